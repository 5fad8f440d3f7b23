-- tests/lua/durable/child.lua -- the child processes of test_durable.lua.
--
--   seda-lua child.lua MODE DATA_DIR [args...]
--
-- Every mode opens a bus on DATA_DIR (the journal), does one thing and
-- prints what the parent checks on stdout (line-buffered; "ready" once the
-- bus and its durable stages exist, i.e. after replay).  Worker states do
-- not see `arg`: paths reach the handlers through seda.shared.  Handlers log
-- with one write(2) per line to a file opened in append mode, so lines from
-- concurrent workers and processes never interleave.
local seda = require "seda"

io.stdout:setvbuf("line")
local mode, dir = arg[1], arg[2]
assert(mode and dir, "usage: child.lua MODE DATA_DIR ...")

local function say(...)
  io.stdout:write(table.concat({ ... }, " "), "\n")
end

-- ---- the 3-stage pipeline: s1 -> s2 -> s3, dead letters to dlq ----
--
-- The handler of every stage writes "h STAGE ID" when it starts and, at the
-- end of an itinerary (s3, or dlq), "fin STAGE ID" when it is done.  s2
-- nacks ids whose number is a multiple of 50 (max_attempts 1: a dead
-- letter).  Each handler spins a little so the stages lag behind publish.
local PIPE_HANDLER = function(env)
  if not LOGF then
    LOGF = {}
    local f = assert(io.open(seda.shared:get("log"), "a"))
    f:setvbuf("full", 65536)
    LOGF.log = f
  end
  local f = LOGF.log
  f:write("h ", env.to, " ", env.id, "\n")
  f:flush()
  local spin = seda.shared:get("spin") or 0
  if spin > 0 then
    local d = seda.now() + math.random() * spin
    while seda.now() < d do end
  end
  if env.to == "s2" and tonumber(env.id:match("(%d+)$")) % 50 == 0 then
    return false
  end
  if env.to == "s3" or env.to == "dlq" then
    f:write("fin ", env.to, " ", env.id, "\n")
    f:flush()
  end
end

local function pipeline(sync)
  -- hold_warn off: on a loaded machine a handler descheduled for 0.1 s
  -- is warned about, and the crash test wants its children's stderr to
  -- hold errors only.
  local bus = seda.bus{ data_dir = dir, workers = 4, batch = 8,
                        dead_letter = "dlq", sync = sync, hold_warn = false }
  -- Destinations first: a replayed envelope must find its next stage.
  bus:stage{ name = "dlq", durable = "at_least_once", concurrency = 1,
             handler = PIPE_HANDLER }
  for _, s in ipairs({ "s3", "s2", "s1" }) do
    bus:stage{ name = s, durable = "at_least_once", concurrency = 2,
               capacity = 64, handler = PIPE_HANDLER }
  end
  return bus
end

if mode == "pipe" then
  -- pipe DIR LOG PUBFILE PREFIX SYNC: publish PREFIX1, PREFIX2, ... until
  -- killed (or 30 s), each id appended to PUBFILE once publish returned
  -- true.
  local log, pubfile, prefix, sync = arg[3], arg[4], arg[5], arg[6]
  seda.shared:set("log", log)
  seda.shared:set("spin", 0.0006)
  local bus = pipeline(sync)
  local pub = assert(io.open(pubfile, "a"))
  say("ready")
  local deadline = seda.now() + 30
  local i = 0
  while seda.now() < deadline do
    i = i + 1
    local id = prefix .. i
    local ok, err = bus:publish("s1", "payload " .. i,
                                { id = id, slip = { "s2", "s3" } })
    if ok then
      pub:write(id, "\n")
      pub:flush()
    else
      say("refused", id, tostring(err))
    end
  end
  pub:close()
  bus:wait(30)
  bus:shutdown(5)
  say("finished")

elseif mode == "recover" then
  -- recover DIR LOG SYNC: replay, wait until idle.
  seda.shared:set("log", arg[3])
  seda.shared:set("spin", 0.0002)
  local bus = pipeline(arg[4])
  say("ready")
  local idle = bus:wait(60)
  say(idle == true and "idle" or "not idle")
  bus:shutdown(5)

