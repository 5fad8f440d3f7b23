-- Handlers that wait on the network hold no worker (suspended calls):
-- many waits at once on two workers, an unrelated stage served meanwhile,
-- the order of seda.sleep, handler_timeout during a wait, reload and
-- shutdown with calls suspended, seda.blocking and blocking = true lending
-- a worker, and the books balanced throughout.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

T.test("200 suspended handlers on 2 workers all complete, an unrelated stage served meanwhile", function()
  local p = T.uniq("s200")
  local bus = T.bus{ workers = 2 }
  seda.shared:set(p .. ".key", p)
  bus:stage{ name = "slow", concurrency = 200, capacity = 1000, handler = function(env)
    local key = seda.shared:get("s200.key")
    seda.sleep(1.5)
    seda.shared:incr(key .. ".slow", 1)
  end }
  bus:stage{ name = "fast", handler = function(env)
    local key = seda.shared:get("s200.key")
    -- Seen from inside: how many slow calls are suspended right now.
    local s = seda.stats("slow")
    local m = seda.shared:get(key .. ".minsusp") or math.huge
    if s.suspended < m then seda.shared:set(key .. ".minsusp", s.suspended) end
    seda.shared:incr(key .. ".fast", 1)
  end }
  seda.shared:set("s200.key", p)
  for i = 1, 200 do T.eq(bus:publish("slow", i), true, "publish slow") end
  T.wait_until(function() return bus:stats("slow").suspended == 200 end, 10,
               "all 200 suspended at once", bus)
  T.eq(bus:stats().suspended, 200, "the bus counts them")
  T.eq(bus:stats("slow").in_flight, 200, "in flight, each holding a permit")
  for i = 1, 20 do bus:publish("fast", i) end
  T.wait_until(function() return seda.shared:get(p .. ".fast") == 20 end, 10,
               "the unrelated stage is served while they wait", bus)
  T.eq(seda.shared:get(p .. ".minsusp"), 200,
       "every fast envelope was handled while all 200 were suspended")
  T.idle(bus, 20)
  T.eq(seda.shared:get(p .. ".slow"), 200, "every suspended call completed")
  T.eq(bus:stats("slow").suspended, 0, "none suspended when idle")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("concurrency bounds the calls in flight, suspended or not", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 5, capacity = 100, handler = function(env)
    seda.sleep(0.05)
  end }
  local peak = 0
  for i = 1, 40 do bus:publish("s", i) end
  T.wait_until(function()
    local s = bus:stats("s")
    if s.suspended > peak then peak = s.suspended end
    return s.delivered == 40
  end, 20, "all 40 handled", bus)
  T.ok(peak >= 1 and peak <= 5, "never more than 5 suspended (saw " .. peak .. ")")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("seda.sleep wakes handlers in the order of their deadlines", function()
  local p = T.uniq("order")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", concurrency = 10, handler = function(env)
    seda.sleep(env.payload.d)
    local k = env.payload.key
    local n = seda.shared:incr(k .. ".n", 1)
    seda.shared:set(k .. "." .. n, env.payload.i)
  end }
  local ds = { 0.30, 0.05, 0.20, 0.10, 0.25 }
  for i, d in ipairs(ds) do bus:publish("s", { d = d, i = i, key = p }) end
  T.idle(bus, 10)
  local got = {}
  for n = 1, #ds do got[n] = seda.shared:get(p .. "." .. n) end
  T.deep_eq(got, { 2, 4, 3, 5, 1 }, "woken shortest first")
  bus:shutdown(5)
end)

T.test("a handler keeps its env across a wait, and changes after it travel on", function()
  local p = T.uniq("view")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "a", concurrency = 20, handler = function(env)
    local before = env.payload.n
    env.headers.before = tostring(before)
    seda.sleep(0.01 * (env.payload.n % 3))
    env.payload = { n = env.payload.n, seen = before }
    env.headers.after = "yes"
  end }
  bus:stage{ name = "b", handler = function(env)
    local key = env.headers.key
    if env.payload.n == env.payload.seen and env.headers.before == tostring(env.payload.n)
       and env.headers.after == "yes" then
      seda.shared:incr(key .. ".ok", 1)
    end
  end }
  for i = 1, 30 do bus:publish("a", { n = i }, { slip = { "b" }, headers = { key = p } }) end
  T.idle(bus, 10)
  T.eq(seda.shared:get(p .. ".ok"), 30, "each call saw its own envelope before and after waiting")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("a wait after the worker changed another envelope's payload: both travel on, nothing kept", function()
  -- One worker: "a" changes its payload (the worker keeps a buffer for
  -- undoing such changes), then "b" waits on the same worker; the
  -- suspended call took that buffer along and never freed it (make asan:
  -- a leak per suspended call).
  local p = T.uniq("keepbuf")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "a", handler = function(env) env.payload = env.payload .. "!" end }
  bus:stage{ name = "b", handler = function(env)
    seda.sleep(0.001)
    seda.shared:set(env.payload, true)
  end }
  for i = 1, 20 do
    T.eq(bus:publish("a", p .. i, { slip = { "b" } }), true, "publish")
  end
  T.idle(bus, 20)
  for i = 1, 20 do
    T.eq(seda.shared:get(p .. i .. "!"), true, "b saw a's change of " .. i)
  end
  T.eq(bus:stats().completed, 20, "every itinerary completed")
  T.accounting(bus)
