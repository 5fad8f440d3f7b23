-- What operators see is current and complete: latency over a recent
-- window (p99 falls back after a spike), and dead letters that say why
-- (headers for each reason, the ring each stage keeps, bus:dead_letters,
-- the REPL's dlq()).
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

T.test("p99 covers the recent window: it falls back within one window after a spike", function()
  local bus = T.bus{ workers = 1, stats_window = 1 }
  bus:stage{ name = "s", handler = function(env)
    if env.payload == "slow" then seda.sleep(0.03) end
  end }
  for i = 1, 5 do bus:publish("s", "slow") end
  T.idle(bus, 10)
  local s = bus:stats("s")
  T.ok(s.service_p99 >= 0.02, "the spike shows (" .. s.service_p99 .. " s)")
  T.eq(s.window, 1.0, "the figure says its window")
  T.ok(s.window_count >= 1, "samples in the window")
  -- A window later, only calm traffic is in it.
  local t0 = seda.now()
  T.wait_until(function()
    bus:publish("s", "fast")
    bus:wait(1)
    return bus:stats("s").service_p99 < 0.005
  end, 10, "p99 fell back", bus)
  T.ok(seda.now() - t0 < 5, "within a few windows")
  local s2 = bus:stats("s")
  T.eq(s2.service_count, s2.sojourn_count, "counts since the stage was made")
  T.ok(s2.service_count >= 6, "the spike still counts in the totals")
  T.raises(function() seda.bus{ stats_window = 0 } end, "stats_window must be > 0")
  bus:shutdown(5)
end)

T.test("a dead letter says why: reason, stage, error, attempts, time, missing stage", function()
  local p = T.uniq("dl")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "dlq", handler = function(env)
    local key = env.headers.key
    local n = seda.shared:incr(key .. ".n", 1)
    for _, h in ipairs{ "x-dead-reason", "x-dead-from", "x-dead-error",
                        "x-dead-attempts", "x-dead-at", "x-dead-stage" } do
      seda.shared:set(key .. "." .. env.headers.case .. "." .. h, env.headers[h] or "-")
    end
  end }
  bus:stage{ name = "a", max_attempts = 3, dead_letter = "dlq", handler = function(env)
    if env.headers.case == "err" then error("the database said no\nline two") end
  end }
  bus:stage{ name = "empty", dead_letter = "dlq", capacity = 4 }
  local h = function(case) return { headers = { key = p, case = case } } end
  bus:publish("a", 1, h("err"))
  local o = h("typo"); o.slip = { "enirch" }
  bus:publish("a", 2, o)
  bus:publish("empty", 3, h("nocons"))
  T.idle(bus, 10)
  local g = function(case, name) return seda.shared:get(p .. "." .. case .. "." .. name) end
  T.eq(g("err", "x-dead-reason"), "max_attempts", "reason")
  T.eq(g("err", "x-dead-from"), "a", "from")
  T.contains(g("err", "x-dead-error"), "the database said no", "the error's first line")
  T.ok(not g("err", "x-dead-error"):find("line two", 1, true), "one line only")
  T.eq(g("err", "x-dead-attempts"), "3", "attempts")
  T.ok(g("err", "x-dead-at"):match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$"),
       "RFC 3339 time: " .. g("err", "x-dead-at"))
  T.eq(g("typo", "x-dead-reason"), "no_such_stage", "no_such_stage")
  T.eq(g("typo", "x-dead-stage"), "enirch", "the missing stage's name")
  T.eq(g("nocons", "x-dead-reason"), "no_consumers", "no_consumers")
  T.eq(g("nocons", "x-dead-from"), "empty", "from the stage without consumers")
  local dl = bus:dead_letters("a")
  T.eq(#dl, 2, "stage a keeps its two")
  T.eq(dl[1].reason, "no_such_stage", "newest first")
  T.eq(dl[1].missing, "enirch", "missing stage")
  T.eq(dl[2].payload, 1, "the payload, decoded")
  T.contains(dl[2].error, "the database said no", "error kept")
  T.eq(dl[2].attempts, 3, "attempts kept")
  T.ok(math.abs(dl[2].at - os.time()) < 60, "wall-clock time")
  T.eq(#bus:dead_letters(), 3, "all stages")
  local none, why = bus:dead_letters("nope")
  T.eq(none, nil, "unknown stage")
  T.eq(why, "no_such_stage", "says why")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("the dead-letter ring keeps the last dead_letter_keep, discarded ones too", function()
  local bus = T.bus{ workers = 1, dead_letter_keep = 5 }
  bus:stage{ name = "a", handler = function(env) return false end }
  for i = 1, 12 do bus:publish("a", i) end
  T.idle(bus, 10)
  local dl = bus:dead_letters("a")
  T.eq(#dl, 5, "five kept")
  T.eq(dl[1].payload, 12, "the newest first")
  T.eq(dl[5].payload, 8, "the oldest kept")
  T.eq(bus:stats().dead_lettered, 12, "all counted")
  local off = T.bus{ workers = 1, dead_letter_keep = 0 }
  off:stage{ name = "a", handler = function(env) return false end }
  off:publish("a", 1)
  T.idle(off, 10)
  T.eq(#off:dead_letters("a"), 0, "0 keeps none")
  T.raises(function() seda.bus{ dead_letter_keep = -1 } end, "a bad keep is refused")
  bus:shutdown(5)
  off:shutdown(5)
end)

T.test("payload_preview is readable: a Lua value in constructor syntax, a string quoted, cut with ...", function()
  local bus = T.bus{ workers = 1, dead_letter_keep = 10 }
  bus:stage{ name = "a", handler = function(env) return false end }
  local items = {}
  for i = 1, 60 do items[i] = "item-" .. i end
  bus:publish("a", { qty = 2, items = items })         -- over the 256 kept
  bus:publish("a", ("x\27[2J"):rep(100))               -- a long string
  bus:publish("a", { total = 3.0 })                     -- whole
  T.idle(bus, 10)
  local dl = bus:dead_letters("a")
  T.eq(#dl, 3)
  T.eq(dl[1].payload.total, 3.0, "a whole value is decoded")
  T.eq(dl[1].payload_preview, "{total = 3.0}", "and previewed as the REPL shows it")
  local s = dl[2].payload_preview
  T.eq(dl[2].payload, nil, "a cut string is not the payload")
  T.eq(s:sub(1, 14), '"x\\x1b[2Jx\\x1b', "quoted, its controls escaped: " .. s:sub(1, 20))
  T.eq(s:sub(-3), "...", "ends ... where it was cut")
  T.ok(not s:find("[%c]"), "no control byte in the preview")
  local t = dl[3].payload_preview
  T.eq(dl[3].payload, nil, "a cut value is not the payload")
  T.ok(t:match('^{'), "a table in constructor syntax: " .. t:sub(1, 40))
  T.contains(t, 'items = {"item-1", "item-2"', "its elements as they were")
  T.eq(t:sub(-3), "...", "ends ... where the kept bytes end")
  T.ok(utf8.len(t) and not t:find("[%z\1-\31]"), "valid UTF-8 without controls")
  T.eq(dl[3].payload_size > 256, true, "the size of the whole payload")
  bus:shutdown(5)
end)

T.test("init runs exactly once per state that handles envelopes (check states run the top level only)", function()
  local dir = T.tmpdir()
  local f = T.write(dir .. "/h.lua", [[
seda.shared:incr("init.top", 1)
return { handle = function(env) seda.shared:incr("init.handled", 1) end,
         init = function(i) seda.shared:incr("init.n", 1); seda.shared:incr("init.w" .. i, 1) end }
]])
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 2, handler = f }
  T.eq(seda.shared:get("init.n"), nil, "no init at declaration (checks run the top level only)")
  T.ok((seda.shared:get("init.top") or 0) >= 1, "the top level was checked")
  -- Keep both workers busy at once so each loads the code.
  bus:stage{ name = "gate", concurrency = 2, handler = function(env) seda.sleep(0.05); seda.publish("s", env.payload) end }
  for i = 1, 40 do bus:publish("gate", i) end
  T.idle(bus, 10)
  T.eq(seda.shared:get("init.handled"), 40, "all handled")
  local n = seda.shared:get("init.n")
  T.ok(n == (seda.shared:get("init.w0") or 0) + (seda.shared:get("init.w1") or 0), "counted per worker")
  T.ok(n >= 1 and n <= 2, "once per worker state that handled envelopes (" .. n .. ")")
  T.ok((seda.shared:get("init.w0") or 0) <= 1 and (seda.shared:get("init.w1") or 0) <= 1, "never twice in one state")
  bus:shutdown(5)
  os.remove(f)
  os.remove(dir)
end)

T.test("a live tap shows the envelopes entering a stage as they enter", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "dst", handler = function(env) end }
  bus:stage{ name = "src", handler = function(env)
    seda.sleep(0.2)                        -- the tap opens meanwhile
    for i = 1, 5 do seda.publish("dst", { n = i }, { headers = { who = "src" } }) end
  end }
  bus:publish("src", 1)
  local got, missed = bus:tap("dst", 5, 10)
  T.eq(#got, 5, "five seen")
  T.eq(missed, 0, "none missed")
  T.eq(got[1].payload.n, 1, "the payload, decoded")
  T.eq(got[5].payload.n, 5, "in order")
  T.eq(got[1].headers.who, "src", "headers")
  T.ok(type(got[1].id) == "string" and #got[1].id > 0, "the id")
  T.idle(bus, 10)
  local none = bus:tap("dst", 1, 0.1)
  T.eq(#none, 0, "nothing enters: nothing seen, within the time given")
  local a, why = bus:tap("nope", 1, 0)
  T.eq(a, nil, "unknown stage")
  T.eq(why, "no_such_stage", "says why")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("bus names: busN by default, a given one kept, bad ones refused naming the field", function()
  local a = T.bus{ workers = 1, name = "obs-orders" }
  T.eq(a:stats().name, "obs-orders", "the given name")
  local b = T.bus{ workers = 1 }
  T.ok(b:stats().name:match("^bus%d+$"), "a default name: " .. b:stats().name)
  -- A number is not a name (it used to be turned into the string "12").
  for _, bad in ipairs{ 12, "", "a b", ("x"):rep(65), {}, true } do
    T.raises(function() seda.bus{ workers = 1, name = bad } end,
      "name " .. tostring(bad), "bus: name must be")
  end
  T.raises(function() seda.bus{ workers = 1, name = "obs-orders" } end,
    "a live bus's name", "is taken by a live bus")
  -- A default name skips one a live bus was given: two buses named bus<N>
  -- would make colliding metric series.
  local next_n = tonumber(b:stats().name:match("%d+")) + 1
  local c = T.bus{ workers = 1, name = "bus" .. next_n }
  local d = T.bus{ workers = 1 }
  T.ne(d:stats().name, c:stats().name, "a default name is not a live bus's")
  T.ok(d:stats().name:match("^bus%d+$"), "still busN: " .. d:stats().name)
  a:shutdown(5)
  b:shutdown(5)
  c:shutdown(5)
  d:shutdown(5)
end)

T.test("a handler that holds its worker past hold_warn is counted; seda's own waits are not", function()
  -- Inline handlers capture no upvalues: each spins on its own.
  local bus = T.bus{ workers = 1, hold_warn = 0.2, name = T.uniq("holds") }
  bus:stage{ name = "slow", handler = function()
    local t = seda.now() while seda.now() - t < 0.4 do end end }
  bus:stage{ name = "wrapped", handler = function()
    seda.blocking(function()
      local t = seda.now() while seda.now() - t < 0.4 do end end) end }
  bus:stage{ name = "sleeps", handler = function() seda.sleep(0.4) end }
  bus:stage{ name = "lent", blocking = true, handler = function()
    local t = seda.now() while seda.now() - t < 0.4 do end end }
  bus:stage{ name = "quick", handler = function() end }
  for _, st in ipairs{ "slow", "slow", "wrapped", "sleeps", "lent", "quick" } do
    bus:publish(st, 1)
  end
  T.idle(bus, 30)
  local s = bus:stats()
  T.eq(s.stages.slow.long_holds, 2, "each long call counts")
  T.eq(s.stages.wrapped.long_holds, 0, "seda.blocking's time is seda's wait")
  T.eq(s.stages.sleeps.long_holds, 0, "a suspended call holds no worker")
  T.eq(s.stages.lent.long_holds, 0, "a blocking = true stage lends its worker")
  T.eq(s.stages.quick.long_holds, 0)
  T.eq(s.long_holds, 2, "the bus sums its stages")
  local m = metrics()
  T.contains(m, ('seda_stage_long_holds_total{bus="%s",stage="slow"} 2')
                :format(s.name), "/metrics")
  T.contains(m, ('seda_bus_long_holds_total{bus="%s"} 2'):format(s.name))
  -- hold_warn = false: never counted; bad values refused naming the option.
  local off = T.bus{ workers = 1, hold_warn = false }
  off:stage{ name = "slow", handler = function()
    local t = seda.now() while seda.now() - t < 0.3 do end end }
  off:publish("slow", 1)
  T.idle(off, 30)
  T.eq(off:stats().long_holds, 0, "hold_warn = false")
  for _, bad in ipairs{ 0, -1, 3601, "1", true, 0/0 } do
    T.raises(function() seda.bus{ hold_warn = bad } end, tostring(bad),
             "hold_warn must be a number of seconds in (0, 3600], or false")
  end
end)

T.done()
