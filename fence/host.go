package fence

import (
	"os"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Host is one machine life, as owner rows record it (contract "Beyond one
// host"): the fleet's name for the host, its machine id and its boot id. An
// owner's pid and incarnation mean something only on the host, and in the
// boot, that wrote them: from another host an owner's liveness cannot be
// proven (unknown, fail closed, whatever its lease says); on this host, a
// row from an earlier boot is dead.
type Host struct {
	// Name is the host's name in the fleet (SKC_HOST / --host-name, the
	// hostname by default). Names must be unique in a fleet.
	Name string
	// MachineID is /etc/machine-id ("" where the host has none).
	MachineID string
	// BootID is the kernel's boot id (/proc/sys/kernel/random/boot_id).
	BootID string
}

// maxHostName bounds a host name (a DNS name's length).
const maxHostName = 253

// CheckHostName accepts 1-253 bytes of [A-Za-z0-9._-], not starting with a
// dot or a dash: a host name, safe in logs, tags and file names.
func CheckHostName(name string) error {
	if name == "" || len(name) > maxHostName {
		return Invalid("host", "the host name must be 1-%d bytes, got %d", maxHostName, len(name))
	}
	if name[0] == '.' || name[0] == '-' {
		return Invalid("host", "the host name must not start with %q", name[0])
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return Invalid("host", "the host name contains byte 0x%02x outside [A-Za-z0-9._-]", c)
		}
	}
	return nil
}

// machineIDFiles are where a machine id is kept (systemd's, then D-Bus's).
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// LocalHost completes h with this machine's facts where h leaves them empty:
// the hostname (os.Hostname), the machine id (machineIDFiles; "" when there is
// none, as in many containers) and the boot id. The name is checked
// (CheckHostName); a boot id that cannot be read is an error, as it is for an
// owner's incarnation.
func LocalHost(h Host) (Host, error) {
	if h.Name == "" {
		name, err := os.Hostname()
		if err != nil {
			return Host{}, verdict.Errorf(verdict.CodeFenceUnavailable, map[string]any{"field": "host"},
				"cannot read this host's name (set SKC_HOST): %w", err)
		}
		h.Name = name
	}
	if err := CheckHostName(h.Name); err != nil {
		return Host{}, err
	}
	if h.MachineID == "" {
		for _, p := range machineIDFiles {
			if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != "" {
				h.MachineID = strings.TrimSpace(string(b))
				break
			}
		}
	}
	if h.BootID == "" {
		boot, err := bootID()
		if err != nil {
			return Host{}, incarnationErr(err)
		}
		h.BootID = boot
	}
	return h, nil
}

// SameHost reports whether a row written by host row was written on host here:
// the same name, and the same machine id where both have one. A row written
// before hosts were recorded (no name: schema 5 and older, one host per fence)
// is this host's.
func SameHost(row, here Host) bool {
	if row.Name == "" {
		return true
	}
	if row.Name != here.Name {
		return false
	}
	return row.MachineID == "" || here.MachineID == "" || row.MachineID == here.MachineID
}

// OwnerLive decides the liveness of row's owner as seen from host here, with
// probe (Liveness, or a test's) for an owner of this host and boot:
//   - an owner on another host: LiveUnknown, whatever its lease or its pid —
//     nothing here can prove it dead (fail closed);
//   - an owner of this host from another boot: Dead, without a probe (its pid
//     may have been reused by now);
//   - otherwise the probe of (pid, incarnation).
func OwnerLive(row Reservation, here Host, probe func(pid int, incarnation string) Live) Live {
	rowHost := row.OwnerHost()
	if !SameHost(rowHost, here) {
		return LiveUnknown
	}
	if rowHost.BootID != "" && here.BootID != "" && rowHost.BootID != here.BootID {
		return Dead
	}
	return probe(row.OwnerPID, row.OwnerIncarnation)
}

// Forgotten is what ForgetHost cleared of a host.
type Forgotten struct {
	Host         string        `json:"host"`
	Reservations []Reservation `json:"reservations"` // its reservation rows, removed
	Published    []Published   `json:"published"`    // its not-ended generations, as they are now: ended
}

// MarkEnded makes f's generations what the forget made them: ended at at.
// The engines read them before they mark them; the answer is what the fence
// now holds (a consumer reading `ended` from it must not see them running).
func (f *Forgotten) MarkEnded(at time.Time) {
	for i := range f.Published {
		f.Published[i].Ended, f.Published[i].EndedAt = true, at
	}
}

// CheckForget is ForgetHost's refusal rule, the same for every engine: the
// name must be a host name, and this host's own rows are never forgotten
// (invalid_request, details.field host): their owners can be probed here,
// and `fence release` resolves one stuck row after that proof. No other
// host's owner can be proven alive from here (OwnerLive: unknown), so this
// is the whole of "refused while the owner is proven alive"; beyond it the
// operator's word that the host is gone decides.
func CheckForget(host string, here Host) error {
	if err := CheckHostName(host); err != nil {
		return err
	}
	if host == here.Name {
		return Invalid("host",
			"%s is this host: its owners can be probed here, so its rows are not forgotten; release one stuck row with `fence release --reservation ID`", host)
	}
	return nil
}

// SchemaNewer is an engine's refusal of a fence whose schema version have is
// newer than the want this binary knows: a newer skc-supervisor migrated it
// (an upgrade, then a downgrade; or, in a fleet, another host upgraded
// first). This binary cannot read it and must not change it, and retrying
// cannot help, hence its own code (exit 2) rather than fence_unavailable.
func SchemaNewer(where string, have, want int) error {
	return verdict.Errorf(verdict.CodeFenceSchemaNewer, map[string]any{"schema_version": have, "supported": want},
		"%s has fence schema version %d, newer than this binary's %d: a newer skc-supervisor has used it; run that version or a later one",
		where, have, want)
}
