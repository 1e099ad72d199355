package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skc-supervisor/skc-supervisor/api"
	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// The human formats below are for people and may change; scripts use --json.

// printCreate prints a create's answer; cmd is how to invoke the CLI again
// to reach the same daemon (attachPrefix), for the attach line.
func printCreate(w io.Writer, res api.CreateResponse, cmd string) {
	s := res.Session
	fmt.Fprintf(w, "%s: session %s (%s), generation %d, pane pid %d\n",
		res.Status, printable(s.Name), s.ID, s.Generation, s.PanePID)
	if s.AttachHint != "" {
		fmt.Fprintf(w, "runs on host %s; attach there: %s\n", printable(s.Host), printable(s.AttachHint))
		return
	}
	fmt.Fprintf(w, "attach: %s attach %s\n", printable(cmd), shellQuote(s.Name))
}

func printList(w io.Writer, res api.ListResponse) {
	c := res.Census
	if !c.Synced {
		fmt.Fprintln(w, "census: not synced yet (the list may be incomplete)")
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tGEN\tSTATE\tRESTART\tPANE\tATTACHED\tACTIVITY\tIDENTITY\tLABEL")
	now := time.Now()
	for _, s := range res.Sessions {
		ident := "-"
		if s.Managed {
			ident = printable(s.StateDir) + " " + printable(s.SessionID)
			if !s.Authoritative && s.State == "" {
				// Between two generations the STATE column says why
				// (exited, starting, gave_up): only an unexplained
				// mismatch of tags is flagged.
				ident += " (not authoritative)"
			}
		}
		pane := strconv.Itoa(s.PanePID)
		if s.PaneDead {
			pane += " (dead)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", printable(s.Name), s.ID, s.Generation,
			stateText(now, s), restartText(s), pane, s.Attached, idleText(now, s.ActivityAt), ident, printable(s.Label))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d session(s) on tmux %s, server pid %d\n", len(res.Sessions), c.TmuxVersion, c.ServerPID)
}

// printFleetList is `ls --fleet`: every host's sessions, HOST first. Other
// hosts' sessions come from the fence's records: their pane, clients and
// activity are not known here.
func printFleetList(w io.Writer, res api.ListResponse) {
	if !res.Census.Synced {
		fmt.Fprintln(w, "census: not synced yet (this host's part may be incomplete)")
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tNAME\tID\tGEN\tSTATE\tIDENTITY\tLABEL")
	now := time.Now()
	hosts := map[string]bool{}
	for _, s := range res.Sessions {
		ident := "-"
		if s.Managed {
			ident = printable(s.StateDir) + " " + printable(s.SessionID)
		}
		hosts[s.Host] = true
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", cmp.Or(printable(s.Host), "-"), printable(s.Name), s.ID,
			s.Generation, stateText(now, s), ident, printable(s.Label))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d session(s) on %d host(s)\n", len(res.Sessions), len(hosts))
}

// stateText is the STATE column: the state, and when the next start is due
// while it waits out a delay.
func stateText(now time.Time, s api.Session) string {
	switch {
	case s.State == "":
		return "-"
	case s.NextStartAt != nil:
		return s.State + " (next start in " + s.NextStartAt.Sub(now).Round(100*time.Millisecond).String() + ")"
	}
	return s.State
}

// authoritativeText is show's authoritative line: false between two
// generations is no fault of the tags, and says so.
func authoritativeText(s api.Session) string {
	switch s.State {
	case "exited", "starting", "stopped", "gave_up":
		return "false (between two generations)"
	}
	return strconv.FormatBool(s.Authoritative)
}

// restartText is the RESTART column: the policy and the restarts so far.
func restartText(s api.Session) string {
	if s.Restart == "" {
		return "-"
	}
	return s.Restart + " (" + strconv.Itoa(s.Restarts) + ")"
}

// idleText says how long ago a pane last wrote: "active" within the last few
// seconds, "idle 3m" after that, "-" when it never has.
func idleText(now time.Time, at *time.Time) string {
	if at == nil {
		return "-"
	}
	d := now.Sub(*at)
	switch {
	case d < 5*time.Second:
		return "active"
	case d < time.Minute:
		return "idle " + strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return "idle " + strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return "idle " + strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return "idle " + strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

// stampText is an optional time in RFC 3339, "-" when absent.
func stampText(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func printShow(w io.Writer, res api.ShowResponse) {
	if res.Session == nil {
		fmt.Fprintln(w, "session: none (the identity has no live session; its history follows)")
	} else {
		printSession(w, res.Session)
	}
	if len(res.Reservation) > 0 && string(res.Reservation) != "null" {
		fmt.Fprintf(w, "reservation: %s\n", summary(res.Reservation, "reservation_id", "phase", "owner_pid"))
	}
	if res.FenceUnavailable {
		fmt.Fprintln(w, "reservation, verdicts: not known (the fence is unavailable and was not read for this identity before)")
		return
	}
	fmt.Fprintf(w, "verdicts (%d):\n", len(res.Verdicts))
	for _, v := range res.Verdicts {
		fmt.Fprintf(w, "  %s\n", verdictLine(v))
	}
}

func printSession(w io.Writer, s *api.Session) {
	rows := [][2]string{
		{"name", printable(s.Name)}, {"id", s.ID}, {"managed", strconv.FormatBool(s.Managed)},
		{"state_dir", printable(s.StateDir)}, {"session_id", printable(s.SessionID)},
		{"state_file", printable(s.StateFile)}, {"generation", strconv.FormatUint(s.Generation, 10)},
		{"authoritative", authoritativeText(*s)}, {"state", stateText(time.Now(), *s)},
		{"restart", restartText(*s)}, {"next_start_at", stampText(s.NextStartAt)},
		{"label", printable(s.Label)},
		{"pane_pid", strconv.Itoa(s.PanePID)}, {"pane_dead", strconv.FormatBool(s.PaneDead)},
		{"attached", strconv.Itoa(s.Attached)}, {"created_at", s.CreatedAt.Format(time.RFC3339)},
		{"activity_at", stampText(s.ActivityAt)}, {"host", cmp.Or(printable(s.Host), "-")},
	}
	if s.AttachHint != "" {
		rows = append(rows, [2]string{"attach (on its host)", printable(s.AttachHint)})
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	tw.Flush()
}

func verdictLine(v verdict.Record) string {
	parts := []string{"#" + strconv.FormatInt(v.Sequence, 10), v.Timestamp.Format(time.RFC3339), v.Action, v.Verdict}
	why, _ := v.Evidence["reason"].(string) // e.g. spawn_failed's executable_not_found
	for _, extra := range []string{v.Code, v.ExitKind, v.Reason, why} {
		if extra != "" {
			parts = append(parts, extra)
		}
	}
	return strings.Join(parts, " ")
}

func printKill(w io.Writer, ref api.Ref, res api.KillResponse) {
	name := ref.Name
	if name == "" && res.Verdict.Session != nil {
		name = res.Verdict.Session.Name
	}
	fmt.Fprintf(w, "killed %s: %s\n", printable(name), verdictLine(res.Verdict))
}

func printRestart(w io.Writer, res api.RestartResponse) {
	s := res.Session
	fmt.Fprintf(w, "restarted: session %s (%s), generation %d, pane pid %d, restarts %d\n",
		printable(s.Name), s.ID, s.Generation, s.PanePID, s.Restarts)
}

func printRelease(w io.Writer, res api.ReleaseResponse) {
	fmt.Fprintf(w, "released: %s\n", verdictLine(res.Verdict))
}

func printForget(w io.Writer, res api.ForgetResponse) {
	fmt.Fprintf(w, "forgot host %s: %d reservation row(s), %d running generation(s)\n",
		printable(res.Host), len(res.Reservations), len(res.Identities))
	for _, r := range res.Reservations {
		fmt.Fprintf(w, "  row %s\n", summary(r, "state_dir", "session_id", "reservation_id", "phase"))
	}
	for _, r := range res.Identities {
		fmt.Fprintf(w, "  generation %s\n", summary(r, "state_dir", "session_id", "generation", "session_name"))
	}
	fmt.Fprintf(w, "released: %s\n", verdictLine(res.Verdict))
}

func printFence(w io.Writer, res api.FenceResponse) {
	fmt.Fprintf(w, "reservations (%d):\n", len(res.Reservations))
	for _, r := range res.Reservations {
		fmt.Fprintf(w, "  %s\n", summary(r, "state_dir", "session_id", "reservation_id", "phase", "owner_pid", "generation"))
	}
	fmt.Fprintf(w, "identities (%d):\n", len(res.Identities))
	for _, r := range res.Identities {
		fmt.Fprintf(w, "  %s\n", summary(r, "state_dir", "session_id", "generation", "session_name", "ended"))
	}
}

// summary renders the named keys of a JSON object as key=value, in order,
// then any other keys' count; values are printable-quoted.
func summary(raw json.RawMessage, keys ...string) string {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return printable(string(raw))
	}
	var parts []string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			parts = append(parts, k+"="+printable(fmt.Sprint(v)))
			delete(m, k)
		}
	}
	rest := make([]string, 0, len(m))
	for k := range m {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	if len(rest) > 0 {
		parts = append(parts, fmt.Sprintf("(+%d more fields with --json)", len(rest)))
	}
	return strings.Join(parts, " ")
}
