package fence

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestPublishedJSONEndedAt: `fence --json` says "ended_at": null for a
// generation that has not ended, the time once it has, and reads both back.
func TestPublishedJSONEndedAt(t *testing.T) {
	live := Published{Identity: Identity{StateDir: "/s", SessionID: "a"}, Generation: 1, PublishedAt: time.Now()}
	b, err := json.Marshal(live)
	if err != nil || !strings.Contains(string(b), `"ended_at":null`) || strings.Contains(string(b), "0001-01-01") {
		t.Fatalf("live: %s %v", b, err)
	}
	ended := live
	ended.Ended, ended.EndedAt = true, time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)
	b, _ = json.Marshal(ended)
	var back Published
	if err := json.Unmarshal(b, &back); err != nil || !back.EndedAt.Equal(ended.EndedAt) || back.Identity != ended.Identity {
		t.Fatalf("ended: %s → %+v %v", b, back, err)
	}
}
