#!/bin/bash
# bench-restart.sh BIN N: how long a daemon's start takes with N live sessions.
#
# Runs `BIN serve` on a private home under /tmp, makes N sessions (8 creates
# at a time, each `sleep`), stops the daemon (SIGTERM: the sessions and the
# tmux server stay), starts it again and times the start until `ls` answers
# (recovery adopts every session before the API listens). Everything it
# starts it ends: the sessions with their tmux server (by its socket path),
# the daemons by their pids. BENCHMARKS.md.
set -euo pipefail
bin=$1
n=${2:-400}
h=$(mktemp -d /tmp/skc-restart-XXXXXX)
mkdir -p "$h/state"
export SKC_HOME="$h/home"
pid=
cleanup() {
	[ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
	tmux -S "$h/home/tmux.sock" kill-server 2>/dev/null || true
	rm -rf "$h"
}
trap cleanup EXIT
"$bin" serve >"$h/serve1.log" 2>&1 &
pid=$!
until "$bin" ls >/dev/null 2>&1; do sleep 0.1; done
seq 1 "$n" | xargs -P8 -I{} "$bin" create --state-dir "$h/state" --session-id "s{}" -- sleep 100000 >/dev/null
kill "$pid"
wait "$pid" || true
t0=$(date +%s%N)
"$bin" serve >"$h/serve2.log" 2>&1 &
pid=$!
until "$bin" ls >/dev/null 2>&1; do sleep 0.05; done
t1=$(date +%s%N)
adopted=$(grep -c '"adopted"' "$h/home/verdicts.jsonl" || true)
echo "$bin sessions=$n start_to_ls_ms=$(( (t1 - t0) / 1000000 )) adopted=$adopted"
"$bin" kill --help >/dev/null 2>&1 || true
