-- scripts/soak/pipeline.lua -- the server side of `make soak` (see
-- scripts/soak.sh): a mixed pipeline run with `seda-lua --serve --control
-- SOCK`, driven by an attached client that calls soak.tick() about every
-- 100 ms and reads stats.
--
-- The pipeline: local stages with random nacks and retries, a durable
-- stage (its own data_dir), a pull stage drained by a handler waiting in
-- seda.receive and by the main state, a fan-out stage whose handler
-- publishes into a small stage, a stage with runaway handlers stopped by
-- handler_timeout, and a dead-letter stage.  Every few seconds a handler
-- file is rewritten and reloaded (sometimes with a syntax error, or an
-- init that fails on workers: those reloads must fail and change
-- nothing), a stage is tuned and the pool resized.
--
-- What is checked (soak.tick records failures; soak.finish() reports):
--   * every second: accepted == completed + dead_lettered + dropped +
--     in_system, and nothing ended more often than it was accepted;
--   * every QUIET seconds, a quiet point: stop publishing, wait until idle
--     and compare the bus's counters with a ledger kept apart from them
--     (publishes that returned true, handler-side counts of envelopes
--     that ended at their last stage and of dead letters reaching dlq):
--     any difference is a loss (or a double);
--   * a stall: envelopes in the system and none ending for over 1 s
--     (while ticks kept coming, so the driver was alive);
--   * memory: the resident set at the end against the one just after the
--     warm-up (the first quarter of the run): flat within 10 %.
-- Environment: SOAK_DIR (scratch directory), SOAK_SECONDS (run length),
-- SOAK_RSS_CHECK (0: no memory verdict, for the sanitizer builds).
local seda = require "seda"

local DIR = assert(os.getenv("SOAK_DIR"), "SOAK_DIR not set")
local SECONDS = tonumber(os.getenv("SOAK_SECONDS") or "") or 600
local WARMUP = SECONDS / 4
local QUIET = 15                        -- seconds between quiet points
local MAX_IN_SYSTEM = 3000              -- publishing pauses above this

-- ---- handler files (rewritten by reloads) ---------------------------------

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- Every stage's handler: the common part, then what the stage does.  An
-- envelope whose slip is empty ends here when the handler acks: such
-- acks are counted in seda.shared "soak.end_ok" (the ledger's
-- completions).  The version tag only shows that reloads happen.
local function handler_src(kind, version, extra)
  return string.format([[
local VERSION = %d
local kind = %q
local function finish(env)
  if #env.slip == 0 then seda.shared:incr("soak.end_ok", 1) end
  return true
end
local function handle(env)
  seda.shared:incr("soak.v." .. kind, 0)
  if kind == "ingest" then
    if math.random() < 0.03 then return false end      -- nack, retried
    env.headers.seen = "ingest"
    return finish(env)
  elseif kind == "fanout" then
    local n = math.random(1, 8)
    for i = 1, n do
      local ok = seda.publish("small", { parent = env.id, i = i })
      if ok then seda.shared:incr("soak.fan_ok", 1) end
    end
    return finish(env)
  elseif kind == "small" then
    return finish(env)
  elseif kind == "durable" then
    if math.random() < 0.01 then error("durable hiccup") end
    return finish(env)
  elseif kind == "runaway" then
    if math.random() < 0.005 then while true do end end  -- handler_timeout
    return finish(env)
  elseif kind == "puller" then
    local got = seda.receive("pull", 0.02)
    if got then
      if math.random() < 0.05 then got:nack() else
        local last = #got.slip == 0
        if got:ack() and last then seda.shared:incr("soak.end_ok", 1) end
      end
    end
    return finish(env)
  elseif kind == "dlq" then
    seda.shared:incr("soak.end_dead", 1)
    return true
  end
  return finish(env)
end
return { init = function() %s end, handle = handle }
]], version, kind, extra or "")
end

local KINDS = { "ingest", "fanout", "small", "durable", "runaway", "puller",
                "dlq" }
local version = {}
for _, k in ipairs(KINDS) do
  version[k] = 1
  write(DIR .. "/" .. k .. ".lua", handler_src(k, 1))
end

-- ---- the bus ----------------------------------------------------------------

os.execute("rm -rf '" .. DIR .. "/journal'")
local bus = seda.bus{ workers = 3, dead_letter = "dlq", hop_timeout = 10,
                      data_dir = DIR .. "/journal", sync = "normal",
                      memory_limit = 64 * 1024 * 1024,
                      max_pending_callbacks = 2000 }
local function stage(t) t.handler = DIR .. "/" .. (t.file or t.name) .. ".lua"
  t.file = nil
  return bus:stage(t)
