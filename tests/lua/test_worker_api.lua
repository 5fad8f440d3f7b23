-- The API inside a handler (a worker's own Lua state), SPEC §5.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

T.test("seda.publish inside a handler reaches the same bus", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "sink", handler = function(env)
    seda.shared:incr("wa.sink", 1)
    seda.shared:set("wa.sink.hdr", env.headers.from)
    seda.shared:set("wa.sink.sender", env.sender)
  end }
  bus:stage{ name = "src", handler = function(env)
    local ok, err = seda.publish("sink", env.payload * 2,
                                 { headers = { from = "src" }, sender = "src-handler" })
    seda.shared:set("wa.pub", ok)
    local ok2, err2 = seda.publish("missing", 1)
    seda.shared:set("wa.pub_missing", tostring(ok2) .. "," .. tostring(err2))
  end }
  bus:publish("src", 21)
  T.idle(bus, 10)
  T.eq(seda.shared:get("wa.pub"), true, "publish from a handler")
  T.eq(seda.shared:get("wa.sink"), 1, "delivered")
  T.eq(seda.shared:get("wa.sink.hdr"), "src", "headers")
  T.eq(seda.shared:get("wa.sink.sender"), "src-handler", "sender")
  T.eq(seda.shared:get("wa.pub_missing"), "false,no_such_stage", "refusal from a handler")
  local s = T.accounting(bus)
  T.eq(s.accepted, 2, "publish from a handler is a new accepted envelope")
  T.eq(s.completed, 2, "both completed")
  bus:shutdown(5)
end)

T.test("seda.stats() inside a handler", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "other", capacity = 77, handler = function() end }
  bus:stage{ name = "s", handler = function(env)
    local st = seda.stats()
    seda.shared:set("wa.st.workers", st.workers)
    seda.shared:set("wa.st.cap", st.stages.other.capacity)
    seda.shared:set("wa.st.inflight", st.stages.s.in_flight)
    local one = seda.stats("other")
    seda.shared:set("wa.st.one", one and one.capacity)
  end }
  bus:publish("s", 1)
  T.idle(bus, 10)
  T.eq(seda.shared:get("wa.st.workers"), 2, "workers")
  T.eq(seda.shared:get("wa.st.cap"), 77, "other stage visible")
  T.eq(seda.shared:get("wa.st.inflight"), 1, "own stage in flight")
  T.eq(seda.shared:get("wa.st.one"), 77, "stats(name)")
  bus:shutdown(5)
end)

T.test("seda.now() is monotonic, in seconds, in main and workers", function()
  local prev = seda.now()
  T.eq(type(prev), "number", "number")
  for i = 1, 100000 do
    local t = seda.now()
    if t < prev then T.fail("seda.now went backwards") end
    prev = t
  end
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 2, handler = function(env)
    local a = seda.now()
    local b = seda.now()
    if b < a then seda.shared:set("wa.now.back", true) end
    seda.shared:set("wa.now." .. env.payload, a)
  end }
  local t0 = seda.now()
  bus:publish("s", 1)
  T.idle(bus, 10)
  local t1 = seda.now()
  local w = seda.shared:get("wa.now.1")
  T.ok(w >= t0 and w <= t1, "worker clock is the same clock as main")
  T.eq(seda.shared:get("wa.now.back"), nil, "monotonic in workers")
  bus:shutdown(5)
end)

T.test("seda.worker is in 0..workers-1 and every worker serves", function()
  local bus = T.bus{ workers = 3, batch = 1 }
  bus:stage{ name = "s", concurrency = 3, handler = function(env)
    local w = seda.worker
    if math.type(w) ~= "integer" or w < 0 or w > 2 then seda.shared:set("wa.w.bad", tostring(w)) end
    seda.shared:set("wa.w.seen." .. w, true)
    -- hold a little so the pool spreads work (bounded)
    local d = seda.now() + 0.002
    while seda.now() < d do end
  end }
  for i = 1, 300 do bus:publish("s", i) end
  T.idle(bus, 20)
  T.eq(seda.shared:get("wa.w.bad"), nil, "index in range")
  T.eq(type(seda.worker), "nil", "seda.worker is nil on the main state")
  bus:shutdown(5)
end)

