#!/bin/sh
# docs/testing.md's example: examples/testing/*_spec.lua under Debian's
# busted on lua5.4, with seda.so and seda.test found through LUA_CPATH and
# LUA_PATH as the page says; every spec must pass, and the page's Lua
# blocks run.  A spec that fails
# makes busted (and so this test) fail.  busted is installed
# (scripts/deps.sh) when missing; skipped, saying why, only when it
# cannot be, or for a sanitizer build (its seda.so cannot load into the
# uninstrumented lua5.4).
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-build/${V:-release}}
case "${V:-release}" in
    release) ;;
    *) echo "skip $NAME: a ${V} build of seda.so cannot load into lua5.4"
       finish ;;
esac
command -v busted >/dev/null 2>&1 || sh "$ROOT/scripts/deps.sh" lua-busted >&2
if ! command -v busted >/dev/null 2>&1; then
    echo "skip $NAME: busted is missing and could not be installed" \
         "(apt-get install lua-busted)"
    finish
fi
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac

run_busted() {
    (cd "$ROOT" && LUA_CPATH="$B/?.so;;" LUA_PATH="$ROOT/lua/?.lua;;" \
        busted --lua=lua5.4 -o TAP "$@" 2>&1)
}

out=$(run_busted examples/testing)
rc=$?
check "busted runs examples/testing and every spec passes ($out)" \
    [ "$rc" = 0 ]
n=$(printf '%s\n' "$out" | grep -c '^ok ')
check "... all 13 of them ($n)" [ "$n" = 13 ]

# docs/testing.md's Lua blocks run as written (from the top of the tree).
awk -v d="$D" '/^```lua$/ { n++; f = d "/doc" n ".lua"; on = 1; next }
               /^```$/ { on = 0; next }
               on { print > f }' "$ROOT/docs/testing.md"
for f in "$D"/doc*.lua; do
    out=$(cd "$ROOT" && LUA_CPATH="$B/?.so;;" LUA_PATH="$ROOT/lua/?.lua;;" \
          lua5.4 "$f" 2>&1)
    check "docs/testing.md block $(basename "$f" .lua) runs ($out)" [ $? = 0 ]
done

# A failing spec fails the run.
mkdir -p "$D/spec"
cat >"$D/spec/fail_spec.lua" <<'LUA'
local T = require "seda.test"
it("sees a nack as a nack", function()
  assert.is_true(T.call(function() return false end, 1).ok)
end)
LUA
out=$(run_busted "$D/spec")
check "a failing spec makes busted fail ($out)" [ $? != 0 ]
finish
