-- seda.timer(delay, fn) and seda.every(interval, fn): run on the main
-- state by whatever runs on_complete callbacks (here bus:poll and
-- bus:wait; seda-lua's loop in tests/cli/test_loop.sh), in due order,
-- cancellable, never early (only lower bounds on time are checked).
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

T.test("a timer fires once, not before its delay, on the main state", function()
  local bus = T.bus{ workers = 1 }
  local t0 = seda.now()
  local fired, at, worker, arg = 0, nil, "unset", nil
  local h = seda.timer(0.03, function(handle)
    fired = fired + 1
    at = seda.now()
    worker = seda.worker
    arg = handle
  end)
  T.eq(h:pending(), true, "pending before it fires")
  T.wait_until(function() return fired > 0 end, 10, "the timer", bus)
  T.ok(at - t0 >= 0.03, "fired after its delay, got " .. (at - t0))
  T.eq(worker, nil, "ran on the main state (seda.worker is nil there)")
  T.eq(arg, h, "the callback gets its handle")
  T.eq(h:pending(), false, "done after firing")
  T.eq(h:cancel(), false, "cancel after it fired returns false")
  local until_ = seda.now() + 0.05
  while seda.now() < until_ do bus:poll() end
  T.eq(fired, 1, "a one-shot fires once")
end)

T.test("timers fire in due order; equal due times in the order set", function()
  local bus = T.bus{ workers = 1 }
  local order = {}
  seda.timer(0.06, function() order[#order + 1] = "c" end)
  seda.timer(0.02, function() order[#order + 1] = "a" end)
  seda.timer(0.04, function() order[#order + 1] = "b" end)
  T.wait_until(function() return #order == 3 end, 10, "three timers", bus)
  T.deep_eq(order, { "a", "b", "c" }, "due order")
  -- Same due time: the order they were set in (the clock cannot split
  -- them: every one is due before the first poll after they are set).
  local same = {}
  for i = 1, 20 do seda.timer(0, function() same[#same + 1] = i end) end
  T.wait_until(function() return #same == 20 end, 10, "twenty timers", bus)
  for i = 1, 20 do T.eq(same[i], i, "position " .. i) end
end)

T.test("cancel: a cancelled timer never fires; cancel says whether it was pending", function()
  local bus = T.bus{ workers = 1 }
  local fired = {}
  local a = seda.timer(0.01, function() fired.a = true end)
  local b = seda.timer(0.02, function() fired.b = true end)
  T.eq(a:cancel(), true, "first cancel of a pending timer")
  T.eq(a:cancel(), false, "second cancel")
  T.eq(a:pending(), false, "not pending once cancelled")
  T.wait_until(function() return fired.b end, 10, "the other timer", bus)
  local until_ = seda.now() + 0.03
  while seda.now() < until_ do bus:poll() end
  T.eq(fired.a, nil, "the cancelled timer did not fire")
  T.ok(tostring(b):find("seda.timer", 1, true), "tostring names it")
end)

T.test("every: tick i comes no sooner than i intervals after, until cancelled", function()
  local bus = T.bus{ workers = 1 }
  local times = {}
  local t0 = seda.now()
  local h
  h = seda.every(0.02, function(handle)
    times[#times + 1] = seda.now()
    if #times == 4 then T.eq(handle:cancel(), true, "cancel from inside") end
  end)
  T.wait_until(function() return #times == 4 end, 10, "four ticks", bus)
  -- Fixed rate: tick i is due i intervals after the call (no drift),
  -- and never runs before that.
  for i = 1, 4 do
    T.ok(times[i] - t0 >= i * 0.02, "tick " .. i .. " at " .. (times[i] - t0))
  end
  local until_ = seda.now() + 0.06
  while seda.now() < until_ do bus:poll() end
  T.eq(#times, 4, "no tick after cancel")
  T.eq(h:pending(), false, "not pending")
end)

T.test("a timer set by a timer callback runs on a later pass, not the same", function()
  local bus = T.bus{ workers = 1 }
  local n = 0
  local function again() n = n + 1; if n < 100 then seda.timer(0, again) end end
  seda.timer(0, again)
  T.spin(0.001)
  local ran = bus:poll()
  T.eq(ran, 1, "one pass runs only what was set before it")
  T.wait_until(function() return n == 100 end, 10, "the chain", bus)
end)

T.test("bus:wait runs due timers while it waits; pending ones do not hold it", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "slow", handler = function(env)
    local t = seda.now() + 0.2
    while seda.now() < t do end
  end }
  local fired_at
  seda.timer(0.01, function() fired_at = seda.now() end)
  local late = seda.timer(1e6, function() error("must not fire") end)
  assert(bus:publish("slow", 1))
  T.eq(bus:wait(10), true, "idle")
  T.ok(fired_at ~= nil, "the due timer ran inside bus:wait")
  T.eq(late:pending(), true, "a far timer is still pending ...")
  T.eq(late:cancel(), true, "... and cancels")
end)

T.test("timer misuse raises, naming the argument", function()
  local f = function() end
  T.raises(function() seda.timer(-1, f) end, "negative", "seda.timer", "delay")
  T.raises(function() seda.timer("1", f) end, "string", "seda.timer", "number")
  T.raises(function() seda.timer(1) end, "no function", "seda.timer", "function")
  T.raises(function() seda.every(0, f) end, "zero interval", "seda.every", "> 0")
  T.raises(function() seda.every(0 / 0, f) end, "nan", "seda.every", "interval")
  T.raises(function() seda.every(1, 5) end, "not a function", "seda.every", "function")
end)

T.test("in a handler, seda.timer raises: timers belong to the main state", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "h", handler = function(env)
    local ok, err = pcall(seda.timer, 1, function() end)
    seda.shared:set("timer_err", ok and "no error" or tostring(err))
  end }
  assert(bus:publish("h", 1))
  T.idle(bus)
  T.contains(seda.shared:get("timer_err"), "main state", "the handler's error")
end)

T.test("an error in a timer callback does not stop the others", function()
  local bus = T.bus{ workers = 1 }
  local ok_after = false
  seda.timer(0, function() error("timer-test-error (expected on stderr)") end)
  seda.timer(0, function() ok_after = true end)
  T.wait_until(function() return ok_after end, 10, "the next timer", bus)
end)

T.done()
