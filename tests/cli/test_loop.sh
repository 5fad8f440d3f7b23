#!/bin/sh
# seda-lua's run loop (--serve, -i): woken by completions (no 10 ms poll),
# so an on_complete-driven feed with one envelope in flight runs well
# above 2000 itineraries/s; timers (seda.timer, seda.every) run by the
# same loop on the main state, errors in them reported like on_complete's.
. "$(dirname "$0")/lib.sh"

# One envelope in flight: each completion publishes the next.  The old
# loop, waking every 10 ms, managed about 100 a second.
cat >"$D/feed.lua" <<'LUA'
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "s", handler = function(env) end }
local n, t0, N = 0, nil, 5000
local function feed()
  bus:publish("s", n, { on_complete = function()
    n = n + 1
    if n == 100 then t0 = seda.now() end       -- past the warm-up
    if n < N and (not t0 or seda.now() - t0 < 3) then return feed() end
    print(string.format("rate=%d n=%d", (n - 100) // (seda.now() - t0), n))
    os.exit(0)
  end })
end
feed()
LUA
out=$(timeout 60 "$SEDA" --serve "$D/feed.lua" 2>&1)
rate=$(printf '%s' "$out" | sed -n 's/^rate=\([0-9]*\).*/\1/p')
# A generous lower bound (the release build runs at ~18 000/s here).  The
# sanitizer builds run every instruction several times slower; 500/s is
# still five times what a 10 ms polling loop can reach at any speed.
floor=2000
case "${V:-release}" in asan|tsan) floor=500 ;; esac
check "an on_complete-driven feed runs over $floor itineraries/s ($out)" \
    [ "${rate:-0}" -gt "$floor" ]

# Timers in the --serve loop: order, repetition, the main state, errors.
cat >"$D/timers.lua" <<'LUA'
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
local log = {}
local function say(s) log[#log + 1] = s end
local t0 = seda.now()
seda.timer(0.2, function() say("c") end)
seda.timer(0.1, function() say("b") end)
seda.timer(0, function() say("a") end)
seda.timer(0.05, function() error("timer-marker") end)
local ticks = 0
seda.every(0.05, function(h)
  ticks = ticks + 1
  if ticks == 5 then
    h:cancel()
    print(string.format("order=%s ticks=%d worker=%s early=%s",
          table.concat(log), ticks, tostring(seda.worker),
          tostring(seda.now() - t0 < 0.25)))
    io.stdout:flush()
  end
end)
LUA
start_server "$D/tlog" --serve "$D/timers.lua"
check "timers ran in the --serve loop" \
    wait_until "$DEADLINE" grep -q "^order=" "$D/tlog"
line=$(grep "^order=" "$D/tlog")
check "in due order, on the main state, never early ($line)" \
    [ "$line" = "order=abc ticks=5 worker=nil early=false" ]
check "an error in a timer is reported with its traceback" \
    grep -q " error timer: .*timer-marker" "$D/tlog"
check "... with file:line" grep -q "timers.lua:9" "$D/tlog"
stop_server
check "the server exits 0 (got $SRC)" [ "$SRC" = 0 ]
finish
