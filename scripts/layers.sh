#!/bin/sh
# make layers: the source tree's layers depend on each other one way only.
#
#   core     the runtime (queue, pool, envelopes, stages, drain, bus):
#            libc and pthreads only
#   durable  the journal, its WAL VFS, replay, the dead-letter store:
#            core (through store.h) and SQLite
#   remote   remote stages over NATS JetStream: core (through remote.h)
#            and libnats
#   lua      the `seda` module: include/seda.h and seda_lua.h only (a
#            client of the public C API), and Lua
#   cli      the seda-lua program: every layer below
#
# core <- durable, core <- remote; lua <- cli.  A file may include headers of its own
# folder, of include/ (the public API), and of the layers its layer may
# use; and only the libraries its layer may link.  Anything else is an
# error naming the file, line and rule.
#
#   scripts/layers.sh [SRC_DIR]     check the tree (default: src)
#   scripts/layers.sh --self-test   plant wrong-way includes in a copy of
#                                   the tree and check that each is caught
set -u

# may_use LAYER -> the folders its files may include from (besides its own).
may_use() {
    case "$1" in
        core)    echo "" ;;
        durable) echo "core" ;;
        remote)  echo "core" ;;
        lua)     echo "" ;;
        cli)     echo "core durable remote lua" ;;
        *)       echo "?" ;;
    esac
}

# System headers a layer may not include (a pattern for grep -E).
forbidden_sys() {
    case "$1" in
        core)    echo '<(lua|lualib|lauxlib|sqlite3|readline/[a-z]+|nats/[a-z]+|nats|microhttpd)\.h>' ;;
        durable) echo '<(lua|lualib|lauxlib|readline/[a-z]+|nats/[a-z]+|nats|microhttpd)\.h>' ;;
        remote)  echo '<(lua|lualib|lauxlib|sqlite3|readline/[a-z]+|microhttpd)\.h>' ;;
        lua)     echo '<(sqlite3|readline/[a-z]+|nats/[a-z]+|nats|microhttpd)\.h>' ;;
        *)       echo '^$' ;;
    esac
}

check() {
    src=$1
    inc=$(dirname "$src")/include
    bad=0
    for dir in "$src"/*/; do
        layer=$(basename "$dir")
        allowed=$(may_use "$layer")
        if [ "$allowed" = "?" ]; then
            echo "layers: $dir: a folder that is no layer (core, durable, remote, lua, cli)"
            bad=1
            continue
        fi
        for f in "$dir"*.c "$dir"*.h; do
            [ -e "$f" ] || continue
            # "..." includes
            grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
            while IFS= read -r line; do
                n=${line%%:*}
                h=$(printf '%s\n' "$line" | sed 's/.*include[[:space:]]*"\([^"]*\)".*/\1/')
                case "$h" in
                    */*)
                        to=${h%%/*}
                        ok=no
                        for a in $allowed; do [ "$a" = "$to" ] && ok=yes; done
                        if [ "$ok" = no ]; then
                            echo "$f:$n: includes $h: $layer may include only" \
                                 "its own folder, include/ and: ${allowed:-nothing else}" \
                                 "(core <- durable, remote <- lua <- cli)"
                        fi
                        ;;
                    *)
                        if [ ! -e "$dir$h" ] && [ ! -e "$inc/$h" ]; then
                            echo "$f:$n: includes $h, which is neither in $layer/" \
                                 "nor in include/ (name the folder: \"core/$h\")"
                        fi
                        ;;
                esac
            done
            # <...> includes of libraries the layer may not use
            pat=$(forbidden_sys "$layer")
            grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*$pat" "$f" |
            while IFS= read -r line; do
                echo "$f:${line%%:*}: includes ${line#*include}: not a" \
                     "library the $layer layer may use"
            done
        done
    done >"${TMPDIR:-/tmp}/layers.$$"
    if [ -s "${TMPDIR:-/tmp}/layers.$$" ]; then
        cat "${TMPDIR:-/tmp}/layers.$$"
        bad=1
    fi
    rm -f "${TMPDIR:-/tmp}/layers.$$"
    return $bad
}

if [ "${1:-}" = "--self-test" ]; then
    cd "$(dirname "$0")/.."
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    fails=0
    # Each plant: file, line to add.  Every one must be caught.
    for plant in 'core/queue.c|#include "lua/lseda.h"' \
                 'core/bus.c|#include "durable/journal.h"' \
                 'durable/journal.c|#include "cli/cli.h"' \
                 'lua/lcodec.c|#include "core/stage.h"' \
                 'core/pool.c|#include <lua.h>' \
                 'lua/lerrors.c|#include <microhttpd.h>' \
                 'lua/lpath.c|#include "stage.h"' \
                 'lua/lstage.c|#include "remote/wire.h"' \
                 'remote/wire.c|#include "durable/journal.h"' \
                 'remote/wire.c|#include <lua.h>' \
                 'core/bus.c|#include "remote/wire.h"' \
                 'durable/durable.c|#include <nats/nats.h>'; do
        pf=${plant%%|*}
        add=${plant#*|}
        rm -rf "$tmp/src" "$tmp/include"
        cp -r src include "$tmp/"
        printf '%s\n' "$add" >>"$tmp/src/$pf"
        if out=$(check "$tmp/src"); then
            echo "layers --self-test: a planted '$add' in src/$pf was NOT caught"
            fails=1
        else
            echo "layers --self-test: caught: ${out#"$tmp/"}"
        fi
    done
    rm -rf "$tmp/src" "$tmp/include"
    cp -r src include "$tmp/"
    if ! check "$tmp/src" >/dev/null; then
        echo "layers --self-test: the unchanged copy fails"
        fails=1
    fi
    exit $fails
fi

cd "$(dirname "$0")/.."
if check "${1:-src}"; then
    echo "layers: ok (core <- durable, remote <- lua <- cli; no include runs upward)"
    exit 0
fi
exit 1
