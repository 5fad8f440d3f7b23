#!/bin/sh
# Every code block of README.md and docs/*.md runs, so the docs cannot rot.
#
# A fenced block whose language is lua, sh, c or sql is code; one with no
# language or `text` is output or a usage summary and is not run.  The
# line right before a code block may hold a marker:
#
#   <!-- doc: run (a note) -->       run it (the default, said aloud)
#   <!-- doc: continues -->          run it after the lua block before it
#                                    (the two as one script)
#   <!-- doc: file=PATH -->          write it to PATH in the page's work
#                                    directory, for the blocks after it
#   <!-- doc: partial (why) -->      deliberately incomplete: checked for
#                                    syntax only (luac -p, sh -n)
#   <!-- doc: run-by SCRIPT -->      another test runs it; SCRIPT must
#                                    exist and name the page
#
# A lua block runs as `seda-lua block.lua` in a work directory of its page
# (examples/handlers/ as handlers/, and the fixtures of tests/cli/docs/:
# the handler files the pages name),
# and must exit 0 within 60 s; a sh block runs under `sh -e` there, with
# seda-lua on the PATH; a c block is compiled against the build and run;
# a sql block runs in an in-memory sqlite3.
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build/${V:-release}}
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
BIN=$(dirname "$SEDA")

# extract PAGE OUT: one file per code block in OUT (NNN.lang) and a
# manifest OUT/list of "NNN|line|lang|marker".
extract() {
    mkdir -p "$2"
    awk -v out="$2" '
        function flush() { close(f) }
        !on && /^```/ {
            lang = substr($0, 4); n++
            f = sprintf("%s/%03d.%s", out, n, lang == "" ? "text" : lang)
            printf "" > f
            m = (prev ~ /^<!-- doc: .* -->$/) ? prev : ""
            sub(/^<!-- doc: /, "", m); sub(/ -->$/, "", m)
            printf "%03d|%d|%s|%s\n", n, NR, lang == "" ? "text" : lang, m \
                >> (out "/list")
            on = 1; prev = $0; next
        }
        on && /^```$/ { on = 0; flush(); prev = $0; next }
        on { print > f }
        { prev = $0 }
        END { if (on) printf "unclosed|%d|text|\n", NR >> (out "/list") }
    ' "$1"
}

run_lua() {   # run_lua WORK FILE
    (cd "$1" && timeout 60 "$SEDA" "$2" 2>&1)
}

run_c() {     # run_c WORK FILE
    cc -std=c11 -D_GNU_SOURCE -I"$ROOT/include" "$2" -o "$1/a.out" \
        "$B/libsedalua.a" "$B/libsedaremote.a" "$B/libsedaio.a" \
        "$B/libsedahttp.a" "$B/libseda.a" \
        $(pkg-config --libs lua5.4 sqlite3 libnats libcurl libmicrohttpd) \
        -lm -pthread 2>&1 && (cd "$1" && timeout 60 ./a.out 2>&1)
}