elseif mode == "dedup" then
  -- dedup DIR ID...: publish each id to the exactly_once stage "e" and
  -- print "ID true" or "ID false REASON"; then wait until handled.
  local bus = seda.bus{ data_dir = dir, workers = 2 }
  bus:stage{ name = "e", durable = "exactly_once", dedup_window = 1000,
             handler = function(env) seda.shared:incr("handled", 1) end }
  say("ready")
  for k = 3, #arg do
    local ok, err = bus:publish("e", "x", { id = arg[k] })
    say(arg[k], tostring(ok), tostring(err))
  end
  bus:wait(10)
  say("handled", tostring(seda.shared:get("handled") or 0))
  bus:shutdown(5)

elseif mode == "fill" then
  -- fill DIR N: publish p1..pN (ids q1..qN) to the durable stage "q" that
  -- has no consumer (a pull stage nobody receives from), then shut down:
  -- shutdown(0) sweeps the queue, the rows stay.
  local bus = seda.bus{ data_dir = dir, workers = 2 }
  bus:stage{ name = "q", durable = "at_least_once", pull = true,
             capacity = 100000 }
  local n = tonumber(arg[3])
  local okn = 0
  for i = 1, n do
    if bus:publish("q", "p" .. i, { id = "q" .. i }) then okn = okn + 1 end
  end
  say("published", okn)
  bus:shutdown(0)

elseif mode == "order" then
  -- order DIR LOG M: create "q" with a handler (concurrency 1), which
  -- replays what fill left; then publish M more (n1..nM).  The handler
  -- logs payloads in the order it sees them.
  seda.shared:set("log", arg[3])
  local bus = seda.bus{ data_dir = dir, workers = 4 }
  bus:stage{ name = "q", durable = "at_least_once", concurrency = 1,
             capacity = 100000,
             handler = function(env)
               LOGF = LOGF or assert(io.open(seda.shared:get("log"), "a"))
               LOGF:write(tostring(env.payload), "\n")
               LOGF:flush()
             end }
  say("ready")
  for i = 1, tonumber(arg[4]) do
    assert(bus:publish("q", "n" .. i, { id = "n" .. i }))
  end
  say(bus:wait(30) == true and "idle" or "not idle")
  bus:shutdown(5)

elseif mode == "dlq_fill" then
  -- dlq_fill DIR N: "work" always raises "boom <id>" (max_attempts 2):
  -- w1..wN become
  -- dead letters in the durable DLQ "dlq" (a pull stage nobody receives
  -- from, so they stay).  One envelope also waits in "held" (not a dead
  -- letter; purge must keep it).
  local bus = seda.bus{ data_dir = dir, workers = 2, dead_letter = "dlq" }
  bus:stage{ name = "dlq", durable = "at_least_once", pull = true }
  bus:stage{ name = "held", durable = "at_least_once", pull = true }
  bus:stage{ name = "work", durable = "at_least_once", max_attempts = 2,
             handler = function(env) error("boom " .. env.id, 0) end }
  local n = tonumber(arg[3])
  assert(bus:publish("held", "keep me", { id = "h1" }))
  for i = 1, n do
    assert(bus:publish("work", i % 2 == 0 and { n = i } or ("payload\t" .. i),
                       { id = "w" .. i, headers = { tag = "t" .. i } }))
  end
  local deadline = seda.now() + 20
  while bus:stats().dead_lettered < n and seda.now() < deadline do
    bus:poll()
  end
  say("dead_lettered", bus:stats().dead_lettered)
  bus:shutdown(0)

