package fence

import (
	"os"
	"strings"
	"testing"
)

// TestOwnerLive: the host rules before any probe — another host (name, or
// machine where both have one) is unknown, an earlier boot of this host is
// dead, a row from before hosts were recorded is this host's — and the probe
// decides the rest.
func TestOwnerLive(t *testing.T) {
	here := Host{Name: "a", MachineID: "m1", BootID: "b1"}
	probed := 0
	probe := func(pid int, inc string) Live { probed++; return Alive }
	for _, tc := range []struct {
		name  string
		row   Host
		want  Live
		probe bool
	}{
		{"same host and boot", here, Alive, true},
		{"before hosts were recorded", Host{}, Alive, true},
		{"another name", Host{Name: "b", MachineID: "m1", BootID: "b1"}, LiveUnknown, false},
		{"same name, another machine", Host{Name: "a", MachineID: "m2", BootID: "b1"}, LiveUnknown, false},
		{"same name, a machine without id", Host{Name: "a", BootID: "b1"}, Alive, true},
		{"an earlier boot", Host{Name: "a", MachineID: "m1", BootID: "b0"}, Dead, false},
		{"another host's other boot", Host{Name: "b", MachineID: "m2", BootID: "b0"}, LiveUnknown, false},
	} {
		probed = 0
		row := Reservation{OwnerPID: 42, OwnerIncarnation: "x", Host: tc.row.Name, HostMachineID: tc.row.MachineID,
			HostBootID: tc.row.BootID}
		if got := OwnerLive(row, here, probe); got != tc.want || (probed > 0) != tc.probe {
			t.Errorf("%s: %s (probed %d), want %s (probe %v)", tc.name, got, probed, tc.want, tc.probe)
		}
	}
}

func TestCheckHostName(t *testing.T) {
	for _, ok := range []string{"a", "host-1.example.com", "HOST_2", strings.Repeat("h", 253)} {
		if err := CheckHostName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "a b", "a/b", "a\n", "ü", strings.Repeat("h", 254)} {
		if err := CheckHostName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestLocalHost: the empty fields are this machine's; the set ones are kept.
func TestLocalHost(t *testing.T) {
	h, err := LocalHost(Host{})
	if err != nil {
		t.Fatal(err)
	}
	if name, _ := os.Hostname(); h.Name != name || h.BootID == "" {
		t.Fatalf("%+v, hostname %q", h, name)
	}
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && strings.TrimSpace(string(b)) != h.MachineID {
		t.Fatalf("machine id %q, /etc/machine-id %q", h.MachineID, b)
	}
	set := Host{Name: "n", MachineID: "m", BootID: "b"}
	if got, err := LocalHost(set); err != nil || got != set {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := LocalHost(Host{Name: "a b"}); err == nil {
		t.Fatal("a bad name was accepted")
	}
}
