package fence

import (
	"encoding/json"
	"fmt"
	"time"
)

// How every engine stores times and the recent start times of a restart
// (RestartInfo.Starts): one encoding, so a record reads back the same from
// either engine and the engines cannot drift apart.

// Nanos is t as stored: Unix nanoseconds, 0 for the zero time.
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromNanos is Nanos's inverse: the zero time for 0, else UTC.
func FromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// EncodeStarts stores the recent start times as a JSON array of Unix
// nanoseconds.
func EncodeStarts(ts []time.Time) string {
	ns := make([]int64, len(ts))
	for i, t := range ts {
		ns[i] = Nanos(t)
	}
	b, _ := json.Marshal(ns)
	return string(b)
}

// DecodeStarts reads what EncodeStarts stored ("" is none).
func DecodeStarts(s string) ([]time.Time, error) {
	if s == "" {
		return nil, nil
	}
	var ns []int64
	if err := json.Unmarshal([]byte(s), &ns); err != nil {
		return nil, fmt.Errorf("fence: identity starts: %w", err)
	}
	out := make([]time.Time, len(ns))
	for i, n := range ns {
		out[i] = FromNanos(n)
	}
	return out, nil
}
