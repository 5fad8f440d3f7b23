-- Publish options, return values and errors (SPEC §2, §3, §5).
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

T.test("publish returns true and on_complete receives the envelope", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = function(env)
    seda.shared:set("pub.seen_sender", env.sender)
    seda.shared:set("pub.seen_hdr", env.headers.k)
    seda.shared:set("pub.seen_attempts", env.attempts)
    seda.shared:set("pub.seen_to", env.to)
    seda.shared:set("pub.seen_id", env.id)
  end }
  local got
  local ok, err = bus:publish("s", { n = 1 }, {
    headers = { k = "v" }, sender = "me", timeout = 1.0,
    on_complete = function(env) got = env end,
  })
  T.eq(ok, true, "publish result")
  T.eq(err, nil, "no error on success")
  T.idle(bus, 10)
  T.ok(got, "on_complete fired")
  T.eq(type(got.id), "string", "id is a string")
  T.eq(got.id, seda.shared:get("pub.seen_id"), "same id in handler and on_complete")
  T.eq(got.to, "s", "to")
  T.eq(got.sender, "me", "sender")
  T.eq(got.attempts, 1, "attempts")
  T.eq(got.headers.k, "v", "headers carried")
  T.deep_eq(got.payload, { n = 1 }, "payload")
  T.eq(seda.shared:get("pub.seen_sender"), "me", "handler saw sender")
  T.eq(seda.shared:get("pub.seen_hdr"), "v", "handler saw header")
  T.eq(seda.shared:get("pub.seen_attempts"), 1, "handler saw attempts")
  T.eq(seda.shared:get("pub.seen_to"), "s", "handler saw to")
  T.eq(bus:shutdown(5), true, "shutdown drained")
end)

T.test("ids are unique strings", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 2, handler = function() end }
  local ids, n = {}, 0
  for i = 1, 200 do
    T.eq(bus:publish("s", i, { on_complete = function(env)
      T.eq(ids[env.id], nil, "duplicate id " .. env.id)
      ids[env.id] = true
      n = n + 1
    end }), true, "publish " .. i)
  end
  T.idle(bus, 10)
  T.eq(n, 200, "every on_complete fired once")
  bus:shutdown(5)
end)

T.test("publish with no options and nil payload", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function(env)
    seda.shared:set("pub.nilpayload", env.payload == nil)
  end }
  T.eq(bus:publish("s"), true, "publish without payload/opts")
  T.idle(bus, 10)
  T.eq(seda.shared:get("pub.nilpayload"), true, "payload is nil")
  T.eq(bus:stats("s").delivered, 1, "delivered")
  bus:shutdown(5)
end)

T.test("publish to an unknown stage returns false, no_such_stage", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function() end }
  local ok, err = bus:publish("nope", 1)
  T.eq(ok, false, "result")
  T.eq(err, "no_such_stage", "reason")
  local s = bus:stats()
  T.eq(s.accepted, 0, "nothing accepted")
  bus:shutdown(5)
end)

T.test("publish with a non-string stage name raises", function()
  local bus = T.bus{ workers = 1 }
  T.raises(function() bus:publish(nil, 1) end, "nil stage name")
  T.raises(function() bus:publish({}, 1) end, "table stage name")
  bus:shutdown(5)
end)

T.test("publish with a bad option type raises", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function() end }
  T.raises(function() bus:publish("s", 1, { on_complete = 5 }) end,
           "on_complete not a function", "on_complete")
  T.raises(function() bus:publish("s", 1, { slip = "x" }) end, "slip not a table", "slip")
  T.raises(function() bus:publish("s", 1, { headers = 1 }) end, "headers not a table", "headers")
  T.raises(function() bus:publish("s", 1, { timeout = "soon" }) end, "timeout not a number", "timeout")
  T.eq(bus:stats().accepted, 0, "nothing accepted by misuse")
  bus:shutdown(5)
end)

T.test("publish_many publishes in order and returns the count", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = function(env)
    local n = seda.shared:incr("pm.count", 1)
    -- concurrency 1: handled in FIFO order
    if env.payload ~= n then seda.shared:set("pm.order_bad", true) end
  end }
  local n, err = bus:publish_many("s", { 1, 2, 3, 4, 5 }, { sender = "me", timeout = 1 })
  T.eq(n, 5, "count")
  T.eq(err, nil, "no error")
  T.idle(bus, 10)
  T.eq(seda.shared:get("pm.count"), 5, "handled")
  T.eq(seda.shared:get("pm.order_bad"), nil, "handled in order")
  bus:shutdown(5)
end)

-- SPEC §5: publish_many takes the same opts as publish (headers, slip,
-- on_complete once per accepted envelope).
T.test("publish_many accepts headers, slip and on_complete", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = function() end }
  bus:stage{ name = "t", handler = function(env) env.headers.t = "yes" end }
  local order, hk, ht = {}, 0, 0
  local n, err = bus:publish_many("s", { 1, 2, 3, 4, 5 }, {
    headers = { k = "v" }, slip = { "t" },
    on_complete = function(env)
      if env.headers.k == "v" then hk = hk + 1 end
      if env.headers.t == "yes" then ht = ht + 1 end
      order[#order + 1] = env.payload
    end,
  })
  T.eq(n, 5, "count")
  T.eq(err, nil, "no error")
  T.idle(bus, 10)
  T.deep_eq(order, { 1, 2, 3, 4, 5 }, "on_complete per envelope, in order")
  T.eq(hk, 5, "headers carried")
  T.eq(ht, 5, "slip visited t")
  bus:shutdown(5)
end)

