#!/bin/sh
# A plain `seda-lua script.lua` run ends, as a Node.js or libuv program
# does, when nothing can make more work: no bus has work, no listener is
# open and no timer is pending (one made with t:unref() does not count).
# Each run here must end by itself: a deadline (timeout 20) turns a run
# that never ends into a failure, and its output says what ran.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run NAME: run $D/NAME.lua with a deadline; output in $D/NAME.out,
# status in $D/NAME.rc.
run() {
    timeout 20 "$SEDA" "$D/$1.lua" >"$D/$1.out" 2>"$D/$1.err"
    echo $? >"$D/$1.rc"
}

# The README's timers snippet: no bus at all, the timers alone keep the
# run until the one-shot has printed.
cat >"$D/readme.lua" <<'EOF'
local seda = require "seda"
local n = 0
local tick = seda.every(0.01, function(h) n = n + 1 end)
seda.timer(0.05, function() print("ticks so far", n) tick:cancel() end)
EOF
run readme
check "the README's timers snippet prints" contains "$(cat "$D/readme.out")" "ticks so far"
check "... and ends with status 0" [ "$(cat "$D/readme.rc")" = 0 ]

# A timer set by an on_complete callback after the bus went idle keeps
# the run too; an unref'd seda.every does not, and ref() undoes unref().
cat >"$D/chain.lua" <<'EOF'
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "s", handler = function(env) end }
local ticks = 0
local every = seda.every(0.01, function() ticks = ticks + 1 end)
assert(every:unref() == every, "unref returns the handle")
assert(every:has_ref() == false, "has_ref after unref")
local r = seda.every(0.01, function(h) h:cancel() print("ref'd again ran") end)
r:unref(); r:ref()
bus:publish("s", 1, { on_complete = function()
  seda.timer(0.2, function() print("late timer ran " .. tostring(ticks > 0)) end)
end })
EOF
run chain
check "a timer set by a callback keeps the run" contains "$(cat "$D/chain.out")" "late timer ran true"
check "ref() undoes unref()" contains "$(cat "$D/chain.out")" "ref'd again ran"
check "... the unref'd every did not keep it (status 0)" [ "$(cat "$D/chain.rc")" = 0 ]

# Only unref'd timers: the run ends at once, the timer never fires.
cat >"$D/unref.lua" <<'EOF'
local seda = require "seda"
seda.timer(60, function() print("should not run") end):unref()
print("script done")
EOF
t0=$(now_ms); run unref; t1=$(now_ms)
check "an unref'd timer alone: the run ends" [ "$(cat "$D/unref.rc")" = 0 ]
check "... without waiting for it ($((t1 - t0)) ms)" [ $((t1 - t0)) -lt 15000 ]
check "... which never fires" [ "$(cat "$D/unref.out")" = "script done" ]

# A listener keeps the run (served meanwhile); l:close() from a timer ends
# it, and so does bus:shutdown().
P=$(free_port)
cat >"$D/close.lua" <<EOF
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "hi", handler = function(env) env.payload = "hi" end }
local l = bus:listen{ http = $P, routes = { ["GET /hi"] = { "hi" } } }
seda.timer(0.5, function()
  local ok = io.popen("curl -s http://127.0.0.1:$P/hi"):read("a")
  print("answered " .. ok)
  l:close()
end)
EOF
run close
check "l:close(): the run ends" [ "$(cat "$D/close.rc")" = 0 ]
check "... after serving" contains "$(cat "$D/close.out")" "answered hi"
P=$(free_port)
cat >"$D/shut.lua" <<EOF
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "hi", handler = function(env) env.payload = "hi" end }
bus:listen{ http = $P, routes = { ["GET /hi"] = { "hi" } } }
seda.timer(0.3, function() print("shutdown", bus:shutdown(5)) end)
EOF
run shut
check "bus:shutdown(): the run ends" [ "$(cat "$D/shut.rc")" = 0 ]
check "... after the shutdown" contains "$(cat "$D/shut.out")" "shutdown	true"

# While a timer keeps the run, SIGTERM drains and ends it as --serve's.
# "up" is printed by a timer, so once the run's loop is turning: a signal
# that arrives while the script itself still runs, before the run is
# known to stay up, keeps its default action (the script printing "up"
# itself left a window for that, hit under load).
cat >"$D/sig.lua" <<'EOF'
local seda = require "seda"
seda.timer(0, function() print("up") io.stdout:flush() end)
seda.timer(60, function() print("should not run") end)
EOF
"$SEDA" "$D/sig.lua" >"$D/sig.out" 2>"$D/sig.err" &
SPID=$!
PIDS="$SPID"
sup() { grep -q up "$D/sig.out"; }
check "a pending timer keeps the run" wait_until 10 sup
kill -TERM "$SPID"
sgone() { ! kill -0 "$SPID" 2>/dev/null; }
check "SIGTERM ends it" wait_until 10 sgone
wait "$SPID"; rc=$?
check "... with status 0" [ "$rc" = 0 ]
finish
