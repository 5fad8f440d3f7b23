-- Handlers that publish never stall the pool (SPEC §9: managed blocking),
-- and one nack rule (SPEC §3) as a Lua user sees them.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

-- src fans `fan` envelopes per source into sink; sink records each id.
local function fanout(workers, sources, fan, cap)
  local key = T.uniq("fan")
  local bus = T.bus{ workers = workers }
  bus:stage{ name = "sink", capacity = cap, handler = function(env)
    local n = seda.shared:incr(env.headers.k .. ".seen." .. env.payload, 1)
    if n > 1 then seda.shared:incr(env.headers.k .. ".dup", 1) end
    seda.shared:incr(env.headers.k .. ".sink", 1)
  end }
  bus:stage{ name = "src", concurrency = 2, handler = function(env)
    local k, base = env.headers.k, env.payload * 100000
    for i = 1, tonumber(env.headers.fan) do
      local ok, err = seda.publish("sink", base + i, { headers = { k = k } })
      if not ok then
        seda.shared:incr(k .. ".refused", 1)
        seda.shared:set(k .. ".err", err)
      end
    end
  end }
  for i = 1, sources do
    assert(bus:publish("src", i, { headers = { k = key, fan = tostring(fan) } }))
  end
  T.idle(bus, 20, "fan-out")
  return bus, key
end

for _, workers in ipairs({ 2, 1 }) do
  T.test("fan-out of 4 x 1000 into capacity 64 with workers = " .. workers ..
         ": 4000 delivered once, no refusal, no dead letter", function()
    local bus, key = fanout(workers, 4, 1000, 64)
    T.eq(seda.shared:get(key .. ".sink"), 4000, "sink deliveries")
    T.eq(seda.shared:get(key .. ".dup"), nil, "no duplicate")
    T.eq(seda.shared:get(key .. ".refused"), nil, "no refusal (" ..
         tostring(seda.shared:get(key .. ".err")) .. ")")
    local s = T.accounting(bus)
    T.eq(s.accepted, 4004, "accepted")
    T.eq(s.completed, 4004, "completed")
    T.eq(s.dead_lettered, 0, "no dead letter")
    T.eq(s.max_loans, 4 * workers, "max_loans defaults to 4 * workers")
    T.ok(s.loans >= 1, "the blocked handlers got loans")
    T.ok(s.loans_peak <= s.max_loans, "never more than max_loans")
    T.wait_until(function() return bus:stats().workers_loaned == 0 end, 10,
                 "loans back to 0 when idle")
  end)
end

T.test("a chain of three fanning-out stages, capacity 8, one worker", function()
  local key = T.uniq("chain")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "sink", capacity = 8, handler = function(env)
    seda.shared:incr(env.headers.k .. ".sink", 1)
  end }
  local function fan(to)
    return load(string.format([[
      return function(env)
        for i = 1, 10 do
          local ok = seda.publish(%q, env.payload * 10 + i, { headers = env.headers })
          if not ok then seda.shared:incr(env.headers.k .. ".refused", 1) end
        end
      end]], to))()
  end
  bus:stage{ name = "c", capacity = 8, handler = fan("sink") }
  bus:stage{ name = "b", capacity = 8, handler = fan("c") }
  bus:stage{ name = "a", capacity = 8, handler = fan("b") }
  for i = 1, 3 do assert(bus:publish("a", i, { headers = { k = key } })) end
  T.idle(bus, 20)
  T.eq(seda.shared:get(key .. ".sink"), 3000, "3 x 10 x 10 x 10 at the sink")
  T.eq(seda.shared:get(key .. ".refused"), nil, "no refusal")
  local s = T.accounting(bus)
  T.eq(s.dead_lettered, 0, "no dead letter")
end)

T.test("a handler waiting on a pull stage fed by another stage (one worker)", function()
  local key = T.uniq("pullw")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "p", pull = true }
  bus:stage{ name = "w", handler = function(env)
    local e, why = seda.receive("p", 5)
    seda.shared:set(env.payload .. ".why", why or "ok")
    if e then
      seda.shared:set(env.payload .. ".got", e.payload)
      e:ack()
    end
  end }
  bus:stage{ name = "feed", handler = function(env)
    assert(seda.publish("p", env.payload .. "-fed"))
  end }
  assert(bus:publish("w", key))
  T.wait_until(function() return bus:stats("w").in_flight == 1 end, 10,
               "the handler waits in seda.receive")
  assert(bus:publish("feed", key))
  T.idle(bus, 10)
  T.eq(seda.shared:get(key .. ".why"), "ok", "received, not timed out")
  T.eq(seda.shared:get(key .. ".got"), key .. "-fed", "the fed envelope")
  T.ok(bus:stats().loans >= 1, "a loan ran the feeder")
end)

