package verdict

import (
	"strings"
	"testing"
	"time"
)

// TestOutputTailRoundTrip: skc.output.tail is written only when set, escaped
// like every string, and read back exactly.
func TestOutputTailRoundTrip(t *testing.T) {
	r := Record{Timestamp: time.Date(2026, 11, 30, 1, 2, 3, 4, time.UTC), Action: ActionEnd,
		Outcome: OutcomeSuccess, Verdict: VerdictEnded, ExitKind: ExitKindCleanup,
		OutputTail: "line \"1\"\nlast é"}
	line := string(r.Line())
	if !strings.Contains(line, `,"output":{"tail":"line \"1\"\nlast é"},"evidence"`) {
		t.Fatalf("encoded: %s", line)
	}
	back, err := ParseLine([]byte(line))
	if err != nil || back.OutputTail != r.OutputTail {
		t.Fatalf("decoded %q, %v", back.OutputTail, err)
	}
	r.OutputTail = ""
	if strings.Contains(string(r.Line()), `"output"`) {
		t.Fatal("an empty tail is written")
	}
}
