// Package verdict is the record of every decision skc-supervisor makes and of
// every session end. It is a leaf: it imports no package of ours, and every
// other package may import it.
//
// It holds four things:
//
//   - The Record type and its vocabulary (vocab.go): verdicts, actions,
//     outcomes, exit kinds and reasons as named constants, with lists
//     (Verdicts, Actions, …) that tests and docs/verdicts.md are generated from.
//   - The error codes and THE table that says how each travels (classify.go):
//     Classify(code) gives the HTTP status, the CLI exit code, the verdict
//     reason and the API status word. Every refusal or failure that crosses a
//     package boundary is an *Error (errors.go) carrying one of these codes;
//     CodeOf finds it in a wrapped chain.
//   - The Writer (writer.go, run.go, file.go, subscribe.go), which keeps the
//     journal (the fence database, which assigns sequences) and the JSON-lines
//     file $SKC_HOME/verdicts.jsonl in step, and feeds `verdicts --follow`.
//   - The operational logger (log.go): NewOpsLogger, and the log field names
//     every package uses, in one place.
//
// # Records
//
// A Record encodes to one line of JSON in Elastic Common Schema names
// (@timestamp in UTC with nine fractional digits; event.kind, action, outcome,
// reason, sequence, duration in ns) with our own fields under skc.* — the shape
// in docs/contract.md, documented with an example line per word in
// docs/verdicts.md. MarshalJSON and UnmarshalJSON are exact inverses. The
// encoder is hand-written (zerolog's escaping rules, fixed field order)
// rather than a zerolog Event, because zerolog drops events when its global
// level is disabled and a verdict must not depend on log settings.
//
// # Durability and ordering
//
// The journal assigns each verdict its sequence (increasing by one, across
// restarts) and is the authority; the file is a copy, written in sequence order
// with one write(2) per record on an O_APPEND descriptor (mode 0600). Emit
// journals then files; Filed takes a record the fence journaled in its own
// transaction (publish, mark ended). A single worker goroutine owns the file:
//
//   - When an append fails, the record stays in the journal; the worker
//     re-appends the backlog from the journal, in order, on the next record,
//     on a periodic retry and on Flush. The file watermark (the highest
//     sequence in it) makes a second copy impossible.
//   - At start the Writer reads the last complete line of the file (or of
//     verdicts.jsonl.1 right after a rotation) and catches up from the journal.
//     A torn last line (a crash or a short write mid-record) is ended with LF,
//     never glued to the next record, and the torn record is written again.
//   - A file whose tail the journal does not hold (the database was replaced)
//     is appended to from the new journal's start, with a warning.
//   - Reopen (SIGHUP) reopens the path for logrotate; the watermark stays in
//     memory.
//
// # Budget
//
// Emit keeps its caller at most Budget (250 ms) or until its context ends.
// Past it the caller gets an *Error (CodeTimeout) wrapping ErrDeferred, and the
// worker still journals and files the record: the caller is never blocked by
// a slow disk or a busy database, and must not emit again. Journal calls run
// on the worker with their own timeout, detached from callers, so a caller
// giving up never aborts a commit half-way.
//
// # Following
//
// Subscribe(after) delivers every record after a sequence, oldest first, with
// no gap and no duplicate: first from the journal, then live. A slow reader
// never blocks Emit: its live buffer is bounded, and when it overflows the
// subscription reads what it missed from the journal.
package verdict
