#!/bin/bash
# bench-rename-lists.sh BIN N: how many full census lists N pooled creates cost.
#
# Runs `BIN serve --pool 4 --wire-log FILE` on a private home under /tmp, makes N
# sequential creates (each claims a standby and renames it), and counts the
# census's full lists (list-sessions with its whole format) on the wire while
# they run. Everything it starts it ends: the sessions by `kill`, the daemon by
# its pid, its tmux server by its socket path. BENCHMARKS.md, issue 18.
set -euo pipefail
bin=$1
n=${2:-20}
h=$(mktemp -d /tmp/skc-rename-XXXXXX)
mkdir -p "$h/state"
"$bin" serve --home "$h/home" --pool 4 --wire-log "$h/wire.log" >"$h/serve.log" 2>&1 &
pid=$!
cleanup() {
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	tmux -S "$h/home/tmux.sock" kill-server 2>/dev/null || true
	rm -rf "$h"
}
trap cleanup EXIT
for _ in $(seq 100); do "$bin" --home "$h/home" ls >/dev/null 2>&1 && break; sleep 0.1; done
sleep 2 # the pool filled, the subscription's first value and its list over
full() { grep -c ' > "list-sessions" "-F" "#{session_id}\\011' "$h/wire.log" || true; }
before=$(full)
for i in $(seq "$n"); do
	"$bin" --home "$h/home" create --state-dir "$h/state" --session-id "s$i" -- sleep 1000 >/dev/null
	sleep 0.3 # the pool refilled: the next create claims a standby too
done
sleep 1
after=$(full)
echo "$(basename "$bin"): $n pooled creates, $((after - before)) full lists, $(grep -c ' > "rename-session"' "$h/wire.log") renames"
for i in $(seq "$n"); do "$bin" --home "$h/home" kill --state-dir "$h/state" --session-id "s$i" >/dev/null; done
