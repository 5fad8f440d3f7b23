-- Hardening: headers are bounded in number and size and count against
-- max_payload; an admit rule on the main state is bounded in time and
-- memory; a rule that publishes from within itself is refused once; a
-- receive that holds its worker (every loan in use) is reported and
-- counted; a bus lives until it is shut down.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

T.test("headers: at most 1024, names and values bounded, counted in max_payload, fast to refuse", function()
  local bus = T.bus{ workers = 1, max_payload = 4096 }
  bus:stage{ name = "s", handler = function(env)
    if env.payload == "grow" then env.headers.big = string.rep("x", 70000) end
  end }
  local h = {}
  for i = 1, 65536 do h["k" .. i] = "v" end
  local t0 = seda.now()
  T.deep_eq({ bus:publish("s", 1, { headers = h }) }, { false, "too_large" }, "65 536 headers")
  T.ok(seda.now() - t0 < 2, "refused without quadratic work (" .. (seda.now() - t0) .. " s)")
  T.deep_eq({ bus:publish("s", 1, { headers = { [string.rep("k", 300)] = "v" } }) },
            { false, "too_large" }, "a 300-byte name")
  T.deep_eq({ bus:publish("s", 1, { headers = { k = string.rep("v", 5000) } }) },
            { false, "too_large" }, "headers count against max_payload")
  T.deep_eq({ bus:publish("s", string.rep("p", 4000), { headers = { k = string.rep("v", 200) } }) },
            { false, "too_large" }, "payload and headers together")
  local ok1 = {}
  for i = 1, 100 do ok1["h" .. i] = tostring(i) end
  T.eq(bus:publish("s", 1, { headers = ok1 }), true, "100 small headers pass")
  T.eq(bus:publish("s", "grow"), true, "a handler's oversized header ...")
  T.idle(bus, 10)
  T.eq(bus:stats("s").nacked, 1, "... nacks its call")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("an admit rule on the main state is bounded: a loop and a runaway allocation refuse admit_error", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "r", handler = function() end, admit = function(env, st)
    if env.payload == "loop" then while true do end end
    if env.payload == "alloc" then local t = {} for i = 1, 1e9 do t[i] = { i } end end
    return true
  end }
  local t0 = seda.now()
  T.deep_eq({ bus:publish("r", "loop") }, { false, "admit_error" }, "an endless rule")
  T.ok(seda.now() - t0 < 5, "stopped within its bound")
  local m0 = collectgarbage("count")
  T.deep_eq({ bus:publish("r", "alloc") }, { false, "admit_error" }, "an allocating rule")
  T.ok(collectgarbage("count") - m0 < 256 * 1024, "its memory is given back")
  T.eq(bus:publish("r", "fine"), true, "the next publish is admitted")
  T.eq(bus:stats("r").refused, 2, "counted refused")
  local errs = bus:errors("r")
  T.contains(errs[2].message, "ran past", "the report says it ran too long")
  bus:shutdown(5)
end)

T.test("a rule that publishes into its own stage from within itself is refused once", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "r", handler = function() end, admit = function(env, st)
    if env.payload == 1 then return B_HARD:publish("r", 2) end
    return true
  end }
  B_HARD = bus
  T.deep_eq({ bus:publish("r", 1) }, { false, "admit_error" }, "refused")
  local s = bus:stats("r")
  T.eq(s.refused, 1, "one refusal counted, not two")
  T.contains(bus:errors("r")[1].message, "may not publish", "says why")
  B_HARD = nil
  bus:shutdown(5)
end)

T.test("a receive that holds its worker (every loan in use) is reported and counted", function()
  local bus = T.bus{ workers = 2, max_loans = 1 }
  bus:stage{ name = "empty", pull = true }
  bus:stage{ name = "waiter", concurrency = 4, handler = function(env) seda.receive("empty", 0.3) end }
  for i = 1, 4 do bus:publish("waiter", i) end
  T.idle(bus, 20)
  T.ok(bus:stats().waits_uncovered >= 1, "counted (" .. bus:stats().waits_uncovered .. ")")
  local errs = bus:errors("empty")
  T.ok(#errs >= 1, "reported on the stage received from")
  T.contains(errs[1].message, "loans exhausted", "says why")
  T.contains(errs[1].message, "stage 'waiter'", "names the waiting stage")
  bus:shutdown(5)
end)

T.test("seda.buses(): in declaration order, each also under its name", function()
  -- Twelve names whose hash order differs from their declaration order
  -- (before, the list came in the order of a table's keys).
  local made, names = {}, {}
  for i = 1, 12 do
    names[i] = T.uniq("b" .. (13 - i) * 7)
    made[i] = T.bus{ workers = 1, name = names[i] }
  end
  local mine = {}
  for _, b in ipairs(seda.buses()) do
    for i = 1, 12 do if b == made[i] then mine[#mine + 1] = i end end
  end
  T.deep_eq(mine, { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 }, "declaration order")
  local t = seda.buses()
  for i = 1, 12 do T.eq(t[names[i]], made[i], "by name: " .. names[i]) end
  made[5]:shutdown(5)
  t = seda.buses()
  T.eq(t[names[5]], nil, "a shut down bus is gone by name")
  local order = {}
  for _, b in ipairs(t) do
    for i = 1, 12 do if b == made[i] then order[#order + 1] = i end end
  end
  T.deep_eq(order, { 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12 }, "and from the list; the rest keep their order")
end)

T.test("a bus lives until it is shut down, listed by seda.buses(); then it is gone", function()
  local function count(b)
    for _, x in ipairs(seda.buses()) do if x == b then return true end end
    return false
  end
  local b = seda.bus{ workers = 1 }
  b:stage{ name = "s", handler = function() end }
  local weak = setmetatable({ b }, { __mode = "v" })
  b = nil
  collectgarbage(); collectgarbage()
  T.ok(weak[1] ~= nil, "dropping every reference does not end it: it runs until shut down")
  T.ok(count(weak[1]), "still listed")
  T.eq(weak[1]:publish("s", 1), true, "and works")
  T.eq(weak[1]:shutdown(5), true, "shut down")
  T.ok(not count(weak[1]), "no longer listed")
end)

T.done()
