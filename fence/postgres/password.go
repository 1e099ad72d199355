package postgres

import (
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// passwordIn reports whether the connection string s itself carries a
// password: a URL's userinfo or its password parameter, or a keyword/value
// string's password keyword. It reads s, not pgx's parsed config, because pgx
// fills the config's password from PGPASSWORD and the passfile too — the two
// ways a password is meant to come (contract: "Beyond one host"). A string it
// cannot read as either form counts as carrying one: it is refused, never
// logged.
func passwordIn(s string) bool {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		return urlPassword(s)
	}
	kv, ok := keywordValues(s)
	if !ok {
		return true
	}
	_, has := kv["password"]
	return has
}

// urlPassword: a password in the userinfo (user:pw@) or a password parameter.
// The authority is cut by hand, as pgx does, because a URL naming several
// hosts (h1:5432,h2:5432) is not one net/url reads.
func urlPassword(s string) bool {
	rest := s[strings.Index(s, "://")+3:]
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	auth, query := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		auth = rest[:i]
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		query = rest[i+1:]
	}
	if at := strings.LastIndexByte(auth, '@'); at >= 0 && strings.Contains(auth[:at], ":") {
		return true
	}
	vals, err := url.ParseQuery(query)
	return err != nil || vals.Has("password")
}

// keywordValues reads a libpq keyword/value string (key=value pairs,
// whitespace around '=', values in single quotes with backslash escapes);
// false when it is not one.
func keywordValues(s string) (map[string]string, bool) {
	kv := map[string]string{}
	for {
		s = strings.TrimLeft(s, " \t\n\r\f\v")
		if s == "" {
			return kv, true
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return nil, false
		}
		key := strings.TrimRight(s[:eq], " \t\n\r\f\v")
		if key == "" || strings.ContainsAny(key, " \t\n\r\f\v") {
			return nil, false
		}
		val, rest, ok := kvValue(strings.TrimLeft(s[eq+1:], " \t\n\r\f\v"))
		if !ok {
			return nil, false
		}
		kv[key], s = val, rest
	}
}

// kvValue reads one value at the start of s: quoted or up to whitespace.
func kvValue(s string) (val, rest string, ok bool) {
	var b strings.Builder
	quoted := strings.HasPrefix(s, "'")
	if quoted {
		s = s[1:]
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case quoted && c == '\'':
			return b.String(), s[i+1:], true
		case !quoted && strings.IndexByte(" \t\n\r\f\v", c) >= 0:
			return b.String(), s[i:], true
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), "", !quoted
}

// Describe names the database of the connection string s for messages and
// logs — postgres://user@host:port/db, never a password nor any other
// parameter — or "postgres" when s does not parse.
func Describe(s string) string {
	cfg, err := pgxpool.ParseConfig(s)
	if err != nil {
		return "postgres"
	}
	return redact(cfg)
}
