-- C9: pub/sub delivery, and p2p round robin for comparison.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

-- Three distinct consumers; each records (consumer, payload, attempt).
-- Consumer k nacks while the payload's fail_k field is > attempts-1.
local function sub1(env)
  local p = env.payload
  seda.shared:incr("ps." .. p.tag .. ".c1." .. p.i, 1)
  seda.shared:incr("ps." .. p.tag .. ".c1.total", 1)
  if (p.fail1 or 0) >= env.attempts then return false end
end
local function sub2(env)
  local p = env.payload
  seda.shared:incr("ps." .. p.tag .. ".c2." .. p.i, 1)
  seda.shared:incr("ps." .. p.tag .. ".c2.total", 1)
  if (p.fail2 or 0) >= env.attempts then error("sub2 nacks") end
end
local function sub3(env)
  local p = env.payload
  seda.shared:incr("ps." .. p.tag .. ".c3." .. p.i, 1)
  seda.shared:incr("ps." .. p.tag .. ".c3.total", 1)
  if (p.fail3 or 0) >= env.attempts then return false end
end

local function count(tag, c, i) return seda.shared:get("ps." .. tag .. ".c" .. c .. "." .. i) end

T.test("C9 every consumer sees every envelope", function()
  local bus = T.bus{ workers = 3 }
  bus:stage{ name = "fan", delivery = "pubsub", concurrency = 3, handlers = { sub1, sub2, sub3 } }
  T.eq(bus:stats("fan").consumers, 3, "three consumers")
  T.eq(bus:stats("fan").delivery, "pubsub", "delivery reported")
  local done = 0
  for i = 1, 100 do
    bus:publish("fan", { tag = "a", i = i }, { on_complete = function() done = done + 1 end })
  end
  T.idle(bus, 20)
  for i = 1, 100 do
    for c = 1, 3 do T.eq(count("a", c, i), 1, "consumer " .. c .. " saw " .. i .. " once") end
  end
  T.eq(done, 100, "each envelope completes once")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("C9 the stage acks only when all consumers ack; retry calls only the nackers", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "dlq", handler = function() seda.shared:incr("ps.b.dlq", 1) end }
  bus:stage{ name = "fan", delivery = "pubsub", max_attempts = 4, dead_letter = "dlq",
             handlers = { sub1, sub2, sub3 } }
  bus:stage{ name = "next", handler = function(env) seda.shared:incr("ps.b.next", 1) end }
  local done = 0
  -- consumer 2 nacks twice (by error), consumer 3 once
  bus:publish("fan", { tag = "b", i = 1, fail2 = 2, fail3 = 1 }, { slip = { "next" },
    on_complete = function() done = done + 1 end })
  T.idle(bus, 10)
  T.eq(count("b", 1, 1), 1, "consumer 1 acked at once, never called again")
  T.eq(count("b", 2, 1), 3, "consumer 2 called until it acked")
  T.eq(count("b", 3, 1), 2, "consumer 3 called until it acked")
  T.eq(seda.shared:get("ps.b.next"), 1, "advanced to the next hop only once, after all acked")
  T.eq(seda.shared:get("ps.b.dlq"), nil, "not dead-lettered")
  T.eq(done, 1, "completed once")
  bus:shutdown(5)
end)

T.test("C9 a consumer that never acks dead-letters the envelope once", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "dlq", handler = function(env)
    seda.shared:incr("ps.c.dlq", 1)
    seda.shared:set("ps.c.reason", env.headers["x-dead-reason"])
  end }
  bus:stage{ name = "fan", delivery = "pubsub", max_attempts = 3, dead_letter = "dlq",
             handlers = { sub1, sub2, sub3 } }
  local done = 0
  bus:publish("fan", { tag = "c", i = 1, fail3 = 99 }, { on_complete = function() done = done + 1 end })
  T.idle(bus, 10)
  T.eq(count("c", 1, 1), 1, "consumer 1 once")
  T.eq(count("c", 2, 1), 1, "consumer 2 once")
  T.eq(count("c", 3, 1), 3, "consumer 3 max_attempts times")
  T.eq(seda.shared:get("ps.c.dlq"), 1, "dead-lettered once")
  T.eq(seda.shared:get("ps.c.reason"), "max_attempts", "reason")
  T.eq(done, 0, "no on_complete")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("p2p: several consumers share envelopes round robin, each handled once", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "rr", handlers = { sub1, sub2, sub3 } }
  for i = 1, 30 do bus:publish("rr", { tag = "e", i = i }) end
  T.idle(bus, 10)
  for i = 1, 30 do
    local n = (count("e", 1, i) or 0) + (count("e", 2, i) or 0) + (count("e", 3, i) or 0)
    T.eq(n, 1, "envelope " .. i .. " handled by exactly one consumer")
  end
  for c = 1, 3 do
    T.eq(seda.shared:get("ps.e.c" .. c .. ".total"), 10, "round robin share of consumer " .. c)
  end
  bus:shutdown(5)
end)

T.done()
