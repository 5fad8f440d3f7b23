#!/bin/sh
# Install the Debian packages the build needs, only when pkg-config cannot
# find them.  Run by make automatically; safe to run by hand (as root, or
# through sudo when it is available).
set -eu

PKG_CONFIG=${PKG_CONFIG:-pkg-config}
need=""

have_pc() { command -v "$PKG_CONFIG" >/dev/null 2>&1 && "$PKG_CONFIG" --exists "$1"; }

command -v "$PKG_CONFIG" >/dev/null 2>&1 || need="$need pkg-config"
have_pc lua5.4 || need="$need liblua5.4-dev"
have_pc cmocka || need="$need libcmocka-dev"
have_pc sqlite3 || need="$need libsqlite3-dev"
have_pc readline || need="$need libreadline-dev"
command -v tmux >/dev/null 2>&1 || need="$need tmux"   # REPL tests (tests/cli)
command -v lua5.4 >/dev/null 2>&1 || need="$need lua5.4"
command -v sqlite3 >/dev/null 2>&1 || need="$need sqlite3"   # journal checks in tests
command -v socat >/dev/null 2>&1 || need="$need socat"     # control-socket clients in tests
for extra in "$@"; do
    case "$extra" in
        *:*) pc=${extra%%:*}; pkg=${extra#*:}
             have_pc "$pc" || need="$need $pkg" ;;
        *)   dpkg -s "$extra" >/dev/null 2>&1 || need="$need $extra" ;;
    esac
done

[ -z "$need" ] && exit 0

echo "deps.sh: installing:$need" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "deps.sh: need root to install:$need" >&2; exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >&2 || true
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $need >&2
