#!/bin/sh
# Install the Debian packages the build needs, only when pkg-config cannot
# find them.  Run by make automatically; safe to run by hand (as root, or
# through sudo when it is available).  Extra arguments name more packages
# (`pc-name:package` for a library found by pkg-config): the tests that
# need tools (promtool, chromium) install them this way.  Services that
# packages ship are not started.
set -eu

PKG_CONFIG=${PKG_CONFIG:-pkg-config}
need=""

have_pc() { command -v "$PKG_CONFIG" >/dev/null 2>&1 && "$PKG_CONFIG" --exists "$1"; }

command -v "$PKG_CONFIG" >/dev/null 2>&1 || need="$need pkg-config"
have_pc lua5.4 || need="$need liblua5.4-dev"
have_pc cmocka || need="$need libcmocka-dev"
have_pc sqlite3 || need="$need libsqlite3-dev"
have_pc readline || need="$need libreadline-dev"
have_pc libmicrohttpd || need="$need libmicrohttpd-dev"   # seda-lua --http
# bus:listen's request parser (src/http); Debian ships no .pc for it.
[ -e /usr/include/http_parser.h ] || need="$need libhttp-parser-dev"
have_pc libnats || need="$need libnats-dev"            # remote stages
have_pc libcurl || need="$need libcurl4-openssl-dev"   # seda.http (src/io)
have_pc jansson || need="$need libjansson-dev"         # remote format json
have_pc msgpack || need="$need libmsgpack-dev"         # remote format msgpack
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] ||
    need="$need nats-server"                           # their tests, bench
command -v tmux >/dev/null 2>&1 || need="$need tmux"   # REPL tests (tests/cli)
command -v lua5.4 >/dev/null 2>&1 || need="$need lua5.4"
command -v sqlite3 >/dev/null 2>&1 || need="$need sqlite3"   # journal checks in tests
command -v socat >/dev/null 2>&1 || need="$need socat"     # control-socket clients in tests
# tests/lua/test_io.lua: a real Redis through Debian's LuaSocket client
# (lua-redis), an HTTP helper on LuaSocket (lua-socket).
command -v redis-server >/dev/null 2>&1 || need="$need redis-server"
[ -e /usr/share/lua/5.1/redis.lua ] || need="$need lua-redis"
dpkg -s lua-socket >/dev/null 2>&1 || need="$need lua-socket"
# tests/lua/test_formats.lua: a table decoded by lua-cjson (cjson.null)
# published as it is.
dpkg -s lua-cjson >/dev/null 2>&1 || need="$need lua-cjson"
# tests/cli/test_rockspec.sh: `luarocks make` for Lua 5.4 into a temporary
# tree; tests/cli/test_busted.sh: the docs/testing.md example under busted.
command -v luarocks >/dev/null 2>&1 || need="$need luarocks"
command -v busted >/dev/null 2>&1 || need="$need lua-busted"
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
# Install, never start: a package that ships a daemon (`prometheus`, which
# the HTTP test installs for promtool, would serve on *:9090) is kept from
# starting it by a policy-rc.d that refuses every start (Debian's
# invoke-rc.d and deb-systemd-invoke honour it), when there is none
# already.  Another apt run holding the dpkg lock is waited for.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ] &&
   printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null; then
    trap '$SUDO rm -f "$policy"' EXIT
    $SUDO chmod 0755 "$policy"
fi
lock="-o DPkg::Lock::Timeout=600"
# shellcheck disable=SC2086
$SUDO apt-get $lock update -q >&2 || true
# shellcheck disable=SC2086
$SUDO apt-get $lock install -y -q --no-install-recommends $need >&2
