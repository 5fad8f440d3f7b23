-- C2: retry, then dead letter.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

-- Nacks (by returning false, or by raising when header mode == "error")
-- until attempt `ok_at` (header; never if absent). Records attempts seen.
local function flaky(env)
  local tag = env.headers.tag
  local n = seda.shared:incr(tag .. ".calls", 1)
  seda.shared:set(tag .. ".attempt." .. n, env.attempts)
  local ok_at = tonumber(env.headers.ok_at)
  if ok_at and env.attempts >= ok_at then
    seda.shared:incr(tag .. ".acked", 1)
    return true
  end
  if env.headers.mode == "error" then error("nack by error, attempt " .. env.attempts) end
  return false
end

-- Dead-letter stage: records what arrives.
local function dlq(env)
  local tag = env.headers.tag or "untagged"
  local n = seda.shared:incr(tag .. ".dlq", 1)
  seda.shared:set(tag .. ".dlq.reason", env.headers["x-dead-reason"])
  seda.shared:set(tag .. ".dlq.from", env.headers["x-dead-from"])
  seda.shared:set(tag .. ".dlq.payload", env.payload)
  seda.shared:set(tag .. ".dlq.attempts", env.attempts)
  seda.shared:set(tag .. ".dlq.id", env.id)
end

local function attempts_seen(tag)
  local t = {}
  for i = 1, (seda.shared:get(tag .. ".calls") or 0) do t[i] = seda.shared:get(tag .. ".attempt." .. i) end
  return t
end

for _, mode in ipairs({ "false", "error" }) do
  T.test("C2a nack by " .. mode .. " until attempt k: delivered exactly once", function()
    local bus = T.bus{ workers = 2 }
    bus:stage{ name = "dlq", handler = dlq }
    bus:stage{ name = "s", max_attempts = 5, dead_letter = "dlq", handler = flaky }
    local tag = "r1" .. mode
    local done = 0
    T.eq(bus:publish("s", "x", { headers = { tag = tag, ok_at = "3", mode = mode },
      on_complete = function(env)
        done = done + 1
        T.eq(env.attempts, 3, "attempts at completion")
      end }), true, "publish")
    T.idle(bus, 10)
    T.deep_eq(attempts_seen(tag), { 1, 2, 3 }, "attempts seen")
    T.eq(seda.shared:get(tag .. ".acked"), 1, "acked once")
    T.eq(done, 1, "on_complete once")
    T.eq(seda.shared:get(tag .. ".dlq"), nil, "not dead-lettered")
    local s = bus:stats("s")
    T.eq(s.delivered + 0 >= 1, true, "delivered counted")
    T.eq(s.nacked, 2, "two nacks")
    T.eq(s.depth, 0, "queue empty")
    local b = T.accounting(bus)
    T.eq(b.completed, 1, "completed")
    T.eq(b.dead_lettered, 0, "dead_lettered")
    T.eq(b.in_system, 0, "no retry state left (in_system)")
    T.eq(bus:shutdown(5), true, "shutdown")
  end)

  T.test("C2b always nack by " .. mode .. ": dead-lettered after max_attempts", function()
    local bus = T.bus{ workers = 2 }
    bus:stage{ name = "dlq", handler = dlq }
    bus:stage{ name = "s", max_attempts = 4, dead_letter = "dlq", handler = flaky }
    local tag = "r2" .. mode
    local done = 0
    T.eq(bus:publish("s", "payload-x", { headers = { tag = tag, mode = mode },
      on_complete = function() done = done + 1 end }), true, "publish")
    T.idle(bus, 10)
    T.deep_eq(attempts_seen(tag), { 1, 2, 3, 4 }, "attempts seen")
    T.eq(seda.shared:get(tag .. ".dlq"), 1, "arrived at dlq once")
    T.eq(seda.shared:get(tag .. ".dlq.reason"), "max_attempts", "x-dead-reason")
    T.eq(seda.shared:get(tag .. ".dlq.from"), "s", "x-dead-from")
    T.eq(seda.shared:get(tag .. ".dlq.payload"), "payload-x", "payload kept")
    T.eq(seda.shared:get(tag .. ".dlq.attempts"), 1, "attempts reset at the DLQ")
    T.eq(done, 0, "on_complete never fires for a dead letter")
    -- never handed to the original handler again
    T.eq(seda.shared:get(tag .. ".calls"), 4, "handler calls == max_attempts")
    local s = bus:stats("s")
    T.eq(s.dead_lettered, 1, "stage dead_lettered")
    T.eq(s.nacked, 4, "stage nacked")
    local b = T.accounting(bus)
    T.eq(b.dead_lettered, 1, "bus dead_lettered")
    T.eq(b.completed, 0, "a dead letter acked by the DLQ is not completed")
    T.eq(bus:shutdown(5), true, "shutdown")
  end)
end

