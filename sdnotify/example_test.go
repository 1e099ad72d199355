package sdnotify_test

import (
	"context"
	"time"

	"github.com/skc-supervisor/skc-supervisor/sdnotify"
)

// Example shows the wiring in `serve`: read the socket once, scrub the
// variables before the tmux server is started (it copies the daemon's
// environment into every pane), notify at the two moments systemd waits for.
func Example() {
	n := sdnotify.FromEnv()
	wd, watched := sdnotify.WatchdogEnabled()
	sdnotify.UnsetEnv()

	// … listen on api.sock, start the census, wait for its first sync …
	_, _ = n.Ready("census synced")

	if watched {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			t := time.NewTicker(wd / 2)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					_, _ = n.Ping()
				}
			}
		}()
	}

	// … on SIGTERM/SIGINT, before the graceful shutdown:
	_, _ = n.Stopping("stopping: finishing in-flight creates")
}