T.test("seda is a global in worker states (inline handler through _ENV)", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = load([[
    return function(env) _ENV.seda.shared:set("wa.global", type(seda.publish)) end
  ]])() }
  bus:publish("s", 1)
  T.idle(bus, 10)
  T.eq(seda.shared:get("wa.global"), "function", "global seda")
  bus:shutdown(5)
end)

T.test("a handler file returning {handle=, init=}", function()
  local dir = T.tmpdir()
  local f = T.write(dir .. "/hi.lua", [[
local prefix
return {
  init = function()
    prefix = "init-" .. seda.worker
    seda.shared:incr("wa.init.count", 1)
  end,
  handle = function(env)
    seda.shared:set("wa.hi." .. env.payload, prefix)
    env.payload = prefix
  end,
}
]])
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = f }
  local got
  bus:publish("s", 1, { on_complete = function(env) got = env.payload end })
  T.idle(bus, 10)
  T.ok(got and got:match("^init%-%d$"), "init ran before handle: " .. tostring(got))
  T.ok((seda.shared:get("wa.init.count") or 0) >= 1, "init ran")
  -- Once per worker state that loaded the code (one envelope: one), and
  -- once in each validation state made as a worker's (workers 0 and 1,
  -- and a loan thread's 1024).
  T.le(seda.shared:get("wa.init.count"), 1 + 3, "init at most once per worker state")
  bus:shutdown(5)
  os.remove(f)
  os.remove(dir)
end)

-- Creates tests/lua/<tmp>/rel.lua and gives the handler as "<tmp>/rel.lua",
-- relative to this script's directory (the cwd is the repo root).
local function with_relative_handler(fn)
  local dir = T.dir .. "tmp_handlers_" .. tostring(os.time()) .. "_" .. math.random(1e6)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  local rel = dir:match("[^/]+$") .. "/rel.lua"
  T.write(dir .. "/rel.lua", "return function(env) seda.shared:set('wa.rel', env.payload) end\n")
  local ok, err = pcall(fn, rel)
  os.remove(dir .. "/rel.lua")
  os.remove(dir)
  if not ok then error(err, 0) end
end

T.test("handler file paths resolve relative to the calling script", function()
  with_relative_handler(function(rel)
    local bus = T.bus{ workers = 1 }
    bus:stage{ name = "s", handler = rel }
    bus:publish("s", "relative")
    T.idle(bus, 10)
    T.eq(seda.shared:get("wa.rel"), "relative", "handler ran")
    bus:shutdown(5)
  end)
end)

-- The calling script is still this one when bus.stage is called through
-- pcall (a C function sits between the script and bus:stage).
T.test("relative handler paths also resolve through pcall(bus.stage, ...)", function()
  with_relative_handler(function(rel)
    local bus = T.bus{ workers = 1 }
    local ok, err = pcall(bus.stage, bus, { name = "s", handler = rel })
    T.eq(ok, true, "relative path resolved: " .. tostring(err))
    bus:shutdown(5)
  end)
end)

T.test("handlers = {...}: several consumers, round robin", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handlers = {
    function(env) seda.shared:incr("wa.rr.1", 1) end,
    function(env) seda.shared:incr("wa.rr.2", 1) end,
    function(env) seda.shared:incr("wa.rr.3", 1) end,
  } }
  T.eq(bus:stats("s").consumers, 3, "consumers")
  for i = 1, 30 do bus:publish("s", i) end
  T.idle(bus, 10)
  for c = 1, 3 do T.eq(seda.shared:get("wa.rr." .. c), 10, "consumer " .. c) end
  bus:shutdown(5)
end)