end)

T.test("a nack after a wait retries, and what the attempt changed is undone", function()
  local p = T.uniq("nack")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", max_attempts = 2, concurrency = 4, handler = function(env)
    local key = env.headers.key
    if env.attempts == 2 then
      if env.headers.mark == nil then seda.shared:incr(key .. ".clean", 1) end
      return true
    end
    env.headers.mark = "dirty"
    seda.sleep(0.01)
    return false
  end }
  for i = 1, 10 do bus:publish("s", i, { headers = { key = p } }) end
  T.idle(bus, 10)
  T.eq(seda.shared:get(p .. ".clean"), 10, "every retry saw the headers as delivered")
  T.eq(bus:stats("s").nacked, 10, "one nack each")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("two suspended calls on one worker: each env reaches its own envelope, the other's raises", function()
  -- Each call owns its context (its env's view): a call that waits
  -- keeps it, the batch's next call gets another, and a call run again
  -- gets its own back, across a second wait too.  The env of a call that
  -- is suspended, reached from the call running now, is not that call's:
  -- it raises, as an env kept past its call does.
  local p = T.uniq("ctx2")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", concurrency = 2, handler = function(env)
    local key = env.headers.key
    local function wait_for(k)
      local t_end = seda.now() + 20
      while not seda.shared:get(k) and seda.now() < t_end do seda.sleep(0.005) end
      return seda.shared:get(k) ~= nil
    end
    local function mine(tag)
      return env.payload.who == tag and env.headers.mark == tag and
             env.headers.other == nil and env.id == env.payload.id_seen
    end
    if seda.shared:incr(key .. ".order", 1) == 1 then
      -- A: its view filled in (a decoded table, headers), then it waits
      -- while B runs on the same worker.
      held_env = env
      env.payload = { who = "A", id_seen = env.id }
      env.headers.mark = "A"
      seda.shared:set(key .. ".a_waits", true)
      if not wait_for(key .. ".b_done") then return false end
      seda.shared:set(key .. ".a1", mine("A"))
      seda.sleep(0.01)                  -- a second wait, in its own context
      seda.shared:set(key .. ".a2", mine("A"))
      env.headers.after = "A"
    else
      if not wait_for(key .. ".a_waits") then return false end
      local ok, err = pcall(function() return held_env.payload end)
      seda.shared:set(key .. ".b_stale", not ok and tostring(err) or "no error")
      env.payload = { who = "B", id_seen = env.id }
      env.headers.mark = "B"
      seda.sleep(0.01)
      seda.shared:set(key .. ".b1", mine("B"))
      seda.shared:set(key .. ".b_done", true)
      env.headers.after = "B"
    end
  end }
  bus:stage{ name = "sink", handler = function(env)
    local key = env.headers.key
    if env.payload.who == env.headers.mark and env.headers.after == env.headers.mark then
      seda.shared:incr(key .. ".sink_ok", 1)
    end
  end }
  for i = 1, 2 do
    T.eq(bus:publish("s", i, { slip = { "sink" }, headers = { key = p } }), true, "publish")
  end
  T.idle(bus, 30)
  T.contains(seda.shared:get(p .. ".b_stale") or "", "envelope used outside its handler",
             "the suspended call's env raises in the other call")
  T.eq(seda.shared:get(p .. ".a1"), true, "A sees its own view after B ran")
  T.eq(seda.shared:get(p .. ".a2"), true, "and after a second wait")
  T.eq(seda.shared:get(p .. ".b1"), true, "B sees its own view after its wait")
  T.eq(seda.shared:get(p .. ".sink_ok"), 2, "each call's changes travel on with its envelope")
  T.eq(bus:stats("s").delivered, 2, "both acked")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("many calls suspended and run again on one worker keep their own views", function()
  -- Contexts are reused from call to call: a context given back by a
  -- call that ended must come to the next call clean (no payload or
  -- headers of the call before).
  local p = T.uniq("ctxmany")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", concurrency = 16, capacity = 1000, handler = function(env)
    local key, n = env.headers.key, env.payload.n
    if env.headers.mark ~= nil then return false end     -- a stale view
    env.headers.mark = tostring(n)
    env.payload = { n = n, t = { n, n * 2 } }
    seda.sleep(0.001 * (n % 5))
    local ok = env.payload.n == n and env.payload.t[2] == n * 2 and
               env.headers.mark == tostring(n)
    seda.sleep(0.001 * (n % 3))
    ok = ok and env.payload.n == n and env.headers.mark == tostring(n)
    if ok then seda.shared:incr(key .. ".ok", 1) end
  end }
  for i = 1, 300 do
    T.eq(bus:publish("s", { n = i }, { headers = { key = p } }), true, "publish")
  end
  T.idle(bus, 60)
  T.eq(seda.shared:get(p .. ".ok"), 300, "every call saw only its own envelope")
  T.eq(bus:stats("s").nacked, 0, "no call saw another's headers")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("handler_timeout covers a wait: the call is nacked with a timeout", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "dlq", handler = function(env)
    seda.shared:set("to.reason", env.headers["x-dead-reason"])
  end }
  bus:stage{ name = "s", handler_timeout = 0.2, dead_letter = "dlq", handler = function(env)
    seda.sleep(30)
    seda.shared:incr("to.ran_on", 1)
  end }
  local t0 = seda.now()
  bus:publish("s", 1)
  T.idle(bus, 10, "the wait was cut short")
  T.ok(seda.now() - t0 < 10, "well before the sleep's 30 s")
  T.eq(seda.shared:get("to.ran_on"), nil, "the handler did not run on past its deadline")
  T.eq(seda.shared:get("to.reason"), "max_attempts", "dead-lettered after its one attempt")
  local errs = bus:errors("s")
  T.contains(errs[1] and errs[1].message or "", "timeout", "the error says timeout")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("a reload while calls are suspended: they finish on the old code, new calls run the new", function()
  local dir = T.tmpdir()
  local f = dir .. "/h.lua"
  T.write(f, [[return function(env) seda.sleep(0.3); seda.shared:incr("rl.old", 1) end]])
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", concurrency = 10, handler = f }
  for i = 1, 5 do bus:publish("s", i) end
  T.wait_until(function() return bus:stats("s").suspended == 5 end, 10, "five suspended", bus)
  T.write(f, [[return function(env) seda.shared:incr("rl.new", 1) end]])
  T.eq(bus:reload("s"), true, "reload")
  for i = 1, 3 do bus:publish("s", i) end
  T.idle(bus, 10)
  T.eq(seda.shared:get("rl.old"), 5, "the suspended calls ended on the old code")
  T.eq(seda.shared:get("rl.new"), 3, "new calls ran the new code")
  T.accounting(bus)
  bus:shutdown(5)
  os.remove(f)
  os.remove(dir)
end)

T.test("shutdown lets suspended calls finish within its timeout", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 50, handler = function(env)
    seda.sleep(0.2)
    seda.shared:incr("sd.done", 1)
  end }
  for i = 1, 50 do bus:publish("s", i) end
  T.wait_until(function() return bus:stats("s").suspended == 50 end, 10, "all suspended", bus)
  T.eq(bus:shutdown(10), true, "drained")
  T.eq(seda.shared:get("sd.done"), 50, "every call finished")
  local s = bus:stats()
  T.eq(s.completed, 50, "completed")
  T.eq(s.in_system, 0, "nothing left")
end)

