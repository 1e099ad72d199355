#!/usr/bin/env bash
# Check the create saga's spin model (model/saga.pml): the default model must hold no
# violation over its whole state space, and every negative variant — each removes one
# rule of the design — must make spin FIND a violation of create-once. A variant that
# stops finding its violation fails the check: it means the model no longer checks
# that rule.
#
#   scripts/model-check.sh            NC=2 creators for the exhaustive default run
#   NC=3 scripts/model-check.sh       the full run: 112M states, ~10 CPU-minutes, ~6.7 GB
#   MODEL_ONLY="default NO_GATE" ...  run only the named checks
#   MODEL_KEEP=1 ...                  keep the work directory (pan.c, trails, outputs)
#
# spin and gcc are installed with apt-get when missing (Debian packages spin, gcc).
# Everything is built in a temporary directory, never in the repository. Exit 0 when
# every check passes.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
model=$here/model/saga.pml
nc=${NC:-2}
memlim=${MODEL_MEMLIM:-16000}   # MB; a run that reaches it is incomplete, and fails
depth=1000000

die() { printf 'model-check: %s\n' "$*" >&2; exit 1; }

[ -f "$model" ] || die "$model is missing"
case $nc in 1|2|3|4) ;; *) die "NC must be 1-4 (creators), not '$nc'" ;; esac

install_tools() {
	local need=""
	command -v spin >/dev/null 2>&1 || need="$need spin"
	command -v gcc >/dev/null 2>&1 || need="$need gcc libc6-dev"
	[ -z "$need" ] && return 0
	echo "model-check: installing with apt-get:$need"
	[ "$(id -u)" = 0 ] || die "spin/gcc missing and not root: apt-get install$need"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	# shellcheck disable=SC2086 # word splitting of the package list is intended
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need
}
install_tools

work=$(mktemp -d "${TMPDIR:-/tmp}/skc-model.XXXXXX")
cleanup() { [ "${MODEL_KEEP:-}" = 1 ] && echo "model-check: kept $work" || rm -rf "$work"; }
trap cleanup EXIT

# verify NAME NC DEFINE...: generate, compile and run one verifier in its own directory
# (-DSAFETY: assertions and invalid end states; -DCOLLAPSE: compressed state vectors);
# leaves its output in $work/NAME/out and sets errors, states, secs, mem.
verify() {
	local name=$1 n=$2; shift 2
	local opt=-O2
	case $name in default | RESTART | RESTART_BUILT | PRESERVE_RELEASES | POOL | POOL_STEP) ;; *) opt=-O0 ;; esac   # a counterexample search is tiny: compile fast
	local dir=$work/$name
	mkdir -p "$dir"
	cp "$model" "$dir/saga.pml"
	(cd "$dir" && spin -a -DNC="$n" "$@" saga.pml >spin.out 2>&1) ||
		{ cat "$dir/spin.out" >&2; die "$name: spin -a failed"; }
	(cd "$dir" && gcc "$opt" -DSAFETY -DCOLLAPSE -DMEMLIM="$memlim" -o pan pan.c 2>gcc.out) ||
		{ cat "$dir/gcc.out" >&2; die "$name: gcc failed"; }
	local t0 t1
	t0=$(date +%s.%N)
	(cd "$dir" && ./pan -m"$depth" >out 2>&1) || true   # pan exits non-zero on errors
	t1=$(date +%s.%N)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' "$dir/out" | tail -1)
	states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$dir/out" | tail -1)
	mem=$(sed -n 's/^ *\([0-9.]*\)[[:space:]]*total actual memory usage.*/\1/p' "$dir/out" | tail -1)
	[ -n "$errors" ] || { cat "$dir/out" >&2; die "$name: no result from pan"; }
}

# An exhaustive run is only a proof when pan covered everything: no depth or memory
# limit reached.
incomplete() {
	grep -q -e 'max search depth too small' -e 'reached -DMEMLIM bound' \
		-e 'out of memory' "$1"
}

failed=0
fail() { printf 'FAIL %s\n' "$*"; failed=1; }

# check_holds NAME NC DEFINE...: the whole state space must hold no violation.
check_holds() {
	local name=$1 n=$2; shift 2
	verify "$name" "$n" "$@"
	local out=$work/$name/out
	if incomplete "$out"; then
		fail "$name (NC=$n${*:+ $*}): search incomplete (depth or memory limit); see below"
		sed -n '1,40p' "$out"
	elif [ "$errors" != 0 ]; then
		fail "$name (NC=$n${*:+ $*}): $errors violation(s); the design's rules no longer hold"
		sed -n '1,40p' "$out"
		(cd "$work/$name" && spin -t -p -DNC="$n" "$@" saga.pml | tail -60) || true
	else
		printf 'ok   %s (NC=%s%s): no violation, %s states, %s s, %s MB\n' \
			"$name" "$n" "${*:+ $*}" "$states" "$secs" "$mem"
	fi
}

