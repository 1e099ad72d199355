package census

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/skc-supervisor/skc-supervisor/tmuxctl"

	"github.com/skc-supervisor/skc-supervisor/internal/tmuxtest"
)

// The census and its client stop in either order with nobody draining the
// client's events: the client closes its stream when its Run returns, and
// no goroutine is left behind.
func TestStopsInEitherOrderWithoutDraining(t *testing.T) {
	needTmux(t)
	for _, censusFirst := range []bool{true, false} {
		name := "client_first"
		if censusFirst {
			name = "census_first"
		}
		t.Run(name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			dir, err := os.MkdirTemp("", "skc")
			if err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(dir, "s")
			r := &rig{t: t, dir: dir, sock: sock}
			defer func() { r.killServer(); os.RemoveAll(dir) }()
			cl := tmuxctl.NewClient(tmuxctl.Config{Tmux: tmuxtest.Bin(), Socket: sock, ConfigFile: "/dev/null"})
			c := newCensus(cl, nil, testConfig())
			cctx, ccancel := context.WithCancel(context.Background())
			kctx, kcancel := context.WithCancel(context.Background())
			defer ccancel()
			defer kcancel()
			clDone, cDone := make(chan error, 1), make(chan error, 1)
			go func() { clDone <- cl.Run(kctx) }()
			go func() { cDone <- c.Run(cctx) }()
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			if err := c.WaitSynced(ctx); err != nil {
				t.Fatal(err)
			}
			if censusFirst {
				ccancel()
				if err := <-cDone; err != nil {
					t.Fatal(err)
				}
				// Events now pile up with no reader.
				r.tmux("new-session", "-d", "-s", "unread", "cat")
				r.tmux("kill-session", "-t", "unread")
				kcancel()
				if err := <-clDone; err != nil {
					t.Fatal(err)
				}
				return
			}
			kcancel()
			if err := <-clDone; err != nil {
				t.Fatal(err)
			}
			if err := <-cDone; err != nil { // its event stream closed
				t.Fatal(err)
			}
			if c.Synced() {
				t.Fatal("synced after the client stopped")
			}
		})
	}
}
