-- C4 shutdown accounting and C13 pause / resume / closed.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

-- Held on the gate named by the "gate" header (bounded), then counted.
local function gated(env)
  local gate = env.headers.gate
  if gate then
    local d = seda.now() + (tonumber(env.headers.hold_max) or 20)
    while not seda.shared:get(gate) and seda.now() < d do end
  end
  seda.shared:incr(env.headers.tag .. ".handled", 1)
end

T.test("C13 pause: publish returns false, paused; resume accepts again", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = gated }
  local h = { tag = "p1" }
  T.eq(bus:publish("s", 1, { headers = h }), true, "before pause")
  bus:pause()
  local ok, err = bus:publish("s", 2, { headers = h })
  T.eq(ok, false, "paused publish")
  T.eq(err, "paused", "reason")
  local n, err2 = bus:publish_many("s", { 3, 4 })
  T.eq(n, 0, "publish_many while paused")
  T.eq(err2, "paused", "publish_many reason")
  bus:resume()
  T.eq(bus:publish("s", 5, { headers = h }), true, "after resume")
  T.idle(bus, 10)
  T.eq(seda.shared:get("p1.handled"), 2, "accepted ones handled")
  local s = T.accounting(bus)
  T.eq(s.accepted, 2, "paused publishes not accepted")
  T.eq(bus:shutdown(5), true, "shutdown")
end)

T.test("C13 in-flight work completes while paused", function()
  local bus = T.bus{ workers = 2, batch = 1 }
  bus:stage{ name = "s", handler = gated }
  local gate = T.gate("p2.gate")
  local h = { tag = "p2", gate = gate }
  local done = 0
  for i = 1, 5 do
    bus:publish("s", i, { headers = h, on_complete = function() done = done + 1 end })
  end
  T.wait_until(function() return bus:stats("s").in_flight == 1 end, 10, "one in flight")
  bus:pause()
  T.eq(select(2, bus:publish("s", 6, { headers = h })), "paused", "paused")
  T.open(gate)
  T.idle(bus, 10)
  T.eq(seda.shared:get("p2.handled"), 5, "queued work drained while paused")
  T.eq(done, 5, "on_complete ran while paused")
  bus:shutdown(5)
end)

T.test("C13 a handler's seda.publish while paused", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "t", handler = function() seda.shared:incr("p3.t", 1) end }
  bus:stage{ name = "s", handler = function(env)
    local ok, err = seda.publish("t", 1)
    seda.shared:set("p3.res", ok and "true" or tostring(err))
  end }
  local gate = T.gate("p3.gate")
  bus:stage{ name = "hold", handler = gated }
  -- hold the only worker, pause, then let s run
  bus:publish("hold", 0, { headers = { gate = gate, tag = "p3" } })
  T.wait_until(function() return bus:stats("hold").in_flight == 1 end, 10, "held")
  bus:publish("s", 0)
  bus:pause()
  T.open(gate)
  T.wait_until(function() return seda.shared:get("p3.res") end, 10, "handler ran")
  T.eq(seda.shared:get("p3.res"), "paused", "seda.publish refused while paused")
  bus:resume()
  T.idle(bus, 10)
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("C13 after shutdown publish returns false, closed", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = gated }
  bus:publish("s", 1, { headers = { tag = "p4" } })
  T.eq(bus:shutdown(5), true, "drained")
  T.eq(seda.shared:get("p4.handled"), 1, "handled before shutdown returned")
  local ok, err = bus:publish("s", 2, { headers = { tag = "p4" } })
  T.eq(ok, false, "closed publish")
  T.eq(err, "closed", "reason")
  local n, err2 = bus:publish_many("s", { 1 })
  T.eq(n, 0, "publish_many closed")
  T.eq(err2, "closed", "publish_many reason")
  -- a second shutdown is harmless
  T.eq(bus:shutdown(1), true, "second shutdown")
  local s = T.accounting(bus)
  T.eq(s.accepted, 1, "accepted")
  T.eq(s.completed, 1, "completed")
end)

T.test("C13 pause is ended by shutdown: closed, not paused", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = gated }
  bus:pause()
  T.eq(bus:shutdown(5), true, "shutdown while paused")
  T.eq(select(2, bus:publish("s", 1)), "closed", "closed wins")
end)

T.test("C4 shutdown(timeout) returns true when drained; all accounted", function()
  local bus = T.bus{ workers = 2 }
  -- each envelope takes ~2 ms of busy work
  bus:stage{ name = "s", concurrency = 2, handler = function(env)
    local d = seda.now() + 0.002
    while seda.now() < d do end
    seda.shared:incr("c4a.handled", 1)
  end }
  local done = 0
  for i = 1, 200 do
    T.eq(bus:publish("s", i, { on_complete = function() done = done + 1 end }), true, "publish")
  end
  T.eq(bus:shutdown(20), true, "drained before timeout")
  T.eq(seda.shared:get("c4a.handled"), 200, "delivered == published")
  local s = T.accounting(bus)
  T.eq(s.completed, 200, "completed")
  T.eq(s.in_system, 0, "nothing left")
  T.eq(s.dropped, 0, "nothing dropped")
  T.eq(done, 200, "shutdown ran the on_complete callbacks")
end)

