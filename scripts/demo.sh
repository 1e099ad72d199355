#!/usr/bin/env bash
# A two-minute tour of skc-supervisor against a private, throw-away home.
#
#   make demo        (builds bin/skc-supervisor first)
#
# Everything lives in a fresh temporary SKC_HOME (fence, verdicts, sockets, a private
# tmux server); your own tmux server and your real SKC_HOME are never touched. On exit,
# success or not, the demo daemon is stopped and the demo tmux server killed, each by
# its own pid, and the temporary home is removed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${SKC_BIN:-$here/bin/skc-supervisor}
tmux_bin=${SKC_TMUX:-tmux}

[ -x "$bin" ] || { echo "demo: $bin is missing; run 'make demo' (it builds first)" >&2; exit 1; }
command -v "$tmux_bin" >/dev/null 2>&1 || { echo "demo: tmux is missing; 'make demo' installs it" >&2; exit 1; }

# A short path under /tmp: api.sock and tmux.sock must fit in 107 bytes.
SKC_HOME=$(mktemp -d "${TMPDIR:-/tmp}/skc-demo.XXXXXX")
chmod 0700 "$SKC_HOME"
export SKC_HOME SKC_RUNTIME_DIR=$SKC_HOME SKC_TMUX=$tmux_bin
# The demo server must not read your ~/.tmux.conf.
export SKC_TMUX_CONFIG=/dev/null
sock=$SKC_HOME/tmux.sock
state=$SKC_HOME/agents
mkdir -m 0700 "$state"
daemon_pid=

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
# quote prints its arguments as a shell would need them typed: a word with
# anything but safe characters in single quotes.
quote() {
	local out='' w
	for w in "$@"; do
		case $w in
		'' | *[!A-Za-z0-9_./=:,@%+-]*) w="'${w//\'/\'\\\'\'}'" ;;
		esac
		out+="${out:+ }$w"
	done
	printf '%s' "$out"
}
# show prints a command (the binary by its base name), quoted as it would be
# typed, and runs it.
show() { printf '$ %s\n' "$(quote "${1##*/}" "${@:2}")"; "$@"; }

# server_pid prints the demo tmux server's pid, or nothing when it is not running.
server_pid() { "$tmux_bin" -S "$sock" display -p '#{pid}' 2>/dev/null || true; }

cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -TERM "$daemon_pid" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	pid=$(server_pid)
	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
	fi
	remove_cgroups
	if [ "$rc" -ne 0 ] && [ -s "$SKC_HOME/serve.log" ]; then
		echo "demo: failed (exit $rc); the daemon's log:" >&2
		tail -n 40 "$SKC_HOME/serve.log" >&2
	fi
	rm -rf "$SKC_HOME"
	exit "$rc"
}
# remove_cgroups removes the cgroups the demo daemon made for its generations
# (their base, named in its log, outlives a daemon as its sessions do, and the
# demo's home is thrown away): only empty ones, once the killed server's agents
# have left them (rmdir refuses a cgroup that still holds a process).
remove_cgroups() {
	local base dir
	base=$(grep -o '"cgroup_base":"[^"]*"' "$SKC_HOME/serve.log" 2>/dev/null | head -n 1 | sed 's/.*:"\(.*\)"$/\1/')
	case "$base" in /sys/fs/cgroup/*/skc-*|/sys/fs/cgroup/skc-*) ;; *) return 0 ;; esac
	for _ in $(seq 50); do
		for dir in "$base"/*/; do [ -d "$dir" ] && { rmdir "$dir" 2>/dev/null || true; }; done
		rmdir "$base" 2>/dev/null && return 0
		[ -d "$base" ] || return 0
		sleep 0.1
	done
	echo "demo: cgroup $base still holds processes; left in place" >&2
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# session_name extracts the session name from `create --json` output without jq:
# the first "name" key of {"status": …, "session": {"name": …}} is the session's.
session_name() { grep -o '"name": *"[^"]*"' | head -n 1 | sed 's/.*"\([^"]*\)"$/\1/'; }

step "start the daemon (SKC_HOME=$SKC_HOME)"
"$bin" serve 2>"$SKC_HOME/serve.log" &
daemon_pid=$!
echo "skc-supervisor serve: pid $daemon_pid, logs in $SKC_HOME/serve.log"
ready=
for _ in $(seq 150); do
	kill -0 "$daemon_pid" 2>/dev/null || { echo "demo: the daemon exited during start-up" >&2; exit 1; }
	if "$bin" ls >/dev/null 2>&1; then ready=1; break; fi
	sleep 0.2
done
[ -n "$ready" ] || { echo "demo: the daemon did not answer within 30s" >&2; exit 1; }
echo "ready: 'skc-supervisor ls' answers"

step "create three agent sessions (one per identity)"
names=()
for n in 1 2 3; do
	argv=(create --json --state-dir "$state" --session-id "demo-$n" -- sh -c "echo hello from $n; exec sleep 600")
	printf '$ %s\n' "$(quote skc-supervisor "${argv[@]}")"
	out=$("$bin" "${argv[@]}")
	name=$(printf '%s\n' "$out" | session_name)
	[ -n "$name" ] || { echo "demo: no session name in: $out" >&2; exit 1; }
	echo "  → $name"
	names+=("$name")
done

step "the same identity again: exactly one session per identity"
show "$bin" create --state-dir "$state" --session-id demo-1 -- sh -c 'echo a second one' || true

step "list"
show "$bin" ls

step "what a human sees in a session"
screen=
for _ in $(seq 50); do
	screen=$("$tmux_bin" -S "$sock" capture-pane -p -t "=${names[0]}:" 2>/dev/null | sed '/^$/d' || true)
	case $screen in *"hello from"*) break ;; esac
	sleep 0.1
done
printf '%s\n' "$screen"

step "kill one"
show "$bin" kill "${names[1]}"

step "the verdicts so far (also in $SKC_HOME/verdicts.jsonl)"
show "$bin" verdicts

if [ -t 0 ] && [ -t 1 ]; then
	# Something to look at: the daemon and two sessions run until Enter.
	cat <<EOT

The demo daemon and two sessions are running. From another terminal, attach to one
(detach again with C-b d):
  $(quote env SKC_HOME="$SKC_HOME" "$bin" attach "${names[0]}")
or list them:
  $(quote env SKC_HOME="$SKC_HOME" "$bin" ls)
EOT
	read -r -p "Press Enter to stop the daemon and clean up. " _ || true
fi
step "stop the daemon (SIGTERM): the sessions keep running"
kill -TERM "$daemon_pid"
status=0
wait "$daemon_pid" || status=$?
daemon_pid=
echo "daemon exited with status $status"
show "$tmux_bin" -S "$sock" ls

step "clean up: the demo tmux server (by its pid) and the temporary home"
pid=$(server_pid)
if [ -n "$pid" ]; then
	echo "killing tmux server pid $pid"
	kill -TERM "$pid"
fi
[ "$status" -eq 0 ] || { echo "demo: the daemon did not stop cleanly" >&2; exit 1; }
echo "done"