T.test("shutdown past its timeout drops suspended calls, counted", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 20, handler = function(env)
    seda.sleep(60)
    seda.shared:incr("sdn.ran", 1)
  end }
  for i = 1, 20 do bus:publish("s", i) end
  T.wait_until(function() return bus:stats("s").suspended == 20 end, 10, "all suspended", bus)
  local t0 = seda.now()
  T.eq(bus:shutdown(0.2), false, "not drained")
  T.ok(seda.now() - t0 < 30, "the 60 s waits were cut short")
  local s = bus:stats()
  T.eq(s.dropped, 20, "each suspended call counted dropped")
  T.eq(s.accepted, s.completed + s.dead_lettered + s.dropped + s.in_system, "books balance")
  T.eq(s.in_system, 0, "nothing left in the system")
  T.eq(seda.shared:get("sdn.ran"), nil, "none ran again after the stop")
end)

T.test("seda.blocking lends the worker: an unrelated stage keeps going on one worker", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "gate", handler = function(env)
    -- A blocking call (a C library, LuaSocket) wrapped: the worker is lent.
    local a, b = seda.blocking(function(x, y)
      local t = seda.now() + 0.5
      while seda.now() < t do os.execute("sleep 0.05") end
      return x + y, "r"
    end, 2, 3)
    seda.shared:set("bl.res", tostring(a) .. b)
  end }
  bus:stage{ name = "other", handler = function(env) seda.shared:incr("bl.other", 1) end }
  local loans0 = bus:stats().loans
  bus:publish("gate", 1)
  T.wait_until(function() return bus:stats().workers_loaned >= 1 end, 10, "a loan started", bus)
  for i = 1, 10 do bus:publish("other", i) end
  T.wait_until(function() return seda.shared:get("bl.other") == 10 end, 10,
               "the other stage ran while the only worker blocked", bus)
  T.idle(bus, 10)
  T.eq(seda.shared:get("bl.res"), "5r", "seda.blocking returned fn's results")
  T.ok(bus:stats().loans > loans0, "counted in loans")
  T.raises(function() seda.blocking(function() error("inner") end) end, "an error passes through")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("blocking = true lends the worker for every call of the stage", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "b", blocking = true, handler = function(env)
    local t = seda.now() + 0.3
    while seda.now() < t do os.execute("sleep 0.05") end
    seda.shared:incr("bt.b", 1)
  end }
  bus:stage{ name = "o", handler = function(env) seda.shared:incr("bt.o", 1) end }
  local loans0 = bus:stats().loans
  bus:publish("b", 1)
  T.wait_until(function() return bus:stats().workers_loaned >= 1 end, 10, "a loan started", bus)
  for i = 1, 5 do bus:publish("o", i) end
  T.wait_until(function() return seda.shared:get("bt.o") == 5 end, 10,
               "the other stage ran meanwhile", bus)
  T.idle(bus, 10)
  T.ok(bus:stats().loans > loans0, "counted in loans")
  T.raises(function() bus:stage{ name = "bad", blocking = 1, handler = function() end } end,
           "blocking must be a boolean")
  bus:shutdown(5)
