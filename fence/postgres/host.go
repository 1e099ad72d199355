package postgres

import (
	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// remote reports whether a row written on host (name, machine id) was
// written on another host than this handle's (fence.SameHost): its owner's
// pid means nothing here, and its generation's session is not in this
// host's tmux.
func (s *Store) remote(host, machineID string) bool {
	return !fence.SameHost(fence.Host{Name: host, MachineID: machineID}, s.host)
}

// localHost is this handle's host: Options.Host completed by
// fence.LocalHost. An invalid name is refused; a machine whose boot id cannot
// be read still opens the fence under the name it was given (reads work, and
// every owner row it would write is refused by the owner's own check).
func localHost(own *fence.Owner, opt fence.Options) (fence.Host, error) {
	h, err := own.Host()
	switch {
	case err == nil:
		return h, nil
	case verdict.CodeOf(err) == verdict.CodeInvalidRequest, opt.Host.Name == "":
		return fence.Host{}, err
	}
	return opt.Host, nil
}
