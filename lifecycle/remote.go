package lifecycle

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// Sessions of other hosts (contract "Beyond one host"). Daemons that share a
// PostgreSQL fence form a fleet with one session per identity: a create for
// an identity another host runs answers existing with that host's session,
// show of it works from any host (from the fence's record), and every verb
// that acts on a session (kill, restart, screen, input, output, wait) answers
// remote_session naming the host: only its own daemon can see its tmux server
// and prove its processes gone.

// remote reports whether p was published by another host of the fleet (a
// record without a host is this host's: fence.SameHost).
func (m *Manager) remote(p *fence.Published) bool {
	return !fence.SameHost(fence.Host{Name: p.Host, MachineID: p.HostMachineID}, m.host)
}

// resolveRemote is Resolve's last look for a name that this host's census and
// identities do not know: another host's running generation of that name
// (Remote), else not_found.
func (m *Manager) resolveRemote(ctx context.Context, name string) (Target, error) {
	p, ok, err := m.fence.FleetPublishedByName(ctx, name)
	if err != nil {
		return Target{}, fenceError(err)
	}
	if !ok || !m.remote(&p) {
		return Target{}, notFoundName(name)
	}
	return Target{Identity: &p.Identity, Published: &p, Remote: true}, nil
}

// remoteSession refuses to act here on p, which another host runs.
func remoteSession(p fence.Published) error {
	return verdict.Errorf(verdict.CodeRemoteSession,
		map[string]any{"host": p.Host, "name": p.SessionName, "generation": p.Generation,
			"state_dir": p.Identity.StateDir, "session_id": p.Identity.SessionID},
		"session %s (generation %d) runs on host %s: only that host's daemon acts on it; run the command there",
		p.SessionName, p.Generation, p.Host)
}

// remoteView is the View of another host's generation p, from its published
// record: nothing here can inspect its tmux server, so its pane, clients and
// activity are as published (pane_dead false, attached 0), and authoritative
// is the fence's word (the generation its host published and has not ended).
func remoteView(p fence.Published) View {
	v := View{Name: p.SessionName, ID: p.TmuxID, Managed: true,
		StateDir: p.Identity.StateDir, SessionID: p.Identity.SessionID,
		StateFile: p.StateFile, Label: p.Label, Generation: p.Generation, Authoritative: !p.Ended,
		PanePID: p.PanePID, CreatedAt: p.PublishedAt.UTC(), State: StateRunning,
		StopTimeoutMS: p.StopTimeoutMS, Restart: restartPolicy(p), Restarts: p.Restart.Restarts,
		Host: p.Host, AttachHint: attachHint(p)}
	if p.Stopping != nil {
		v.State = StateStopping
	}
	return v
}

// attachHint is the command to attach to p's session, to run on its host.
func attachHint(p fence.Published) string {
	return "skc-supervisor attach " + shellQuote(p.SessionName)
}

// shellQuote quotes s for a POSIX shell (single quotes, ' as '\”).
func shellQuote(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, `'\''`...)
			continue
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// existingElsewhere answers a create whose identity another host runs
// (fence.PublishedElsewhere): existing, with that host's session and how to
// attach to it there, and its existing verdict (reason published_elsewhere).
func (m *Manager) existingElsewhere(ctx context.Context, req CreateRequest, pub fence.Published, start time.Time) *CreateResult {
	rec := m.existingRecord(req, pub, verdict.ReasonPublishedElsewhere, start)
	rec.Evidence["host"] = pub.Host
	m.emit(ctx, rec)
	return &CreateResult{Status: verdict.VerdictExisting, Session: remoteView(pub)}
}

// ListFleet is `ls --fleet`: List (this host's sessions, from its census)
// followed by the running generations of every other host of the fleet, from
// the fence's records (remoteView), ordered by host then session name. With
// an SQLite fence the fleet is this host: it lists what List does.
func (m *Manager) ListFleet(ctx context.Context) (ListResult, error) {
	out, err := m.List(ctx)
	if err != nil {
		return ListResult{}, err
	}
	all, err := m.fence.FleetIdentities(ctx)
	if err != nil {
		return ListResult{}, fenceError(err)
	}
	var remote []View
	for i := range all {
		if p := &all[i]; !p.Ended && m.remote(p) && !m.inThisLife(p) {
			remote = append(remote, remoteView(*p))
		}
	}
	slices.SortFunc(remote, func(a, b View) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), strings.Compare(a.Name, b.Name))
	})
	out.Sessions = append(out.Sessions, remote...)
	return out, nil
}
