// Package integration holds the end-to-end tests of skc-supervisor: they build the
// real binary once per test binary, start real daemons on private homes against a
// real tmux server, and drive them exactly as a user would (the CLI, raw HTTP on the
// unix socket, a pty for attach, signals for crashes).
//
// The package has no non-test code; this file exists so that `go build ./...` and
// `go vet ./...` see a package here.
package integration
