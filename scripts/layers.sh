#!/bin/sh
# make layers: the source tree's layers depend on each other one way only.
#
# The rule is data, in src/layers (the one place it is written): for each
# layer folder, the headers of other folders it may include (a whole
# folder, or a listed door into one) and the libraries it may use; and for
# the folders of Lua modules, the modules they may require.  This script
# reads it and checks
#   - every #include "..." of src/<layer>/ and bench/: a header of the
#     file's own folder, or one the rule lists for its layer;
#   - every #include <...> that a `lib` line names: a library the layer
#     may use;
#   - every require in lua/seda/*.lua and bench/*.lua: a module the rule
#     lists, named by a string literal;
#   - every folder of src/ has a rule (a layer whose folder does not exist
#     yet is skipped);
#   - a header on a `whole` line (core/stage.h, core/bus.h) is included
#     only by the files that line names;
#   - every internal function a src/core/ file defines (seda__NAME, not
#     static) is named after that file, not another: where NAME begins
#     with the name of a core file (the longest that fits: seda__stage_new
#     is stage_new's, seda__stage_admit stage's), that file defines it.
#     The one exception is a constructor's pair: X_new.c holds seda__X_free.
# Anything else is an error naming the file, line and rule.
#
#   scripts/layers.sh [ROOT]        check the tree at ROOT (default: the
#                                   source tree this script is in)
#   scripts/layers.sh --self-test   plant wrong-way includes in a copy of
#                                   the tree and check that each is caught
set -u

