package verdict

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/verdicts.md and docs/errors.md from the code")

const (
	verdictsDoc = "../docs/verdicts.md"
	errorsDoc   = "../docs/errors.md"
)

// TestDocs keeps docs/verdicts.md and docs/errors.md generated from the
// vocabulary, its doc comments and real records: run
// `go test ./verdict -run TestDocs -update` after changing the vocabulary.
func TestDocs(t *testing.T) {
	docs := constDocs(t)
	for path, want := range map[string]string{
		verdictsDoc: genVerdictsDoc(t, docs),
		errorsDoc:   genErrorsDoc(docs),
	} {
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s is stale (%v): run go test ./verdict -run TestDocs -update", path, err)
		}
	}
}

// TestDocExamplesParse reads the example lines back from docs/verdicts.md, as
// a reader would copy them: each is a valid record in the vocabulary.
func TestDocExamplesParse(t *testing.T) {
	b, err := os.ReadFile(verdictsDoc)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte(`{"@timestamp"`)) {
			continue
		}
		n++
		assertECS(t, append(append([]byte(nil), line...), '\n'))
		r, err := ParseLine(line)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", line, err)
		}
	}
	want := len(Verdicts) + len(ExitKinds) + len(Reasons)
	for _, c := range Codes {
		if codeInVerdicts(c) { // the others show an API error body
			want++
		}
	}
	if n < want {
		t.Fatalf("%d example lines, want %d", n, want)
	}
}

// constDocs maps each exported constant's value (for Code…, Verdict…, …) and
// name to the meaning its doc comment gives ("// VerdictX: meaning.").
func constDocs(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range pkgs["verdict"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || vs.Doc == nil {
				return true
			}
			text := strings.Join(strings.Fields(vs.Doc.Text()), " ")
			for _, name := range vs.Names {
				if _, meaning, ok := strings.Cut(text, ": "); ok && strings.HasPrefix(text, name.Name+":") {
					out[name.Name] = meaning
				}
			}
			return true
		})
	}
	return out
}

// meaning finds the doc of the constant whose value is v among names with prefix.
func meaning(t *testing.T, docs map[string]string, prefix, v string) string {
	for _, c := range constantNames(prefix, v) {
		if m, ok := docs[c]; ok {
			return strings.ToUpper(m[:1]) + m[1:]
		}
	}
	t.Errorf("no doc comment for %s %q", prefix, v)
	return ""
}

// constantNames is the Go name a vocabulary value has: CamelCase of the value.
func constantNames(prefix, v string) []string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, part := range strings.Split(v, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return []string{b.String()}
}

func line(r Record) string { return string(r.AppendJSON(nil)) }

func genVerdictsDoc(t *testing.T, docs map[string]string) string {
	var b strings.Builder
	b.WriteString(verdictsIntro)
	section := func(title, intro string) { fmt.Fprintf(&b, "\n## %s\n\n%s\n", title, intro) }
	item := func(word, what, example string) {
		fmt.Fprintf(&b, "\n### `%s`\n\n%s\n\n```json\n%s\n```\n", word, what, example)
	}
	section("Verdicts (`skc.verdict`)", "One per decision. `event.action` says which operation decided.")
	for i, r := range verdictExamples() {
		item(Verdicts[i], meaning(t, docs, "Verdict", Verdicts[i]), line(r))
	}
	section("Exit kinds (`skc.exit_kind`)", "On `ended` verdicts only; `skc.exit` carries the status (null when unknown) or the signal name.")
	for i, r := range exitKindExamples() {
		item(ExitKinds[i], meaning(t, docs, "ExitKind", ExitKinds[i]), line(r))
	}
	section("Reasons (`event.reason`)", "Why the verdict was reached. A refused or failed verdict's reason is its code's reason (see below and docs/errors.md).")
	for i, r := range reasonExamples() {
		item(Reasons[i], meaning(t, docs, "Reason", Reasons[i]), line(r))
	}
	section("Codes (`skc.code`)", "A refused or failed verdict carries the code the API returned; `event.reason` is the code's reason word. Codes that never reach a verdict (they are refused before any decision, or on the client side) show the API error body instead. HTTP statuses and exit codes: docs/errors.md.")
	for i, c := range Codes {
		what := fmt.Sprintf("%s Reason `%s`.", meaning(t, docs, "Code", c), Classify(c).Reason)
		if codeInVerdicts(c) {
			item(c, what, line(codeExample(i, c)))
			continue
		}
		body, _ := json.Marshal(map[string]any{"status": Classify(c).Status,
			"error": Errorf(c, exampleDetails[c], "%s", exampleMessages[c])})
		item(c, what+" API and CLI only.", string(body))
	}
	return b.String()
}