T.test("C2 max_attempts = 1 (default): one call, then dead letter", function()
  local bus = T.bus{ workers = 1, dead_letter = "dlq" }
  bus:stage{ name = "dlq", handler = dlq }
  bus:stage{ name = "s", handler = flaky }   -- bus-wide dead_letter
  T.eq(bus:publish("s", 1, { headers = { tag = "r3" } }), true, "publish")
  T.idle(bus, 10)
  T.eq(seda.shared:get("r3.calls"), 1, "one call")
  T.eq(seda.shared:get("r3.dlq"), 1, "bus-wide dead_letter used")
  T.eq(seda.shared:get("r3.dlq.reason"), "max_attempts", "reason")
  T.eq(seda.shared:get("r3.dlq.from"), "s", "from")
  bus:shutdown(5)
end)

T.test("C2 stage dead_letter overrides the bus-wide one", function()
  local bus = T.bus{ workers = 1, dead_letter = "busdlq" }
  bus:stage{ name = "busdlq", handler = function(env) seda.shared:incr("r4.bus", 1) end }
  bus:stage{ name = "mydlq", handler = function(env) seda.shared:incr("r4.mine", 1) end }
  bus:stage{ name = "s", dead_letter = "mydlq", handler = function() return false end }
  bus:publish("s", 1)
  T.idle(bus, 10)
  T.eq(seda.shared:get("r4.mine"), 1, "stage DLQ")
  T.eq(seda.shared:get("r4.bus"), nil, "bus DLQ unused")
  bus:shutdown(5)
end)

T.test("C2 no dead-letter stage: discarded but counted", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", max_attempts = 2, handler = function() return false end }
  local done = 0
  for i = 1, 3 do bus:publish("s", i, { on_complete = function() done = done + 1 end }) end
  T.idle(bus, 10)
  local b = T.accounting(bus)
  T.eq(b.dead_lettered, 3, "counted dead_lettered")
  T.eq(b.completed, 0, "none completed")
  T.eq(done, 0, "no on_complete")
  T.eq(bus:stats("s").nacked, 6, "2 attempts each")
  bus:shutdown(5)
end)

T.test("C2c a stage without handlers dead-letters at once: no_consumers", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "dlq", handler = dlq }
  bus:stage{ name = "empty", dead_letter = "dlq", max_attempts = 5 }
  local done = 0
  T.eq(bus:publish("empty", "z", { headers = { tag = "r5" },
    on_complete = function() done = done + 1 end }), true, "publish accepted")
  T.idle(bus, 10)
  T.eq(seda.shared:get("r5.dlq"), 1, "dead-lettered once")
  T.eq(seda.shared:get("r5.dlq.reason"), "no_consumers", "reason")
  T.eq(seda.shared:get("r5.dlq.from"), "empty", "from")
  T.eq(done, 0, "no on_complete")
  T.eq(bus:stats("empty").consumers, 0, "no consumers")
  T.eq(bus:stats("empty").dead_lettered, 1, "stage counts it")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("C2 unknown slip hop: no_such_stage", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "dlq", handler = dlq }
  bus:stage{ name = "a", dead_letter = "dlq", handler = function(env) seda.shared:incr("r6.a", 1) end }
  local done = 0
  T.eq(bus:publish("a", "p", { headers = { tag = "r6" }, slip = { "nowhere" },
    on_complete = function() done = done + 1 end }), true, "publish")
  T.idle(bus, 10)
  T.eq(seda.shared:get("r6.a"), 1, "first hop ran")
  T.eq(seda.shared:get("r6.dlq"), 1, "dead-lettered")
  T.eq(seda.shared:get("r6.dlq.reason"), "no_such_stage", "reason")
  T.eq(seda.shared:get("r6.dlq.from"), "a", "from the stage that acked")
  T.eq(done, 0, "no on_complete")
  local b = T.accounting(bus)
  T.eq(b.dead_lettered, 1, "counted")
  bus:shutdown(5)
end)

T.test("C2 env:forward to an unknown stage: no_such_stage", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "dlq", handler = dlq }
  bus:stage{ name = "a", dead_letter = "dlq", handler = function(env) return env:forward("ghost") end }
  bus:publish("a", 1, { headers = { tag = "r7" } })
  T.idle(bus, 10)
  T.eq(seda.shared:get("r7.dlq.reason"), "no_such_stage", "reason")
  bus:shutdown(5)
end)

T.test("C2 a stage dead_letter naming no stage falls back to the bus's", function()
  local bus = T.bus{ workers = 2, dead_letter = "busdlq" }
  bus:stage{ name = "busdlq", handler = dlq }
  bus:stage{ name = "a", dead_letter = "nosuch", handler = function() return false end }
  bus:stage{ name = "self", dead_letter = "self", handler = function() return false end }
  bus:publish("a", "pa", { headers = { tag = "r11a" } })
  bus:publish("self", "ps", { headers = { tag = "r11s" } })
  T.idle(bus, 10)
  T.eq(seda.shared:get("r11a.dlq"), 1, "a's envelope at the bus's dead-letter stage")
  T.eq(seda.shared:get("r11a.dlq.from"), "a", "x-dead-from")
  T.eq(seda.shared:get("r11s.dlq"), 1, "a stage is not its own dead-letter stage")
  T.eq(bus:stats("a").errors >= 1, true, "the missing stage is reported")
  local b = T.accounting(bus)
  T.eq(b.dead_lettered, 2, "dead_lettered")
  bus:shutdown(5)
end)