T.test("module-level locals of a handler file are per worker", function()
  local dir = T.tmpdir()
  local f = T.write(dir .. "/count.lua", [[
local count = 0
return function(env)
  count = count + 1
  seda.shared:set("wa.ml." .. seda.worker, count)
  seda.shared:incr("wa.ml.total", 1)
  local d = seda.now() + 0.001
  while seda.now() < d do end
end
]])
  local bus = T.bus{ workers = 2, batch = 1 }
  bus:stage{ name = "s", concurrency = 2, handler = f }
  for i = 1, 200 do bus:publish("s", i) end
  T.idle(bus, 20)
  local a = seda.shared:get("wa.ml.0") or 0
  local b = seda.shared:get("wa.ml.1") or 0
  T.eq(seda.shared:get("wa.ml.total"), 200, "total")
  -- each worker's local counts only its own calls
  T.eq(a + b, 200, "per-worker counters add up (no shared local)")
  bus:shutdown(5)
  os.remove(f)
  os.remove(dir)
end)

T.test("worker states are separate from the main state", function()
  MAIN_ONLY_GLOBAL = "main"
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function(env)
    seda.shared:set("wa.sep", tostring(MAIN_ONLY_GLOBAL))
    WORKER_GLOBAL = "worker"
  end }
  bus:publish("s", 1)
  T.idle(bus, 10)
  T.eq(seda.shared:get("wa.sep"), "nil", "main globals are not visible in workers")
  T.eq(WORKER_GLOBAL, nil, "worker globals are not visible in main")
  MAIN_ONLY_GLOBAL = nil
  bus:shutdown(5)
end)

T.test("concurrency = n runs a burst of n envelopes at once (default batch)", function()
  -- Each handler waits until all three are inside; one taking a batch of
  -- the others would make them time out instead.
  for round = 1, 5 do
    local key = "wa.meet." .. round
    local bus = T.bus{ workers = 3 }
    bus:stage{ name = "s", concurrency = 3, handler = function(env)
      local k = "wa.meet." .. env.payload
      seda.shared:incr(k, 1)
      local deadline = seda.now() + 10
      while (seda.shared:get(k) or 0) < 3 do
        if seda.now() > deadline then error("met alone") end
      end
      seda.shared:incr(k .. ".ok", 1)
    end }
    for _ = 1, 3 do T.eq(bus:publish("s", round), true, "publish") end
    T.idle(bus, 20)
    T.eq(seda.shared:get(key .. ".ok"), 3, "all three handlers met")
    local s = bus:stats("s")
    T.eq(s.nacked, 0, "no handler waited alone")
    bus:shutdown(5)
  end
end)

T.test("a stage that turns slow still spreads its backlog over its permits", function()
  -- Fast envelopes first (the stage learns a short handling time), then
  -- a slow one followed by two that must meet each other: the two may
  -- not wait behind the slow one in the same drain task.
  local bus = T.bus{ workers = 3 }
  bus:stage{ name = "s", concurrency = 3, handler = function(env)
    local p = env.payload
    if p == "slow" then
      local t = seda.now() + 0.3
      while seda.now() < t do end
    elseif p == "meet" then
      seda.shared:incr("wa.turn", 1)
      local deadline = seda.now() + 10
      while seda.shared:get("wa.turn") < 2 do
        if seda.now() > deadline then error("met alone") end
      end
      seda.shared:incr("wa.turn.ok", 1)
    end
  end }
  for _ = 1, 20000 do bus:publish("s", 0) end
  T.idle(bus, 20)
  for _, p in ipairs{ "slow", "meet", "meet" } do
    T.eq(bus:publish("s", p), true, "publish")
  end
  T.idle(bus, 30)
  T.eq(seda.shared:get("wa.turn.ok"), 2, "the two met")
  T.eq(bus:stats("s").nacked, 0, "nothing waited alone")
  bus:shutdown(5)
end)

