package main

import (
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/home"
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