T.test("C2 retries go to the head of the queue", function()
  local bus = T.bus{ workers = 1, batch = 1 }
  -- First envelope nacks once; FIFO order must be e1(1), e1(2), e2, e3.
  bus:stage{ name = "s", max_attempts = 3, handler = function(env)
    local n = seda.shared:incr("r8.n", 1)
    seda.shared:set("r8.seq." .. n, env.payload .. "#" .. env.attempts)
    if env.payload == "e1" and env.attempts == 1 then return false end
  end }
  local n = bus:publish_many("s", { "e1", "e2", "e3" })
  T.eq(n, 3, "published")
  T.idle(bus, 10)
  local seq = {}
  for i = 1, seda.shared:get("r8.n") do seq[i] = seda.shared:get("r8.seq." .. i) end
  T.deep_eq(seq, { "e1#1", "e1#2", "e2#1", "e3#1" }, "retry at head")
  bus:shutdown(5)
end)

T.test("C2 retries go to the head of the queue within a batch (default batch)", function()
  local bus = T.bus{ workers = 1 }
  -- Warm-up envelopes make the stage's handling time known and small, so
  -- the drain task takes the next five in one batch: a retry must still
  -- come before the rest of that batch, which was behind it in the queue.
  bus:stage{ name = "s", max_attempts = 3, handler = function(env)
    if env.payload == "warm" then return end
    local n = seda.shared:incr("r10.n", 1)
    seda.shared:set("r10.seq." .. n, env.payload .. "#" .. env.attempts)
    if env.payload == "e1" and env.attempts < 3 then return false end
    if env.payload == "e3" and env.attempts < 2 then return false end
  end }
  local warm = {}
  for i = 1, 64 do warm[i] = "warm" end
  T.eq(bus:publish_many("s", warm), 64, "warm-up published")
  T.idle(bus, 10)
  T.eq(bus:publish_many("s", { "e1", "e2", "e3", "e4", "e5" }), 5, "published")
  T.idle(bus, 10)
  local seq = {}
  for i = 1, seda.shared:get("r10.n") do seq[i] = seda.shared:get("r10.seq." .. i) end
  T.deep_eq(seq, { "e1#1", "e1#2", "e1#3", "e2#1", "e3#1", "e3#2", "e4#1", "e5#1" },
            "each retry before the rest")
  bus:shutdown(5)
end)

T.test("C2 a retry never takes the queue past its capacity", function()
  -- A handler known to be fast (full batches) turns slow and nacks while
  -- publishers refill the queue: the retry is delivered again by the task
  -- that holds it, never put back on top of a full queue.
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s1", capacity = 4, max_attempts = 2, handler = function(env)
    if env.payload == "slow" and env.attempts == 1 then
      local d = seda.now() + 0.01
      while seda.now() < d do end
      return false
    end
  end }
  bus:stage{ name = "s2", handler = function(env)
    local d = seda.now() + 0.05
    while seda.now() < d do end
  end }
  local worst = 0
  for round = 1, 3 do
    for i = 1, 2000 do T.eq(bus:publish("s1", "fast"), true, "warm-up") end
    T.idle(bus, 10)
    T.eq(bus:publish("s2", "x"), true, "occupy the worker")
    T.eq(bus:publish_many("s1", { "slow", "fast", "fast", "fast" }), 4, "batch")
    local t = seda.now() + 0.2
    while seda.now() < t do
      bus:publish("s1", "fast", { timeout = 0 })
      local d = bus:stats("s1").depth
      if d > worst then worst = d end
    end
    T.idle(bus, 10)
  end
  T.le(worst, 4, "depth never above capacity")
  T.eq(bus:stats("s1").dead_lettered, 0, "each slow one acked on its retry")
  bus:shutdown(5)
end)

T.test("C2 many envelopes nacking k times: no retry state left behind", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 2, max_attempts = 3, handler = function(env)
    if env.attempts < 3 then return false end
    seda.shared:incr("r9.ok", 1)
  end }
  local done = 0
  for i = 1, 100 do bus:publish("s", i, { on_complete = function() done = done + 1 end }) end
  T.idle(bus, 20)
  T.eq(seda.shared:get("r9.ok"), 100, "each acked once")
  T.eq(done, 100, "each completed once")
  local b = T.accounting(bus)
  T.eq(b.in_system, 0, "in_system")
  T.eq(bus:stats("s").nacked, 200, "nacks")
  bus:shutdown(5)
end)

T.done()
