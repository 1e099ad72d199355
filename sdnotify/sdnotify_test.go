package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// listen opens a real unixgram socket standing in for systemd's; the path is
// kept short because sun_path holds at most 107 bytes.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen %s: %v", name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func fsSocket(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	dir, err := os.MkdirTemp("", "skc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	return path, listen(t, path)
}

func recv(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	// A generous deadline only bounds a broken test; it asserts nothing about speed.
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(buf[:n])
}

func TestSendFilesystemSocket(t *testing.T) {
	path, conn := fsSocket(t)
	t.Setenv(EnvSocket, path)
	n := FromEnv()
	cases := []struct {
		name string
		send func() (bool, error)
		want string
	}{
		{"ready", func() (bool, error) { return n.Ready("") }, "READY=1\n"},
		{"ready+status", func() (bool, error) { return n.Ready("census synced: 3 sessions") }, "READY=1\nSTATUS=census synced: 3 sessions\n"},
		{"stopping", func() (bool, error) { return n.Stopping("") }, "STOPPING=1\n"},
		{"status flattened", func() (bool, error) { return n.Status("a\nb\r\nc") }, "STATUS=a b c\n"},
		{"mainpid", func() (bool, error) { return n.MainPID(4242) }, "MAINPID=4242\n"},
		{"watchdog", n.Ping, "WATCHDOG=1\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sent, err := tc.send()
			if err != nil || !sent {
				t.Fatalf("send: sent=%v err=%v", sent, err)
			}
			if got := recv(t, conn); got != tc.want {
				t.Fatalf("datagram %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSendAbstractSocket(t *testing.T) {
	name := fmt.Sprintf("@skc-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	conn := listen(t, name)
	sent, err := New(name).Ready("")
	if err != nil || !sent {
		t.Fatalf("send: sent=%v err=%v", sent, err)
	}
	if got := recv(t, conn); got != "READY=1\n" {
		t.Fatalf("datagram %q", got)
	}
}

func TestDisabledIsNoop(t *testing.T) {
	t.Setenv(EnvSocket, "")
	for _, n := range []*Notifier{FromEnv(), New(""), nil, {}} {
		if n.Enabled() {
			t.Fatal("enabled without a socket")
		}
		if sent, err := n.Ready("x"); sent || err != nil {
			t.Fatalf("disabled send: sent=%v err=%v", sent, err)
		}
	}
}

func TestInvalidState(t *testing.T) {
	path, _ := fsSocket(t)
	for _, s := range []string{"READY=1\nMAINPID=1", "NOEQUALS", "A=\x00"} {
		if _, err := New(path).Send(s); !errors.Is(err, ErrInvalidState) {
			t.Fatalf("%q: err %v, want ErrInvalidState", s, err)
		}
	}
}

func TestSendToMissingSocketFails(t *testing.T) {
	path, conn := fsSocket(t)
	conn.Close()
	os.Remove(path)
	if sent, err := New(path).Ready(""); sent || err == nil {
		t.Fatalf("sent=%v err=%v, want an error", sent, err)
	}
}

func TestWatchdog(t *testing.T) {
	const pid = 100
	cases := []struct {
		usec, wpid string
		want       time.Duration
		ok         bool
	}{
		{"", "", 0, false},
		{"0", "", 0, false},
		{"junk", "", 0, false},
		{"2000000", "", 2 * time.Second, true},
		{"2000000", strconv.Itoa(pid), 2 * time.Second, true},
		{"2000000", "101", 0, false},
		{"2000000", "x", 0, false},
	}
	for _, tc := range cases {
		env := map[string]string{EnvWatchdogUsec: tc.usec, EnvWatchdogPID: tc.wpid}
		got, ok := watchdog(func(k string) string { return env[k] }, pid)
		if got != tc.want || ok != tc.ok {
			t.Errorf("usec=%q pid=%q: got %v,%v want %v,%v", tc.usec, tc.wpid, got, ok, tc.want, tc.ok)
		}
	}
	t.Setenv(EnvWatchdogUsec, "500000")
	t.Setenv(EnvWatchdogPID, strconv.Itoa(os.Getpid()))
	if d, ok := WatchdogEnabled(); !ok || d != 500*time.Millisecond {
		t.Fatalf("WatchdogEnabled = %v,%v", d, ok)
	}
}

func TestUnsetEnv(t *testing.T) {
	for _, k := range ServiceVars {
		t.Setenv(k, "x")
	}
	UnsetEnv()
	for _, k := range ServiceVars {
		if _, ok := os.LookupEnv(k); ok {
			t.Errorf("%s still set", k)
		}
	}
}