var exampleDetails = map[Code]map[string]any{
	CodeInvalidRequest:   {"field": "state_dir"},
	CodeNotFound:         {"name": "skc-nope"},
	CodeBodyTooLarge:     {"limit_bytes": 1 << 20},
	CodeMethodNotAllowed: {"method": "GET", "path": "/v1/sessions/skc-nope/input", "allowed": []string{"POST"}},
	CodeBusy:             {"pid": 4242},
	CodeFenceSchemaNewer: {"schema_version": 7, "supported": 6},
	CodeRemoteSession:    {"host": "host-a", "name": "skc-3f2a9c1e5b7d-9b1c2d3e4f5a69788796a5b4c3d2e1f0"},
}

var exampleMessages = map[Code]string{
	CodeInvalidRequest:    "state_dir must be an absolute path",
	CodeNotFound:          "no session named skc-nope",
	CodePermissionDenied:  "peer uid 1001 is not the daemon's uid 1000",
	CodeBodyTooLarge:      "request body is larger than 1048576 bytes",
	CodeMethodNotAllowed:  "GET /v1/sessions/skc-nope/input: this path takes POST",
	CodeDaemonUnreachable: "dial /run/user/1000/skc/api.sock: connect: no such file or directory",
	CodeBusy:              "SKC_HOME /home/ana/.local/state/skc is held by pid 4242",
	CodeFenceSchemaNewer:  "/home/ana/.local/state/skc/fence.sqlite has fence schema version 7, newer than this binary's 6: a newer skc-supervisor has used it; run that version or a later one",
	CodeRemoteSession:     "session skc-3f2a9c1e5b7d-9b1c2d3e4f5a69788796a5b4c3d2e1f0 runs on host host-a: act on it there",
}

func genErrorsDoc(docs map[string]string) string {
	var b strings.Builder
	b.WriteString(errorsIntro)
	b.WriteString("| code | HTTP | exit | status | reason | meaning |\n|---|---|---|---|---|---|\n")
	for _, c := range Codes {
		cl := Classify(c)
		name := constantNames("Code", c)[0]
		m := docs[name]
		if m != "" {
			m = strings.ToUpper(m[:1]) + m[1:]
		}
		fmt.Fprintf(&b, "| `%s` | %d | %d | `%s` | `%s` | %s |\n", c, cl.HTTP, cl.Exit, cl.Status, cl.Reason, m)
	}
	b.WriteString(errorsOutro)
	return b.String()
}

