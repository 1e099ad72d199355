package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestFenceReadOnly: the fence database files become unwritable under a running
// daemon (chattr +i: immutable even for root, as a read-only disk would be). A
// create then fails with fence_unavailable (exit 1) — nothing is started in tmux, the daemon stays
// healthy — and succeeds once the files are writable again.
func TestFenceReadOnly(t *testing.T) {
	chattr, err := exec.LookPath("chattr")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and chattr (e2fsprogs) to make files immutable")
	}
	t.Parallel()
	d := StartDaemon(t, DaemonOpts{})
	warm := d.MustCreate(t, NewSpec(t, "warm"), "published")
	// The warm session's pane helper uses the fence until it starts its agent
	// (it closes the fence first): freeze the files under the daemon alone. A
	// -race process caught in the middle of a SQLite access by the freeze
	// cannot survive the fault (fence/sqlite/writable.go); the daemon is quiescent
	// here, and each of its fence operations checks the files first.
	waitAgent(t, warm.PanePID, "sleep")

	var files []string
	for _, suffix := range []string{"", "-wal", "-shm"} {
		p := filepath.Join(d.Dir, "fence.sqlite"+suffix)
		if _, err := os.Stat(p); err == nil {
			files = append(files, p)
		}
	}
	setImmutable := func(on bool) error {
		flag := "-i"
		if on {
			flag = "+i"
		}
		return exec.Command(chattr, append([]string{flag}, files...)...).Run()
	}
	if err := setImmutable(true); err != nil {
		t.Skipf("chattr +i not supported on this filesystem: %v", err)
	}
	t.Cleanup(func() { _ = setImmutable(false) })

	spec := NewSpec(t, "readonly")
	r := d.CLI(t, spec.Args()...)
	expectError(t, r, 1, "error", "fence_unavailable", "")
	if ss := d.AgentSessions(t); len(ss) != 1 {
		t.Errorf("tmux has %d agent sessions after a create on a read-only fence, want only the warm one", len(ss))
	}
	if status, _ := d.Get(t, "/v1/ping"); status != 200 {
		t.Errorf("ping after a read-only fence: %d", status)
	}
	if ents, _ := os.ReadDir(spec.StateDir); len(ents) != 0 {
		t.Errorf("a failed create wrote under state_dir")
	}

	if err := setImmutable(false); err != nil {
		t.Fatal(err)
	}
	d.MustCreate(t, spec, "published")
	status, body := d.Get(t, "/v1/fence")
	var f struct {
		Reservations []json.RawMessage `json:"reservations"`
	}
	if status != 200 || json.Unmarshal(body, &f) != nil || len(f.Reservations) != 0 {
		t.Errorf("fence after recovery from read-only: %d %s, want no reservation left", status, body)
	}
	d.Stop(t)
}