T.test("C4 shutdown(timeout) times out: the rest is counted dropped", function()
  local bus = T.bus{ workers = 1, batch = 1 }
  local gate = T.gate("c4b.gate")
  bus:stage{ name = "s", handler = gated }
  local done = 0
  for i = 1, 20 do
    bus:publish("s", i, { headers = { gate = gate, tag = "c4b", hold_max = "1.0" },
      on_complete = function() done = done + 1 end })
  end
  T.wait_until(function() return bus:stats("s").in_flight == 1 end, 10, "held")
  -- the handler stays held past the shutdown timeout: the gate is never
  -- opened before shutdown returns, the handler gives up on its own after
  -- hold_max = 1 s (a worker cannot be interrupted without handler_timeout)
  local t0 = seda.now()
  local ok = bus:shutdown(0.3)
  local dt = seda.now() - t0
  T.open(gate)
  T.eq(ok, false, "shutdown timed out")
  T.ok(dt >= 0.25, string.format("waited for the timeout (%.3fs)", dt))
  T.eq(select(2, bus:publish("s", 99)), "closed", "closed after shutdown")
  -- the held envelope may still finish; wait for the pool to settle
  T.wait_until(function()
    local s = bus:stats()
    return s.in_system == 0
  end, 15, "in_system drains to 0")
  local s = T.accounting(bus)
  T.eq(s.accepted, 20, "accepted")
  T.eq(s.completed + s.dropped, 20, "every envelope completed or dropped")
  T.ok(s.dropped >= 19 - (seda.shared:get("c4b.handled") or 0) + 0, "queued ones dropped")
  T.eq(bus:stats("s").depth, 0, "no envelope left in a queue")
  T.eq(done, s.completed, "on_complete only for completed ones")
end)

T.test("C4 shutdown_now counts what is left as dropped", function()
  local bus = T.bus{ workers = 1, batch = 1 }
  local gate = T.gate("c4c.gate")
  bus:stage{ name = "s", handler = gated }
  local done = 0
  for i = 1, 10 do
    bus:publish("s", i, { headers = { gate = gate, tag = "c4c" },
      on_complete = function() done = done + 1 end })
  end
  T.wait_until(function() return bus:stats("s").in_flight == 1 end, 10, "held")
  T.eq(bus:stats("s").depth, 9, "nine queued")
  T.open(gate)
  bus:shutdown_now()
  T.eq(select(2, bus:publish("s", 99)), "closed", "closed")
  T.wait_until(function() return bus:stats().in_system == 0 end, 15, "settled")
  local s = T.accounting(bus)
  T.eq(s.accepted, 10, "accepted")
  T.eq(s.completed + s.dropped, 10, "completed + dropped")
  T.ok(s.dropped >= 9 - (s.completed - 1), "queued envelopes dropped")
  T.eq(bus:stats("s").depth, 0, "queue empty")
  T.eq(bus:stats("s").dropped, s.dropped, "stage dropped counts the sweep")
end)

T.test("C4 shutdown concurrent with a slow pipeline: nothing unaccounted", function()
  local bus = T.bus{ workers = 2 }
  local slow = function(env)
    local d = seda.now() + 0.001
    while seda.now() < d do end
    if env.payload % 7 == 0 then return false end
  end
  bus:stage{ name = "a", concurrency = 2, handler = slow }
  bus:stage{ name = "b", concurrency = 1, handler = slow }
  for i = 1, 300 do bus:publish("a", i, { slip = { "b" } }) end
  local ok = bus:shutdown(0.05)
  T.wait_until(function() return bus:stats().in_system == 0 end, 20, "settled")
  local s = T.accounting(bus)
  T.eq(s.accepted, 300, "accepted")
  if ok then T.eq(s.dropped, 0, "drained: nothing dropped") end
  T.eq(bus:stats("a").depth + bus:stats("b").depth, 0, "queues empty")
end)

T.test("wait(timeout) returns false when not idle, true when idle", function()
  local bus = T.bus{ workers = 1 }
  local gate = T.gate("w.gate")
  bus:stage{ name = "s", handler = gated }
  T.eq(bus:wait(1), true, "empty bus is idle")
  bus:publish("s", 1, { headers = { gate = gate, tag = "w" } })
  local t0 = seda.now()
  T.eq(bus:wait(0.2), false, "held: not idle")
  T.ok(seda.now() - t0 >= 0.15, "wait waited")
  T.open(gate)
  T.eq(bus:wait(10), true, "idle after the gate opens")
  bus:shutdown(5)
end)

T.done()
