-- Bounded resources: the size of a payload (max_payload, "too_large"),
-- the memory its encoding takes in a handler (memory_limit), and the
-- on_complete results waiting for the main state (max_pending_callbacks).
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

-- Peak resident memory of this process so far, in bytes (VmHWM).
local function peak_rss()
  for l in io.lines("/proc/self/status") do
    local kb = l:match("^VmHWM:%s+(%d+)")
    if kb then return tonumber(kb) * 1024 end
  end
  error("no VmHWM in /proc/self/status")
end

-- A table of 2^depth leaves built from depth + 1 tables: each level holds
-- the one below twice, and the codec copies a table shared twice twice.
local DAG = [[
  local t = { "leaf" }
  for i = 1, DEPTH do t = { t, t } end
  return t
]]

-- ---- max_payload ---------------------------------------------------------

T.test("max_payload: bus:publish refuses a larger payload with too_large, string or table", function()
  local bus = T.bus{ workers = 1, max_payload = 1024 }
  bus:stage{ name = "s", handler = function() end }
  T.eq(select(2, bus:publish("s", string.rep("x", 1025))), "too_large", "string")
  T.eq(bus:publish("s", string.rep("x", 1024)), true, "exactly max_payload")
  local big = {}
  for i = 1, 300 do big[i] = "abcdefgh" end
  local ok, err = bus:publish("s", big)
  T.eq(ok, false, "table refused")
  T.eq(err, "too_large", "reason")
  local n, perr = bus:publish_many("s", { "a", string.rep("y", 2000), "c" })
  T.eq(n, 1, "publish_many stops at the big one")
  T.eq(perr, "too_large", "publish_many reason")
  n, perr = bus:publish_many("s", { "a", big })
  T.eq(n, 1, "publish_many: table")
  T.eq(perr, "too_large", "publish_many: table reason")
  T.idle(bus)
  local s = T.accounting(bus)
  T.eq(s.accepted, 3, "only the small ones accepted")
end)

T.test("max_payload: seda.publish in a handler returns false, too_large; a handler result over it is a nack naming it", function()
  local bus = T.bus{ workers = 2, max_payload = 4096, dead_letter = "dlq" }
  local k = T.uniq("tl")
  seda.shared:set("tl_key", k)
  bus:stage{ name = "dlq", handler = function(env)
    seda.shared:set(seda.shared:get("tl_key") .. ".dead", env.headers["x-dead-reason"])
  end }
  bus:stage{ name = "sink", handler = function() end }
  bus:stage{ name = "pub", handler = function(env)
    local ok, err = seda.publish("sink", string.rep("z", 5000))
    seda.shared:set(seda.shared:get("tl_key") .. ".pub", tostring(ok) .. " " .. tostring(err))
    local t = {}
    for i = 1, 1000 do t[i] = i * 1000 end
    ok, err = seda.publish("sink", t)
    seda.shared:set(seda.shared:get("tl_key") .. ".pubt", tostring(ok) .. " " .. tostring(err))
  end }
  bus:stage{ name = "grow", handler = function(env)
    env.payload = string.rep("w", 5000)        -- the handler's result
  end }
  bus:stage{ name = "growt", handler = function(env)
    local t = {}
    for i = 1, 2000 do t[i] = "item" .. i end
    env.payload = t
  end }
  assert(bus:publish("pub", "go"))
  assert(bus:publish("grow", "small", { slip = { "sink" } }))
  assert(bus:publish("growt", "small", { slip = { "sink" } }))
  T.idle(bus, 20)
  T.eq(seda.shared:get(k .. ".pub"), "false too_large", "seda.publish string")
  T.eq(seda.shared:get(k .. ".pubt"), "false too_large", "seda.publish table")
  local s = T.accounting(bus)
  T.eq(bus:stats("grow").nacked, 1, "grow nacked")
  T.eq(bus:stats("growt").nacked, 1, "growt nacked")
  T.eq(bus:stats("sink").delivered, 0, "nothing too large reached sink")
  T.eq(s.dead_lettered, 2, "both dead-lettered")
  T.eq(seda.shared:get(k .. ".dead"), "max_attempts", "as a nack")
end)

T.test("max_payload: the nack report names too_large", function()
  local base = T.tmpdir()
  T.write(base .. "/p.lua", [[
    local seda = require "seda"
    local bus = seda.bus{ workers = 1, max_payload = 100 }
    bus:stage{ name = "s", handler = function(env) env.payload = string.rep("q", 200) end }
    bus:publish("s", "x")
  ]])
  local p = io.popen("'" .. (arg[-1] or "build/release/seda-lua") .. "' " .. base .. "/p.lua 2>&1")
  local out = p:read("a")
  p:close()
  T.contains(out, "too_large: the payload is 200 bytes, over max_payload", "report")
end)

