package main

import (
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/sqlite"
	"github.com/skc-supervisor/skc-supervisor/home"
)

// openFence opens the fence of the home directory homeDir: the embedded SQLite
// engine's file there (home.FenceFile). The daemon and the pane helpers it
// starts open the same one, each on its own.
func openFence(homeDir string) (fence.Fence, error) {
	return sqlite.Open(home.Paths{Home: homeDir}.Fence(), fence.Options{})
}