elseif mode == "dlq_handled" then
  -- dlq_handled DIR N: "work" always nacks; the durable DLQ "dlq" has a
  -- handler that acks each dead letter (w1..wN, Lua table payloads).
  -- Waits until dlq completed N.
  local bus = seda.bus{ data_dir = dir, workers = 2, dead_letter = "dlq" }
  bus:stage{ name = "dlq", durable = "at_least_once",
             handler = function(env) seda.shared:incr("dlq_seen") end }
  bus:stage{ name = "work", durable = "at_least_once",
             handler = function(env) return false end }
  local n = tonumber(arg[3])
  for i = 1, n do
    assert(bus:publish("work", { n = i, tags = { "a", "b" } },
                       { id = "w" .. i }))
  end
  local deadline = seda.now() + 20
  while bus:stats("dlq").delivered < n and seda.now() < deadline do
    bus:poll()
  end
  assert(bus:wait(10))
  say("dlq delivered", bus:stats("dlq").delivered, "seen",
      seda.shared:get("dlq_seen"))
  bus:shutdown(5)

elseif mode == "dlq_again" then
  -- dlq_again DIR: declare the same durable DLQ with its handler again;
  -- what would it be handed?  (Done dead letters must not come back.)
  local bus = seda.bus{ data_dir = dir, workers = 1, dead_letter = "dlq" }
  bus:stage{ name = "dlq", durable = "at_least_once",
             handler = function(env) seda.shared:incr("dlq_again") end }
  local s = bus:stats("dlq")
  say("dlq depth", s.depth, "enqueued", s.enqueued)
  assert(bus:wait(10))
  say("handled", seda.shared:get("dlq_again") or 0)
  bus:shutdown(5)

elseif mode == "dlq_recover" then
  -- dlq_recover DIR LOG N: "work" now succeeds and logs "ID TAG
  -- DEADREASON ATTEMPTS TYPE"; wait until it completed N; dlq and held stay
  -- consumer-less.
  seda.shared:set("log", arg[3])
  local bus = seda.bus{ data_dir = dir, workers = 2, dead_letter = "dlq" }
  bus:stage{ name = "dlq", durable = "at_least_once", pull = true }
  bus:stage{ name = "held", durable = "at_least_once", pull = true }
  bus:stage{ name = "work", durable = "at_least_once",
             handler = function(env)
               LOGF = LOGF or assert(io.open(seda.shared:get("log"), "a"))
               LOGF:write(env.id, " ", tostring(env.headers.tag), " ",
                          tostring(env.headers["x-dead-reason"]), " ",
                          env.attempts, " ", type(env.payload), "\n")
               LOGF:flush()
             end }
  local want = tonumber(arg[4])
  local deadline = seda.now() + 20
  repeat
    bus:poll()
    local s = bus:stats("work")
  until (s.completed >= want and s.depth == 0 and s.in_flight == 0)
        or seda.now() > deadline
  say("work completed", bus:stats("work").completed)
  say("dlq depth", bus:stats("dlq").depth, "held depth",
      bus:stats("held").depth)
  bus:shutdown(0)

elseif mode == "hold" then
  -- hold DIR STOPFILE: keep the journal open until STOPFILE exists (20 s
  -- at most).
  local bus = seda.bus{ data_dir = dir, workers = 1 }
  say("ready")
  local deadline = seda.now() + 20
  while seda.now() < deadline do
    local f = io.open(arg[3])
    if f then f:close() break end
    os.execute("sleep 0.02")
  end
  bus:shutdown(1)
  say("released")

elseif mode == "diskfill" then
  -- diskfill DIR IDSFILE SIZE: publish SIZE-byte payloads (ids d1, d2, ...)
  -- to a consumer-less durable stage until publish refuses; record every
  -- accepted id in IDSFILE (outside DIR) and print the refusal.
  local bus = seda.bus{ data_dir = dir, workers = 1 }
  bus:stage{ name = "q", durable = "at_least_once", pull = true,
             capacity = 1000000 }
  local ids = assert(io.open(arg[3], "w"))
  local size = tonumber(arg[4])
  local deadline = seda.now() + 30
  local i, refusal = 0, nil
  while seda.now() < deadline do
    i = i + 1
    local payload = string.format("%08d", i) .. string.rep("x", size - 8)
    local ok, err = bus:publish("q", payload, { id = "d" .. i })
    if not ok then refusal = tostring(ok) .. " " .. tostring(err) break end
    ids:write("d", i, "\n")
    ids:flush()
  end
  ids:close()
  say("accepted", i - 1)
  say("refused", refusal or "never")
  -- A second publish after the failure is refused too or accepted; either
  -- way the bus must stay usable and not crash.
  local ok2, err2 = bus:publish("q", "small", { id = "after" })
  say("after", tostring(ok2), tostring(err2))
  bus:shutdown(0)