T.test("max_payload: bad values raise naming the option", function()
  T.raises(function() seda.bus{ max_payload = 0 } end, "zero", "max_payload")
  T.raises(function() seda.bus{ max_payload = "1k" } end, "string", "max_payload")
  T.raises(function() seda.bus{ max_payload = 2^40 } end, "too big", "max_payload")
end)

-- ---- memory_limit bounds encoding ----------------------------------------

T.test("memory_limit bounds a handler's payload encoding (a 2^26-leaf DAG)", function()
  local before = peak_rss()
  -- max_payload is 16 MiB by default too, but the state's own memory
  -- counts against memory_limit, so memory runs out first.
  local bus = T.bus{ workers = 1, memory_limit = 16 * 1024 * 1024 }
  local k = T.uniq("dag")
  seda.shared:set("dag_key", k)
  bus:stage{ name = "sink", handler = function() end }
  bus:stage{ name = "dag", handler = function(env)
    local t = { "leaf" }
    for i = 1, 26 do t = { t, t } end
    local ok, err = seda.publish("sink", t)
    seda.shared:set(seda.shared:get("dag_key") .. ".pub", tostring(ok) .. " " .. tostring(err))
    env.payload = t                           -- the result, encoded at return
  end }
  assert(bus:publish("dag", "go", { slip = { "sink" } }))
  T.idle(bus, 60)
  T.contains(seda.shared:get(k .. ".pub"), "false ", "seda.publish refused")
  T.contains(seda.shared:get(k .. ".pub"), "not enough memory", "because of memory_limit")
  T.eq(bus:stats("dag").nacked, 1, "the result could not be encoded: a nack")
  T.eq(bus:stats("sink").delivered, 0, "nothing reached sink")
  local grew = peak_rss() - before
  T.ok(grew < 200 * 1024 * 1024, string.format("peak RSS grew by %.0f MB", grew / 2^20))
  -- The worker keeps serving.
  assert(bus:publish("sink", "after"))
  T.idle(bus)
  T.eq(bus:stats("sink").delivered, 1, "worker alive")
end)

T.test("max_payload bounds encoding on the main state (a 2^26-leaf DAG)", function()
  local before = peak_rss()
  local bus = T.bus{ workers = 1 }            -- default max_payload: 16 MiB
  bus:stage{ name = "s", handler = function() end }
  local t = load(DAG:gsub("DEPTH", "26"))()
  local ok, err = bus:publish("s", t)
  T.eq(ok, false, "refused")
  T.eq(err, "too_large", "reason")
  local grew = peak_rss() - before
  T.ok(grew < 200 * 1024 * 1024, string.format("peak RSS grew by %.0f MB", grew / 2^20))
end)

-- ---- max_pending_callbacks -----------------------------------------------

-- What waits is at most max_pending_callbacks plus what completes while
-- the main state is elsewhere, which the stage's capacity bounds (256
-- queued + two batches in hand here); never the N published.
T.test("publish runs due on_complete callbacks once more than max_pending_callbacks wait", function()
  local bus = T.bus{ workers = 2, max_pending_callbacks = 100 }
  bus:stage{ name = "s", capacity = 256, concurrency = 2, handler = function() end }
  local ran, peak = 0, 0
  local function cb() ran = ran + 1 end
  local N = 20000
  for i = 1, N do
    assert(bus:publish("s", i, { on_complete = cb }))
    local p = bus:stats().callbacks_pending
    if p > peak then peak = p end
  end
  -- Never polled: publish itself ran them.
  T.ok(ran > 0, "callbacks ran inside publish: " .. ran)
  T.ok(peak <= 100 + 256 + 2 * 32, "pending stayed bounded: peak " .. peak)
  T.idle(bus, 30)
  T.eq(ran, N, "every callback ran once")
  T.eq(bus:stats().callbacks_pending, 0, "none left")
end)

T.test("publish_many bounds them too; callbacks that publish do not recurse without end", function()
  local bus = T.bus{ workers = 2, max_pending_callbacks = 1 }
  bus:stage{ name = "s", capacity = 100000, handler = function() end }
  local ran, depth, deepest = 0, 0, 0
  local cb
  cb = function()
    depth = depth + 1
    if depth > deepest then deepest = depth end
    ran = ran + 1
    if ran <= 2000 then assert(bus:publish("s", ran, { on_complete = cb })) end
    depth = depth - 1
  end
  for i = 1, 50 do
    T.eq(bus:publish_many("s", { 1, 2, 3, 4 }, { on_complete = cb }), 4, "batch")
  end
  T.idle(bus, 30)
  T.eq(ran, 200 + 2000, "all ran")
  T.ok(deepest <= 9, "nesting bounded: " .. deepest)
end)

T.test("max_pending_callbacks: bad values raise naming the option", function()
  T.raises(function() seda.bus{ max_pending_callbacks = 0 } end, "zero", "max_pending_callbacks")
  T.raises(function() seda.bus{ max_pending_callbacks = 1.5 } end, "float", "max_pending_callbacks")
end)

T.done()
