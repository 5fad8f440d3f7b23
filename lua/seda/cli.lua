-- lua/seda/cli.lua -- the Lua side of the seda-lua program's live
-- operation features: the REPL helpers (stats, top, reload, tune, workers,
-- help), the stats table, the Prometheus exposition, tab completion and the
-- --watch reload policy.  Embedded into seda-lua at build time
-- (src/cli_lua.c) and run once on the main Lua state with one argument:
-- a table of C functions (C.write writes to the current output sink, C.top
-- runs the live view).  Returns the module table M the C side calls into.

local C, P = ...
local seda = require "seda"

local M = {}

local fmt, concat, sort = string.format, table.concat, table.sort

-- Output of the helpers goes to the current sink: the calling control
-- client, else standard output.
local function out(...) C.write(...) end
M.out = out

-- ---- collecting stats ----------------------------------------------

local function buses()
  local ok, b = pcall(seda.buses)
  if not ok or type(b) ~= "table" then return {} end
  return b
end

-- Stage names of one bus-level stats table in declaration (pipeline)
-- order: by each stage's `index`, names breaking ties.
local function stage_names(bs)
  local names = {}
  for name in pairs(bs.stages or {}) do names[#names + 1] = name end
  local st = bs.stages or {}
  sort(names, function(a, b)
    local ia, ib = st[a].index or math.huge, st[b].index or math.huge
    if ia ~= ib then return ia < ib end
    return a < b
  end)
  return names
end
M.stage_names = stage_names

-- Fallback deliveries/s when the binding does not report `rate`:
-- the delta since the previous sample taken at least 0.5 s ago.
local prev = setmetatable({}, { __mode = "k" })
local function rate_of(bus, name, s, now)
  if s.rate then return s.rate end
  local pb = prev[bus]
  if not pb then pb = {}; prev[bus] = pb end
  local p = pb[name]
  if not p then
    pb[name] = { t = now, d = s.delivered or 0, r = nil }
    return nil
  end
  if now - p.t >= 0.5 then
    p.r = ((s.delivered or 0) - p.d) / (now - p.t)
    p.t, p.d = now, s.delivered or 0
  end
  return p.r
end

-- Every live bus's stats: { {bus=, stats=}, ... } in creation order (as
-- seda.buses() gives them).
local function snapshot()
  local list = {}
  for i, b in ipairs(buses()) do
    local ok, st = pcall(b.stats, b)
    if ok and type(st) == "table" then
      list[#list + 1] = { index = i, bus = b, stats = st }
    end
  end
  return list
end
M.snapshot = snapshot

-- ---- instantaneous rates ----------------------------------------------
--
-- The run loop calls M.sample() every 250 ms: per bus a short ring of
-- {t, completed, dead_lettered, delivered per stage}.  A rate is then the
-- change over the last second: against the newest sample at least 1 s
-- old (or, within the first second, the oldest one at least 0.2 s old),
-- so it falls to 0 one second after the work stops, where the binding's
-- `rate` is a trailing 5 s figure.

local SAMPLE_KEEP = 12                     -- 3 s at 4 a second
local samples = setmetatable({}, { __mode = "k" })

local function take(bus, st, now)
  local ring = samples[bus]
  if not ring then ring = {}; samples[bus] = ring end
  local d = {}
  for name, s in pairs(st.stages or {}) do d[name] = s.delivered or 0 end
  ring[#ring + 1] = { t = now, completed = st.completed or 0,
                      dead = st.dead_lettered or 0, delivered = d }
  while #ring > SAMPLE_KEEP do table.remove(ring, 1) end
end

function M.sample()
  local now = seda.now()
  for _, e in ipairs(snapshot()) do take(e.bus, e.stats, now) end
end

-- The sample to measure against at `now`, or nil.
local function base_sample(bus, now)
  local ring = samples[bus]
  if not ring then return nil end
  local best
  for i = #ring, 1, -1 do
    if now - ring[i].t >= 1.0 then return ring[i] end
    if now - ring[i].t >= 0.2 then best = ring[i] end
  end
  return best
end

-- Per-second change of value `now_v` since sample field get(sample), or
-- nil without a usable sample.
local function per_second(bus, now, now_v, get)
  local b = base_sample(bus, now)
  if not b then return nil end
  local old = get(b)
  if old == nil or now_v == nil then return nil end
  local r = (now_v - old) / (now - b.t)
  return r < 0 and 0 or r
end

-- Deliveries per second of stage `name` over the last second.
local function rate1(bus, name, s, now)
  return per_second(bus, now, s.delivered,
                    function(b) return b.delivered[name] end)
end
M.rate1 = rate1

-- ---- the stats table -------------------------------------------------

local function num(v)
  if v == nil then return "-" end
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v then return "-" end
  if v >= 100 or v == math.floor(v) then return fmt("%.0f", v) end
  return fmt("%.1f", v)
end

-- A duration given in microseconds, with its unit.
local function dur(v)
  if v == nil or v ~= v then return "-" end
  if v >= 1e7 then return fmt("%.0fs", v / 1e6) end
  if v >= 1e6 then return fmt("%.2fs", v / 1e6) end
  if v >= 1e4 then return fmt("%.0fms", v / 1e3) end
  if v >= 1e3 then return fmt("%.1fms", v / 1e3) end
  return fmt("%.0fus", v)
end

-- Bytes, with a binary unit.
local function bytes(v)
  if v == nil then return "-" end
  if v >= 1 << 30 then return fmt("%.1fG", v / (1 << 30)) end
  if v >= 1 << 20 then return fmt("%.1fM", v / (1 << 20)) end
  if v >= 1 << 10 then return fmt("%.0fK", v / (1 << 10)) end
  return fmt("%dB", v)
end
M.bytes = bytes

local COLS = {
  { "stage", "l" }, { "depth/cap", "r" }, { "inflt", "r" }, { "rate/s", "r" },
  { "delivered", "r" }, { "nacked", "r" }, { "dropped", "r" }, { "dead", "r" },
  { "shed", "r" }, { "dly", "r" },
  { "sojourn99", "r" }, { "service99", "r" }, { "ver", "r" },
}

local function render(rows)
  local w = {}
  for c, col in ipairs(COLS) do
    w[c] = #col[1]
    for _, r in ipairs(rows) do
      if #r[c] > w[c] then w[c] = #r[c] end
    end
  end
  local lines = {}
  local function line(r)
    local cells = {}
    for c, col in ipairs(COLS) do
      local v = r[c]
      if col[2] == "l" then cells[c] = v .. (" "):rep(w[c] - #v)
      else cells[c] = (" "):rep(w[c] - #v) .. v end
    end
    lines[#lines + 1] = (concat(cells, "  "):gsub("%s+$", ""))
  end
  local head = {}
  for c, col in ipairs(COLS) do head[c] = col[1] end
  line(head)
  for _, r in ipairs(rows) do line(r) end
  return lines
end

-- The memory line of one bus: every worker's Lua state, the loan
-- threads' states, and the main state.
local function memory_line(bs)
  local wm, parts, total = bs.worker_memory or {}, {}, 0
  for i, v in ipairs(wm) do
    parts[#parts + 1] = fmt("w%d %s", i - 1, bytes(v))
    total = total + v
  end
  local lm, lt = bs.loan_memory or {}, 0
  for _, v in ipairs(lm) do lt = lt + v end
  local text = "  memory: " .. (#parts > 0 and concat(parts, " ") or "-") ..
               fmt(" (workers %s", bytes(total))
  if #lm > 0 then
    text = text .. fmt(", %d loan state%s %s", #lm, #lm == 1 and "" or "s",
                       bytes(lt))
  end
  return text .. ")"
end

-- The text of the stats table: one block per live bus.
function M.format_stats()
  local now = seda.now()
  local snap = snapshot()
  if #snap == 0 then return "no live bus\n" end
  local text = {}
  for _, e in ipairs(snap) do
    local bs = e.stats
    local rows, errs = {}, {}
    local tot = { depth = 0, cap = 0, inflt = 0, del = 0, nack = 0,
                  drop = 0, dead = 0 }
    for _, name in ipairs(stage_names(bs)) do
      local s = bs.stages[name]
      local r = rate1(e.bus, name, s, now)
      rows[#rows + 1] = {
        name, num(s.depth) .. "/" .. num(s.capacity),
        num(s.in_flight) .. "/" .. num(s.concurrency), num(r),
        num(s.delivered), num(s.nacked), num(s.dropped), num(s.dead_lettered),
        num(s.shed) .. ((s.shedding or 0) > 0 and "*" or ""), num(s.delayed),
        dur(s.sojourn_p99), dur(s.service_p99),
        num(s.version) .. (s.last_error and "!" or ""),
      }
      tot.depth = tot.depth + (s.depth or 0)
      tot.cap = tot.cap + (s.capacity or 0)
      tot.inflt = tot.inflt + (s.in_flight or 0)
      tot.del = tot.del + (s.delivered or 0)
      tot.nack = tot.nack + (s.nacked or 0)
      tot.drop = tot.drop + (s.dropped or 0)
      tot.dead = tot.dead + (s.dead_lettered or 0)
      if s.last_error then errs[#errs + 1] = name .. ": " .. s.last_error end
    end
    rows[#rows + 1] = {
      "(total)", num(tot.depth) .. "/" .. num(tot.cap), num(tot.inflt), "",
      num(tot.del), num(tot.nack), num(tot.drop), num(tot.dead), "", "", "",
      "", "",
    }
    -- The journal's troubles, only when there are some.
    local journal = ""
    if (bs.quarantined or 0) > 0 then
      journal = journal .. " quarantined=" .. num(bs.quarantined)
    end
    if (bs.wal_discarded_frames or 0) > 0 or (bs.wal_discarded_bytes or 0) > 0 then
      journal = journal .. fmt(" wal_discarded=%s frames/%s bytes",
                               num(bs.wal_discarded_frames),
                               num(bs.wal_discarded_bytes))
    end
    text[#text + 1] = fmt("bus %d: workers=%s loaned=%s/%s loans=%s " ..
      "accepted=%s completed=%s dead_lettered=%s dropped=%s in_system=%s " ..
      "callbacks=%s%s%s%s",
      e.index, num(bs.workers), num(bs.workers_loaned), num(bs.max_loans),
      num(bs.loans), num(bs.accepted), num(bs.completed),
      num(bs.dead_lettered), num(bs.dropped), num(bs.in_system),
      num(bs.callbacks_pending), journal,
      bs.paused and " paused" or "", bs.closed and " closed" or "")
    local cps = per_second(e.bus, now, bs.completed,
                           function(b) return b.completed end)
    local dps = per_second(e.bus, now, bs.dead_lettered,
                           function(b) return b.dead end)
    text[#text + 1] = fmt("  throughput: %s completed/s, %s dead-lettered/s " ..
                          "(itineraries, last 1 s)", num(cps), num(dps))
    text[#text + 1] = memory_line(bs)
    for _, l in ipairs(render(rows)) do text[#text + 1] = "  " .. l end
    for _, l in ipairs(errs) do
      text[#text + 1] = "  last reload error: " .. l
    end
  end
  return concat(text, "\n") .. "\n"
end

-- The banner of the REPL (-i on a terminal, attach): the version, the
-- live buses with their stages in pipeline order, and where help is.
function M.banner(extra)
  local lines = { fmt("seda-lua %s (%s)%s", seda.version, _VERSION,
                      extra and ("  " .. extra) or "") }
  local snap = snapshot()
  if #snap == 0 then
    lines[#lines + 1] = "no live bus yet (seda.bus{...} makes one)"
  end
  for _, e in ipairs(snap) do
    local names = stage_names(e.stats)
    lines[#lines + 1] = fmt("bus %d: %s workers, %d stage%s%s%s", e.index,
      num(e.stats.workers), #names, #names == 1 and "" or "s",
      #names > 0 and ": " or "", concat(names, " "))
  end
  lines[#lines + 1] = "help() lists the commands; stats(), top() show " ..
                      "the buses; Ctrl-D leaves"
  return concat(lines, "\n") .. "\n"
end

-- ---- pretty-printing REPL results (lua/seda/pretty.lua) ---------------

M.pretty = P.pretty

-- show(print, ...): print a REPL line's results through `print` (the
-- client's own, for attach), pretty.
function M.show(printf, ...)
  local n = select("#", ...)
  local t = table.pack(...)
  for i = 1, n do t[i] = P.pretty(t[i]) end
  printf(table.unpack(t, 1, n))
end

-- ---- REPL helpers (installed as globals) -----------------------------

local G = {}

-- stats(): { [stage] = stage stats } over every live bus (a name used by
-- several buses: the first bus's stage, the others as "name#2", ...); its
-- tostring is the aligned table, so typing stats() at the REPL prints it.
local stats_mt = { __tostring = function(t)
  return (rawget(getmetatable(t), "text") or ""):gsub("\n$", "")
end }
function G.stats()
  local t = setmetatable({}, { __tostring = stats_mt.__tostring,
                               text = M.format_stats() })
  for _, e in ipairs(snapshot()) do
    for name, s in pairs(e.stats.stages or {}) do
      local k, n = name, 1
      while t[k] ~= nil do n = n + 1; k = name .. "#" .. n end
      t[k] = s
    end
  end
  return t
end

-- The bus that has stage `name` (the first one), or nil.
local function bus_of(name)
  for _, b in ipairs(buses()) do
    local ok, s = pcall(b.stats, b, name)
    if ok and s then return b end
  end
  return nil
end
M.bus_of = bus_of

-- A stage as stats() names it: "name" is the first bus's, "name#N" the
-- N-th bus that has a stage `name` (stage names cannot contain '#').
-- Returns the bus and the stage's own name, or nil.
local function resolve(label)
  local base, n = label:match("^(.+)#(%d+)$")
  if not base then return bus_of(label), label end
  n = tonumber(n)
  local k = 0
  for _, b in ipairs(buses()) do
    local ok, s = pcall(b.stats, b, base)
    if ok and s then
      k = k + 1
      if k == n and n >= 2 then return b, base end
    end
  end
  return nil
end
M.resolve = resolve

-- Raise msg from a REPL helper: the message alone, without the helper's
-- code position or a traceback (C.fail marks it for the message handler).
local function fail(msg) C.fail(msg) end

-- Call a bus method; an error it raises comes back as a message without
-- the caller's code position (that position would be this file's).
local function try(what, fn, ...)
  local r = table.pack(pcall(fn, ...))
  if not r[1] then
    fail(what .. ": " .. (tostring(r[2]):gsub("^%[seda%-lua cli%]:%d+: ", "")
                                        :gsub("^" .. what .. ": ", "")))
  end
  return table.unpack(r, 2, r.n)
end

-- reload([stage]): reload one stage (on every bus that has it; "name#N"
-- as stats() shows it: that bus's only) or every stage of every bus.
-- Prints and returns true, or false, err.
function G.reload(stage)
  if stage ~= nil and type(stage) ~= "string" then
    fail("reload: stage name must be a string")
  end
  local list, name = buses(), stage
  if stage and stage:find("#", 1, true) then
    local b
    b, name = resolve(stage)
    list = { b }
  end
  local any, ok_all, errs = false, true, {}
  for _, b in ipairs(list) do
    local has = name == nil or (pcall(b.stats, b, name) and b:stats(name))
    if has then
      any = true
      local ok, err = b:reload(name)
      if not ok then ok_all = false; errs[#errs + 1] = tostring(err) end
    end
  end
  -- A failure is returned, not printed: the REPL prints what a line
  -- returns, so printing here too showed it twice.
  if not any then
    return false, stage and ("no such stage '" .. stage .. "'") or "no live bus"
  end
  if ok_all then
    out("reloaded " .. (stage or "every stage") .. "\n")
    return true
  end
  return false, concat(errs, "; ")
end

-- tune(stage, {concurrency=, capacity=, policy=}); stage as stats() names
-- it ("name#N": the N-th bus's).
function G.tune(stage, opts)
  if type(stage) ~= "string" then fail("tune: stage name expected") end
  if type(opts) ~= "table" then
    fail("tune: options table expected ({concurrency=, capacity=, policy=, " ..
         "shed=, retry=, admit=, starve_after=})")
  end
  local b, name = resolve(stage)
  if not b then fail("tune: no such stage '" .. stage .. "'") end
  if type(b.tune) ~= "function" then
    fail("tune: bus:tune is not available in this build")
  end
  local r = table.pack(try("tune", b.tune, b, name, opts))
  if r[1] == false then fail("tune: " .. tostring(r[2])) end
  local s = b:stats(name)
  out(fmt("%s: concurrency=%s capacity=%s policy=%s\n", stage,
          num(s.concurrency), num(s.capacity), tostring(s.policy)))
  return true
end

-- workers([n]): resize the pool of every live bus (or print the sizes).
-- bus:workers checks n (one message for every bad n).  It prints and
-- returns nothing, so the REPL shows each size once (bus:workers()
-- returns the number).
function G.workers(n)
  local list = buses()
  if n == nil then
    if #list == 0 then out("no live bus\n") end
    for i, b in ipairs(list) do
      out(fmt("bus %d: %s workers\n", i, num(b:stats().workers)))
    end
    return
  end
  if #list == 0 then fail("workers: no live bus") end
  for i, b in ipairs(list) do
    if type(b.workers) ~= "function" then
      fail("workers: bus:workers is not available in this build")
    end
    local r = table.pack(try("workers", b.workers, b, n))
    if r[1] == false then fail("workers: " .. tostring(r[2])) end
    out(fmt("bus %d: %s workers\n", i, num(b:stats().workers)))
  end
end

-- top([seconds]): the stats table redrawn in place until a key is pressed.
function G.top(seconds)
  seconds = seconds or 1
  if type(seconds) ~= "number" or seconds <= 0 then
    fail("top: seconds must be a positive number")
  end
  return C.top(seconds)
end

-- metrics(): the Prometheus text exposition of every live bus.
function G.metrics() return M.metrics() end

local HELP = [[
seda-lua REPL -- Lua statements and expressions (=expr prints too); results
are pretty-printed (tables as indented key = value, cut when deep or long).
The buses keep running while you type.
  stats()                    table of every stage of every live bus, stages
                             in declaration (pipeline) order (returns
                             { [stage] = stats }; tostring gives the table)
  top([seconds])             stats redrawn every `seconds` (default 1) until
                             a key is pressed
  reload([stage])            hot-reload one stage's handler code, or all
  tune(stage, {concurrency=, capacity=, policy=, shed=, retry=,
               admit=, starve_after=})
                             change a stage of a running bus (shed =
                             {target=, interval=} or false; retry =
                             {backoff=, max_backoff=, multiplier=,
                             jitter=} or false; admit = function, file
                             or false)
  workers([n])               resize the worker pool of every bus (n nil:
                             print the sizes)
  metrics()                  the Prometheus text exposition (a string)
  seda.buses()               the live bus objects; bus:stats([stage]) one
                             bus's figures
  seda.timer(delay, fn)      run fn once after delay seconds, on this state
  seda.every(interval, fn)   ... every interval seconds; both return a
                             handle: handle:cancel()
  help()                     this text
Columns: depth/cap queue depth and capacity; inflt envelopes being handled /
concurrency (the permits); rate/s deliveries per second over the last
second; shed publishes refused by adaptive shedding ("*": shedding now);
dly retries waiting out their backoff; sojourn99 queue wait (admitted ->
handler start) and service99 handler run time, p99 of the recent window;
ver handler code version ("!" = the last reload failed).  The bus line: loaned=now/max loan threads standing
in for workers blocked inside handlers, loans= loans so far; throughput:
itineraries completed (each counted once) and dead-lettered per second;
memory: bytes held by each worker's Lua state (w0 = seda.worker 0).
callbacks= on_complete results waiting for the main state (publish runs
them itself past max_pending_callbacks); quarantined= journal rows replay
found malformed (seda-lua dlq DIR quarantine lists them) and
wal_discarded= what recovery dropped of a damaged WAL, shown when not 0.
Ctrl-D (or end of input) leaves the REPL; Ctrl-C interrupts a running
command or clears the line; Tab completes globals, fields and stage names
inside strings.  Stage names as stats() shows them ("a#2") work in tune()
and reload().
]]
function G.help() out(HELP) end

function M.install(env)
  for k, v in pairs(G) do env[k] = v end
end

-- ---- the end of a run -------------------------------------------------

local function plural(n, one, many)
  return n .. " " .. (n == 1 and one or (many or one .. "s"))
end

-- Per stage of bus b: { name = { dropped=, depth=, in_flight=, pull= } }.
local function stage_counts(b)
  local ok, st = pcall(b.stats, b)
  local t = {}
  if not ok or type(st) ~= "table" then return t end
  for name, s in pairs(st.stages or {}) do
    t[name] = { dropped = s.dropped or 0, depth = s.depth or 0,
                in_flight = s.in_flight or 0, pull = s.consumers == 0 }
  end
  return t
end

-- finish(drain, wait_first): how seda-lua ends.  When wait_first (a
-- script's normal end, the end of -i), run on_complete callbacks until no
-- bus has work left, however long that takes (settle_all).  Then for
-- every live bus, in order: stop it accepting publishes (pause: hops and callbacks keep flowing),
-- let it drain for up to `drain` seconds in all, shut it down and count
-- what the shutdown dropped.  C.drain_stopped() turns true on a signal:
-- the waiting stops and the rest is dropped at once.  Says on stderr how
-- many envelopes were dropped and why.  Returns true when none were.
-- Run callbacks until no live bus has work or callbacks left.  A callback
-- of one bus may publish into another (only the main state can: a handler
-- publishes into its own bus), so one bus is not settled until a whole
-- pass over all of them runs no callback, finds each idle, and sees no
-- completion since the pass before (a completion is what queues a
-- callback).  Returns false when a signal stopped the waiting.
local function settle_all()
  local prev = {}
  while true do
    local clean = true
    for _, b in ipairs(buses()) do
      local ok1, ran = pcall(b.poll, b)
      local ok2, idle = pcall(b.wait, b, 0)
      local ok3, st = pcall(b.stats, b)
      local done = ok3 and type(st) == "table" and st.completed or -1
      if not (ok1 and ok2 and idle and ran == 0 and prev[b] == done) then
        clean = false
      end
      prev[b] = done
    end
    if clean then return true end
    if C.drain_stopped() then return false end
    for _, b in ipairs(buses()) do         -- let the first busy one progress
      if not b:wait(0.01) then break end
    end
  end
end

function M.finish(drain, wait_first)
  local deadline
  local stopped, timed_out = false, false
  local total, pull_left, seen = 0, {}, {}
  if wait_first then stopped = not settle_all() end
  while true do
    local b = buses()[1]
    if not b or seen[b] then break end
    seen[b] = true
    pcall(b.pause, b)
    deadline = deadline or seda.now() + drain
    while not stopped do
      local left = deadline - seda.now()
      if b:wait(left > 0.05 and 0.05 or (left > 0 and left or 0)) then break end
      if C.drain_stopped() then stopped = true; break end
      if seda.now() >= deadline then timed_out = true; break end
    end
    local before = stage_counts(b)
    b:shutdown(0)
    for name, a in pairs(stage_counts(b)) do
      local p = before[name]
      local n = a.dropped - (p and p.dropped or 0)
      total = total + n
      -- Left queued in a pull stage: nothing received it.
      if n > 0 and p and p.pull then
        pull_left[#pull_left + 1] = { name = name, n = n }
      end
    end
  end
  if total == 0 then return true end
  sort(pull_left, function(x, y) return x.name < y.name end)
  local why = {}
  local pulled = 0
  for _, p in ipairs(pull_left) do
    why[#why + 1] = fmt("%s queued in pull stage '%s' with no receiver",
                        plural(p.n, "envelope"), p.name)
    pulled = pulled + p.n
  end
  if stopped then
    why[#why + 1] = "a signal stopped the drain"
  elseif timed_out then
    why[#why + 1] = fmt("the drain did not finish within %gs (--drain)",
                        drain)
  end
  if #why == 0 or (pulled < total and not stopped and not timed_out) then
    why[#why + 1] = plural(total - pulled, "envelope") ..
                    " still queued or in flight"
  end
  C.warn(fmt("%s dropped at exit: %s", plural(total, "envelope was",
             "envelopes were"), concat(why, "; ")))
  return false
end

-- ---- Prometheus exposition -------------------------------------------

local function esc(v)
  return (tostring(v):gsub("[\\\"\n]", { ["\\"] = "\\\\", ['"'] = '\\"',
                                          ["\n"] = "\\n" }))
end

local function pnum(v)
  if v == true then return "1" end
  if v == false then return "0" end
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v then return "NaN" end
  if v == math.huge then return "+Inf" end
  if v == -math.huge then return "-Inf" end
  return fmt("%.9g", v)
end

local STAGE_METRICS = {
  { "depth", "gauge", "Envelopes waiting in the stage's queue.", "depth" },
  { "capacity", "gauge", "Capacity of the stage's queue.", "capacity" },
  { "concurrency", "gauge", "Concurrency limit (permits) of the stage.",
    "concurrency" },
  { "in_flight", "gauge", "Drain tasks of the stage running now.",
    "in_flight" },
  { "consumers", "gauge", "Consumers (handlers) of the stage.", "consumers" },
  { "enqueued_total", "counter", "Envelopes admitted to the stage's queue.",
    "enqueued" },
  { "delivered_total", "counter", "Envelopes delivered to the stage's handlers.",
    "delivered" },
  { "nacked_total", "counter", "Deliveries that nacked (false or an error).",
    "nacked" },
  { "errors_total", "counter", "Handler errors raised in the stage.", "errors" },
  { "dropped_total", "counter", "Envelopes refused or evicted by the stage.",
    "dropped" },
  { "dead_lettered_total", "counter", "Envelopes dead-lettered by the stage.",
    "dead_lettered" },
  { "completed_total", "counter", "Itineraries that completed at the stage.",
    "completed" },
  { "refused_total", "counter", "Publishes refused by the stage's admit rule.",
    "refused" },
  { "shed_total", "counter", "Publishes refused by adaptive shedding.",
    "shed" },
  { "shedding", "gauge",
    "Shedding level: 0 none, 1 refusing low, 2 refusing low and normal.",
    "shedding" },
  { "delayed", "gauge", "Retries waiting out their backoff.", "delayed" },
  { "depth_high", "gauge", "Envelopes waiting at high priority.",
    "depth_high" },
  { "depth_low", "gauge", "Envelopes waiting at low priority.", "depth_low" },
  { "delivery_rate", "gauge",
    "Deliveries per second over the last few seconds.", "rate" },
  { "handler_version", "gauge", "Version of the stage's handler code " ..
    "(1 at declaration, +1 per successful reload).", "version" },
}

local BUS_METRICS = {
  { "accepted_total", "counter", "Envelopes accepted by publish.", "accepted" },
  { "completed_total", "counter", "Itineraries completed.", "completed" },
  { "dead_lettered_total", "counter", "Itineraries dead-lettered.",
    "dead_lettered" },
  { "dropped_total", "counter", "Itineraries evicted or swept.", "dropped" },
  { "in_system", "gauge", "Accepted itineraries not yet ended.", "in_system" },
  { "workers", "gauge", "Worker threads of the bus's pool.", "workers" },
  { "workers_loaned", "gauge", "Loan threads in service now (standing in " ..
    "for workers blocked inside handlers).", "workers_loaned" },
  { "loans_total", "counter", "Loans started (a worker blocked inside a " ..
    "handler while a loan thread ran for it).", "loans" },
  { "max_loans", "gauge", "The bound on workers_loaned.", "max_loans" },
  { "paused", "gauge", "1 when the bus is paused.", "paused" },
  { "callbacks_pending", "gauge", "on_complete results waiting for the " ..
    "main state.", "callbacks_pending" },
  { "quarantined_total", "counter", "Malformed journal rows the replay " ..
    "set aside.", "quarantined" },
  { "wal_discarded_frames_total", "counter", "WAL frames recovery " ..
    "dropped when the journal opened (a damaged log).",
    "wal_discarded_frames" },
  { "wal_discarded_bytes_total", "counter", "Bytes of the WAL frames " ..
    "recovery dropped when the journal opened.", "wal_discarded_bytes" },
}

local QUANTILES = { { "0.5", "p50" }, { "0.99", "p99" }, { "0.999", "p999" } }

function M.metrics()
  local snap = snapshot()
  local multi = #snap > 1
  local lines = {}
  local function add(s) lines[#lines + 1] = s end
  local function labels(e, stage, extra)
    local l = {}
    if multi then l[#l + 1] = 'bus="' .. e.index .. '"' end
    if stage then l[#l + 1] = 'stage="' .. esc(stage) .. '"' end
    if extra then l[#l + 1] = extra end
    if #l == 0 then return "" end
    return "{" .. concat(l, ",") .. "}"
  end
  local now = seda.now()
  for _, m in ipairs(STAGE_METRICS) do
    local samples = {}
    for _, e in ipairs(snap) do
      for _, name in ipairs(stage_names(e.stats)) do
        local s = e.stats.stages[name]
        local v = s[m[4]]
        if m[4] == "rate" then v = rate_of(e.bus, name, s, now) end
        if v ~= nil then
          samples[#samples + 1] = "seda_stage_" .. m[1] .. labels(e, name) ..
                                  " " .. pnum(v)
        end
      end
    end
    if #samples > 0 then
      add("# HELP seda_stage_" .. m[1] .. " " .. m[3])
      add("# TYPE seda_stage_" .. m[1] .. " " .. m[2])
      for _, s in ipairs(samples) do add(s) end
    end
  end
  -- reload errors: 1 when the last reload of the stage failed
  add("# HELP seda_stage_reload_failed 1 when the stage's last reload failed " ..
      "(the old code stays installed).")
  add("# TYPE seda_stage_reload_failed gauge")
  for _, e in ipairs(snap) do
    for _, name in ipairs(stage_names(e.stats)) do
      add("seda_stage_reload_failed" .. labels(e, name) .. " " ..
          (e.stats.stages[name].last_error and "1" or "0"))
    end
  end
  for _, kind in ipairs({ "service", "sojourn" }) do
    local samples = {}
    for _, e in ipairs(snap) do
      for _, name in ipairs(stage_names(e.stats)) do
        local s = e.stats.stages[name]
        for _, q in ipairs(QUANTILES) do
          local v = s[kind .. "_" .. q[2]]
          if v ~= nil then
            samples[#samples + 1] = "seda_stage_" .. kind .. "_seconds" ..
              labels(e, name, 'quantile="' .. q[1] .. '"') .. " " ..
              pnum(v / 1e6)
          end
        end
        if #samples > 0 and s.delivered then
          samples[#samples + 1] = "seda_stage_" .. kind .. "_seconds_count" ..
            labels(e, name) .. " " .. pnum(s.delivered)
        end
      end
    end
    if #samples > 0 then
      add("# HELP seda_stage_" .. kind .. "_seconds " .. (kind == "service"
        and "Handler service time (recent window)."
        or "Time from admission to the end of delivery (recent window)."))
      add("# TYPE seda_stage_" .. kind .. "_seconds summary")
      for _, s in ipairs(samples) do add(s) end
    end
  end
  for _, m in ipairs(BUS_METRICS) do
    local samples = {}
    for _, e in ipairs(snap) do
      local v = e.stats[m[4]]
      if v ~= nil then
        samples[#samples + 1] = "seda_bus_" .. m[1] .. labels(e) .. " " .. pnum(v)
      end
    end
    if #samples > 0 then
      add("# HELP seda_bus_" .. m[1] .. " " .. m[3])
      add("# TYPE seda_bus_" .. m[1] .. " " .. m[2])
      for _, s in ipairs(samples) do add(s) end
    end
  end
  add("# HELP seda_buses Live buses in the process.")
  add("# TYPE seda_buses gauge")
  add("seda_buses " .. #snap)
  return concat(lines, "\n") .. "\n"
end

-- ---- completion ------------------------------------------------------

local KEYWORDS = { "and", "break", "do", "else", "elseif", "end", "false",
  "for", "function", "goto", "if", "in", "local", "nil", "not", "or",
  "repeat", "return", "then", "true", "until", "while" }

-- Keys of a value usable after "." (or ":" for methods), following
-- __index tables of metatables.
local function keys_of(v, methods, acc, seen)
  seen = seen or {}
  if v == nil or seen[v] then return acc end
  seen[v] = true
  if type(v) == "table" then
    for k, x in next, v do
      if type(k) == "string" and k:match("^[%a_][%w_]*$") and
         (not methods or type(x) == "function") then
        acc[k] = true
      end
    end
  end
  local ok, mt = pcall(getmetatable, v)
  if ok and type(mt) == "table" then
    local idx = rawget(mt, "__index")
    if type(idx) == "table" then keys_of(idx, methods, acc, seen) end
  end
  return acc
end

-- complete(word, in_string, env): candidates replacing `word`.
function M.complete(word, in_string, env)
  env = env or _G
  local res = {}
  if in_string then
    local seen = {}
    for _, e in ipairs(snapshot()) do
      for name in pairs(e.stats.stages or {}) do
        if name:sub(1, #word) == word and not seen[name] then
          seen[name] = true
          res[#res + 1] = name
        end
      end
    end
    sort(res)
    return res
  end
  local path, sep, part = word:match("^(.*)([%.:])([%w_]*)$")
  local base = env
  if path then
    for seg in path:gmatch("[^%.:]+") do
      if not seg:match("^[%a_][%w_]*$") then return res end
      local ok, v = pcall(function() return base[seg] end)
      if not ok or v == nil then return res end
      base = v
    end
  else
    part = word
  end
  local acc = keys_of(base, sep == ":", {})
  if not path then for _, k in ipairs(KEYWORDS) do acc[k] = true end end
  for k in pairs(acc) do
    if k:sub(1, #part) == part then
      res[#res + 1] = (path and (path .. sep) or "") .. k
    end
  end
  sort(res)
  return res
end

-- ---- --watch ---------------------------------------------------------

local function dirname(p) return p:match("^(.*)/[^/]*$") or "." end

-- Directories to watch: those of every stage's handler files, and the
-- package.path directories under `script_dir` (when given).
function M.watch_dirs(script_dir)
  local dirs, seen = {}, {}
  local function add(d)
    if d and d ~= "" and not seen[d] then seen[d] = true; dirs[#dirs + 1] = d end
  end
  for _, b in ipairs(buses()) do
    if type(b.handler_files) == "function" then
      local ok, hf = pcall(b.handler_files, b)
      if ok and type(hf) == "table" then
        for _, files in pairs(hf) do
          for _, f in ipairs(files) do add(dirname(C.realpath(f) or f)) end
        end
      end
    end
  end
  if script_dir then
    local sd = C.realpath(script_dir) or script_dir
    for templ in package.path:gmatch("[^;]+") do
      local d = templ:match("^(.*)/[^/]*%?[^/]*$")
      if d and not d:find("?", 1, true) then
        if d:sub(1, 1) ~= "/" then d = sd .. "/" .. d end
        local rd = C.realpath(d)
        if rd and (rd == sd or rd:sub(1, #sd + 1) == sd .. "/") then add(rd) end
      end
    end
  end
  return dirs
end

-- changed(paths): files (real directory + "/" + name) that changed on
-- disk.  Reload the stages whose handler file changed; when another .lua
-- file changed (a module a handler may require), every stage.  Every
-- outcome goes to stderr and stays in the stage's stats.
function M.changed(paths)
  local changed = {}
  for _, p in ipairs(paths) do changed[p] = true end
  local todo, other = {}, false
  local matched = {}
  for _, b in ipairs(buses()) do
    local ok, hf = pcall(b.handler_files, b)
    if ok and type(hf) == "table" then
      for stage, files in pairs(hf) do
        for _, f in ipairs(files) do
          local rf = (C.realpath(dirname(f)) or dirname(f)) .. "/" ..
                     f:match("[^/]*$")
          if changed[rf] then
            matched[rf] = true
            todo[#todo + 1] = { b, stage, rf }
          end
        end
      end
    end
  end
  for p in pairs(changed) do
    if not matched[p] then other = p; break end
  end
  local function report(b, stage, why)
    local ok, err = b:reload(stage)
    local s = b:stats(stage)
    if ok then
      io.stderr:write(fmt("seda-lua: watch: reloaded stage '%s' (%s): " ..
        "version %s\n", stage, why, num(s and s.version)))
    else
      io.stderr:write(fmt("seda-lua: watch: reload of stage '%s' (%s) " ..
        "failed, keeping version %s: %s\n", stage, why,
        num(s and s.version), tostring(err)))
    end
    io.stderr:flush()
  end
  if other then
    for _, b in ipairs(buses()) do
      local st = b:stats()
      for _, name in ipairs(stage_names(st)) do
        report(b, name, other:match("[^/]*$") .. " changed")
      end
    end
  else
    local done = {}
    for _, t in ipairs(todo) do
      done[t[1]] = done[t[1]] or {}
      if not done[t[1]][t[2]] then
        done[t[1]][t[2]] = true
        report(t[1], t[2], t[3]:match("[^/]*$") .. " changed")
      end
    end
  end
end

return M