end
stage{ name = "dlq", capacity = 100000, concurrency = 2 }
stage{ name = "ingest", capacity = 512, concurrency = 2, max_attempts = 3 }
stage{ name = "fanout", capacity = 256, concurrency = 2 }
stage{ name = "small", capacity = 8, concurrency = 1 }
stage{ name = "durable", capacity = 512, concurrency = 2, max_attempts = 2,
       durable = "at_least_once" }
stage{ name = "runaway", capacity = 512, concurrency = 2,
       handler_timeout = 0.05 }
stage{ name = "puller", capacity = 64, concurrency = 2 }
bus:stage{ name = "pull", pull = true, capacity = 4096, ack_timeout = 5,
           max_attempts = 3 }

-- ---- the ledger and the checks ------------------------------------------

local S = {
  t0 = seda.now(), ticks = 0, last_tick = nil,
  accepted = 0,               -- publishes from the main state that returned true
  main_end_ok = 0,            -- pull envelopes the main state acked to the end
  cb_ran = 0,                 -- on_complete callbacks run
  failures = {},
  rss = {},                   -- { t =, kb = } every second
  quiet_points = 0, reloads_ok = 0, reloads_refused = 0, tunes = 0,
  rollback = {}, rollbacks = 0,   -- stage -> the version a bad init must
                                  -- take every worker back to
  resizes = 0, driver_gaps = 0, peak_in_system = 0,
  next_second = 1, next_quiet = QUIET, next_reload = 3, next_tune = 5,
  next_resize = 7,
  quiet = false, quiet_since = nil,
  progress_t = seda.now(), progress_ended = 0, longest_stall = 0,
}

local function failf(...)
  local msg = string.format(...)
  if #S.failures < 50 then S.failures[#S.failures + 1] = msg end
  io.stderr:write("soak: FAIL ", msg, "\n")
end

local function rss_kb()
  for l in io.lines("/proc/self/status") do
    local kb = l:match("^VmRSS:%s+(%d+)")
    if kb then return tonumber(kb) end
  end
end

local function ended(s) return s.completed + s.dead_lettered + s.dropped end

local function check_identity(s, where)
  if s.accepted ~= ended(s) + s.in_system then
    failf("%s: accepted %d ~= completed %d + dead_lettered %d + dropped %d + in_system %d",
          where, s.accepted, s.completed, s.dead_lettered, s.dropped, s.in_system)
  end
  if ended(s) > s.accepted then
    failf("%s: %d ended but %d accepted", where, ended(s), s.accepted)
  end
  if s.dropped ~= 0 then
    failf("%s: %d dropped (no stage evicts and nothing was swept)", where, s.dropped)
  end
end

-- The quiet point: the bus is idle; its counters against the ledger.
local function check_ledger(s)
  local fan = seda.shared:get("soak.fan_ok") or 0
  local end_ok = (seda.shared:get("soak.end_ok") or 0) + S.main_end_ok
  local end_dead = seda.shared:get("soak.end_dead") or 0
  if s.in_system ~= 0 then failf("quiet point: in_system %d", s.in_system) end
  if s.accepted ~= S.accepted + fan then
    failf("quiet point: bus accepted %d, ledger %d (main %d + fan-out %d)",
          s.accepted, S.accepted + fan, S.accepted, fan)
  end
  if s.completed ~= end_ok then
    failf("quiet point: bus completed %d, ledger %d", s.completed, end_ok)
  end
  if s.dead_lettered ~= end_dead then
    failf("quiet point: bus dead_lettered %d, dlq received %d",
          s.dead_lettered, end_dead)
  end
  check_identity(s, "quiet point")
end

-- ---- the work of one tick ---------------------------------------------------

local function on_complete() S.cb_ran = S.cb_ran + 1 end

-- No itinerary visits a stage it left (ingest -> durable and durable ->
-- ingest together would be a cycle: two full block stages waiting on each
-- other, which only hop_timeout ends, by design).  None ends at runaway:
-- a handler there that is preempted past handler_timeout after counting
-- its ack is nacked all the same (by design), which the ledger's count
-- of completions at last stages would take for a completion.
local ITINERARIES = {
  { "ingest", { "durable", "runaway", "small" } },
  { "ingest", { "fanout" } },
  { "durable", { "small" } },
  { "runaway", { "small" } },
  { "ingest", { "puller" } },
  { "puller", {} },
}

local function publish_some()
  for _, it in ipairs(ITINERARIES) do
    local n = math.random(4, 16)
    local payloads = {}
    for i = 1, n do
      payloads[i] = (i % 2 == 0) and { n = i, tag = "soak", list = { 1, 2, 3 } }
                                  or ("payload " .. i)
    end
    local opts = { slip = it[2], timeout = 0.05 }
    if math.random() < 0.5 then opts.on_complete = on_complete end
    local got = bus:publish_many(it[1], payloads, opts)
    S.accepted = S.accepted + got
  end
  -- The pull stage: its envelopes end when received and acked.
  local n = bus:publish_many("pull", { "p1", "p2", "p3", "p4" }, { timeout = 0.05 })
  S.accepted = S.accepted + n