T.test("publish_many stops at the first refusal", function()
  local bus = T.bus{ workers = 1 }
  local gate = T.gate("pm.gate")
  bus:stage{ name = "s", capacity = 3, policy = "reject", handler = function(env)
    local d = seda.now() + 10
    while not seda.shared:get("pm.gate") and seda.now() < d do end
    seda.shared:incr("pm2.handled", 1)
  end }
  -- hold one in the handler
  T.eq(bus:publish("s", 0), true, "first")
  T.wait_until(function() return bus:stats("s").in_flight == 1 end, 5, "one in flight")
  local n, err = bus:publish_many("s", { 1, 2, 3, 4, 5 })
  T.eq(n, 3, "accepted up to capacity")
  T.eq(err, "full", "reason")
  T.eq(bus:stats("s").depth, 3, "depth")
  T.open(gate)
  T.idle(bus, 10)
  T.eq(seda.shared:get("pm2.handled"), 4, "handled")
  bus:shutdown(5)
end)

T.test("publish_many: a payload that cannot be encoded is the first refusal", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function() end }
  local got = {}
  local n, err = bus:publish_many("s", { 1, 2, print, 3 },
    { on_complete = function(env) got[#got + 1] = env.payload end })
  T.eq(n, 2, "the two before it accepted")
  T.contains(err, "payloads[3]", "names the item")
  T.contains(err, "cannot encode a function", "says why")
  T.idle(bus, 10)
  T.deep_eq(got, { 1, 2 }, "those two completed, in order")
  T.eq(bus:stats().accepted, 2, "accepted")
  bus:shutdown(5)
end)

T.test("stats of an unknown stage: nil and the reason", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function(env)
    local v, e = seda.stats("nope")
    seda.shared:set("st.unknown", tostring(v) .. " " .. tostring(e))
  end }
  local v, e = bus:stats("nope")
  T.eq(v, nil, "no table")
  T.eq(e, "no_such_stage", "reason")
  T.eq(type(bus:stats("s")), "table", "a known stage")
  bus:publish("s", 1)
  T.idle(bus, 10)
  T.eq(seda.shared:get("st.unknown"), "nil no_such_stage", "inside a handler too")
  bus:shutdown(5)
end)

T.test("publish_many to an unknown stage", function()
  local bus = T.bus{ workers = 1 }
  local n, err = bus:publish_many("nope", { 1, 2 })
  T.eq(n, 0, "none accepted")
  T.eq(err, "no_such_stage", "reason")
  bus:shutdown(5)
end)

T.test("on_complete runs on the main state only from wait/poll", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = function() seda.shared:incr("oc.n", 1) end }
  local fired = 0
  for i = 1, 10 do
    bus:publish("s", i, { on_complete = function() fired = fired + 1 end })
  end
  -- wait for the handlers, without running callbacks
  local d = seda.now() + 10
  while (seda.shared:get("oc.n") or 0) < 10 and seda.now() < d do end
  T.eq(seda.shared:get("oc.n"), 10, "handled")
  T.eq(fired, 0, "no callback ran outside wait/poll")
  T.wait_until(function() bus:poll(); return fired == 10 end, 10, "poll runs callbacks", bus)
  T.eq(fired, 10, "every callback once")
  bus:shutdown(5)
end)

T.test("an error in on_complete does not break the bus", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function() end }
  local fired = 0
  bus:publish("s", 1, { on_complete = function() error("boom in on_complete") end })
  bus:publish("s", 2, { on_complete = function() fired = fired + 1 end })
  -- whether wait reports the error or not, the second callback must run
  local d = seda.now() + 10
  while fired == 0 and seda.now() < d do pcall(bus.wait, bus, 1) end
  T.eq(fired, 1, "later callback still ran")
  T.eq(bus:publish("s", 3), true, "bus still accepts")
  pcall(bus.wait, bus, 5)
  bus:shutdown(5)
end)

T.test("publish with an id to an in-memory stage raises: ids stay unique", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function() end }
  T.raises(function() bus:publish("s", 1, { id = "x" }) end, "publish id", "id", "durable")
  T.raises(function() bus:publish_many("s", { 1, 2 }, { id = "x" }) end, "publish_many id", "id")
  local ids, n = {}, 0
  for i = 1, 200 do
    bus:publish("s", i, { on_complete = function(env)
      n = n + 1
      if ids[env.id] then error("duplicate id " .. env.id) end
      ids[env.id] = true
    end })
  end
  T.idle(bus, 10)
  T.eq(n, 200, "all completed with distinct ids")
  T.eq(bus:stats().accepted, 200, "the refused publishes accepted nothing")
  bus:shutdown(5)
end)

T.done()
