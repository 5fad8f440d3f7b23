-- lua/seda/cli.lua -- the Lua side of the seda-lua program's live
-- operation features: the REPL helpers (stats, top, reload, tune, workers,
-- errors, help), the stats table, tab completion and the --watch reload
-- policy (the Prometheus exposition is lua/seda/metrics.lua).  Embedded into seda-lua at build time
-- (src/cli/cli_lua.c) and run once on the main Lua state with one argument:
-- a table of C functions (C.write writes to the current output sink, C.top
-- runs the live view).  Returns the module table M the C side calls into.

local C, P = ...
local seda = require "seda"

local M = {}

local fmt, concat, sort = string.format, table.concat, table.sort

-- printable(s [, lines]): s made safe for an operator's terminal (its
-- controls, C1 controls and invalid UTF-8 bytes shown as \xNN; lines
-- true keeps newlines and tabs): what a handler's error, an envelope's id,
-- header or payload says must not retitle the window, clear the screen or
-- fake lines.  The one escaping function of every text view (C.printable,
-- src/cli/cli_term.c); the observer state, which prints nothing, has a
-- plain fallback.
local printable = C.printable or function(s, lines)
  local pat = lines and "[%z\1-\8\11-\31\127-\255]" or "[%z\1-\31\127-\255]"
  return (tostring(s):gsub(pat, function(c)
    return fmt("\\x%02x", c:byte())
  end))
end
M.printable = printable

-- Output of the helpers goes to the current sink: the calling control
-- client, else standard output.
local function out(...) C.write(...) end
M.out = out

-- The site of an error message: the first "file:line" of its first line
-- (where a handler's error() was raised: "handler error: parse.lua:4:
-- ..." is parse.lua:4), else that line's text before its first ": " (a
-- hop timeout, a journal failure), at most 60 bytes.
local function error_site(message)
  local line = tostring(message):match("^[^\n]*")
  local site = line:match("([^%s:]+:%d+):")
  if not site then site = line:match("^(.-): ") or line end
  if #site > 60 then site = site:sub(1, 57) .. "..." end
  return site
end
M.error_site = error_site

