package tmuxctl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestDecodeGolden requires every corpus transcript to decode to its
// .decode.jsonl, record for record (compared as parsed JSON objects).
func TestDecodeGolden(t *testing.T) {
	outs, err := filepath.Glob("testdata/corpus/*.out")
	if err != nil || len(outs) < 40 {
		t.Fatalf("corpus missing: %v (%d files)", err, len(outs))
	}
	matched := 0
	for _, out := range outs {
		name := strings.TrimSuffix(filepath.Base(out), ".out")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := Decode(bytes.NewReader(raw), &got); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(out, ".out") + ".decode.jsonl")
			if os.IsNotExist(err) {
				// 06 (-CC) and 07 (empty) have no expected parse: decoding
				// must still succeed and yield valid JSON lines.
				parseJSONL(t, got.Bytes())
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g, w := parseJSONL(t, got.Bytes()), parseJSONL(t, want)
			if len(g) != len(w) {
				t.Errorf("got %d records, want %d", len(g), len(w))
			}
			for i := 0; i < len(g) && i < len(w); i++ {
				if !reflect.DeepEqual(g[i], w[i]) {
					t.Fatalf("record %d:\n got %s\nwant %s", i, short(g[i]), short(w[i]))
				}
			}
			matched++
		})
	}
	t.Logf("%d transcripts matched their golden decode", matched)
}

func parseJSONL(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad JSON line %q: %v", short(sc.Text()), err)
		}
		recs = append(recs, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return recs
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 400 {
		b = append(b[:400], "…"...)
	}
	return string(b)
}

func TestDecodeEdges(t *testing.T) {
	in := "%begin 1 2 1\n\xff\xe2\x82 x\n%end 1 2 1\n%extended-output %3 12 : a\\012\n%begin 7 8 0\nhalf"
	var out bytes.Buffer
	if err := Decode(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	got := parseJSONL(t, out.Bytes())
	want := parseJSONL(t, []byte(`{"type":"reply","time":1,"number":2,"flags":1,"error":false,"lines":["\ufffd\ufffd\ufffd x"]}
{"type":"output","pane":"%3","data_b64":"YQo=","age":12}
{"type":"incomplete","time":7,"number":8,"flags":0,"lines":["half"]}
`))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if strings.Contains(out.String(), `\u003c`) {
		t.Fatal("HTML escaping in output")
	}
}