# check_caught NAME NC DEFINE...: the variant must end in an assertion violation (never
# two live sessions, never two agents) — not merely any error.
check_caught() {
	local name=$1 n=$2; shift 2
	verify "$name" "$n" "$@"
	local out=$work/$name/out
	local at
	at=$(sed -n 's/.*assertion violated.*(at depth \([0-9]*\)).*/\1/p' "$out" | head -1)
	if [ "$errors" = 0 ] || [ -z "$at" ]; then
		fail "$name (NC=$n${*:+ $*}): spin found no violation; the model no longer checks this rule"
		sed -n '1,40p' "$out"
	else
		printf 'ok   %s (NC=%s%s): violation found at depth %s, %s s\n' "$name" "$n" "${*:+ $*}" "$at" "$secs"
	fi
}

# The restart extension (issue 16) starts from a running identity and is far larger per
# creator: one creator and one restarter race, sessions end only through their panes
# (ND=0); the full run (NC=3) lets one session end by itself as well (ND=1).
rnd=0
[ "$nc" -ge 3 ] && rnd=1
max() { if [ "$1" -ge "$2" ]; then echo "$1"; else echo "$2"; fi; }

only=${MODEL_ONLY:-default NO_PUBLIVE RECLAIM_FIRST NO_GATE SESSION_IS_AGENT PRESERVE_RELEASES RESTART RESPAWN_FIRST RESTART_TWO_STEPS RESTART_AT_RESERVED RESTART_BUILT CREATE_NEW_SESSION POOL POOL_STEP POOL_NO_GATE POOL_PRECLAIM_UNRECORDED POOL_RENAME_FIRST}
for c in $only; do
	case $c in
	default) check_holds default "$nc" ;;
	NO_PUBLIVE | NO_GATE | SESSION_IS_AGENT) check_caught "$c" "$nc" "-D$c" ;;
	RECLAIM_FIRST) check_caught "$c" "$(max "$nc" 3)" "-D$c" ;;   # needs a third creator
	PRESERVE_RELEASES) check_holds "$c" 2 "-D$c" ;;   # NC=2 always: see model/README.md
	RESTART) check_holds RESTART 1 -DRESTART -DND=$rnd ;;
	# the restart as built: one creator and one restarter; the full run (NC=3) adds a
	# kill of the waiting identity. CREATE_NEW_SESSION removes the create's reuse of
	# the kept session: a second session beside it (model/README.md).
	RESTART_BUILT)
		if [ "$nc" -ge 3 ]; then check_holds RESTART_BUILT 1 -DRESTART_BUILT -DND=0 -DKILL
		else check_holds RESTART_BUILT 1 -DRESTART_BUILT -DND=0; fi ;;
	CREATE_NEW_SESSION) check_caught "$c" 1 -DRESTART_BUILT -DND=0 -DCREATE_NEW_SESSION ;;
	# the warm pool (issue 18): claims of standbys racing crashes, recoveries and the
	# next daemon's sweep, a first generation's claim recorded with its reservation
	# (POOL_PRECLAIM, as built); POOL_STEP records every claim by its own spawned
	# step (a later generation's path, alone); POOL_NO_GATE lets a standby start its
	# agent at the hand-off.
	POOL) check_holds POOL "$nc" -DPOOL -DPOOL_PRECLAIM ;;
	POOL_STEP) check_holds POOL_STEP "$nc" -DPOOL ;;
	POOL_NO_GATE) check_caught POOL_NO_GATE "$nc" -DPOOL -DPOOL_PRECLAIM -DPOOL_NO_GATE ;;
	# POOL_PRECLAIM_UNRECORDED takes the standby with the reservation but records it
	# nowhere (the row stays at reserved while the standby is renamed and tagged).
	POOL_PRECLAIM_UNRECORDED) check_caught POOL_PRECLAIM_UNRECORDED "$(max "$nc" 2)" -DPOOL -DPOOL_PRECLAIM -DPOOL_PRECLAIM_UNRECORDED ;;
	# POOL_RENAME_FIRST records spawned after the claim's rename and tags: a second
	# creator reclaims the crashed one's row without a census (needs two creators).
	POOL_RENAME_FIRST) check_caught POOL_RENAME_FIRST "$(max "$nc" 2)" -DPOOL -DPOOL_RENAME_FIRST ;;
	RESPAWN_FIRST | RESTART_TWO_STEPS | RESTART_AT_RESERVED)
		check_caught "$c" 1 -DRESTART -DND=0 "-D$c" ;;
	*) die "unknown check '$c'" ;;
	esac
done
[ "$failed" = 0 ] || die "model check failed"
echo "model-check: all checks passed"