-- error_sites(errors [, cap = 20]): the entries of bus:errors() grouped by
-- stage and site, the most frequent first: { stage =, site =, count =
-- (occurrences, repeats included), distinct = (messages), first =, last =
-- (wall-clock), message = (the latest's first line) }; at most cap
-- groups, and how many more were left out.
function M.error_sites(errors, cap)
  cap = cap or 20
  local by, list = {}, {}
  for _, e in ipairs(errors or {}) do
    local site = error_site(e.message)
    local key = e.stage .. "\0" .. site
    local g = by[key]
    if not g then
      g = { stage = e.stage, site = site, count = 0, distinct = 0,
            first = e.first or e.time, last = e.time,
            message = tostring(e.message):match("^[^\n]*") }
      by[key] = g
      list[#list + 1] = g
    end
    g.count = g.count + (e.repeats or 1)
    g.distinct = g.distinct + 1
    if (e.first or e.time) < g.first then g.first = e.first or e.time end
    if e.time > g.last then
      g.last = e.time
      g.message = tostring(e.message):match("^[^\n]*")
    end
  end
  sort(list, function(a, b)
    if a.count ~= b.count then return a.count > b.count end
    if a.last ~= b.last then return a.last > b.last end
    return a.stage .. a.site < b.stage .. b.site
  end)
  local more = math.max(0, #list - cap)
  for i = #list, cap + 1, -1 do list[i] = nil end
  return list, more
end

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
M.rate_of = rate_of

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

-- A duration given in seconds, with its unit.
local function dur(v)           -- v in seconds
  if v == nil or v ~= v then return "-" end
  if v >= 10 then return fmt("%.0fs", v) end
  if v >= 1 then return fmt("%.2fs", v) end
  if v >= 1e-2 then return fmt("%.0fms", v * 1e3) end
  if v >= 1e-3 then return fmt("%.1fms", v * 1e3) end
  return fmt("%.0fus", v * 1e6)
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

-- "12:03:04 (5s ago)" for a wall-clock time t.
local function when(t)
  local age = os.time() - t
  local rel = age < 1 and "now" or age < 120 and fmt("%ds ago", age // 1)
              or age < 7200 and fmt("%dmin ago", age // 60)
              or fmt("%dh ago", age // 3600)
  return os.date("%H:%M:%S", t // 1) .. " (" .. rel .. ")"
end
M.when = when

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

-- JetStream's figures are -1 until it answered once.
local function js(v) return (v or -1) < 0 and "?" or num(v) end

-- Two lines for a remote stage: where it is, then its figures.
local function remote_lines(name, r)
  return {
    fmt("  remote %s: %s %s stream %s consumer %s%s", name, r.state, r.url,
        r.stream, r.consumer, r.consuming and "" or " (publishes only)"),
    fmt("    jetstream pending=%s unacked=%s waiting=%s | published=%s " ..
        "publishing=%s failed=%s | taken=%s acked=%s naked=%s termed=%s " ..
        "bad=%s held=%s | awaiting=%s", js(r.js_pending),
        js(r.js_ack_pending), js(r.js_waiting), num(r.published),
        num(r.publishing), num(r.publish_failed), num(r.fetched),
        num(r.acked), num(r.naked), num(r.termed), num(r.bad_messages),
        num(r.held), num(r.awaiting)),
  }
end

-- A bus as the REPL names it: its stable name (seda.bus{ name = }, else
-- busN), as the metrics and the status page do.
local function bus_name(stats, index)
  return stats and stats.name or ("bus" .. tostring(index))
end

-- The text of the stats table: one block per live bus; with only_bus and
-- only_stage, that bus's block with that stage's row alone.  Made safe
-- for a terminal (printable): a reload error or a server's message says
-- anything.
function M.format_stats(only_bus, only_stage)
  local now = seda.now()
  local snap = snapshot()
  if #snap == 0 then return "no live bus\n" end
  local text = {}
  for _, e in ipairs(snap) do
    if only_bus and not rawequal(e.bus, only_bus) then goto next_bus end
    local bs = e.stats
    local rows, errs, remotes = {}, {}, {}
    local tot = { depth = 0, cap = 0, inflt = 0, del = 0, nack = 0,
                  drop = 0, dead = 0 }
    for _, name in ipairs(stage_names(bs)) do
      if only_stage and name ~= only_stage then goto next_stage end
      local s = bs.stages[name]
      local r = rate1(e.bus, name, s, now)
      rows[#rows + 1] = {
        name, num(s.depth) .. "/" .. num(s.capacity),
        num(s.in_flight) .. "/" .. num(s.concurrency) ..
          ((s.suspended or 0) > 0 and " (" .. num(s.suspended) .. " susp)"
            or ""), num(r),
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
      if s.remote then
        for _, l in ipairs(remote_lines(name, s.remote)) do
          remotes[#remotes + 1] = l
        end
      end
      ::next_stage::
    end
    local okr, recent = pcall(e.bus.errors, e.bus, only_stage)
    local lasts, seen = {}, {}
    for _, x in ipairs(okr and recent or {}) do      -- newest first
      if not seen[x.stage] then
        seen[x.stage] = true
        local msg = printable(x.message:match("^[^\n]*"))
        if #msg > 100 then msg = msg:sub(1, 97) .. "..." end
        lasts[#lasts + 1] = fmt("  last error: %s %s%s: %s", x.stage,
          when(x.time), x.repeats > 1 and fmt(" x%d", x.repeats) or "", msg)
      end
    end
    if not only_stage then rows[#rows + 1] = {
      "(total)", num(tot.depth) .. "/" .. num(tot.cap), num(tot.inflt), "",
      num(tot.del), num(tot.nack), num(tot.drop), num(tot.dead), "", "", "",
      "", "",
    } end
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
    text[#text + 1] = fmt("%s: workers=%s loaned=%s/%s loans=%s " ..
      "accepted=%s completed=%s dead_lettered=%s dropped=%s %sin_system=%s " ..
      "callbacks=%s%s%s%s",
      bus_name(bs, e.index), num(bs.workers), num(bs.workers_loaned),
      num(bs.max_loans),
      num(bs.loans), num(bs.accepted), num(bs.completed),
      num(bs.dead_lettered), num(bs.dropped),
      (bs.handed_off or 0) > 0 and "handed_off=" .. num(bs.handed_off) .. " "
        or "", num(bs.in_system), num(bs.callbacks_pending) ..
        ((bs.suspended or 0) > 0 and " suspended=" .. num(bs.suspended)
          or "") .. ((bs.waits_uncovered or 0) > 0 and " uncovered_waits=" ..
          num(bs.waits_uncovered) or ""), journal,
      bs.paused and " paused" or "", bs.closed and " closed" or "")
    local cps = per_second(e.bus, now, bs.completed,
                           function(b) return b.completed end)
    local dps = per_second(e.bus, now, bs.dead_lettered,
                           function(b) return b.dead end)
    local window
    for _, s in pairs(bs.stages or {}) do window = window or s.window end
    text[#text + 1] = fmt("  throughput: %s completed/s, %s dead-lettered/s " ..
                          "(itineraries, last 1 s)%s", num(cps), num(dps),
                          window and fmt("; sojourn99, service99: last %s s",
                                         num(window)) or "")
    text[#text + 1] = memory_line(bs)
    for _, l in ipairs(render(rows)) do text[#text + 1] = "  " .. l end
    for _, l in ipairs(remotes) do text[#text + 1] = l end
    for _, l in ipairs(errs) do
      text[#text + 1] = "  last reload error: " .. l
    end
    for _, l in ipairs(lasts) do text[#text + 1] = l end
    ::next_bus::
  end
  return printable(concat(text, "\n") .. "\n", true)
end

-- ---- top(): a sparkline per stage from the history ---------------------

local BLOCKS = { "\u{2581}", "\u{2582}", "\u{2583}", "\u{2584}",
                 "\u{2585}", "\u{2586}", "\u{2587}", "\u{2588}" }
local SPARK_SECONDS = 60

-- One line of unicode blocks for values (NaN, a second without a sample,
-- is a space), scaled to their largest; "" when there is no history.
local function sparkline(values)
  local max = 0
  for _, v in ipairs(values) do
    if v == v and v > max then max = v end
  end
  local cells = {}
  for i, v in ipairs(values) do
    if v ~= v then cells[i] = " "
    elseif max <= 0 then cells[i] = BLOCKS[1]
    else cells[i] = BLOCKS[1 + math.floor(v / max * 7 + 0.5)] end
  end
  return concat(cells), max
end
M.sparkline = sparkline

-- What top() draws: the stats table, then per stage the deliveries per
-- second of the last minute as a sparkline (from the history that
-- /history.json serves), its peak, and the seconds it was shedding.
function M.format_top()
  local text = { M.format_stats() }
  for _, e in ipairs(snapshot()) do
    local bname = bus_name(e.stats, e.index)
    local names = stage_names(e.stats)
    local w = 0
    for _, n in ipairs(names) do if #n > w then w = #n end end
    local lines = {}
    for _, n in ipairs(names) do
      local d = C.history(bname, n, "delivered", SPARK_SECONDS)
      if d and #d > 0 then
        local line, max = sparkline(d)
        local shed = 0
        for _, v in ipairs(C.history(bname, n, "shedding", SPARK_SECONDS)
                           or {}) do
          if v == v and v > 0 then shed = shed + 1 end
        end
        lines[#lines + 1] = fmt("  %s%s  %s%s  peak %s/s%s", n,
          (" "):rep(w - #n), (" "):rep(SPARK_SECONDS - #d), line, num(max),
          shed > 0 and fmt(", shedding %d s", shed) or "")
      end
    end
    if #lines > 0 then
      text[#text + 1] = fmt("%s: delivered/s, the last %d s (oldest left)\n",
                            bname, SPARK_SECONDS)
      text[#text + 1] = concat(lines, "\n") .. "\n"
    end
  end
  return concat(text)
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
    lines[#lines + 1] = fmt("%s: %s workers, %d stage%s%s%s",
      bus_name(e.stats, e.index),
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

-- stats([stage]): { [stage] = stage stats } over every live bus (a name
-- used by several buses: the first bus's stage, the others as "name#2",
-- ...); its tostring is the aligned table, so typing stats() at the REPL
-- prints it.  stats("fetch") (or "fetch#2"): that stage alone, in both.
local stats_mt = { __tostring = function(t)
  return (rawget(getmetatable(t), "text") or ""):gsub("\n$", "")
end }
function G.stats(stage)
  local only_bus
  if stage ~= nil then
    if type(stage) ~= "string" then
      C.fail("stats: the stage must be a name (a string), as stats() " ..
           "lists them: stats() or stats(\"name\")")
    end
    local name
    only_bus, name = M.resolve(stage)
    if not only_bus then C.fail("stats: no such stage '" .. stage .. "'") end
    local s = only_bus:stats(name)
    return setmetatable({ [stage] = s }, {
      __tostring = stats_mt.__tostring,
      text = M.format_stats(only_bus, name) })
  end
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
      local st = b:stats()
      out(fmt("%s: %s workers\n", bus_name(st, i), num(st.workers)))
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
    local st = b:stats()
    out(fmt("%s: %s workers\n", bus_name(st, i), num(st.workers)))
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

-- What errors(stage) and dlq(stage) read: { {bus, name} } for one stage
-- ("name#N" as stats() names it), or { {bus} } for every bus.  Raises for
-- a bad or unknown stage, naming the helper.
local function targets(what, stage)
  if stage ~= nil and type(stage) ~= "string" then
    fail(what .. ": stage name must be a string")
  end
  if stage then
    local b, name = resolve(stage)
    if not b then fail(what .. ": no such stage '" .. stage .. "'") end
    return { { b, name } }
  end
  local list = {}
  for _, b in ipairs(buses()) do list[#list + 1] = { b } end
  return list
end

-- errors([stage]): the recent errors (bus:errors()) of one stage ("name#N"
-- as stats() names it) or of every stage of every bus, newest first, each
-- whole (tracebacks included).  Prints; returns nothing.
function G.errors(stage)
  local list = targets("errors", stage)
  local n = 0
  for i, x in ipairs(list) do
    local ok, errs = pcall(x[1].errors, x[1], x[2])
    for _, e in ipairs(ok and errs or {}) do
      n = n + 1
      local head = fmt("%s%s  %s%s\n",
                       #list > 1 and bus_name(x[1]:stats(), i) .. ": " or "",
                       e.stage, when(e.time),
                       e.repeats > 1 and fmt("  x%d since %s", e.repeats,
                                             when(e.first)) or "")
      out(head .. "  " .. printable(e.message):gsub("\n", "\n  ") .. "\n")
    end
  end
  if n == 0 then
    out(stage and ("no errors in stage '" .. stage .. "'\n") or "no errors\n")
  end
end

-- s as valid UTF-8: each byte that does not start a valid sequence
-- becomes U+FFFD (as /dlq.json writes them).
local function utf8_valid(s)
  if utf8.len(s) then return s end
  local parts, i, n = {}, 1, #s
  while i <= n do
    if utf8.len(s, i, i) then
      local j = utf8.offset(s, 2, i) or n + 1
      parts[#parts + 1] = s:sub(i, j - 1)
      i = j
    else
      parts[#parts + 1] = "\239\191\189"
      i = i + 1
    end
  end
  return concat(parts)
end

-- json(...): its arguments as one line of JSON (one value, or an array of
-- several): what `seda-lua attach --json SOCK 'expr'` prints.  seda.null
-- (cjson.null) is null; strings that are not UTF-8 have U+FFFD for each
-- bad byte, so the line is always valid JSON.
local function to_json(v, seen)
  local t = type(v)
  if v == nil or v == seda.null then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    return fmt("%.17g", v)
  end
  if t == "string" then
    return '"' .. utf8_valid(v):gsub('[%c"\\]', function(c)
      local b = c:byte()
      if c == '"' then return '\\"' elseif c == "\\" then return "\\\\"
      elseif c == "\n" then return "\\n" elseif c == "\t" then return "\\t"
      end
      return fmt("\\u%04x", b)
    end) .. '"'
  end
  if t == "table" then
    seen = seen or {}
    if seen[v] then return '"(cycle)"' end
    seen[v] = true
    local n = #v
    local count = 0
    for _ in pairs(v) do count = count + 1 end
    local parts = {}
    if n > 0 and count == n then
      for i = 1, n do parts[i] = to_json(v[i], seen) end
      seen[v] = nil
      return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      parts[#parts + 1] = to_json(tostring(k)) .. ":" .. to_json(v[k], seen)
    end
    seen[v] = nil
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return to_json(tostring(v))
end
M.to_json = to_json

local function json_line(...)
  local n = select("#", ...)
  if n == 0 then return "[]\n" end
  if n == 1 then return to_json((...)) .. "\n" end
  local t, parts = table.pack(...), {}
  for i = 1, n do parts[i] = to_json(t[i]) end
  return "[" .. concat(parts, ",") .. "]\n"
end

function G.json(...) out(json_line(...)) end

-- show_json(print, ...): a command's results as one line of JSON (one
-- value, an array of several, [] for none): `seda-lua attach --json`.
function M.show_json(printf, ...) out(json_line(...)) end

-- tap(stage [, n [, secs]]): print the next n (10) envelopes entering a
-- stage ("name#N" as stats() names it), as they enter, waiting up to secs
-- (10) in all.  Watching costs the stage nothing when nobody taps.
function G.tap(stage, n, secs)
  if type(stage) ~= "string" then
    fail("usage: tap(stage [, n = 10 [, seconds = 10]]): print the next n " ..
         "envelopes entering stage (a name, as stats() lists them), e.g. " ..
         "tap(\"orders\", 5)")
  end
  local b, name = resolve(stage)
  if not b then fail("tap: no such stage '" .. stage .. "'") end
  local got, missed = b:tap(name, n or 10, secs or 10)
  for _, e in ipairs(got) do
    local h = {}
    for k, v in pairs(e.headers) do h[#h + 1] = k .. "=" .. v end
    table.sort(h)
    local p = e.payload ~= nil and M.pretty(e.payload)
              or e.payload_preview or ""
    if #p > 100 then p = p:sub(1, 97) .. "..." end
    out(printable(fmt("%s %s attempt %d%s  ", name, e.id, e.attempts,
                      #h > 0 and " {" .. table.concat(h, ", ") .. "}" or ""))
        .. printable(p, true) .. "\n")
  end
  if #got == 0 then out("nothing entered '" .. name .. "'\n") end
  if missed > 0 then out(fmt("(%d missed: shown slower than they came)\n", missed)) end
end

-- dlq([stage]): the dead letters each stage keeps (bus:dead_letters()),
-- newest first, each with why: reason, the last error, attempts, when,
-- and the missing stage of a no_such_stage.  Prints; returns nothing.
function G.dlq(stage)
  local list = targets("dlq", stage)
  local n = 0
  for i, x in ipairs(list) do
    local ok, dls = pcall(x[1].dead_letters, x[1], x[2])
    for _, d in ipairs(ok and dls or {}) do
      n = n + 1
      local p = d.payload ~= nil and M.pretty(d.payload)
                or d.payload_preview or ""
      if #p > 100 then p = p:sub(1, 97) .. "..." end
      -- Every field is shown through printable: an id, a reason, a
      -- missing stage or an error can say anything.
      out(fmt("%s%s %s %s  %s attempts=%d%s%s\n  payload %s\n",
              #list > 1 and bus_name(x[1]:stats(), i) .. ": " or "",
              printable(d.stage), printable(d.id), when(d.at),
              printable(d.reason), d.attempts,
              d.missing and " stage=" .. printable(d.missing) or "",
              d.error and "\n  error " .. printable(d.error) or "",
              printable(p, true)))
    end
  end
  if n == 0 then
    out(stage and ("no dead letters in stage '" .. stage .. "'\n")
        or "no dead letters\n")
  end
end

local HELP = [[
seda-lua REPL -- Lua statements and expressions (=expr prints too); results
are pretty-printed (tables as indented key = value, cut when deep or long).
The buses keep running while you type.
  stats([stage])             table of every stage of every live bus, stages
                             in declaration (pipeline) order (returns
                             { [stage] = stats }; tostring gives the table);
                             stats("fetch"): that stage only
  top([seconds])             stats redrawn every `seconds` (default 1) until
                             a key is pressed, with each stage's delivered/s
                             over the last 60 s as a sparkline
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
  tap(stage, [n], [secs])    print the next n envelopes entering stage, live
  dlq([stage])               the dead letters kept per stage, newest first,
                             with why (reason, last error, attempts, when)
  errors([stage])            the recent errors (handler errors with their
                             tracebacks, hop timeouts...), newest first: the
                             last 32 distinct ones per stage, repeats folded
  seda.buses()               the live bus objects in declaration order,
                             each also by name (seda.buses().orders);
                             bus:stats([stage]) one bus's figures
  seda.timer(delay, fn)      run fn once after delay seconds, on this state
  seda.every(interval, fn)   ... every interval seconds; both return a
                             handle: handle:cancel(), handle:unref() (it
                             keeps no plain run going), handle:ref()
  seda.sleep(seconds)        wait (here: blocks the prompt; in a handler it
                             suspends the call: its worker serves others)
  seda.http.request{url=, method=, headers=, body=, timeout=, max_size=,
                    follow=} -> {status=, headers=, body=} or nil, err
  seda.socket.tcp()          a LuaSocket-style TCP object: connect, send,
                             receive, settimeout, close, setkeepalive...
  seda.blocking(fn, ...)     fn(...) with the worker lent (a blocking C
                             call); stage option blocking = true for all
  help()                     this text
Columns: depth/cap queue depth and capacity; inflt envelopes being handled /
concurrency (the permits), "(n susp)" of them suspended on a network
wait; rate/s deliveries per second over the last
second; shed publishes refused by adaptive shedding ("*": shedding now);
dly retries waiting out their backoff; sojourn99 queue wait (admitted ->
handler start) and service99 handler run time, p99 of the recent window;
ver handler code version ("!" = the last reload failed).  The bus line: loaned=now/max loan threads standing
in for workers blocked inside handlers, loans= loans so far; handed_off=
itineraries that left for remote stages; throughput: itineraries
completed (each counted once) and dead-lettered per second; memory: bytes
held by each worker's Lua state (w0 = seda.worker 0).
Remote stages (NATS JetStream) get two more lines: the connection state,
url, stream and consumer; then JetStream's pending / unacknowledged /
waiting pull requests for the consumer ("?" until it answered), what
this process published (publishing = awaiting JetStream's
acknowledgement), took in, acked, naked, termed, dead-lettered as bad
messages, holds, and the on_complete callbacks it awaits.
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

-- Per stage of bus b: { name = { dropped=, depth=, in_flight=, pull=,
-- durable= } }.
local function stage_counts(b)
  local ok, st = pcall(b.stats, b)
  local t = {}
  if not ok or type(st) ~= "table" then return t end
  for name, s in pairs(st.stages or {}) do
    t[name] = { dropped = s.dropped or 0, depth = s.depth or 0,
                in_flight = s.in_flight or 0, pull = s.consumers == 0,
                durable = s.durable }
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

-- settle(): the same for a plain run kept alive by a listener or a
-- timer (cli_plain): true once no bus has work, false on a signal.
M.settle = function() return settle_all() end

-- When bus b's remote stages have all lost their server and no handler
-- of a local stage is running: what b still holds can complete only
-- through that server (acks, completions, remote hops), and JetStream
-- redelivers what it had handed out to other consumers, so waiting out
-- the drain gains nothing.  Returns the line saying so, or nil.
local function remote_gone(b)
  local ok, st = pcall(b.stats, b)
  if not ok or type(st) ~= "table" then return nil end
  local urls, held, remote = {}, 0, false
  for name, s in pairs(st.stages or {}) do
    local r = s.remote
    if r then
      remote = true
      if r.state == "connected" then return nil end
      held = held + (r.held or 0)
      urls[r.url or "?"] = true
    elseif (s.in_flight or 0) > 0 then
      return nil                          -- a local handler still runs
    end
  end
  if not remote then return nil end
  local u = {}
  for k in pairs(urls) do u[#u + 1] = k end
  sort(u)
  return fmt("drain of bus '%s' ended: the NATS server is unreachable " ..
             "(%s) and what the bus still holds can only complete through " ..
             "it; JetStream redelivers the messages handed out here%s to " ..
             "other consumers", st.name or "?", concat(u, ", "),
             held > 0 and fmt(" (%d held)", held) or "")
end

function M.finish(drain, wait_first)
  local deadline
  local stopped, timed_out, unreachable = false, false, false
  local total, pull_left, kept, seen = 0, {}, {}, {}
  if wait_first then stopped = not settle_all() end
  while true do
    local b = buses()[1]
    if not b or seen[b] then break end
    seen[b] = true
    -- Listeners stop accepting, as bus:shutdown does first (at
    -- SIGINT/SIGTERM the program stops accepting, answers what is in
    -- flight, and exits).
    C.quiesce(b)
    pcall(b.pause, b)
    deadline = deadline or seda.now() + drain
    while not stopped do
      local left = deadline - seda.now()
      if b:wait(left > 0.05 and 0.05 or (left > 0 and left or 0)) then break end
      if C.drain_stopped() then stopped = true; break end
      if seda.now() >= deadline then timed_out = true; break end
      local gone = remote_gone(b)
      if gone then
        C.log("warn", nil, gone)
        unreachable = true
        break
      end
    end
    local before = stage_counts(b)
    b:shutdown(0)
    for name, a in pairs(stage_counts(b)) do
      local p = before[name]
      local n = a.dropped - (p and p.dropped or 0)
      if n > 0 and a.durable then
        -- A durable stage's journal keeps them: the next run that
        -- declares the stage delivers them.  Not lost.
        kept[#kept + 1] = { name = name, n = n, pull = p and p.pull }
      else
        total = total + n
        -- Left queued in a pull stage: nothing received it.
        if n > 0 and p and p.pull then
          pull_left[#pull_left + 1] = { name = name, n = n }
        end
      end
    end
  end
  if #kept > 0 then
    sort(kept, function(x, y) return x.name < y.name end)
    local where, nkept = {}, 0
    for _, k in ipairs(kept) do
      where[#where + 1] = fmt("%s in %sstage '%s'", plural(k.n, "envelope"),
                              k.pull and "durable pull " or "durable ", k.name)
      nkept = nkept + k.n
    end
    C.log("info", nil, fmt("%s kept at exit in the journal: %s; the next " ..
          "run that declares the stage delivers %s", plural(nkept,
          "envelope was", "envelopes were"), concat(where, "; "),
          nkept == 1 and "it" or "them"))
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
  if unreachable then
    why[#why + 1] = "the NATS server was unreachable"
  end
  if stopped then
    why[#why + 1] = "a signal stopped the drain"
  elseif timed_out then
    why[#why + 1] = fmt("the drain did not finish within %gs (--drain)",
                        drain)
  end
  if #why == 0 or (pulled < total and not stopped and not timed_out and
                   not unreachable) then
    why[#why + 1] = plural(total - pulled, "envelope") ..
                    " still queued or in flight"
  end
  C.warn(fmt("%s dropped at exit: %s", plural(total, "envelope was",
             "envelopes were"), concat(why, "; ")))
  return false
end

-- ---- Prometheus exposition -------------------------------------------
-- M.metrics() is lua/seda/metrics.lua's (src/cli/cli_metrics.c installs it
-- into M after this file has run); it uses M.snapshot, M.stage_names and
-- M.rate_of.

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
      C.log("info", stage, fmt("watch: reloaded stage '%s' (%s): " ..
        "version %s", stage, why, num(s and s.version)))
    else
      C.log("error", stage, fmt("watch: reload of stage '%s' (%s) " ..
        "failed, keeping version %s: %s", stage, why,
        num(s and s.version), tostring(err)))
    end
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