elseif mode == "diskcheck" then
  -- diskcheck DIR LOG: replay "q" into a handler that logs ids in order.
  seda.shared:set("log", arg[3])
  local bus = seda.bus{ data_dir = dir, workers = 2 }
  bus:stage{ name = "q", durable = "at_least_once", concurrency = 1,
             capacity = 1000000,
             handler = function(env)
               LOGF = LOGF or assert(io.open(seda.shared:get("log"), "a"))
               LOGF:write(env.id, "\n")
               LOGF:flush()
             end }
  say("ready")
  say(bus:wait(30) == true and "idle" or "not idle")
  bus:shutdown(5)

elseif mode == "grouppub" or mode == "grouprec" then
  -- grouppub DIR LOG PUBLOG PREFIX: the main state publishes PREFIX1,
  -- PREFIX2, ... into "src" (in memory) until killed (or 30 s); each of
  -- src's 64 concurrent handlers (2 workers) publishes its payload into
  -- the durable stage "d" (sync full: the publishes meet in group
  -- commits) and, once that returned true, appends the id to PUBLOG.
  -- grouprec DIR LOG: replay "d" and run until idle.  d's handler
  -- logs "fin ID" to LOG.  One write(2) per line.
  seda.shared:set("log", arg[3])
  local bus = seda.bus{ data_dir = dir, workers = 2, sync = "full" }
  bus:stage{ name = "d", durable = "at_least_once", concurrency = 2,
             capacity = 1000000, handler = function(env)
               if not DLOG then
                 DLOG = assert(io.open(seda.shared:get("log"), "a"))
                 DLOG:setvbuf("full", 4096)
               end
               DLOG:write("fin " .. env.payload .. "\n")
               DLOG:flush()
             end }
  if mode == "grouprec" then
    say("ready")
    say(bus:wait(60) == true and "idle" or "not idle")
    bus:shutdown(5)
    os.exit(0)
  end
  seda.shared:set("publog", arg[4])
  bus:stage{ name = "src", concurrency = 64, capacity = 256, policy = "block",
             handler = function(env)
               if seda.publish("d", env.payload) then
                 if not PLOG then
                   PLOG = assert(io.open(seda.shared:get("publog"), "a"))
                   PLOG:setvbuf("full", 4096)
                 end
                 PLOG:write(env.payload .. "\n")
                 PLOG:flush()
               end
             end }
  say("ready")
  local prefix = arg[5]
  local deadline = seda.now() + 30
  local i = 0
  while seda.now() < deadline do
    i = i + 1
    bus:publish("src", prefix .. i)
  end
  bus:wait(30)
  bus:shutdown(5)
  say("finished")

elseif mode == "dcount" then
  -- dcount DIR: replay the durable stage "d" (test_durable_group.lua)
  -- and print "PAYLOAD COUNT" per payload (trailing z padding cut), then
  -- "total N".
  local bus = seda.bus{ data_dir = dir, workers = 2 }
  bus:stage{ name = "d", durable = "at_least_once", concurrency = 4,
             capacity = 1000000, handler = function(env)
               seda.shared:incr("p:" .. (tostring(env.payload):gsub("z+$", "")), 1)
               seda.shared:incr("total", 1)
             end }
  say(bus:wait(60) == true and "idle" or "not idle")
  for _, k in ipairs(seda.shared:keys()) do
    if k:sub(1, 2) == "p:" then say(k:sub(3), seda.shared:get(k)) end
  end
  say("total", seda.shared:get("total") or 0)
  bus:shutdown(5)

else
  error("child.lua: unknown mode " .. tostring(mode))
end
