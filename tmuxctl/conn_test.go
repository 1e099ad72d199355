package tmuxctl

import (
	"errors"
	"strings"
	"testing"
)

func TestConnBasics(t *testing.T) {
	cfg := testConfig(t)
	c := dialT(t, cfg)
	drain(c)
	info := c.Info()
	if info.PID <= 0 || info.StartTime <= 0 || info.Version == "" || info.Socket == "" {
		t.Fatalf("bad identity %+v", info)
	}
	if info.ControlSessionID == "" || info.ClientPID <= 0 {
		t.Fatalf("bad identity %+v", info)
	}
	r, err := c.Command(bg(), "display-message", "-p", "#{pid}")
	if err != nil || len(r.Lines) != 1 || r.Lines[0] != itoa(info.PID) {
		t.Fatalf("display: %+v %v", r, err)
	}
	r, err = c.Command(bg(), "show-options", "-t", info.ControlSessionID, "-v", "@skc-control")
	if err != nil || strings.Join(r.Lines, "|") != "1" {
		t.Fatalf("control tag: %+v %v", r, err)
	}
	_, err = c.Command(bg(), "kill-session", "-t", "$999")
	var ce *CommandError
	if !errors.As(err, &ce) || len(ce.Lines) == 0 {
		t.Fatalf("want CommandError, got %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !waitGone(info.ClientPID, 10e9) {
		t.Fatal("client process left behind")
	}
	if _, err := c.Command(bg(), "display-message", "-p", "x"); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("after close: %v", err)
	}
}
