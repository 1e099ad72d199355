#!/usr/bin/env bash
# build-tmux.sh TARBALL — build tmux from a source tarball (a `git archive` of a
# release tag, no configure yet) into a cache directory reused between runs, and
# print the path of the tmux binary on stdout. Everything else goes to stderr.
#
# The cache is keyed by the tarball's sha256, so a changed tarball gets a fresh
# build and an unchanged one costs nothing:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/skc-supervisor/tmux-<version>-<sha256[:16]>/bin/tmux
# Build dependencies (Debian: autoconf automake bison pkg-config libevent-dev
# libncurses-dev) are installed with apt-get only when one is missing.
set -euo pipefail

tarball=${1:?usage: build-tmux.sh TARBALL}
[ -f "$tarball" ] || { echo "build-tmux: $tarball: no such file" >&2; exit 1; }

sum=$(sha256sum "$tarball" | cut -c1-16)
name=$(basename "$tarball" .tar.gz)                      # tmux-3.7c
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/skc-supervisor
prefix=$cache_root/$name-$sum
bin=$prefix/bin/tmux

if [ -x "$bin" ] && "$bin" -V >/dev/null 2>&1; then
	echo "build-tmux: using cached $("$bin" -V) at $bin" >&2
	echo "$bin"
	exit 0
fi

install_deps() {
	local need="" tool pkg
	for tool in autoconf:autoconf automake:automake bison:bison pkg-config:pkg-config; do
		command -v "${tool%%:*}" >/dev/null 2>&1 || need="$need ${tool#*:}"
	done
	pkg-config --exists libevent 2>/dev/null || need="$need libevent-dev"
	pkg-config --exists ncurses 2>/dev/null || pkg-config --exists ncursesw 2>/dev/null || need="$need libncurses-dev"
	[ -z "$need" ] && return 0
	echo "build-tmux: installing build dependencies with apt-get:$need" >&2
	local sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq >&2
	# shellcheck disable=SC2086 # $need is a word list
	$sudo apt-get install -y -qq --no-install-recommends $need >&2
}

install_deps
mkdir -p "$cache_root"
# One build at a time per cache (two CI runs on one machine share it).
exec 9>"$cache_root/.lock"
flock 9
if [ -x "$bin" ] && "$bin" -V >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi

work=$(mktemp -d "$cache_root/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "build-tmux: building $name into $prefix (about a minute)" >&2
tar xzf "$tarball" -C "$work"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n1)
stage=$work/prefix
(
	cd "$src"
	sh autogen.sh
	./configure --prefix="$prefix" --disable-dependency-tracking
	make -j"$(nproc 2>/dev/null || echo 2)"
	make install DESTDIR="$stage"
) >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log" >&2; echo "build-tmux: build failed" >&2; exit 1; }
# DESTDIR puts the tree under $stage$prefix; move it into place in one rename.
rm -rf "$prefix"
mv "$stage$prefix" "$prefix"
"$bin" -V >&2
echo "$bin"
