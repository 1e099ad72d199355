// Package verdict is the record of every decision skc-supervisor makes and of
// every session end: the Record type and its vocabulary, the error codes that
// cross package boundaries with THE table that maps them to HTTP statuses, CLI
// exit codes, verdict reasons and API status words (Classify), and the Writer
// that keeps the sequenced journal (the fence database) and the JSON-lines file
// ($SKC_HOME/verdicts.jsonl) in step.
//
// # Records
//
// A Record encodes to one line of JSON in Elastic Common Schema names
// (@timestamp with nanoseconds, event.kind/action/outcome/reason/sequence/
// duration) with our own fields under skc.* (see docs/verdicts.md and
// CONTRACT.md). MarshalJSON and UnmarshalJSON are exact inverses.
//
// # Durability
//
// The journal assigns each verdict its sequence (increasing by one, across
// restarts) and is the authority; the file is a copy written with one write(2)
// per record, in sequence order. When a file append fails the record stays in
// the journal and the Writer re-appends it later (on the next record, on a
// periodic retry, or on Flush), so the file never loses or repeats a sequence.
// At start the Writer reads the sequence of the file's last complete line and
// catches up from the journal; a torn last line is ended with LF, never glued to
// the next record. Reopen (SIGHUP) follows logrotate.
//
// # Budget
//
// Emit keeps its caller at most Budget (250 ms). Past it the caller gets an
// *Error wrapping ErrDeferred and the Writer's worker goroutine still journals
// and files the record: the caller is never blocked by a slow disk or a busy
// database, and never has to emit twice.
//
// # Errors
//
// Every refusal and failure that crosses a package boundary is an *Error with a
// stable snake_case Code. CodeOf finds it in a chain; Classify says how it
// travels. The table is in classify.go and rendered in docs/errors.md.
package verdict
