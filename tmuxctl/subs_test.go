package tmuxctl

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSubChanges(t *testing.T) {
	cases := []struct {
		args []string
		want []subChange
	}{
		{[]string{"refresh-client", "-B", "a::#{session_id}"}, []subChange{{"a", true}}},
		{[]string{"refresh", "-Bb:%*:x"}, []subChange{{"b", true}}},
		{[]string{"refresh-client", "-B", "a"}, []subChange{{"a", false}}},
		{[]string{"refresh-client", "-c", "-B", "a:x:y", "-B", "b"}, []subChange{{"a", true}, {"b", false}}},
		{[]string{"refresh-client", "-cB", "a:x:y"}, []subChange{{"a", true}}},
		{[]string{"refresh-client", "-A", "-B", "-B", "c:x:y"}, []subChange{{"c", true}}}, // -A takes "-B"
		{[]string{"refresh-client", "-B", "a:x:y", "-t", "/dev/pts/1"}, nil},              // another client
		{[]string{"refresh-client", "--", "-B", "a:x:y"}, nil},
		{[]string{"refresh-client", "-S"}, nil},
		{[]string{"display-message", "-B", "a:x:y"}, nil},
	}
	for _, c := range cases {
		if got := subChanges(c.args); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %+v, want %+v", c.args, got, c.want)
		}
	}
}

// TestCloseRemovesSubscriptions: Close sends `refresh-client -B name` for a
// subscription added through Command and waits for its reply before it
// closes stdin; one removed by the caller is not removed again.
func TestCloseRemovesSubscriptions(t *testing.T) {
	cfg := testConfig(t)
	var wire lockedBuffer
	cfg.WireLog = &wire
	c := dialT(t, cfg)
	drain(c)
	for _, name := range []string{"skc-a", "skc-b"} {
		if _, err := c.Command(bg(), "refresh-client", "-B", name+"::#{session_id}"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Command(bg(), "refresh-client", "-B", "skc-b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(wire.String(), "\n")
	find := func(from int, sub string) int {
		for i := from; i < len(lines); i++ {
			if strings.Contains(lines[i], sub) {
				return i
			}
		}
		return -1
	}
	rmA := find(0, `> "refresh-client" "-B" "skc-a"`)
	if rmA < 0 {
		t.Fatalf("no removal of skc-a on the wire:\n%s", wire.String())
	}
	if end := find(rmA, "< %end "); end < 0 || find(end, "< %exit") < 0 {
		t.Fatalf("removal not answered before %%exit:\n%s", wire.String())
	}
	if n := strings.Count(wire.String(), `> "refresh-client" "-B" "skc-b"`); n != 1 {
		t.Fatalf("skc-b removed %d times, want once (by the caller)", n)
	}
}

// TestSubscribeCloseCycles: control clients subscribe and close, one after
// the other, beside a long-lived one, and the server survives. Every fifth
// cycle waits for a %subscription-changed first, so the client exits with
// the subscription timer armed (the 3.3a crash window, docs/tmux-facts.md §6).
//
// The cycles do not overlap: several control clients exiting at once crash
// 3.3a in control_write on a client whose control state is already freed
// (a different bug, with or without subscriptions; see the package doc).
func TestSubscribeCloseCycles(t *testing.T) {
	cfg := testConfig(t)
	keep := dialT(t, cfg)
	drain(keep)
	life := keep.Info().ServerLife
	const cycles = 20
	for i := 0; i < cycles; i++ {
		if err := subscribeAndClose(cfg, i%5 == 0); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	r, err := keep.Command(bg(), "display-message", "-p", "#{pid}")
	if err != nil {
		t.Fatalf("server gone after the cycles: %v", err)
	}
	if r.Lines[0] != itoa(life.PID) {
		t.Fatalf("server changed: pid %s, was %d", r.Lines[0], life.PID)
	}
}

// subscribeAndClose dials, subscribes the census-like format, optionally
// waits for its first report, and closes.
func subscribeAndClose(cfg Config, waitReport bool) error {
	ctx, cancel := context.WithTimeout(bg(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		return err
	}
	reported := make(chan struct{})
	go func() {
		once := false
		for n := range c.Notifications() {
			if n.Name == NoteSubscriptionChanged && !once {
				once = true
				close(reported)
			}
		}
	}()
	_, err = c.Command(ctx, "refresh-client", "-B", "skc-census::#{S:#{session_id},}")
	if err == nil && waitReport {
		select {
		case <-reported:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return err
}
