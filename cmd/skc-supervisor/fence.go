package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/postgres"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/home"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// envHost names this host in the fleet (contract "Beyond one host"); the
// flag is `serve --host-name`. The default is the hostname.
const envHost = "SKC_HOST"

// fenceName names the fence for the start's log line: "sqlite", or the
// database's user, host and name (postgres.Describe: never a password, which
// a URL can carry in its query too, nor any other parameter).
func fenceName(p home.Paths) string {
	if p.FenceURL == home.FenceSQLite {
		return home.FenceSQLite
	}
	return postgres.Describe(p.FenceURL)
}

// openDaemonFence opens the fence serve was told to use (--fence, SKC_FENCE;
// the home's SQLite file by default) for owners on host, and records the
// choice for the pane helpers. With PostgreSQL the host registers itself in
// the fleet.
func openDaemonFence(ctx context.Context, p home.Paths, host fence.Host) (fence.Fence, error) {
	if p.FenceURL == home.FenceSQLite {
		if err := os.Remove(p.FenceConf()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, verdict.Errorf(verdict.CodeFenceUnavailable, map[string]any{"path": p.FenceConf()},
				"cannot remove the fleet fence record %s: %v", p.FenceConf(), err)
		}
		return openFenceAs(p.Home, host)
	}
	st, err := postgres.Open(p.FenceURL, fence.Options{Host: host}, postgres.Config{})
	if err != nil {
		return nil, err // a nil Fence, not a Fence holding a nil *Store
	}
	err = st.RegisterHost(ctx)
	if err == nil {
		err = writeFenceConf(p.FenceConf(), home.FenceConf{Fence: p.FenceURL, Host: st.Host().Name})
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// writeFenceConf writes the record 0600, atomically (a helper starting at
// that moment reads the old one or the new one).
func writeFenceConf(path string, c home.FenceConf) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fence.conf-*")
	if err == nil {
		_, err = tmp.Write(append(b, '\n'))
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		return verdict.Errorf(verdict.CodeFenceUnavailable, map[string]any{"path": path},
			"cannot record the fleet fence in %s: %v", path, err)
	}
	return nil
}

// openFence opens the fence of the home directory homeDir as its daemon
// recorded it (home.FenceConf), as the pane helper does: the helper opens it on its
// own and writes no owner rows; its postmortems carry the daemon's host name.
func openFence(homeDir string) (fence.Fence, error) {
	p := home.Paths{Home: homeDir}
	c, ok, err := home.ReadFenceConf(homeDir)
	if !ok {
		return openFenceAs(homeDir, fence.Host{})
	}
	if err != nil {
		return nil, verdict.Errorf(verdict.CodeFenceUnavailable, map[string]any{"path": p.FenceConf()},
			"the fleet fence record %s is unreadable: %v", p.FenceConf(), err)
	}
	st, err := postgres.Open(c.Fence, fence.Options{Host: fence.Host{Name: c.Host}}, postgres.Config{MaxConns: 2})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// openFenceAs opens the fence of homeDir for an owner on host: the embedded
// SQLite engine's file there (home.FenceFile). The daemon and the pane helpers
// it starts open the same one, each on its own.
func openFenceAs(homeDir string, host fence.Host) (fence.Fence, error) {
	s, err := sqlite.Open(home.Paths{Home: homeDir}.Fence(), fence.Options{Host: host})
	if err != nil {
		return nil, err // a nil Fence, not a Fence holding a nil *Store
	}
	return s, nil
}

// host is this daemon's host: --host-name, else SKC_HOST, else the hostname,
// with this machine's id and boot id. It is established before anything
// starts: a bad name refuses the start (invalid_request) and never reaches a
// row. A machine whose boot id cannot be read still starts, as before: its
// creates are refused then (identity_incarnation_unavailable), its reads work.
func (cli *CLI) host(flagName string) (fence.Host, error) {
	name := flagName
	if name == "" {
		name = cli.getenv(envHost)
	}
	host, err := fence.LocalHost(fence.Host{Name: name})
	if verdict.CodeOf(err) == verdict.CodeInvalidRequest {
		return fence.Host{}, err
	} else if err != nil {
		return fence.Host{Name: name}, nil // the rest is resolved when a row is written
	}
	return host, nil
}
