package postgres

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Host is a daemon's identity in the fleet, written with every owner row:
// its name (SKC_HOST), the machine id and the boot id. A row of another
// host cannot be probed from here, so its owner's liveness is unknown and it
// blocks (fail closed), whatever its lease says; a row of this host from an
// earlier boot is dead (the incarnation's boot id says so).
type Host struct {
	Name      string `json:"name"`
	MachineID string `json:"machine_id"`
	BootID    string `json:"boot_id"`
}

// bootIDFileEnv is proctree.BootIDFileEnv (fence engines import only fence
// and verdict): the test seam that simulates a reboot.
const bootIDFileEnv = "SKC_TEST_BOOT_ID_FILE"

// ThisHost returns this machine's identity under name (the hostname when
// empty). Without a machine id or a boot id no row could be judged, so it
// is an error.
func ThisHost(name string) (Host, error) {
	if name == "" {
		var err error
		if name, err = os.Hostname(); err != nil {
			return Host{}, fmt.Errorf("host name: %w", err)
		}
	}
	if err := checkHostName(name); err != nil {
		return Host{}, err
	}
	h := Host{Name: name}
	var err error
	if h.MachineID, err = readFirst("/etc/machine-id", "/var/lib/dbus/machine-id"); err != nil {
		return Host{}, fmt.Errorf("machine id: %w", err)
	}
	bootPath := "/proc/sys/kernel/random/boot_id"
	if p := os.Getenv(bootIDFileEnv); p != "" {
		bootPath = p
	}
	if h.BootID, err = readFirst(bootPath); err != nil {
		return Host{}, fmt.Errorf("boot id: %w", err)
	}
	return h, nil
}

// checkHostName accepts what the contract's --host-name is: a short,
// printable token (it appears in verdicts, attach hints and log lines).
func checkHostName(name string) error {
	if len(name) > 255 {
		return errors.New("host name longer than 255 bytes")
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f || r == '/' {
			return fmt.Errorf("host name %q: spaces, control characters and '/' are not allowed", name)
		}
	}
	return nil
}

func readFirst(paths ...string) (string, error) {
	var errs []error
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if v := strings.TrimSpace(string(b)); err == nil && v != "" {
			return v, nil
		}
		if err == nil {
			err = fmt.Errorf("%s is empty", p)
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// remote reports whether an owner row's host is not this one: another name,
// or the same name on another machine (two hosts misconfigured with one
// name must not judge each other's pids).
func (s *Store) remote(host, machineID string) bool {
	return host != s.host.Name || machineID != s.host.MachineID
}