# check ROOT: print every violation; return 1 if there was one.
check() {
    root=$1
    if [ ! -r "$root/src/layers" ]; then
        echo "layers: $root/src/layers: missing (the layer rule)"
        return 1
    fi
    awk -v root="$root" -v q="'" '
function exists(p) { return system("test -e \"" root "/" p "\"") == 0 }
function isdir(p) { return system("test -d \"" root "/" p "\"") == 0 }
function err(msg) { print msg; bad = 1 }

# The library a system header belongs to, or "" (libc).
function lib_of(h,    i, p) {
    for (i = 1; i <= nlh; i++) {
        p = libhdr[i]
        if (p ~ /\/$/ ? index(h, p) == 1 : h == p)
            return libname[i]
    }
    return ""
}

# May layer l include key (folder/header, include/name.h, tests/...)?
function may_include(l, key,    top) {
    top = key
    sub(/\/.*/, "", top)
    if (top == l || (l SUBSEP key) in inc || (l SUBSEP top "/") in inc)
        return 1
    return 0
}

# May file p include the whole-struct header key (src/layers whole)?
function whole_check(p, n, key,    base) {
    if (!(key in whole))
        return
    base = p
    sub(/.*\//, "", base)
    if (!((key SUBSEP base) in whole_ok))
        err(p ":" n ": includes " key ", which only" whole[key] \
            " may include (src/layers: a part takes its part, never the" \
            " whole)")
}

function check_c(l, dir, p,    line, n, h, key, d, lib) {
    n = 0
    while ((getline line < (root "/" p)) > 0) {
        n++
        if (line ~ /^[ \t]*#[ \t]*include[ \t]*"/) {
            h = line
            sub(/^[^"]*"/, "", h)
            sub(/".*/, "", h)
            if (h ~ /^\.\.\//) {
                d = dir
                while (h ~ /^\.\.\//) {
                    sub(/^\.\.\//, "", h)
                    if (d !~ /\//) d = ""; else sub(/\/[^\/]*$/, "", d)
                }
                key = (d == "" ? h : d "/" h)
                sub(/^src\//, "", key)
            } else if (h ~ /\//) {
                key = h
            } else if (exists(dir "/" h)) {
                key = dir "/" h
                sub(/^src\//, "", key)
                whole_check(p, n, key)
                continue
            } else if (exists("include/" h)) {
                key = "include/" h
            } else {
                err(p ":" n ": includes " h ", which is neither in " dir \
                    "/ nor in include/ (name the folder: \"core/" h "\")")
                continue
            }
            whole_check(p, n, key)
            if (!may_include(l, key))
                err(p ":" n ": includes " h ": " l " may include only its" \
                    " own folder and:" (incl[l] == "" ? " nothing else" : \
                    incl[l]) " (src/layers)")
        } else if (line ~ /^[ \t]*#[ \t]*include[ \t]*</) {
            h = line
            sub(/^[^<]*</, "", h)
            sub(/>.*/, "", h)
            lib = lib_of(h)
            if (lib != "" && !((l SUBSEP lib) in uses))
                err(p ":" n ": includes <" h ">: " lib " is not a library" \
                    " the " l " layer may use (it may use:" libs[l] \
                    "; src/layers)")
        }
    }
    close(root "/" p)
}

function may_require(g, m,    k, a, cnt, pre) {
    cnt = split(mods[g], a, " ")
    for (k = 1; k <= cnt; k++) {
        if (a[k] ~ /\.\*$/) {
            pre = substr(a[k], 1, length(a[k]) - 1)
            if (index(m, pre) == 1 && length(m) > length(pre))
                return 1
        } else if (m == a[k]) {
            return 1
        }
    }
    return 0
}

function check_lua(g, p,    line, n, s, m, computed, literal) {
    computed = "[^A-Za-z0-9_.:]require[ \t]*\\([ \t]*[^\"" q " \t]"
    literal = "[^A-Za-z0-9_.:]require[ \t]*\\(?[ \t]*[\"" q "][^\"" q "]*[\"" q "]"

    n = 0
    while ((getline line < (root "/" p)) > 0) {
        n++
        s = line
        sub(/--.*/, "", s)              # comments (and anything after a
                                        # "--" in a string: never a miss
                                        # that matters here)
        s = " " s
        if (s ~ computed)
            err(p ":" n ": a require of a computed name: name the module" \
                " with a string literal (src/layers)")
        while (match(s, literal)) {
            m = substr(s, RSTART, RLENGTH)
            s = substr(s, RSTART + RLENGTH)
            sub("^[^\"" q "]*[\"" q "]", "", m)
            sub("[\"" q "]$", "", m)
            if (!may_require(g, m))
                err(p ":" n ": requires \"" m "\": " g "/*.lua may" \
                    " require only" mods[g] " (src/layers)")
        }
    }
    close(root "/" p)
}

{
    sub(/#.*/, "")
    if (NF == 0)
        next
    if ($1 == "lib" && NF >= 3) {
        for (i = 3; i <= NF; i++) {
            libhdr[++nlh] = $i
            libname[nlh] = $2
        }
    } else if ($1 == "layer" && NF >= 3) {
        l = $2
        order[++nl] = l
        names = names (nl > 1 ? ", " : "") l
        side = 0
        for (i = 3; i <= NF; i++) {
            if ($i == "|") {
                side = 1
            } else if (side) {
                uses[l, $i] = 1
                libs[l] = libs[l] " " $i
            } else {
                inc[l, $i] = 1
                incl[l] = incl[l] " " $i
            }
        }
        if (!side)
            err("src/layers:" NR ": layer " l ": no \"|\" before its" \
                " libraries")
    } else if ($1 == "whole" && NF >= 3) {
        for (i = 3; i <= NF; i++) {
            whole[$2] = whole[$2] " " $i
            whole_ok[$2, $i] = 1
        }
    } else if ($1 == "require" && NF >= 3) {
        rq[++nrq] = $2
        for (i = 3; i <= NF; i++)
            mods[$2] = mods[$2] " " $i
    } else {
        err("src/layers:" NR ": not a lib, layer, whole or require line")
    }
}

END {
    for (k = 1; k <= nl; k++)
        known[order[k]] = 1
    cmd = "cd \"" root "\" && for d in src/*/; do [ -d \"$d\" ] && echo \"$d\"; done"
    while ((cmd | getline d) > 0) {
        sub(/\/$/, "", d)
        sub(/^src\//, "", d)
        if (!(d in known))
            err("layers: src/" d "/: a folder that is no layer (" names \
                "; src/layers)")
    }
    close(cmd)
    for (k = 1; k <= nl; k++) {
        l = order[k]
        if (isdir("src/" l))
            dir = "src/" l
        else if (isdir(l))
            dir = l
        else
            continue                    # not on this branch yet
        cmd = "cd \"" root "\" && ls " dir "/*.c " dir "/*.h 2>/dev/null"
        while ((cmd | getline p) > 0)
            check_c(l, dir, p)
        close(cmd)
    }
    for (k = 1; k <= nrq; k++) {
        cmd = "cd \"" root "\" && ls " rq[k] "/*.lua 2>/dev/null"
        while ((cmd | getline p) > 0)
            check_lua(rq[k], p)
        close(cmd)
    }
    exit bad
}' "$root/src/layers"
}

# prefixes ROOT: print every internal core function named after another
# core file; return 1 if there was one.
prefixes() {
    root=$1
    [ -d "$root/src/core" ] || return 0
    names=$(cd "$root/src/core" && ls *.c *.h 2>/dev/null |
            sed 's/\.[ch]$//' | sort -u | tr '\n' ' ')
    (cd "$root" && awk -v names="$names" '
BEGIN { nn = split(names, nm, " ") }
function report(fn, line,    n, best, k, b) {
    n = substr(fn, 7)
    best = ""
    for (k = 1; k <= nn; k++) {
        b = nm[k]
        if ((n == b || index(n, b "_") == 1) && length(b) > length(best))
            best = b
    }
    if (best == "" || best == base || (base == best "_new" && n == best "_free"))
        return
    print FILENAME ":" line ": " fn " is named after core/" best ".*, not " \
          base ".c: name it seda__" base "_..., or move it there" \
          " (scripts/layers.sh)"
    bad = 1
}
FNR == 1 {
    base = FILENAME
    sub(/.*\//, "", base)
    sub(/\.c$/, "", base)
    pend = ""
}
pend != "" {
    if ($0 ~ /;/ && ($0 !~ /\{/ || index($0, ";") < index($0, "{")))
        pend = ""
    else if ($0 ~ /\{/) {
        report(pend, pline)
        pend = ""
    }
    next
}
/^[A-Za-z_][^(;=]*[ *]seda__[a-z0-9_]+\(/ && $0 !~ /^(static|extern|typedef)/ {
    fn = $0
    sub(/\(.*/, "", fn)
    sub(/.*[ *]/, "", fn)
    if ($0 ~ /\)[ \t]*;/)
        next
    if ($0 ~ /\{/)
        report(fn, FNR)
    else {
        pend = fn
        pline = FNR
    }
}
END { exit bad }' src/core/*.c)
}

# The parts of the tree the check reads, copied to $1.
copy_tree() {
    mkdir -p "$1/tests/remote" "$1/lua" "$1/bench"
    cp -r src include "$1/"
    cp -r lua/seda "$1/lua/"
    cp bench/*.c bench/*.h bench/*.lua "$1/bench/"
    cp tests/remote/natsd.h "$1/tests/remote/"
}

if [ "${1:-}" = "--self-test" ]; then
    cd "$(dirname "$0")/.."
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    fails=0
    # Each plant: file|line[|line...] to add.  Every one must be caught.
    for plant in 'src/core/queue.c|#include "lua/lseda.h"' \
                 'src/core/bus.c|#include "durable/journal.h"' \
                 'src/durable/journal.c|#include "cli/cli.h"' \
                 'src/lua/lcodec.c|#include "core/stage.h"' \
                 'src/core/pool.c|#include <lua.h>' \
                 'src/lua/lerrors.c|#include <microhttpd.h>' \
                 'src/lua/lpath.c|#include "stage.h"' \
                 'src/lua/lstage.c|#include "remote/wire.h"' \
                 'src/remote/wire.c|#include "durable/journal.h"' \
                 'src/remote/wire.c|#include <lua.h>' \
                 'src/core/bus.c|#include "remote/wire.h"' \
                 'src/durable/durable.c|#include <nats/nats.h>' \
                 'src/remote/pub.c|#include "core/stage.h"|int x = st->cap_fast;' \
                 'src/cli/cli_dlq.c|#include "durable/journal.h"' \
                 'bench/pipeline.c|#include "lua/lseda.h"' \
                 'lua/seda/pretty.lua|local socket = require "socket"' \
                 'src/io/loop.c|#include "seda.h"' \
                 'src/core/tap.c|void seda__stage_planted(void)|{|}' \
                 'src/core/stats.c|#include "stage.h"' \
                 'src/core/permits.c|#include "bus.h"' \
                 'src/core/stage_new.c|int seda__bus_planted(int x,|int y)|{|return x + y;|}'; do
        pf=${plant%%|*}
        add=${plant#*|}
        rm -rf "$tmp/t"
        copy_tree "$tmp/t"
        mkdir -p "$(dirname "$tmp/t/$pf")"
        printf '%s\n' "$add" | tr '|' '\n' >>"$tmp/t/$pf"
        if out=$(check "$tmp/t" && prefixes "$tmp/t"); then
            echo "layers --self-test: a planted '$add' in $pf was NOT caught"
            fails=1
        else
            echo "layers --self-test: caught: $out"
        fi
    done
    rm -rf "$tmp/t"
    copy_tree "$tmp/t"
    if ! check "$tmp/t" >/dev/null || ! prefixes "$tmp/t" >/dev/null; then
        echo "layers --self-test: the unchanged copy fails"
        fails=1
    fi
    exit $fails
fi

cd "$(dirname "$0")/.."
ok=0
check "${1:-.}" || ok=1
prefixes "${1:-.}" || ok=1
if [ $ok = 0 ]; then
    echo "layers: ok (src/layers: core <- durable, core <- remote;" \
         "io; all <- lua <- cli; bench and lua/seda checked; every" \
         "internal core function named after its file)"
fi
exit $ok
