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
// fields are tab-separated so that none can run into another, and the
// socket path, the only free text, comes last (it may hold a tab itself).
const identityFormat = "#{pid}\t#{start_time}\t#{version}\t#{session_id}\t#{socket_path}"

// parseIdentity reads the identity reply. The socket path is the one field
// tmux 3.4/3.5 may have escaped (a control byte or invalid UTF-8 in the
// path); it is decoded for those versions, so Socket is the same string in
// every life whatever the version (ServerLife is compared with ==).
func parseIdentity(lines []string) (ServerInfo, error) {
	if len(lines) == 0 {
		return ServerInfo{}, &ProtocolError{Line: "", Reason: "identity reply is empty"}
	}
	// A newline in the socket path splits the reply into lines.
	line := strings.Join(lines, "\n")
	f := strings.SplitN(line, "\t", 5)
	if len(f) != 5 {
		return ServerInfo{}, &ProtocolError{Line: line, Reason: "identity reply has not 5 fields"}
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 || f[2] == "" || strings.ContainsAny(f[2], "\n") ||
		!isID(f[3], '$') {
		return ServerInfo{}, &ProtocolError{Line: line, Reason: "identity reply does not parse"}
	}
	info := ServerInfo{ServerLife: ServerLife{Socket: f[4], PID: pid, StartTime: start},
		Version: f[2], ControlSessionID: f[3]}
	if info.EscapesOutput() {
		info.Socket, _ = UnescapeOutput(info.Socket)
	}
	return info, nil
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
