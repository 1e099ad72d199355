package main

import (
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/home"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// envHost names this host in the fleet (contract "Beyond one host"); the
// flag is `serve --host-name`. The default is the hostname.
const envHost = "SKC_HOST"

// openFence opens the fence of the home directory homeDir as the pane helper
// does: it writes no owner rows, so its host is this machine's by default.
func openFence(homeDir string) (fence.Fence, error) {
	return openFenceAs(homeDir, fence.Host{})
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
