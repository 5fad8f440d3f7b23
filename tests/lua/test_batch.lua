-- A stage's batch runs in one protected call (src/lua/lbatch.c): what
-- happens to one envelope never leaks into the next, and every error,
-- nack, retry, timeout and memory error in the middle of a batch leaves
-- the rest of the batch delivered, each with its own result.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

-- A stage whose handler holds the only worker until the key is set, so
-- that what is published meanwhile waits in the queue: the next batches.
local function hold(bus, key)
  T.gate(key)
  bus:stage{ name = "hold", handler = function(env)
    local d = seda.now() + 10
    while not seda.shared:get(env.payload) and seda.now() < d do end
  end }
  T.eq(bus:publish("hold", key), true, "publish hold")
end

-- Warm the stage up: a handling time measured, so the drain task takes
-- full batches (it takes one envelope while the time is unknown).
local function warm(bus, stage, n)
  for _ = 1, n do bus:publish(stage, 0) end
  T.idle(bus, 10)
end

T.test("errors, nacks and retries in the middle of a batch: the rest delivered in order", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "dlq", handler = function(env)
    seda.shared:set("bt1.dlq", (seda.shared:get("bt1.dlq") or "") ..
      env.payload .. ":" .. env.headers["x-dead-reason"] .. " ")
  end }
  bus:stage{ name = "s", max_attempts = 2, dead_letter = "dlq", handler = function(env)
    local p = env.payload
    if p == 0 then return end                         -- warm-up
    seda.shared:set("bt1.seq", (seda.shared:get("bt1.seq") or "") .. p .. "/" .. env.attempts .. " ")
    if p == 5 and env.attempts == 1 then error("five fails once") end
    if p == 7 then return false end                   -- always nacks
    if p == 9 then error("nine always fails") end
    if p == 11 and env.attempts == 1 then
      env.payload = 999                               -- discarded by the error
      env.headers.changed = "yes"
      error("eleven fails once")
    end
    if p == 11 and env.headers.changed ~= nil then
      seda.shared:set("bt1.leak", true)               -- the retry saw a change
    end
  end }
  warm(bus, "s", 64)
  hold(bus, "bt1.gate")
  for i = 1, 16 do T.eq(bus:publish("s", i), true, "publish " .. i) end
  T.open("bt1.gate")
  T.idle(bus, 10)
  T.eq(seda.shared:get("bt1.seq"),
       "1/1 2/1 3/1 4/1 5/1 5/2 6/1 7/1 7/2 8/1 9/1 9/2 10/1 11/1 11/2 12/1 13/1 14/1 15/1 16/1 ",
       "each envelope in order, a retry right after its nack")
  T.eq(seda.shared:get("bt1.dlq"), "7:max_attempts 9:max_attempts ", "dead letters")
  T.eq(seda.shared:get("bt1.leak"), nil, "the retry of 11 saw the delivered headers")
  local s = bus:stats("s")
  T.eq(s.delivered, 64 + 14, "acks")
  T.eq(s.nacked, 6, "nacks: 5 once, 7 twice, 9 twice, 11 once")
  T.eq(s.errors, 4, "errors: 5, 9 twice, 11")
  T.eq(s.dead_lettered, 2, "dead-lettered")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("each envelope of a batch carries its own changes, and only its own", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function(env)
    local p = env.payload
    if type(p) == "table" then
      if p.i % 3 == 0 then
        p.seen = true                                 -- changed in place
      elseif p.i % 3 == 1 then
        env.payload = { i = p.i, replaced = true }    -- assigned
        env.headers.h = "h" .. p.i
      end                                             -- else: read only
    end
  end }
  bus:stage{ name = "end", handler = function(env) end }
  warm(bus, "s", 64)
  local got = {}
  hold(bus, "bt2.gate")
  for i = 1, 24 do
    T.eq(bus:publish("s", { i = i }, { slip = { "end" }, on_complete = function(env)
      got[env.payload.i] = env
    end }), true, "publish " .. i)
  end
  T.open("bt2.gate")
  T.idle(bus, 10)
  for i = 1, 24 do
    local e = got[i]
    T.ok(e, "completed " .. i)
    if i % 3 == 0 then
      T.deep_eq(e.payload, { i = i, seen = true }, "changed in place " .. i)
      T.eq(e.headers.h, nil, "no header " .. i)
    elseif i % 3 == 1 then
      T.deep_eq(e.payload, { i = i, replaced = true }, "assigned " .. i)
      T.eq(e.headers.h, "h" .. i, "header " .. i)
    else
      T.deep_eq(e.payload, { i = i }, "untouched " .. i)
      T.eq(e.headers.h, nil, "no header " .. i)
    end
  end
  bus:shutdown(5)
end)

T.test("a handler_timeout in the middle of a batch stops that one only", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler_timeout = 0.2, handler = function(env)
    local p = env.payload
    if p == 0 then return end
    if p == 3 then while true do end end              -- runaway
    -- within the limit: a few milliseconds of instructions, which the
    -- hook left by the runaway must not stop
    local x = 0
    for k = 1, 200000 do x = x + k end
    seda.shared:set("bt3.seq", (seda.shared:get("bt3.seq") or "") .. p .. " ")
  end }
  warm(bus, "s", 16)
  hold(bus, "bt3.gate")
  for i = 1, 6 do T.eq(bus:publish("s", i), true, "publish " .. i) end
  T.open("bt3.gate")
  T.idle(bus, 10)
  T.eq(seda.shared:get("bt3.seq"), "1 2 4 5 6 ", "the others ran to the end")
  local s = bus:stats("s")
  T.eq(s.nacked, 1, "the runaway nacked")
  T.eq(s.errors, 1, "one error")
  T.eq(s.dead_lettered, 1, "dead-lettered")
  bus:shutdown(5)
end)

T.test("a memory error in the middle of a batch nacks that one only", function()
  local bus = T.bus{ workers = 1, memory_limit = 16 * 1024 * 1024 }
  bus:stage{ name = "s", handler = function(env)
    local p = env.payload
    if p == 0 then return end
    if p == 2 then
      local t = {}
      for k = 1, 1e8 do t[k] = k end                  -- past the limit
    end
    seda.shared:set("bt4.seq", (seda.shared:get("bt4.seq") or "") .. p .. " ")
  end }
  warm(bus, "s", 16)
  hold(bus, "bt4.gate")
  for i = 1, 4 do T.eq(bus:publish("s", i), true, "publish " .. i) end
  T.open("bt4.gate")
  T.idle(bus, 10)
  T.eq(seda.shared:get("bt4.seq"), "1 3 4 ", "the others delivered")
  T.eq(bus:stats("s").nacked, 1, "one nack")
  bus:shutdown(5)
end)

T.done()