T.test("loans never exceed max_loans; a wait without one ends at hop_timeout", function()
  local key = T.uniq("max")
  local bus = T.bus{ workers = 1, max_loans = 1, hop_timeout = 0.2 }
  bus:stage{ name = "sink", capacity = 2, handler = function() end }
  bus:stage{ name = "src", concurrency = 3, handler = function(env)
    for i = 1, 5 do
      local ok, err = seda.publish("sink", i)
      seda.shared:incr(env.payload .. (ok and ".ok" or ".refused"), 1)
      if not ok then seda.shared:set(env.payload .. ".err", err) end
    end
  end }
  for _ = 1, 3 do assert(bus:publish("src", key)) end
  T.idle(bus, 20)
  local s = T.accounting(bus)
  T.eq(s.max_loans, 1, "max_loans")
  T.ok(s.loans_peak <= 1, "peak within max_loans (" .. s.loans_peak .. ")")
  local ok, refused = seda.shared:get(key .. ".ok") or 0, seda.shared:get(key .. ".refused") or 0
  T.eq(ok + refused, 15, "every publish answered")
  if refused > 0 then T.eq(seda.shared:get(key .. ".err"), "timeout", "refused by hop_timeout") end
  T.wait_until(function() return bus:stats().workers_loaned == 0 end, 10, "loans back to 0")
end)

T.test("a self-cycle still ends in hop_refused within hop_timeout", function()
  local key = T.uniq("cyc")
  local gate = T.gate(key .. ".gate")
  local bus = T.bus{ workers = 2, hop_timeout = 0.3, dead_letter = "dlq" }
  bus:stage{ name = "dlq", handler = function(env)
    seda.shared:set(env.headers.k .. ".reason", env.headers["x-dead-reason"])
    seda.shared:set(env.headers.k .. ".t", seda.now())
  end }
  bus:stage{ name = "loop", capacity = 1, handler = function(env)
    if env.payload == 1 and #env.slip == 1 then
      seda.shared:set(env.headers.k .. ".in", true)
      local d = seda.now() + 10
      while not seda.shared:get(env.headers.gate) and seda.now() < d do end
    end
  end }
  assert(bus:publish("loop", 1, { slip = { "loop" }, headers = { k = key, gate = gate } }))
  T.wait_until(function() return seda.shared:get(key .. ".in") end, 10, "first in its handler")
  assert(bus:publish("loop", 2, { headers = { k = key } }))      -- fills it
  local t0 = seda.now()
  T.open(gate)
  T.wait_until(function() return seda.shared:get(key .. ".reason") end, 10, "the dead letter")
  T.eq(seda.shared:get(key .. ".reason"), "hop_refused", "reason")
  T.ok(seda.shared:get(key .. ".t") - t0 >= 0.25, "waited hop_timeout first")
  T.idle(bus, 10)
  T.ok(bus:stats("loop").errors >= 1, "the cycle was reported")
end)

T.test("max_loans option: validated, 0 means none", function()
  T.raises(function() seda.bus{ max_loans = -1 } end, "max_loans must be an integer")
  T.raises(function() seda.bus{ max_loans = 1.5 } end, "max_loans must be an integer")
  T.raises(function() seda.bus{ max_loans = "2" } end, "max_loans must be an integer")
  local bus = T.bus{ workers = 2, max_loans = 0 }
  T.eq(bus:stats().max_loans, 0, "no loans")
  local b2 = T.bus{ workers = 3 }
  T.eq(b2:stats().max_loans, 12, "default")
  T.eq(b2:stats().workers_loaned, 0, "none lent at rest")
  T.eq(b2:stats().loans, 0, "none started")
end)

-- ---- one nack rule ----

local function nack_case(how)
  local key = T.uniq("nr")
  local bus = T.bus{ workers = 2, dead_letter = "dlq" }
  bus:stage{ name = "dlq", handler = function(env)
    local k = env.headers.k
    seda.shared:set(k .. ".dlq.payload", env.payload)
    seda.shared:set(k .. ".dlq.x", env.headers.x)
    seda.shared:set(k .. ".dlq.y", env.headers.y or "-")
  end }
  bus:stage{ name = "s", max_attempts = 2, handler = load(string.format([[
    return function(env)
      local k = env.headers.k
      local n = seda.shared:incr(k .. ".calls", 1)
      seda.shared:set(k .. ".seen." .. n, env.payload .. "|" .. env.headers.x .. "|" ..
                      (env.headers.y or "-") .. "|" .. #env.slip)
      env.payload = "changed"
      env.headers.x = "changed"
      env.headers.y = "added"
      env:forward("nowhere")
      if %q == "error" then error("failing on purpose") end
      return false
    end]], how))() }
  assert(bus:publish("s", "orig", { headers = { k = key, x = "orig" } }))
  T.idle(bus, 10)
  T.eq(seda.shared:get(key .. ".calls"), 2, "two attempts")
  T.eq(seda.shared:get(key .. ".seen.1"), "orig|orig|-|0", "attempt 1")
  T.eq(seda.shared:get(key .. ".seen.2"), "orig|orig|-|0", "the retry sees what attempt 1 was given")
  T.eq(seda.shared:get(key .. ".dlq.payload"), "orig", "dead letter payload")
  T.eq(seda.shared:get(key .. ".dlq.x"), "orig", "dead letter header")
  T.eq(seda.shared:get(key .. ".dlq.y"), "-", "no header added by a nacked attempt")
end

T.test("nack by false discards the attempt's changes (retry and dead letter)", function()
  nack_case("false")
end)

T.test("nack by error discards the attempt's changes (retry and dead letter)", function()
  nack_case("error")
end)

T.done()
