-- C1: back-pressure, each policy, for Lua handlers.
--
-- A stage with concurrency 1 on a bus with batch 1 whose handler is held on a
-- gate (a seda.shared flag named in the envelope's "gate" header): exactly
-- one envelope sits in the handler, `capacity` more fill the queue, and the
-- next publish meets a full queue.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local CAP = 4

-- Gated handler: waits (bounded) for the gate, then records the payload as
-- delivered under "<tag>.got.<payload>" and counts "<tag>.handled".
local function gated(env)
  local gate = env.headers.gate
  if gate then
    local d = seda.now() + 20
    while not seda.shared:get(gate) and seda.now() < d do end
  end
  local tag = env.headers.tag
  seda.shared:incr(tag .. ".handled", 1)
  local n = seda.shared:incr(tag .. ".got." .. tostring(env.payload), 1)
  if n > 1 then seda.shared:set(tag .. ".dup", true) end
end

-- Build the bus and stage, hold one envelope in the handler and fill the
-- queue; returns bus, headers.
local function setup(policy, tag, extra)
  local bus = T.bus{ workers = 2, batch = 1, hop_timeout = 10 }
  local opts = { name = "s", capacity = CAP, concurrency = 1, policy = policy, handler = gated }
  for k, v in pairs(extra or {}) do opts[k] = v end
  bus:stage(opts)
  local gate = T.gate(tag .. ".gate")
  local h = { gate = gate, tag = tag }
  T.eq(bus:publish("s", "held", { headers = h }), true, "publish held")
  T.wait_until(function()
    local s = bus:stats("s")
    return s.in_flight == 1 and s.depth == 0
  end, 10, "held envelope in the handler")
  for i = 1, CAP do
    T.eq(bus:publish("s", "q" .. i, { headers = h }), true, "fill " .. i)
  end
  T.eq(bus:stats("s").depth, CAP, "queue full")
  return bus, h
end

local function got(tag, p) return seda.shared:get(tag .. ".got." .. p) end

T.test("C1 block: publish on a full queue times out after roughly the timeout", function()
  local bus, h = setup("block", "bpb")
  local t0 = seda.now()
  local ok, err = bus:publish("s", "late", { headers = h, timeout = 0.3 })
  local dt = seda.now() - t0
  T.eq(ok, false, "result")
  T.eq(err, "timeout", "reason")
  T.ok(dt >= 0.25, string.format("waited at least ~0.3s (waited %.3fs)", dt))
  T.ok(dt < 10, string.format("did not wait far beyond the timeout (%.3fs)", dt))
  T.eq(bus:stats("s").dropped, 1, "the refusal is counted in dropped")
  T.open(h.gate)
  T.idle(bus, 10)
  T.eq(seda.shared:get("bpb.handled"), 1 + CAP, "held + queued delivered")
  T.eq(got("bpb", "late"), nil, "timed-out envelope never delivered")
  T.accounting(bus)
  T.eq(bus:shutdown(5), true, "shutdown")
end)

T.test("C1 block: stage publish_timeout applies when publish gives none", function()
  local bus, h = setup("block", "bpt", { publish_timeout = 0.2 })
  local t0 = seda.now()
  local ok, err = bus:publish("s", "late", { headers = h })
  local dt = seda.now() - t0
  T.eq(ok, false, "result")
  T.eq(err, "timeout", "reason")
  T.ok(dt >= 0.15, string.format("waited ~0.2s (%.3fs)", dt))
  T.ok(dt < 10, string.format("bounded (%.3fs)", dt))
  T.open(h.gate)
  T.idle(bus, 10)
  bus:shutdown(5)
end)

T.test("C1 block: a blocked producer is never refused once the gate opens", function()
  local bus, h = setup("block", "bpp")
  -- The producer runs on the other worker thread; each seda.publish blocks
  -- (up to hop_timeout = 10 s) until the gated stage has room.
  bus:stage{ name = "producer", concurrency = 1, handler = function(env)
    local tag = env.headers.tag
    for i = 1, 3 do
      local ok, err = seda.publish("s", "p" .. i, { headers = { gate = env.headers.gate, tag = tag } })
      seda.shared:set(tag .. ".res." .. i, ok and "true" or tostring(err))
    end
  end }
  T.eq(bus:publish("producer", nil, { headers = h }), true, "start producer")
  -- the producer is now blocked on the full queue
  T.wait_until(function() return bus:stats("producer").in_flight == 1 end, 10, "producer running")
  T.eq(seda.shared:get("bpp.res.1"), nil, "first blocked publish has not returned yet")
  T.eq(bus:stats("s").depth, CAP, "still full")
  T.open(h.gate)
  T.wait_until(function() return seda.shared:get("bpp.res.3") ~= nil end, 15, "producer done")
  for i = 1, 3 do
    T.eq(seda.shared:get("bpp.res." .. i), "true", "blocked publish " .. i .. " accepted")
  end
  T.idle(bus, 10)
  T.eq(seda.shared:get("bpp.handled"), 1 + CAP + 3, "all delivered")
  T.eq(seda.shared:get("bpp.dup"), nil, "no duplicates")
  T.eq(bus:stats("s").dropped, 0, "nothing dropped")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("C1 reject: returns false, full at once; dropped counts refusals", function()
  local bus, h = setup("reject", "bpr")
  for i = 1, 3 do
    local ok, err = bus:publish("s", "r" .. i, { headers = h, timeout = 5 })
    T.eq(ok, false, "refused " .. i)
    T.eq(err, "full", "reason " .. i)
  end
  local s = bus:stats("s")
  T.eq(s.dropped, 3, "dropped == refusals")
  T.eq(s.depth, CAP, "depth unchanged")
  T.open(h.gate)
  T.idle(bus, 10)
  T.eq(seda.shared:get("bpr.handled"), 1 + CAP, "held + queued delivered")
  for i = 1, 3 do T.eq(got("bpr", "r" .. i), nil, "refused r" .. i .. " never delivered") end
  local st = T.accounting(bus)
  T.eq(st.accepted, 1 + CAP, "refusals are not accepted")
  T.eq(bus:stats("s").dropped, 3, "dropped exact after drain")
  bus:shutdown(5)
end)

T.test("C1 a slow handler: the stage holds capacity plus what is in the handler (default batch)", function()
  -- Three envelopes arrive together while the handler's time is unknown;
  -- the drain task must not take them all out of the queue (a batch it
  -- would hold behind the first), or the stage would admit three more.
  local bus = T.bus{ workers = 2 }
  local gate = T.gate("bps.gate")
  local h = { gate = gate, tag = "bps" }
  bus:stage{ name = "s", capacity = 3, concurrency = 1, policy = "reject", handler = gated }
  T.eq(bus:publish_many("s", { "a", "b", "c" }, { headers = h }), 3, "three at once")
  T.wait_until(function() return bus:stats("s").in_flight >= 1 end, 10, "one in the handler")
  local accepted = 3
  for i = 1, 10 do
    local ok, err = bus:publish("s", "x" .. i, { headers = h })
    if not ok then T.eq(err, "full", "reason"); break end
    accepted = accepted + 1
  end
  local s = bus:stats("s")
  T.eq(accepted, 3 + 1, "capacity + the one in the handler")
  T.eq(s.in_flight, 1, "in flight")
  T.eq(s.depth, 3, "depth")
  T.le(s.in_flight, s.concurrency, "in_flight <= concurrency")
  T.open(gate)
  T.idle(bus, 10)
  T.eq(seda.shared:get("bps.handled"), accepted, "every accepted one delivered")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("a fast handler under a burst: in_flight never above concurrency", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", capacity = 4096, concurrency = 2, handler = function(env) end }
  local worst = 0
  for round = 1, 20 do
    local burst = {}
    for i = 1, 2000 do burst[i] = i end
    bus:publish_many("s", burst)
    for k = 1, 50 do
      local s = bus:stats("s")
      if s.in_flight > worst then worst = s.in_flight end
    end
  end
  T.idle(bus, 20)
  T.le(worst, 2, "in_flight")
  T.eq(bus:stats("s").delivered, 40000, "delivered")
  bus:shutdown(5)
end)

T.test("C1 a slow handler on a busy stage: in_flight never above concurrency", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", capacity = 64, concurrency = 1, handler = function(env)
    local d = seda.now() + 0.005
    while seda.now() < d do end
  end }
  for i = 1, 20 do T.eq(bus:publish("s", i), true, "publish " .. i) end
  local seen = 0
  T.wait_until(function()
    local s = bus:stats("s")
    T.le(s.in_flight, 1, "in_flight")
    seen = math.max(seen, s.delivered)
    return s.delivered == 20
  end, 20, "all delivered")
  T.idle(bus, 10)
  bus:shutdown(5)
end)

T.test("C1 drop_newest: returns false, dropped; offer never delivered", function()
  local bus, h = setup("drop_newest", "bpn")
  for i = 1, 5 do
    local ok, err = bus:publish("s", "n" .. i, { headers = h })
    T.eq(ok, false, "discarded " .. i)
    T.eq(err, "dropped", "reason " .. i)
  end
  T.eq(bus:stats("s").dropped, 5, "dropped == discarded offers")
  T.eq(bus:stats("s").depth, CAP, "queue unchanged")
  T.open(h.gate)
  T.idle(bus, 10)
  T.eq(seda.shared:get("bpn.handled"), 1 + CAP, "held + queued delivered")
  for i = 1, CAP do T.eq(got("bpn", "q" .. i), 1, "queued q" .. i .. " delivered") end
  for i = 1, 5 do T.eq(got("bpn", "n" .. i), nil, "n" .. i .. " never delivered") end
  T.eq(bus:stats("s").dropped, 5, "dropped exact")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("C1 drop_oldest: always true, depth <= capacity, evicted never delivered", function()
  local bus, h = setup("drop_oldest", "bpo")
  local completed = {}
  for i = 1, 10 do
    local ok, err = bus:publish("s", "o" .. i, { headers = h, on_complete = function(env)
      completed[env.payload] = true
    end })
    T.eq(ok, true, "publish o" .. i .. " (" .. tostring(err) .. ")")
    T.le(bus:stats("s").depth, CAP, "depth after o" .. i)
  end
  -- queue was q1..q4; ten more evicted q1..q4 and o1..o6
  T.eq(bus:stats("s").dropped, 10, "dropped == evictions")
  T.open(h.gate)
  T.idle(bus, 10)
  T.eq(seda.shared:get("bpo.handled"), 1 + CAP, "held + survivors delivered")
  for i = 1, CAP do T.eq(got("bpo", "q" .. i), nil, "evicted q" .. i .. " never delivered") end
  for i = 1, 6 do
    T.eq(got("bpo", "o" .. i), nil, "evicted o" .. i .. " never delivered")
    T.eq(completed["o" .. i], nil, "evicted o" .. i .. " never completed")
  end
  for i = 7, 10 do
    T.eq(got("bpo", "o" .. i), 1, "survivor o" .. i .. " delivered once")
    T.eq(completed["o" .. i], true, "survivor o" .. i .. " completed")
  end
  local st = T.accounting(bus)
  T.eq(st.dropped, 10, "bus dropped counts evictions")
  T.eq(st.completed, 1 + CAP, "bus completed")
  bus:shutdown(5)
end)

T.done()