T.test("env fields inside a handler", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "t", handler = function() end }
  bus:stage{ name = "s", handler = function(env)
    seda.shared:set("wa.env.id", type(env.id))
    seda.shared:set("wa.env.to", env.to)
    seda.shared:set("wa.env.sender", env.sender)
    seda.shared:set("wa.env.attempts", env.attempts)
    seda.shared:set("wa.env.hdr", type(env.headers))
    seda.shared:set("wa.env.slip", table.concat(env.slip, ","))
    seda.shared:set("wa.env.fwd", type(env.forward))
  end }
  bus:publish("s", nil, { slip = { "t" }, sender = "snd" })
  T.idle(bus, 10)
  T.eq(seda.shared:get("wa.env.id"), "string", "id")
  T.eq(seda.shared:get("wa.env.to"), "s", "to")
  T.eq(seda.shared:get("wa.env.sender"), "snd", "sender")
  T.eq(seda.shared:get("wa.env.attempts"), 1, "attempts")
  T.eq(seda.shared:get("wa.env.hdr"), "table", "headers")
  T.eq(seda.shared:get("wa.env.slip"), "t", "slip")
  T.eq(seda.shared:get("wa.env.fwd"), "function", "forward")
  bus:shutdown(5)
end)

T.test("the env is only valid during the call", function()
  local bus = T.bus{ workers = 1 }
  local dir = T.tmpdir()
  local f = T.write(dir .. "/keep.lua", [[
local kept
return function(env)
  if kept then
    -- using an envelope from an earlier call must not crash
    local ok = pcall(function() return kept.payload, kept.id, kept.headers.x end)
    seda.shared:set("wa.kept.used", true)
  end
  kept = env
end
]])
  bus:stage{ name = "s", handler = f }
  bus:publish("s", 1)
  bus:publish("s", 2)
  T.idle(bus, 10)
  T.eq(seda.shared:get("wa.kept.used"), true, "no crash using a stale env")
  bus:shutdown(5)
  os.remove(f)
  os.remove(dir)
end)