page() {      # page DOC
    doc=$1
    rel=${doc#"$ROOT"/}
    key=$(printf '%s' "$rel" | tr '/.' '__')
    out="$D/$key"
    work="$D/$key.work"
    mkdir -p "$work"
    cp -r "$ROOT/examples/handlers" "$work/handlers"
    cp -r "$ROOT/tests/cli/docs/." "$work/"
    extract "$doc" "$out"
    [ -f "$out/list" ] || return 0
    last=""
    while IFS='|' read -r n line lang marker; do
        f="$out/$n.$lang"
        where="$rel:$line"
        if [ "$n" = unclosed ]; then fail "$where: a code block is not closed"; continue; fi
        case "$lang" in
            lua|sh|c|sql) ;;
            text|console|json|svg) continue ;;
            *) fail "$where: a block in '$lang': say text, or mark it"; continue ;;
        esac
        case "$marker" in
        file=*)
            p=${marker#file=}
            mkdir -p "$work/$(dirname "$p")"
            cp "$f" "$work/$p"
            out1=$( [ "$lang" = lua ] && luac5.4 -p "$f" 2>&1 )
            check "$where: $p is written (and parses) ($out1)" [ $? = 0 ]
            ;;
        partial*)
            case "$lang" in
                lua) out1=$(luac5.4 -p "$f" 2>&1) ;;
                sh) out1=$(sh -n "$f" 2>&1) ;;
                *) out1= ; true ;;
            esac
            check "$where: partial $lang block parses ($out1)" [ $? = 0 ]
            ;;
        run-by\ *)
            s=${marker#run-by }
            check "$where: run by $s" grep -q "$rel" "$ROOT/$s"
            ;;
        ""|run*|continues)
            case "$lang" in
            lua)
                if [ "$marker" = continues ]; then
                    cat "$last" "$f" >"$f.whole"
                else
                    cp "$f" "$f.whole"
                fi
                last="$f.whole"
                out1=$(run_lua "$work" "$f.whole")
                check "$where: lua block runs ($out1)" [ $? = 0 ]
                ;;
            sh)
                out1=$(cd "$work" && PATH="$BIN:$PATH" timeout 60 sh -e "$f" 2>&1)
                check "$where: sh block runs ($out1)" [ $? = 0 ]
                ;;
            c)
                out1=$(run_c "$work" "$f")
                check "$where: c block compiles and runs ($out1)" [ $? = 0 ]
                ;;
            sql)
                out1=$(sqlite3 :memory: <"$f" 2>&1)
                check "$where: sql block runs ($out1)" [ $? = 0 ]
                ;;
            esac
            ;;
        *)
            fail "$where: unknown marker '$marker'"
            ;;
        esac
    done <"$out/list"
}

for doc in "$ROOT/README.md" "$ROOT"/docs/*.md; do
    page "$doc"
done

# Every relative link of those pages (and of tests/ and bench/ READMEs)
# names a file that exists.
for doc in "$ROOT/README.md" "$ROOT"/docs/*.md "$ROOT/tests/README.md" \
           "$ROOT/bench/README.md" "$ROOT/src/README.md" \
           "$ROOT/src/core/README.md"; do
    dir=$(dirname "$doc")
    bad=""
    for l in $(grep -o '](\([^)# ]*\)' "$doc" | sed 's/^](//' |
               grep -v '^[a-z]*:' | sort -u); do
        [ -e "$dir/$l" ] || bad="$bad $l"
    done
    check "${doc#"$ROOT"/}: every relative link resolves ($bad)" [ -z "$bad" ]
done

# What a user reads stands alone: no page, example, man page or Lua
# module cites a specification the repository does not ship ("SPEC",
# "SPEC.md", "SPEC §12").
spec=$(cd "$ROOT" && grep -rlw 'SPEC\(\.md\)\?' README.md docs examples lua 2>/dev/null | tr '\n' ' ')
check "no user-facing file cites a SPEC the repository does not have ($spec)" [ -z "$spec" ]

# The reference's remote = { ... } table names every field a remote stage
# takes (the list bus:stage checks against, in src/lua/lremote.c).
keys=$(sed -n '/^static const char \*const remote_keys\[\] = {/,/};/p' \
           "$ROOT/src/lua/lremote.c" | grep -o '"[a-z_]*"' | tr -d '"')
table=$(awk '/^### `remote = \{ ... \}`/ { on = 1; next }
             on && /^\|/ { seen = 1; print; next }
             on && seen { exit }' "$ROOT/docs/reference.md")
missing=""
for k in $keys; do
    printf '%s\n' "$table" | grep -q "^| \`$k\`\|^| [^|]*\`$k\`" || missing="$missing $k"
done
check "reference.md's remote table names every remote field ($missing)" \
    sh -c "[ -n '$keys' ] && [ -z '$missing' ]"

# The runner itself: an unmarked failing block fails, a partial one with
# a syntax error fails, a block left open fails.
mkdir -p "$D/self"
cat >"$D/self/bad.md" <<'EOF'
```lua
error("this block fails")
```

<!-- doc: partial (a fragment) -->
```lua
local x = = 1
```

```lua
print("never closed")
EOF
before=$FAILS
page "$D/self/bad.md" >"$D/self/out" 2>&1
got=$((FAILS - before))
FAILS=$before
if [ "$got" = 3 ]; then
    ok "self-test: three bad blocks are three failures"
else
    fail "self-test: three bad blocks gave $got failures:"
    sed 's/^/    /' "$D/self/out"
fi
finish
