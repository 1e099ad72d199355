package tmuxctl

import (
	"strconv"
	"strings"
)

// ServerLife names one life of a tmux server: tmux ids ($N, @N, %N) restart
// at 0 in every new life, so an id is only meaningful with its life. It is
// comparable with ==.
type ServerLife struct {
	Socket    string // socket path as tmux reports it (#{socket_path})
	PID       int    // server pid (#{pid})
	StartTime int64  // server start, epoch seconds (#{start_time})
}

// ServerInfo is what a connection learnt about its server at connect time.
type ServerInfo struct {
	ServerLife
	Version          string // #{version}, e.g. "3.3a"
	ControlSessionID string // the control session's id ("$N") in this life
	ClientPID        int    // pid of the `tmux -C` client process
}

// identityFormat is expanded by display-message -p in one command: the
// fields are tab-separated so that none can run into another.
const identityFormat = "#{pid}\t#{start_time}\t#{version}\t#{socket_path}\t#{session_id}"

func parseIdentity(lines []string) (ServerInfo, error) {
	if len(lines) != 1 {
		return ServerInfo{}, &ProtocolError{Line: strings.Join(lines, "\n"),
			Reason: "identity reply is not exactly one line"}
	}
	f := strings.Split(lines[0], "\t")
	if len(f) != 5 {
		return ServerInfo{}, &ProtocolError{Line: lines[0], Reason: "identity reply has not 5 fields"}
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 || f[2] == "" || !strings.HasPrefix(f[4], "$") {
		return ServerInfo{}, &ProtocolError{Line: lines[0], Reason: "identity reply does not parse"}
	}
	return ServerInfo{ServerLife: ServerLife{Socket: f[3], PID: pid, StartTime: start},
		Version: f[2], ControlSessionID: f[4]}, nil
}

// VersionAtLeast reports whether the server's version is at least
// major.minor ("3.3a" is 3.3; "next-3.5" is 3.5). Unparseable versions are
// treated as new (master builds print odd strings).
func (i ServerInfo) VersionAtLeast(major, minor int) bool {
	v := strings.TrimPrefix(i.Version, "next-")
	ma, rest, _ := strings.Cut(v, ".")
	maj, err := strconv.Atoi(ma)
	if err != nil {
		return true
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	mi, err := strconv.Atoi(rest[:n])
	if err != nil {
		mi = 0
	}
	return maj > major || maj == major && mi >= minor
}