T.test("an env kept past its call raises; it never reaches a later envelope", function()
  local dir = T.tmpdir()
  local f = dir .. "/keep.lua"
  T.write(f, [[
    local saved
    return function(env)
      if saved then
        local ok, err = pcall(function() return saved.id end)
        seda.shared:set("keep.read." .. env.payload, tostring(ok) .. " " .. tostring(err))
        ok, err = pcall(function() saved.payload = "changed" end)
        seda.shared:set("keep.write." .. env.payload, tostring(ok) .. " " .. tostring(err))
        ok = pcall(function() return saved:forward("nowhere") end)
        seda.shared:set("keep.fwd." .. env.payload, tostring(ok))
        seda.shared:set("keep.same." .. env.payload, tostring(saved == env))
      end
      saved = env
    end
  ]])
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = f }
  local got = {}
  for i = 1, 3 do
    bus:publish("s", i, { on_complete = function(env) got[#got + 1] = env.payload end })
  end
  T.idle(bus, 10)
  T.deep_eq(got, { 1, 2, 3 }, "every payload unchanged, none dead-lettered")
  for i = 2, 3 do
    T.contains(seda.shared:get("keep.read." .. i), "false", "read raised at " .. i)
    T.contains(seda.shared:get("keep.read." .. i), "envelope used outside its handler", "message")
    T.contains(seda.shared:get("keep.write." .. i), "false", "write raised at " .. i)
    T.eq(seda.shared:get("keep.fwd." .. i), "false", "forward raised at " .. i)
    T.eq(seda.shared:get("keep.same." .. i), "false", "a new env each call")
  end
  T.eq(bus:stats("s").dead_lettered, 0, "nothing dead-lettered")
  bus:shutdown(5)
  os.remove(f)
  os.remove(dir)
end)

T.test("a handler blocked publishing into a full stage never strands it", function()
  -- The producer handler fills a 4-slot block stage and waits for room:
  -- the stage's drain task, queued from that worker, must still run.
  local bus = T.bus{ workers = 4, hop_timeout = 20 }
  bus:stage{ name = "blk", capacity = 4, policy = "block", handler = function(env)
    seda.shared:incr("strand.delivered", 1)
  end }
  bus:stage{ name = "prod", handler = function(env)
    for i = 1, 300 do
      if not seda.publish("blk", i) then seda.shared:incr("strand.refused", 1) end
    end
  end }
  T.spin(0.05) -- let the idle workers go to sleep (the case that stranded)
  bus:publish("prod", 0)
  T.wait_until(function() return seda.shared:get("strand.delivered") == 300 end, 10,
               "every envelope delivered well before hop_timeout")
  T.eq(seda.shared:get("strand.refused"), nil, "none refused")
  T.idle(bus, 10)
  bus:shutdown(5)
end)

T.test("a handler waiting on work it published gets it done by another worker", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "b", handler = function(env) seda.shared:set("rr.done", true) end }
  bus:stage{ name = "a", handler = function(env)
    local t0 = seda.now()
    seda.publish("b", 1)
    while not seda.shared:get("rr.done") and seda.now() < t0 + 5 do end
    seda.shared:set("rr.waited", seda.now() - t0)
  end }
  T.spin(0.05) -- let the idle worker go to sleep
  bus:publish("a", 0)
  T.idle(bus, 10)
  T.eq(seda.shared:get("rr.done"), true, "b ran")
  T.le(seda.shared:get("rr.waited"), 2, "b ran while a waited (not after a gave up)")
  bus:shutdown(5)
end)

T.test("hops into a full stage while every worker routes: the waiting worker drains it", function()
  -- Both workers route acks of s2 into s3 (capacity 1); s3's drain task
  -- waits in the pool queue behind them.  A routing worker that must wait
  -- for room runs that task itself instead of sitting out hop_timeout.
  local bus = T.bus{ workers = 2, hop_timeout = 2 }
  bus:stage{ name = "s2", capacity = 4096, concurrency = 2, handler = function(env) end }
  bus:stage{ name = "s3", capacity = 1, handler = function(env) end }
  local done = 0
  for i = 1, 300 do
    bus:publish("s2", i, { slip = { "s3" }, on_complete = function() done = done + 1 end })
  end
  T.idle(bus, 10)
  T.eq(done, 300, "every itinerary completed")
  T.eq(bus:stats().dead_lettered, 0, "no hop refused")
  bus:shutdown(5)
end)

T.test("stats: worker_memory per worker state in bytes, following bus:workers(n)", function()
  local bus = T.bus{ workers = 2 }
  -- Each worker thread makes its state as it starts.
  T.wait_until(function() return #bus:stats().worker_memory == 2 end, 10,
               "one entry per worker")
  local mem = bus:stats().worker_memory
  for i = 1, 2 do
    T.eq(math.type(mem[i]), "integer", "bytes are an integer")
    T.ok(mem[i] > 0, "a state holds something")
  end
  T.eq(#bus:stats().loan_memory, 0, "no loan states yet")
  -- A handler that keeps 4 MB in its state's module-level table: the
  -- worker that ran it shows it.
  bus:stage{ name = "hog", handler = function(env)
    HOG = HOG or {}
    HOG[#HOG + 1] = string.rep("x", 4 << 20)
  end }
  assert(bus:publish("hog", 1))
  T.idle(bus)
  local after = bus:stats().worker_memory
  local big = 0
  for i = 1, #after do if after[i] >= 4 << 20 then big = big + 1 end end
  T.eq(big, 1, "exactly the worker that ran the handler holds its 4 MB")
  T.eq(bus:workers(3), 3, "grown")
  T.wait_until(function() return #bus:stats().worker_memory == 3 end, 10,
               "a third worker state")
  bus:workers(1)
  T.wait_until(function() return #bus:stats().worker_memory == 1 end, 10,
               "one worker state left")
end)

T.test("stats: stages carry their declaration index", function()
  local bus = T.bus{ workers = 1 }
  for _, n in ipairs({ "zz", "aa", "mm" }) do
    bus:stage{ name = n, handler = function(env) end }
  end
  local st = bus:stats().stages
  T.eq(st.zz.index, 1, "first declared")
  T.eq(st.aa.index, 2, "second")
  T.eq(st.mm.index, 3, "third")
  T.eq(bus:stats("mm").index, 3, "one stage's table too")
end)

T.done()
