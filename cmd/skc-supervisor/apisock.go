package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/skc-supervisor/skc-supervisor/api"
)

// apiSocketLook is how often the daemon checks that api.sock is still there.
var apiSocketLook = 5 * time.Second // a var only so a test can look sooner

// keepAPISocket listens again at api.sock when it was removed while the
// daemon ran — a cleaner of /tmp (the default runtime directory is
// /tmp/skc-<uid> without XDG_RUNTIME_DIR), an rm -rf of the runtime
// directory: the daemon went on holding its home, so a second `serve` was
// refused busy, and no CLI could reach it until it was killed. The old
// listener stays open (nothing can reach it); Shutdown closes both. One
// lstat per look.
func (d *daemon) keepAPISocket(ctx context.Context) error {
	path := d.paths.APISocket()
	t := time.NewTicker(apiSocketLook)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			d.log.Warn().Err(err).Str("api", path).Msg("api.sock was removed; its directory cannot be made again")
			continue
		}
		ln, err := api.Listen(path)
		if err != nil {
			d.log.Warn().Err(err).Str("api", path).Msg("api.sock was removed; listening again failed")
			continue
		}
		d.log.Warn().Str("api", path).Msg("api.sock was removed while the daemon ran; listening there again")
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			_ = d.srv.Serve(ln) // ends at Shutdown; an error here leaves the next look to listen again
		}()
	}
}
