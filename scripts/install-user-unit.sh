#!/usr/bin/env bash
# Install skc-supervisor as a systemd user service for the current user.
#
#   make install-user-unit          (builds bin/skc-supervisor first)
#
# Copies bin/skc-supervisor to ~/.local/bin, contrib/systemd/skc-supervisor.service to
# ~/.config/systemd/user/ (XDG_CONFIG_HOME is honoured), the README to
# ~/.local/share/doc/skc-supervisor/, and runs `systemctl --user daemon-reload`.
# It starts and enables nothing: it prints the commands that do.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin_src=${SKC_BIN:-$here/bin/skc-supervisor}
unit_src=$here/contrib/systemd/skc-supervisor.service
unit_name=skc-supervisor.service

die() {
	printf 'install-user-unit: %s\n' "$*" >&2
	exit 1
}

command -v systemctl >/dev/null 2>&1 ||
	die "systemctl not found: this installs a systemd user unit and needs systemd. Without systemd, run '$bin_src serve' under your own supervisor."
[ -n "${HOME:-}" ] || die "HOME is not set"
if [ "$(id -u)" -eq 0 ]; then
	# Legitimate (root has a user manager too), but usually `sudo make …` by mistake.
	printf 'install-user-unit: warning: installing for root (HOME=%s); run it as the user whose agents it supervises unless you mean root\n' "$HOME" >&2
fi
[ -x "$bin_src" ] || die "$bin_src is missing: run 'make build' (or 'make install-user-unit', which builds) first"
[ -f "$unit_src" ] || die "$unit_src is missing"

bin_dir=$HOME/.local/bin
unit_dir=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user
doc_dir=${XDG_DATA_HOME:-$HOME/.local/share}/doc/skc-supervisor

# place SRC DEST MODE: copy next to DEST, then rename over it. The rename is atomic
# and a running daemon keeps executing its old inode, so an upgrade in place never
# meets "text file busy" or a half-written binary.
place() {
	local src=$1 dest=$2 mode=$3 tmp
	mkdir -p "$(dirname "$dest")"
	tmp=$(mktemp "$dest.XXXXXX")
	cp "$src" "$tmp"
	chmod "$mode" "$tmp"
	mv -f "$tmp" "$dest"
	printf 'installed %s\n' "$dest"
}

place "$bin_src" "$bin_dir/skc-supervisor" 0755
place "$unit_src" "$unit_dir/$unit_name" 0644
if [ -f "$here/README.md" ]; then
	place "$here/README.md" "$doc_dir/README.md" 0644
fi

if ! systemctl --user daemon-reload; then
	die "the files are installed, but 'systemctl --user daemon-reload' failed: no user service manager is reachable (log in on a session with systemd --user, or run 'loginctl enable-linger ${USER:-$(id -un)}' as an administrator, then run 'systemctl --user daemon-reload')"
fi

cat <<EOT

skc-supervisor is installed as a user unit; nothing was started.

  systemctl --user enable --now skc-supervisor   # start now and at every login
  loginctl enable-linger "\$USER"                  # keep it (and the sessions) across logouts
  systemctl --user status skc-supervisor
  journalctl --user -u skc-supervisor -f          # daemon logs
  $bin_dir/skc-supervisor doctor                   # check the installation

Stopping or restarting the unit leaves the tmux server and every session running
(KillMode=process; the server lives in its own skc-tmux-*.scope).
EOT
case ":$PATH:" in
*":$bin_dir:"*) ;;
*) printf '\nNote: %s is not on your PATH; add it to use the CLI by name.\n' "$bin_dir" ;;
esac
