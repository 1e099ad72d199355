package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/skc-supervisor/skc-supervisor/home"
)

// startFix is how to start the daemon of cfg's home: the user unit serves
// the default home only, so the command names the home doctor looked at
// (found outside-in: a custom SKC_HOME was told to start the unit).
func startFix(cfg Config) string {
	cmd := "skc-supervisor serve --home " + strconv.Quote(cfg.Home)
	if cfg.RuntimeDir != "" && cfg.RuntimeDir != cfg.Home {
		cmd += " --runtime-dir " + strconv.Quote(cfg.RuntimeDir) // where doctor looked for api.sock
	}
	return "start it: " + cmd + " (for the default home, with the user unit: systemctl --user start skc-supervisor)"
}

func checkDaemon(ctx context.Context, cfg Config) []Result {
	sock := filepath.Join(cfg.RuntimeDir, home.APISocket)
	if len(sock) > home.MaxSocketPath {
		return []Result{{Check: "daemon", Status: Skip, Message: "api.sock path too long (see socket_path)"}}
	}
	err := ping(ctx, sock, cfg)
	if err == nil {
		return []Result{{Check: "daemon", Status: OK, Message: "answers GET /v1/ping on " + sock}}
	}
	holder := lockHolder(filepath.Join(cfg.Home, home.LockFile))
	switch {
	case errors.Is(err, fs.ErrNotExist) && holder == 0 && !exists(cfg.Home):
		// A fresh home: nothing was started yet, which doctor's exit 0
		// allows (README: checks that do not apply yet).
		return []Result{{Check: "daemon", Status: Skip,
			Message: "not started yet: " + cfg.Home + " does not exist (serve creates it)", Fix: startFix(cfg)}}
	case errors.Is(err, fs.ErrNotExist) && holder == 0:
		return []Result{{Check: "daemon", Status: Fail, Message: "not running: " + sock + " does not exist", Fix: startFix(cfg)}}
	case errors.Is(err, fs.ErrNotExist):
		return []Result{{Check: "daemon", Status: Fail,
			Message: fmt.Sprintf("pid %d holds %s but %s does not exist (another runtime dir?)", holder, home.LockFile, sock),
			Fix:     "give doctor the daemon's --runtime-dir / SKC_RUNTIME_DIR, or restart the daemon"}}
	case holder == 0:
		return []Result{{Check: "daemon", Status: Fail,
			Message: fmt.Sprintf("not reachable on %s: %v (a stale socket from a daemon that died?)", sock, err), Fix: startFix(cfg)}}
	}
	return []Result{{Check: "daemon", Status: Fail,
		Message: fmt.Sprintf("pid %d is running but does not answer on %s: %v", holder, sock, err),
		Fix:     "see its log (journalctl --user -u skc-supervisor); if it stays stuck, kill " + strconv.Itoa(holder) + " and start it again"}}
}

// ping is GET /v1/ping over the unix socket, bounded by cfg.Timeout.
func ping(ctx context.Context, sock string, cfg Config) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://skc/v1/ping", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	var pong struct {
		OK bool `json:"ok"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &pong) != nil || !pong.OK {
		return fmt.Errorf("unexpected answer %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// lockHolder is the pid recorded in supervisor.lock when that process still
// exists; 0 otherwise. The lock is not taken (see the package comment), so a
// reused pid can mislead: it only colours the message.
func lockHolder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		return 0
	}
	return pid
}

// exists reports whether path names anything (a dangling link included).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
