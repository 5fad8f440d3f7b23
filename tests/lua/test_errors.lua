-- bus:errors([stage]): the stages' recent errors (the core's ring), newest
-- first, with wall-clock times and repeat counts; and the latency sums in
-- bus:stats() behind the Prometheus summaries.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

T.test("bus:errors() lists handler errors with tracebacks, newest first", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "a", handler = function(env)
    if env.payload == "boom" then error("boom in a") end
    if env.payload == "nack" then return false end      -- a nack is no error
  end }
  bus:stage{ name = "b", handler = function(env) error({ code = 7 }) end }
  local t0 = os.time()
  bus:publish("a", "boom")
  T.idle(bus, 10)
  bus:publish("b", 1)
  T.idle(bus, 10)
  bus:publish("a", "nack")
  T.idle(bus, 10)
  local t1 = os.time() + 1
  local all = bus:errors()
  T.eq(#all, 2, "two errors")
  T.eq(all[1].stage, "b", "the newest first")
  T.eq(all[2].stage, "a")
  T.contains(all[2].message, "boom in a", "the message")
  T.contains(all[2].message, "stack traceback", "with its traceback")
  T.contains(all[2].message, "test_errors.lua:9", "naming file:line")
  T.contains(all[1].message, "table", "a non-string error is described")
  for _, e in ipairs(all) do
    T.eq(math.type(e.repeats), "integer")
    T.eq(e.repeats, 1)
    T.ok(e.time >= t0 and e.time <= t1, "wall-clock time " .. e.time)
    T.eq(e.first, e.time, "first == time for a single occurrence")
  end
  T.ok(all[1].time >= all[2].time, "ordered by time")
  local a = bus:errors("a")
  T.eq(#a, 1, "one stage's")
  T.eq(a[1].stage, "a")
  T.eq(a[1].message, all[2].message)
  T.eq(#bus:stats("a").name, 1)
  T.eq(bus:stats("a").errors, 1, "counted in stats")
  bus:shutdown(5)
end)

T.test("repeats fold into one entry; the ring keeps the last 32", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function(env) error("e" .. env.payload, 0) end }
  for i = 1, 5 do bus:publish("s", 1) end
  T.idle(bus, 10)
  local e = bus:errors("s")
  T.eq(#e, 1, "one entry for five equal errors")
  T.eq(e[1].repeats, 5)
  T.ok(e[1].first <= e[1].time, "first <= time")
  for i = 1, 40 do bus:publish("s", 100 + i) end
  T.idle(bus, 10)
  e = bus:errors("s")
  T.eq(#e, 32, "the last 32 distinct")
  T.contains(e[1].message, "e140", "newest")
  T.contains(e[32].message, "e109", "oldest kept")
  T.eq(bus:stats("s").errors, 45, "every error counted")
  bus:shutdown(5)
end)

T.test("bus:errors() misuse and edge cases", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "quiet", handler = function() end }
  T.eq(#bus:errors(), 0, "no error yet: an empty list")
  T.eq(#bus:errors("quiet"), 0)
  local r, why = bus:errors("nope")
  T.eq(r, nil, "unknown stage")
  T.eq(why, "no_such_stage")
  T.eq(select(2, bus:errors(42)), "no_such_stage", "a number names no stage")
  T.raises(function() bus:errors({}) end, "a table", "string expected")
  bus:shutdown(5)
  T.eq(#bus:errors(), 0, "still readable after shutdown, like stats")
end)

T.test("hop timeouts are kept too (on the stage that had no room)", function()
  local bus = T.bus{ workers = 2, hop_timeout = 0.05 }
  local g = T.gate("err.gate")
  bus:stage{ name = "full", capacity = 1, handler = function()
    local deadline = seda.now() + 10
    while not seda.shared:get("err.gate") and seda.now() < deadline do end
  end }
  bus:stage{ name = "src", handler = function(env)
    for i = 1, 3 do seda.publish("full", i) end      -- the third waits 50 ms
  end }
  bus:publish("src", 1)
  T.wait_until(function() return #bus:errors("full") > 0 end, 10, "hop timeout kept")
  T.open(g)
  T.idle(bus, 10)
  T.contains(bus:errors("full")[1].message, "waited hop_timeout")
  T.contains(bus:errors()[1].message, "waited hop_timeout")
  T.eq(bus:errors()[1].stage, "full")
  bus:shutdown(5)
end)

T.test("stats carry sojourn and service counts and sums", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function()
    local t = seda.now() + 0.001
    while seda.now() < t do end
  end }
  local s = bus:stats("s")
  T.eq(s.sojourn_count, 0)
  T.eq(s.service_count, 0)
  T.eq(s.sojourn_sum, 0.0)
  for i = 1, 4 do bus:publish("s", i) end
  T.idle(bus, 10)
  s = bus:stats("s")
  T.eq(s.sojourn_count, 4)
  T.eq(s.service_count, 4)
  T.eq(math.type(s.service_sum), "float")
  T.ok(s.service_sum >= 4 * 0.001, "4 x 1 ms of service (s): " .. s.service_sum)
  T.ok(s.service_sum <= 4 * s.service_max + 1e-6, "sum <= count * max")
  T.ok(s.sojourn_sum <= 4 * s.sojourn_max + 1e-6, "sojourn sum <= count * max")
  bus:shutdown(5)
end)

T.done()