var verdictsIntro = `# Verdicts

<!-- Generated by ` + "`go test ./verdict -run TestDocs -update`" + ` from verdict/*.go; do not edit by hand. -->

Every decision skc-supervisor makes and every session end writes exactly one
verdict: a JSON object on one line of ` + "`$SKC_HOME/verdicts.jsonl`" + ` (one write per
record), also kept in the fence database under the same sequence number, which is
what ` + "`skc-supervisor verdicts --since N`" + ` and ` + "`GET /v1/verdicts`" + ` read.
Every create ends in exactly one terminal verdict of its own.

Field names follow the Elastic Common Schema where one fits:

| field | meaning |
|---|---|
| ` + "`@timestamp`" + ` | RFC 3339, UTC, nine fractional digits |
| ` + "`event.kind`" + ` | always ` + "`event`" + ` |
| ` + "`event.action`" + ` | ` + codeList(Actions) + ` |
| ` + "`event.outcome`" + ` | ` + codeList(Outcomes) + ` |
| ` + "`event.reason`" + ` | a reason word (below) |
| ` + "`event.sequence`" + ` | increases by one per verdict, across restarts |
| ` + "`event.duration`" + ` | nanoseconds; absent when not measured |
| ` + "`skc.verdict`" + ` | the verdict word (below) |
| ` + "`skc.code`" + ` | the refusal or failure code, ` + "`\"\"`" + ` on success |
| ` + "`skc.exit_kind`" + ` | how a session ended, ` + "`\"\"`" + ` unless ` + "`ended`" + ` |
| ` + "`skc.identity`" + ` | ` + "`{state_dir, session_id}`" + ` |
| ` + "`skc.session`" + ` | ` + "`{name, id, generation}`" + ` (tmux session name and id) |
| ` + "`skc.reservation`" + ` | ` + "`{id, phase}`" + ` |
| ` + "`skc.exit`" + ` | ` + "`{status, signal}`" + ` on ` + "`ended`" + `: status null when unknown, signal a name such as ` + "`SIGKILL`" + ` |
| ` + "`skc.output`" + ` | ` + "`{tail}`" + ` on ` + "`ended`" + `: the last ≤ 50 lines (≤ 8 KiB) the pane showed, control characters removed |
| ` + "`skc.evidence`" + ` | what the decision was based on (pids, phases, tmux errors) |

` + "`skc.identity`, `skc.session`, `skc.reservation`, `skc.exit` and `skc.output`" + ` are absent when they
do not apply. Consumers ignore fields they do not know.

## Reading the file

- Lines are in sequence order. A gap or a repeat never happens within one file;
  after ` + "`logrotate`" + ` (SIGHUP reopens the file) the sequence continues in the new
  file. If an append fails (disk full, permissions) the record is still in the
  database and is appended later, in order; use the sequence to check.
- A line without its final newline can only be the result of a crash or a failed
  write in the middle of a record; the next record starts on a new line and the
  torn record is appended again whole.
- If the database is replaced (restored from a backup, deleted), its sequence
  restarts and the file shows a drop in ` + "`event.sequence`" + `; the daemon logs a warning.
`

const errorsIntro = `# Error codes

<!-- Generated by ` + "`go test ./verdict -run TestDocs -update`" + ` from verdict/classify.go; do not edit by hand. -->

Every refusal and failure carries a stable snake_case code. The API answers
` + "`{\"status\": …, \"error\": {\"code\", \"message\", \"details\"}}`" + ` with the HTTP status
below; the CLI exits with the exit code below and, with ` + "`--json`" + `, prints the same
document on stdout. A refused or failed verdict carries the code in ` + "`skc.code`" + ` and
the reason word in ` + "`event.reason`" + `. The table is ` + "`verdict.Classify`" + `; an unknown code is
treated as ` + "`internal`" + `.

`

const errorsOutro = `
Exit codes (docs/contract.md): 0 success, 1 the operation failed, 2 usage error or
invalid input, 3 refused by the fence, 4 no such session, 69 the daemon is not
reachable, 75 busy (another daemon holds SKC_HOME, or the fence stayed
contended: retry later), 77 permission denied.

` + "`identity_fence_contended`" + ` is a refusal (HTTP 409, status ` + "`refused`" + `) whose exit code
is 75 rather than 3, because it is temporary: the same create may succeed when
retried. ` + "`fence_lost`" + ` is a conflict discovered in the middle of a create (another
owner took the reservation): HTTP 409 but a failure (exit 1), not a refusal.
`

// codeList writes words as the tables do: each in backticks, comma-separated.
func codeList(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "`" + w + "`"
	}
	return strings.Join(q, ", ")
}