end)

T.test("a coroutine of the handler's own that waits blocks instead (with a loan)", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function(env)
    local co = coroutine.wrap(function() seda.sleep(0.05); return "in" end)
    seda.shared:set("own.r", co())
  end }
  bus:publish("s", 1)
  T.idle(bus, 10)
  T.eq(seda.shared:get("own.r"), "in", "the wait ran inside the handler's coroutine")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("a handler that yields outside a coroutine of its own is nacked", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function(env)
    if env.payload == 1 then coroutine.yield() end
    seda.shared:incr("y.ok", 1)
  end }
  bus:publish("s", 1)
  bus:publish("s", 2)
  T.idle(bus, 10)
  T.eq(seda.shared:get("y.ok"), 1, "the other envelope acked")
  T.eq(bus:stats("s").nacked, 1, "the yield nacked")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("a stage whose calls wait on the network sheds when its queue is slow, at the door too", function()
  -- Each call waits (holding no worker), so the worker time per call is
  -- near zero; shedding must judge the backlog by the calls' whole life.
  local bus = T.bus{ workers = 2 }
  seda.shared:set("wshed.fast", false)
  bus:stage{ name = "net", concurrency = 1, capacity = 100000, policy = "reject",
             shed = { target = 0.01, interval = 0.03 }, handler = function(env)
    if not seda.shared:get("wshed.fast") then seda.sleep(0.02) end
  end }
  bus:stage{ name = "front", handler = function(env) end }
  local why
  local t_end = seda.now() + 20
  while seda.now() < t_end do
    local ok, err = bus:publish("net", 1)
    if not ok then why = err break end
    T.spin(0.002)
  end
  T.eq(why, "shed", "the waiting stage sheds")
  T.deep_eq({ bus:publish("front", 1, { slip = { "net" } }) }, { false, "shed", "net" },
            "a new itinerary through it is refused at the door")
  T.ok(bus:stats("net").shed >= 1, "counted in shed")
  seda.shared:set("wshed.fast", true)
  T.idle(bus, 30)
  T.deep_eq({ bus:publish("net", 1) }, { true }, "accepted again once the queue is good")
  T.idle(bus, 10)
  T.accounting(bus)
  bus:shutdown(5)
end)

T.done()
