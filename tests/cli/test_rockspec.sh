#!/bin/sh
# The rockspec: Debian's luarocks, for Lua 5.4, `luarocks make`s this
# checkout into a private tree (seda.so and seda.test), and a stock
# lua5.4 pointed at that tree publishes through a bus and loads
# seda.test.  luarocks is installed (scripts/deps.sh) when missing; the
# test is skipped, saying why, only when it cannot be.
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case "${V:-release}" in
    release) ;;
    *) echo "skip $NAME: a ${V} build of seda.so cannot load into the" \
            "uninstrumented lua5.4 (the rock builds the release variant)"
       finish ;;
esac
if ! command -v luarocks >/dev/null 2>&1; then
    sh "$ROOT/scripts/deps.sh" luarocks >&2 || true
fi
if ! command -v luarocks >/dev/null 2>&1; then
    echo "skip $NAME: luarocks is missing and could not be installed" \
         "(apt-get install luarocks)"
    finish
fi

T="$D/tree"
out=$(luarocks --lua-version=5.4 lint "$ROOT/seda-scm-1.rockspec" 2>&1)
check "luarocks lint accepts the rockspec ($out)" [ $? = 0 ]
out=$(cd "$ROOT" && luarocks --lua-version=5.4 --tree="$T" make \
      seda-scm-1.rockspec 2>&1)
check "luarocks make installs into a temporary tree ($out)" \
    contains "$out" "seda scm-1 is now installed in $T"
check "... seda.so" [ -s "$T/lib/lua/5.4/seda.so" ]
check "... seda.test" [ -s "$T/share/lua/5.4/seda/test.lua" ]
out=$(luarocks --lua-version=5.4 --tree="$T" list --porcelain 2>&1)
check "luarocks lists the rock ($out)" contains "$out" "seda	scm-1"

out=$(cd "$D" && LUA_CPATH="$T/lib/lua/5.4/?.so" \
      LUA_PATH="$T/share/lua/5.4/?.lua" lua5.4 -e '
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "double", handler = function(env)
  env.payload = env.payload * 2 end }
bus:stage{ name = "sum", handler = function(env)
  seda.shared:incr("rock.sum", env.payload) end }
local done = 0
for i = 1, 10 do
  assert(bus:publish("double", i, { slip = { "sum" },
    on_complete = function() done = done + 1 end }))
end
assert(bus:wait(10))
local T = require "seda.test"
local r = T.call(function(env) return env:forward("x") end, 1)
print(("sum=%d completed=%d seda.test=%s"):format(
  seda.shared:get("rock.sum"), done, tostring(r.ok and r.next == "x")))
assert(bus:shutdown(10))' 2>&1)
check "lua5.4 with the tree on LUA_CPATH/LUA_PATH publishes through a bus ($out)" \
    [ "$out" = "sum=110 completed=10 seda.test=true" ]

out=$(luarocks --lua-version=5.4 --tree="$T" remove seda 2>&1)
check "luarocks remove takes it out again ($out)" \
    sh -c "[ ! -e '$T/lib/lua/5.4/seda.so' ] && [ ! -e '$T/share/lua/5.4/seda/test.lua' ]"
finish
