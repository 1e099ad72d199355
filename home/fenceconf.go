package home

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// FenceConf is what FenceConfFile records: which fence the daemon of a home
// uses, and as which host, for the processes it starts (the pane helpers)
// and for doctor. The URL never carries a password (the PostgreSQL engine
// refuses one): helpers authenticate as the daemon does, by PGPASSFILE
// (~/.pgpass) or a trusted local socket.
type FenceConf struct {
	Fence string `json:"fence"`
	Host  string `json:"host"`
}

// ReadFenceConf reads homeDir's FenceConfFile; ok false when there is none
// (the embedded fence). A record that cannot be read, or names no fence, is
// an error.
func ReadFenceConf(homeDir string) (c FenceConf, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(homeDir, FenceConfFile))
	if errors.Is(err, fs.ErrNotExist) {
		return FenceConf{}, false, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err == nil && c.Fence == "" {
		err = errors.New("it names no fence")
	}
	if err != nil {
		return FenceConf{}, true, err
	}
	return c, true, nil
}
