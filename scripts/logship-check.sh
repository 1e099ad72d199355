#!/usr/bin/env bash
# Check contrib/rsyslog/skc-verdicts.conf with a real rsyslogd.
#
#   scripts/logship-check.sh VERDICTS_FILE   ship an existing verdicts.jsonl (read only)
#                                            and check every record arrives parsed
#   scripts/logship-check.sh --selftest      synthesize records, rotate the file the way
#                                            logrotate + SIGHUP do, restart rsyslogd, and
#                                            check: every record, parsed, once, in order
#
# rsyslogd runs in the foreground with its own configuration and work directory in a
# temporary directory (never the system's /etc/rsyslog.conf), and is stopped by its pid.
# Needs rsyslog (Debian: apt-get install rsyslog). Exit 0 when the check passes.
# LOGSHIP_KEEP=1 keeps the work directory (configuration, output, rsyslogd's log).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
conf_src=$here/contrib/rsyslog/skc-verdicts.conf
timeout_s=${LOGSHIP_TIMEOUT:-60}

die() { printf 'logship-check: %s\n' "$*" >&2; exit 1; }

command -v rsyslogd >/dev/null 2>&1 || die "rsyslogd not found (Debian: apt-get install rsyslog)"
[ -f "$conf_src" ] || die "$conf_src is missing"

work=$(mktemp -d "${TMPDIR:-/tmp}/skc-logship.XXXXXX")
out=$work/shipped.jsonl
rpid=

stop_rsyslogd() {
	[ -n "$rpid" ] || return 0
	kill -TERM "$rpid" 2>/dev/null || true
	wait "$rpid" 2>/dev/null || true
	rpid=
}

cleanup() {
	local rc=$?
	trap - EXIT
	stop_rsyslogd
	if [ "$rc" -ne 0 ] && [ -s "$work/rsyslogd.log" ]; then
		echo "logship-check: rsyslogd said:" >&2
		tail -n 20 "$work/rsyslogd.log" >&2
	fi
	if [ -n "${LOGSHIP_KEEP:-}" ]; then echo "logship-check: kept $work" >&2; else rm -rf "$work"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# write_conf FILE: the contrib snippet with its placeholders filled, behind a global()
# block that gives this rsyslogd its own work directory (imfile's offsets).
write_conf() {
	local file=$1
	case $file$out in *'"'* | *\\* | *'|'*) die "paths with \", \\ or | are not supported: $file" ;; esac
	mkdir -p "$work/state"
	{
		printf 'global(workDirectory="%s" maxMessageSize="64k")\n' "$work/state"
		sed -e "s|@VERDICTS@|$file|g" -e "s|@OUTPUT@|$out|g" "$conf_src"
	} >"$work/rsyslog.conf"
	rsyslogd -N1 -f "$work/rsyslog.conf" >"$work/check.log" 2>&1 ||
		{ cat "$work/check.log" >&2; die "rsyslogd rejects the configuration"; }
}

start_rsyslogd() {
	rsyslogd -n -f "$work/rsyslog.conf" -i "$work/rsyslogd.pid" >>"$work/rsyslogd.log" 2>&1 &
	rpid=$!
}

# sequences: event.sequence of each JSON line on stdin, in line order. Matches the
# daemon's compact JSON and rsyslog's spaced $!all-json alike (event has no nested
# object, so [^}]* stays inside it).
sequences() { sed -n 's/.*"event": *{[^}]*"sequence": *\([0-9][0-9]*\).*/\1/p'; }

lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }

# wait_for N: until N records were shipped (bounded; fails early if rsyslogd died).
wait_for() {
	local want=$1 i
	for ((i = 0; i < timeout_s * 10; i++)); do
		[ "$(lines "$out")" -ge "$want" ] && return 0
		kill -0 "$rpid" 2>/dev/null || die "rsyslogd exited"
		sleep 0.1
	done
	die "only $(lines "$out") of $want records arrived within ${timeout_s}s"
}

# verify EXPECTED_SEQUENCES_FILE: shipped == expected, line for line.
verify() {
	local expected=$1
	sequences <"$out" >"$work/got"
	if ! diff -u "$expected" "$work/got" >"$work/diff"; then
		head -n 40 "$work/diff" >&2
		die "shipped sequences differ from the expected ones (lost, duplicated or reordered)"
	fi
	[ "$(wc -l <"$work/got")" -eq "$(lines "$out")" ] || die "some shipped lines carry no event.sequence"
	[ ! -s "$out.unparsed" ] || die "$(lines "$out.unparsed") lines did not parse as JSON"
	printf 'logship-check: ok: %d records shipped, parsed, each once, in order\n' "$(wc -l <"$work/got")"
}

# gen A B: synthetic verdict records with sequences A..B, shaped like CONTRACT.md's.
gen() {
	local i
	for ((i = $1; i <= $2; i++)); do
		printf '{"@timestamp":"2026-11-30T01:02:03.%09dZ","event":{"kind":"event","action":"create","outcome":"success","reason":"created","sequence":%d},"skc":{"verdict":"published","code":"","identity":{"state_dir":"/s","session_id":"a-%d"},"evidence":{"note":"quote \\" and unicode \\u00e9"}}}\n' "$i" "$i" "$i"
	done
}

selftest() {
	local src=$work/src file
	mkdir -m 0700 "$src"
	file=$src/verdicts.jsonl
	write_conf "$file"
	gen 1 100 >"$file"
	start_rsyslogd
	wait_for 100
	echo "logship-check: 100 records shipped; rotating while writing"
	gen 101 150 >>"$file"
	mv "$file" "$file.1"         # logrotate's rename
	gen 151 170 >>"$file.1"      # the daemon writes on until its SIGHUP reopen
	gen 171 300 >"$file"         # reopened: a new verdicts.jsonl
	wait_for 300
	echo "logship-check: 300 records shipped; restarting rsyslogd"
	stop_rsyslogd
	gen 301 350 >>"$file"        # written while the shipper is down
	start_rsyslogd
	wait_for 350
	seq 1 350 >"$work/expected"
	verify "$work/expected"
}

check_file() {
	local file=$1 n
	[ -f "$file" ] || die "$file: no such file"
	case $file in /*) ;; *) file=$PWD/$file ;; esac
	write_conf "$file"
	sequences <"$file" >"$work/expected"
	n=$(wc -l <"$work/expected")
	[ "$n" -gt 0 ] || die "$file holds no verdict records"
	start_rsyslogd
	wait_for "$n"
	verify "$work/expected"
}

case ${1:-} in
--selftest) selftest ;;
"" | -h | --help) sed -n '2,14p' "$0"; exit 2 ;;
*) check_file "$1" ;;
esac