end

local function receive_some()
  for _ = 1, 8 do
    local env = bus:receive("pull", 0)
    if not env then break end
    if math.random() < 0.05 then
      env:nack()
    elseif env:ack() then
      S.main_end_ok = S.main_end_ok + 1
    end
  end
end

local function reload_something(now)
  local k = KINDS[math.random(1, #KINDS)]
  local path = DIR .. "/" .. k .. ".lua"
  local r = math.random()
  if r < 0.15 then
    -- A syntax error: refused, old code kept.
    write(path, handler_src(k, version[k] + 1) .. "\nthis is not lua(\n")
    local ok = bus:reload(k)
    if ok then failf("a reload with a syntax error of %s succeeded", k) end
    S.reloads_refused = S.reloads_refused + 1
    write(path, handler_src(k, version[k]))
  elseif r < 0.25 then
    -- An init that fails on workers only: the check (top level only)
    -- passes, so the reload is taken; the first worker that loads it
    -- fails its init and every worker goes back to the version before
    -- (checked in the ticks after: S.rollback), nothing lost.
    write(path, handler_src(k, version[k] + 1,
          "if seda.worker >= 0 then error('no init here') end"))
    local before = bus:stats(k).version
    local ok, err = bus:reload(k)
    if ok then
      S.rollback[k] = { before = before, t = seda.now() }
    else
      failf("a reload whose init fails only on workers was refused: %s",
            tostring(err))
    end
    S.reloads_refused = S.reloads_refused + 1
    write(path, handler_src(k, version[k]))
  else
    version[k] = version[k] + 1
    write(path, handler_src(k, version[k]))
    S.rollback[k] = nil         -- the workers load this one instead
    local ok, err = bus:reload(k)
    if not ok then failf("reload of %s failed: %s", k, tostring(err)) end
    S.reloads_ok = S.reloads_ok + 1
  end
end

local TUNABLE = { "ingest", "fanout", "durable", "runaway", "puller" }

local function tune_something()
  local k = TUNABLE[math.random(1, #TUNABLE)]
  bus:tune(k, { concurrency = math.random(1, 4),
                capacity = ({ 64, 128, 256, 512 })[math.random(1, 4)] })
  S.tunes = S.tunes + 1
end

local soak = {}

-- One tick: publish (unless quiet), receive, poll, and the checks due.
function soak.tick()
  local ok, err = pcall(function()
    local now = seda.now() - S.t0
    S.ticks = S.ticks + 1
    if S.last_tick and now - S.last_tick > 0.5 then
      S.driver_gaps = S.driver_gaps + 1     -- the driver was late: no stall
      S.progress_t = seda.now()             -- judged across this gap
    end
    S.last_tick = now
    local s = bus:stats()
    if s.in_system > S.peak_in_system then S.peak_in_system = s.in_system end
    -- Stall: envelopes in the system, none ending.
    local e = ended(s)
    if e ~= S.progress_ended or s.in_system == 0 then
      S.progress_ended, S.progress_t = e, seda.now()
    else
      local stalled = seda.now() - S.progress_t
      if stalled > S.longest_stall then S.longest_stall = stalled end
      if stalled > 1.0 then
        failf("stall: %d in the system, none ended for %.2fs", s.in_system, stalled)
        S.progress_t = seda.now()
      end
    end
    if S.quiet then
      -- Idle, and the pull stage (which does not keep wait() busy)
      -- empty too.
      if bus:wait(0) and bus:stats().in_system == 0 then
        check_ledger(bus:stats())
        S.quiet_points = S.quiet_points + 1
        S.quiet = false
      elseif seda.now() - S.quiet_since > 30 then
        failf("quiet point: not idle after 30 s (in_system %d)", bus:stats().in_system)
        S.quiet = false
      end
      receive_some()
      return
    end
    -- A reload whose init failed on workers: once the stage handled
    -- something, its version is back where it was (or a later reload
    -- replaced it); 20 s without that is a failure.
    for k, r in pairs(S.rollback) do
      local v = bus:stats(k).version
      if v == r.before then
        S.rollbacks = S.rollbacks + 1
        S.rollback[k] = nil
      elseif seda.now() - r.t > 20 then
        failf("stage %s: a reload whose init fails on workers is still " ..
              "version %d after 20 s (before: %d)", k, v, r.before)
        S.rollback[k] = nil
      end
    end
    if s.in_system < MAX_IN_SYSTEM then publish_some() end
    receive_some()
    bus:poll()
    if now >= S.next_second then
      S.next_second = S.next_second + 1
      check_identity(bus:stats(), string.format("t=%.0fs", now))
      S.rss[#S.rss + 1] = { t = now, kb = rss_kb() }
    end
    if now >= S.next_reload then
      S.next_reload = now + 3
      reload_something(now)
    end
    if now >= S.next_tune then
      S.next_tune = now + 5
      tune_something()
    end
    if now >= S.next_resize then
      S.next_resize = now + 7
      bus:workers(math.random(2, 4))
      S.resizes = S.resizes + 1
    end
    if now >= S.next_quiet then
      S.next_quiet = now + QUIET
      S.quiet, S.quiet_since = true, seda.now()
    end
  end)
  if not ok then failf("tick raised: %s", tostring(err)) end
end

-- Where memory is: the main state's Lua heap, the worker and loan
-- states' (as the bus reports them), and the journal file, in kB.
local function memory_parts(s)
  local states = 0
  for _, b in ipairs(s.worker_memory or {}) do states = states + b end
  for _, b in ipairs(s.loan_memory or {}) do states = states + b end
  local f = io.open(DIR .. "/journal/seda.db", "rb")
  local db = f and f:seek("end") or 0
  if f then f:close() end
  return collectgarbage("count"), states / 1024, db / 1024
end

-- One line of progress (the driver prints it every few seconds).
function soak.line()
  local s = bus:stats()
  local lua, states, db = memory_parts(s)
  return string.format("t=%.0fs accepted=%d completed=%d dead=%d in_system=%d " ..
    "quiet_points=%d reloads=%d/%d refused tunes=%d resizes=%d rss=%dkB " ..
    "(main lua %.0fkB, states %.0fkB, db %.0fkB) callbacks=%d loans=%d failures=%d",
    seda.now() - S.t0, s.accepted, s.completed, s.dead_lettered, s.in_system,
    S.quiet_points, S.reloads_ok, S.reloads_refused, S.tunes, S.resizes,
    rss_kb(), lua, states, db, S.cb_ran, s.loans, #S.failures)
end

local function median(list)
  if #list == 0 then return nil end
  table.sort(list)
  return list[(#list + 1) // 2]
end

-- The end: a last quiet point, the memory check and the verdict.
function soak.finish()
  local ok, err = pcall(function()
    local deadline = seda.now() + 30
    while seda.now() < deadline and not (bus:wait(0.05) and
                                          bus:stats().in_system == 0) do
      receive_some()
    end
    if bus:stats().in_system ~= 0 then failf("finish: not idle after 30 s") end
    check_ledger(bus:stats())
    S.quiet_points = S.quiet_points + 1
    local warm, last = {}, {}
    local t_end = S.rss[#S.rss] and S.rss[#S.rss].t or 0
    for _, r in ipairs(S.rss) do
      if r.t >= WARMUP and r.t < WARMUP + 10 then warm[#warm + 1] = r.kb end
      if r.t > t_end - 10 then last[#last + 1] = r.kb end
    end
    S.rss_warm, S.rss_end = median(warm), median(last)
    if os.getenv("SOAK_RSS_CHECK") == "0" then
      -- not judged (a sanitizer runtime's own memory grows by design)
    elseif not S.rss_warm or not S.rss_end then
      failf("memory: too few samples (%d)", #S.rss)
    elseif S.rss_end > S.rss_warm * 1.10 then
      failf("memory: RSS grew from %d kB after warm-up to %d kB at the end (+%.1f%%)",
            S.rss_warm, S.rss_end, (S.rss_end / S.rss_warm - 1) * 100)
    end
    if S.quiet_points < 2 then failf("only %d quiet points", S.quiet_points) end
    if S.reloads_ok < 3 then failf("only %d reloads", S.reloads_ok) end
  end)
  if not ok then failf("finish raised: %s", tostring(err)) end
  local s = bus:stats()
  local summary = string.format("%.0fs, %d ticks, accepted %d, completed %d, " ..
    "dead-lettered %d, peak in_system %d, %d quiet points, reloads %d ok / %d refused or rolled back (%d rollbacks seen), " ..
    "%d tunes, %d resizes, %d loans, %d callbacks, longest no-progress %.2fs, " ..
    "%d driver gaps, RSS %s kB after warm-up -> %s kB at the end",
    seda.now() - S.t0, S.ticks, s.accepted, s.completed, s.dead_lettered,
    S.peak_in_system, S.quiet_points, S.reloads_ok, S.reloads_refused,
    S.rollbacks, S.tunes,
    S.resizes, s.loans, S.cb_ran, S.longest_stall, S.driver_gaps,
    tostring(S.rss_warm), tostring(S.rss_end))
  if #S.failures == 0 then return "SOAK PASS: " .. summary end
  return "SOAK FAIL: " .. summary .. "\n  " .. table.concat(S.failures, "\n  ")
end

_G.soak = soak
_G.soak_bus = bus
