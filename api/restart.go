package api

import (
	"time"
)

// Restart policy bounds and defaults (contract "Restart policy").
const (
	RestartNever           = "never"
	RestartOnFailure       = "on-failure"
	RestartAlways          = "always"
	DefaultRestartDelay    = time.Second
	MaxRestartDelay        = 60 * time.Second
	DefaultRestartBurst    = 5
	MaxRestartBurst        = 100
	DefaultRestartInterval = 300 * time.Second
	MaxRestartInterval     = 24 * time.Hour
	// StatusRestarted answers a restart request.
	StatusRestarted = "restarted"
)

// RestartSpec is a validated restart policy: Policy never means the rest is
// unused (it is stored as given).
type RestartSpec struct {
	Policy     string
	ResumeArgv []string
	Delay      time.Duration
	Burst      int
	Interval   time.Duration
}

// RestartResponse answers POST /v1/sessions/{name}/restart and `restart --json`.
type RestartResponse struct {
	Status  string  `json:"status"` // restarted
	Session Session `json:"session"`
}

// validRestart checks the policy fields of a create request and fills in
// their defaults.
func validRestart(req CreateRequest) (RestartSpec, error) {
	r := RestartSpec{Policy: RestartNever, Delay: DefaultRestartDelay, Burst: DefaultRestartBurst,
		Interval: DefaultRestartInterval}
	switch req.Restart {
	case "", RestartNever:
	case RestartOnFailure, RestartAlways:
		r.Policy = req.Restart
	default:
		return RestartSpec{}, invalid("restart", "must be never, on-failure or always, got %q", req.Restart)
	}
	if req.ResumeArgv != nil {
		argv, err := validArgv(req.ResumeArgv)
		if err != nil {
			return RestartSpec{}, invalid("resume_argv", "%v", err)
		}
		r.ResumeArgv = argv
	}
	if ms := req.RestartDelayMS; ms != nil {
		if *ms < 0 || *ms > MaxRestartDelay.Milliseconds() {
			return RestartSpec{}, invalid("restart_delay_ms", "must be 0-%d milliseconds, got %d", MaxRestartDelay.Milliseconds(), *ms)
		}
		r.Delay = time.Duration(*ms) * time.Millisecond
	}
	if b := req.RestartBurst; b != nil {
		if *b < 1 || *b > MaxRestartBurst {
			return RestartSpec{}, invalid("restart_burst", "must be 1-%d, got %d", MaxRestartBurst, *b)
		}
		r.Burst = int(*b)
	}
	if s := req.RestartIntervalS; s != nil {
		if *s < 1 || *s > int64(MaxRestartInterval/time.Second) {
			return RestartSpec{}, invalid("restart_interval_s", "must be 1-%d seconds, got %d", int64(MaxRestartInterval/time.Second), *s)
		}
		r.Interval = time.Duration(*s) * time.Second
	}
	return r, nil
}
