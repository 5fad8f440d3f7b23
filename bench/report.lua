-- SPDX-License-Identifier: MIT
-- bench/report.lua OUTDIR GNUPLOT_SCRIPT RESULTS.jsonl... -- run by
-- bench/report.
--
-- Reads the JSON rows of one or more benchmark runs and writes
-- OUTDIR/report.md (Markdown tables: median over trials, min-max) and
-- GNUPLOT_SCRIPT, a gnuplot script with the data inline that draws one
-- chart per family into OUTDIR: capacity.svg, count.svg, pipeline.svg,
-- durable.svg, fanout.svg and firehose.svg.  Every bar or point is the
-- median over trials with a min-max bar; throughput charts draw the
-- floors of the run the rows came from (the empty Lua call and the
-- mutex+condvar ring) as dashed lines.  Rows that did not drain are listed
-- but never averaged in.

local outdir, gpfile = arg[1], arg[2]
local files = { table.unpack(arg, 3) }
assert(outdir and gpfile and #files > 0,
       "usage: report.lua OUTDIR GNUPLOT_SCRIPT RESULTS.jsonl...")
local file = table.concat(files, ", ")

-- The rows are flat objects of strings, numbers, booleans and null; each
-- remembers which file (run) it came from, for its floors.
local rows = {}
for fi, name in ipairs(files) do
  for line in io.lines(name) do
    if line:match("^%s*{") then
      local r = { _run = fi }
      for k, q, v in line:gmatch('"([%w_]+)":("?)([^,}"]*)') do
        if q == '"' then r[k] = v
        elseif v == "true" then r[k] = true
        elseif v == "false" then r[k] = false
        elseif v ~= "null" then r[k] = tonumber(v) end
      end
      rows[#rows + 1] = r
    end
  end
end

local function select(pred)
  local out = {}
  for _, r in ipairs(rows) do
    if pred(r) then out[#out + 1] = r end
  end
  return out
end

local function values(rs, field)
  local v = {}
  for _, r in ipairs(rs) do
    if r.drained ~= false and type(r[field]) == "number" then
      v[#v + 1] = r[field]
    end
  end
  table.sort(v)
  return v
end

local function median(v)
  local n = #v
  if n == 0 then return nil end
  if n % 2 == 1 then return v[(n + 1) // 2] end
  return (v[n // 2] + v[n // 2 + 1]) / 2
end

local function rate(x)
  if not x then return "–" end
  if x >= 1e6 then return string.format("%.2f M", x / 1e6) end
  if x >= 1e3 then return string.format("%.1f k", x / 1e3) end
  return string.format("%.0f", x)
end

local function num(x, fmt)
  if not x then return "–" end
  return string.format(fmt or "%.1f", x)
end

-- "median (min–max)" of a field over rows, formatted by f.
local function cell(rs, field, f)
  local v = values(rs, field)
  if #v == 0 then return "–" end
  if #v == 1 then return f(v[1]) end
  return string.format("%s (%s–%s)", f(median(v)), f(v[1]), f(v[#v]))
end

local function med(rs, field) return median(values(rs, field)) end

local function undrained(rs)
  local n = 0
  for _, r in ipairs(rs) do
    if r.drained == false then n = n + 1 end
  end
  return n
end

local md = {}
local function out(fmt, ...) md[#md + 1] = string.format(fmt, ...) end

local cpus = select(function(r) return r.config == "cap8" end)[1]
out("# seda-lua benchmark report")
out("")
out("Source: `%s` (%d rows).  Each cell: median over trials (min–max); " ..
    "rows that did not drain are never averaged in.  Throughput in " ..
    "envelopes/s (pipeline: itineraries/s); latency in µs, nearest rank.%s",
    file, #rows, cpus and string.format("  P = %d producers.", cpus.producers) or "")
out("")

-- ---- floors ----
out("## Floors")
out("")
out("| floor | rate/s |")
out("|---|---|")
for _, name in ipairs{"lua_call", "lua_call_1arg", "mutex_ring"} do
  local rs = select(function(r) return r.config == "floor" and r.name == name end)
  if #rs > 0 then out("| %s | %s |", name, cell(rs, "rate_per_s", rate)) end
end
out("")

-- ---- capacity curve ----
local CAP = {
  {"cap1", "c"}, {"cap1", "lua"}, {"cap8", "c"}, {"cap8", "lua"},
  {"cap1_table", "lua"},
}
local FRACS = {0, 0.5, 1.0, 1.5}
out("## Capacity curve (cap1, cap8, cap1_table)")
out("")
out("Load 0 is the unpaced calibration (its best run is max_throughput).")
out("")
out("| config | handler | load | target/s | throughput/s | achieved/target | p50 µs | p99 µs | p999 µs | drain tail ms | floor ratio | not drained |")
out("|---|---|---|---|---|---|---|---|---|---|---|---|")
for _, ch in ipairs(CAP) do
  for _, f in ipairs(FRACS) do
    local rs = select(function(r)
      return r.config == ch[1] and r.handler == ch[2] and r.load_fraction == f
    end)
    if #rs > 0 then
      for _, r in ipairs(rs) do
        if r.target_rate_eps and r.target_rate_eps > 0 then
          r.achieved_ratio = r.throughput_eps / r.target_rate_eps
        end
      end
      out("| %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %d |",
          ch[1], ch[2], f, rate(med(rs, "target_rate_eps")),
          cell(rs, "throughput_eps", rate),
          f > 0 and cell(rs, "achieved_ratio", function(x) return num(x, "%.2f") end) or "–",
          cell(rs, "p50_us", num), cell(rs, "p99_us", num),
          cell(rs, "p999_us", num), cell(rs, "drain_tail_ms", function(x) return num(x, "%.0f") end),
          cell(rs, "floor_ratio", function(x) return num(x, "%.3f") end),
          undrained(rs))
    end
  end
end
out("")

-- ---- firehose ----
out("## Firehose (seq, par, chan)")
out("")
out("| config | handler | producers | channels | throughput/s | p50 µs | p99 µs | max µs | floor ratio | not drained |")
out("|---|---|---|---|---|---|---|---|---|---|")
for _, c in ipairs{"seq", "par", "chan"} do
  for _, h in ipairs{"c", "lua"} do
    local rs = select(function(r) return r.config == c and r.handler == h end)
    if #rs > 0 then
      out("| %s | %s | %d | %d | %s | %s | %s | %s | %s | %d |", c, h,
          rs[1].producers, rs[1].channels, cell(rs, "throughput_eps", rate),
          cell(rs, "p50_us", num), cell(rs, "p99_us", num),
          cell(rs, "max_us", num),
          cell(rs, "floor_ratio", function(x) return num(x, "%.3f") end),
          undrained(rs))
    end
  end
end
out("")

-- ---- pipeline ----
local pipe = select(function(r) return r.config == "pipeline" end)
if #pipe > 0 then
  out("## Pipeline (4 stages, routing slip)")
  out("")
  out("Lua handlers, and the same pipeline with C consumers (each hop " ..
      "increments a counter in the payload's bytes).")
  out("")
  out("| handler | producers | itineraries/s | handler calls/s | p50 µs | p99 µs | lost | not drained |")
  out("|---|---|---|---|---|---|---|---|")
  local seen = {}
  for _, r in ipairs(pipe) do
    local key = (r.handler or "lua") .. "/" .. r.producers
    if not seen[key] then
      seen[key] = true
      local rs = select(function(x)
        return x.config == "pipeline" and x.producers == r.producers and
               (x.handler or "lua") == (r.handler or "lua")
      end)
      local lost = 0
      for _, x in ipairs(rs) do lost = lost + (x.lost or 0) end
      out("| %s | %d | %s | %s | %s | %s | %d | %d |", r.handler or "lua",
          r.producers,
          cell(rs, "itineraries_per_s", rate),
          cell(rs, "handler_calls_per_s", rate),
          cell(rs, "p50_us", num), cell(rs, "p99_us", num), lost,
          undrained(rs))
    end
  end
  out("")
end

-- ---- durable ----
local dur = select(function(r) return r.config and r.config:match("^durable") end)
if #dur > 0 then
  out("## Durable (Lua handlers, one C producer, at_least_once journal)")
  out("")
  out("durable1: one seda_stage_publish per envelope; durable_batch: " ..
      "seda_publish_many in batches of 100 (one commit per call); " ..
      "durable_pipeline: d1..d4 all durable, slip {d2, d3, d4}, fed in " ..
      "batches of 100 (throughput in itineraries/s).  Elapsed runs from " ..
      "the first publish to drained.  Publish latency: time inside the " ..
      "publish call, one sample per call.  Rows left: journal rows after " ..
      "a drained shutdown (should be 0).")
  out("")
  out("| config | sync | throughput/s | publish p50 µs | publish p99 µs | p50 µs | p99 µs | lost | rows left | not drained |")
  out("|---|---|---|---|---|---|---|---|---|---|")
  for _, c in ipairs{"durable1", "durable_batch", "durable_pipeline"} do
    for _, s in ipairs{"normal", "full"} do
      local rs = select(function(r) return r.config == c and r.sync == s end)
      if #rs > 0 then
        local lost, left = 0, 0
        for _, x in ipairs(rs) do
          lost = lost + (x.lost or 0)
          left = left + (x.journal_rows_left or 0)
        end
        out("| %s | %s | %s | %s | %s | %s | %s | %d | %d | %d |", c, s,
            cell(rs, "throughput_eps", rate),
            cell(rs, "publish_p50_us", num), cell(rs, "publish_p99_us", num),
            cell(rs, "p50_us", num), cell(rs, "p99_us", num), lost, left,
            undrained(rs))
      end
    end
  end
  out("")
end

-- ---- durable_group ----
local grp = select(function(r) return r.config == "durable_group" end)
if #grp > 0 then
  out("## Durable group commit (Lua handlers publishing into a durable stage)")
  out("")
  out("1, 8 and 64 handlers (2 workers) each publishing into a durable " ..
      "stage; their publishes wait suspended and share group commits.  " ..
      "Publish latency: seda.publish's wait for its commit.  Beside it, " ..
      "SQLite alone on the same schema and pragmas, one row and 64 rows " ..
      "a transaction (rows/s).")
  out("")
  out("| sync | publishers | throughput/s | publish p50 µs | publish p99 µs | fsyncs/s (SQLite: commits/s) | publishes a commit | not drained |")
  out("|---|---|---|---|---|---|---|---|")
  for _, s in ipairs{"normal", "full"} do
    for _, p in ipairs{1, 8, 64} do
      local rs = select(function(r)
        return r.config == "durable_group" and not r.reference and
               r.sync == s and r.publishers == p
      end)
      if #rs > 0 then
        out("| %s | %d | %s | %s | %s | %s | %s | %d |", s, p,
            cell(rs, "throughput_eps", rate), cell(rs, "publish_p50_us", num),
            cell(rs, "publish_p99_us", num), cell(rs, "fsyncs_per_s", rate),
            cell(rs, "publishes_per_commit", num), undrained(rs))
      end
    end
    for _, k in ipairs{1, 64} do
      local rs = select(function(r)
        return r.config == "durable_group" and r.reference == "sqlite" and
               r.sync == s and r.rows_per_txn == k
      end)
      if #rs > 0 then
        out("| %s | SQLite, %d a transaction | %s | | | %s | | |", s, k,
            cell(rs, "throughput_eps", rate), cell(rs, "txns_per_s", rate))
      end
    end
  end
  out("")
end

-- ---- reload ----
local rel = select(function(r) return r.config == "reload" end)
if #rel > 0 then
  out("## Reload (cap1, Lua, bus:reload every 100 ms)")
  out("")
  out("| trial | load | throughput/s | published | delivered | delivered = published | reloads | failed | drained |")
  out("|---|---|---|---|---|---|---|---|---|")
  for _, r in ipairs(rel) do
    out("| %d | %.1f | %s | %d | %d | %s | %d | %d | %s |", r.trial,
        r.load_fraction, rate(r.throughput_eps), r.total, r.delivered,
        tostring(r.total == r.delivered), r.reloads or 0,
        r.reload_failed or 0, tostring(r.drained))
  end
  out("")
end

-- ---- codec, memory ----
local codec = select(function(r) return r.config == "codec" end)
if #codec > 0 then
  out("## Codec")
  out("")
  out("Encode + decode of a 5-field table (%d bytes), one thread: %s ns per round trip.",
      codec[1].bytes, cell(codec, "ns_per_roundtrip", num))
  out("")
end
local cnt = select(function(r) return r.config == "count" end)
if #cnt > 0 then
  out("## count (the hand-off check)")
  out("")
  out("One stage (capacity 1024, block, concurrency = producers); a C consumer that only counts, or a Lua handler that only reads `env.payload`; 8-byte payloads.  P2/P1: median with 2 producers over median with 1.")
  out("")
  out("| handler | producers | throughput/s | P2/P1 | floor ratio | trials | not drained |")
  out("|---|---|---|---|---|---|---|")
  for _, h in ipairs{"c", "lua"} do
    local one = select(function(r)
      return r.config == "count" and r.handler == h and r.producers == 1 end)
    for _, np in ipairs{1, 2} do
      local rs = select(function(r)
        return r.config == "count" and r.handler == h and r.producers == np end)
      if #rs > 0 then
        local ratio = (np == 2 and #one > 0)
          and string.format("%.2f", med(rs, "throughput_eps") / med(one, "throughput_eps"))
          or "–"
        local fr = h == "lua" and string.format("%.3f", med(rs, "floor_ratio")) or "–"
        out("| %s | %d | %s | %s | %s | %d | %d |", h, np,
            cell(rs, "throughput_eps", rate), ratio, fr, #rs, undrained(rs))
      end
    end
  end
  out("")
end
local fan = select(function(r) return r.config == "fanout" end)
if #fan > 0 then
  out("## fanout (handlers that publish, managed blocking)")
  out("")
  out("Four `src` handlers each publish 100 000 envelopes into `sink` on a bus of 2 workers; a small `sink` (64) makes the workers wait inside `src`, loan threads drain it; the large capacity never fills (the baseline).")
  out("")
  out("| handler | sink capacity | deliveries/s | loans | loans peak | lost | not drained |")
  out("|---|---|---|---|---|---|---|")
  for _, h in ipairs{"c", "lua"} do
    local caps, list = {}, {}
    for _, r in ipairs(fan) do
      if r.handler == h and not caps[r.capacity] then
        caps[r.capacity] = true
        list[#list + 1] = r.capacity
      end
    end
    table.sort(list)
    for _, cap in ipairs(list) do
      local rs = select(function(r)
        return r.config == "fanout" and r.handler == h and r.capacity == cap end)
      local lost = 0
      for _, x in ipairs(rs) do lost = lost + (x.lost or 0) end
      out("| %s | %d | %s | %s | %s | %d | %d |", h, cap,
          cell(rs, "throughput_eps", rate), cell(rs, "loans", function(x) return num(x, "%.0f") end),
          cell(rs, "loans_peak", function(x) return num(x, "%.0f") end), lost, undrained(rs))
    end
  end
  out("")
end
local mem = select(function(r) return r.config == "memory" end)
if #mem > 0 then
  out("## Memory")
  out("")
  out("| payload | payload bytes | envelopes queued | bytes per envelope (RSS) |")
  out("|---|---|---|---|")
  for _, r in ipairs(mem) do
    out("| %s | %d | %d | %.1f |", r.payload, r.payload_bytes, r.count,
        r.bytes_per_envelope)
  end
  out("")
end
out("Charts (median over trials, min–max bars; dashed lines: the " ..
    "floors of the run): `capacity.svg`, `count.svg`, `pipeline.svg`, " ..
    "`durable.svg`, `fanout.svg`, `firehose.svg`.")

local f = assert(io.open(outdir .. "/report.md", "w"))
f:write(table.concat(md, "\n"), "\n")
f:close()

-- ---- gnuplot: one chart per family ----
local gp = {}
local function g(fmt, ...) gp[#gp + 1] = string.format(fmt, ...) end
local COLORS = { "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1",
                 "#76b7b2" }

-- {median, min, max} of field over rows scaled by k, or nil.
local function mmm(rs, field, k)
  local v = values(rs, field)
  if #v == 0 then return nil end
  k = k or 1
  return { median(v) * k, v[1] * k, v[#v] * k }
end

-- The floors (rate/s medians) of run `run`: { {name, value}, ... }.
local function floors_of(run, names)
  local out_ = {}
  for _, n in ipairs(names) do
    local rs = select(function(r)
      return r.config == "floor" and r.name == n and r._run == run
    end)
    local m = med(rs, "rate_per_s")
    if m then out_[#out_ + 1] = { n, m } end
  end
  return out_
end

local FLOOR_LABEL = { lua_call = "empty Lua call", mutex_ring = "mutex+condvar ring" }

local ndata = 0
-- A clustered bar chart with min-max bars.  spec: file, title, ylabel,
-- series (names), groups = { { label, { {med,min,max} or nil per series } } },
-- floors = { {name, value} } (same unit as the bars), scale (divide by).
local function bars(spec)
  local any = false
  for _, grp in ipairs(spec.groups) do
    for i = 1, #spec.series do if grp[2][i] then any = true end end
  end
  if not any then return false end
  ndata = ndata + 1
  local name = "$bars" .. ndata
  local lo, hi = math.huge, 0
  g("%s << EOD", name)
  for _, grp in ipairs(spec.groups) do
    local cells = { '"' .. grp[1] .. '"' }
    for i = 1, #spec.series do
      local v = grp[2][i]
      if v then
        cells[#cells + 1] = string.format("%.6g %.6g %.6g", v[1], v[2], v[3])
        lo, hi = math.min(lo, v[2]), math.max(hi, v[3])
      else
        cells[#cells + 1] = "NaN NaN NaN"
      end
    end
    g("%s", table.concat(cells, " "))
  end
  g("EOD")
  for _, fl in ipairs(spec.floors or {}) do
    lo, hi = math.min(lo, fl[2]), math.max(hi, fl[2])
  end
  if spec.file then
    g("reset")
    g("set terminal svg size 860,480 dynamic noenhanced font 'sans,11' background '#ffffff'")
    g("set output '%s/%s'", outdir, spec.file)
  end
  g("set title '%s'", spec.title)
  g("set ylabel '%s'", spec.ylabel)
  g("set style data histograms")
  g("set style histogram errorbars gap 1 lw 1")
  g("set style fill solid 0.85 border -1")
  g("set boxwidth 0.9")
  g("set grid ytics")
  g("set key top left")
  g("set logscale y")
  g("set yrange [%.6g:%.6g]", lo / 3, hi * 3)
  for i, fl in ipairs(spec.floors or {}) do
    g("set arrow %d from graph 0, first %.6g to graph 1, first %.6g nohead dt 2 lw 1.5 lc rgb '#555555'",
      i, fl[2], fl[2])
    g("set label %d '%s floor %s/s' at graph 0.99, first %.6g right offset 0,0.6 textcolor rgb '#555555'",
      i, FLOOR_LABEL[fl[1]] or fl[1], rate(fl[2] * (spec.scale or 1)), fl[2])
  end
  local parts = {}
  for i, sname in ipairs(spec.series) do
    local c = 2 + (i - 1) * 3
    parts[#parts + 1] = string.format("%s using %d:%d:%d%s title '%s' lc rgb '%s'",
      i == 1 and name or "''", c, c + 1, c + 2, i == 1 and ":xtic(1)" or "",
      sname, COLORS[i])
  end
  g("plot %s", table.concat(parts, ", "))
  g("unset arrow")
  g("unset label")
  g("unset logscale y")
  return true
end

local function rs_of(pred) return select(pred) end
local function run_of(rs) return rs[1] and rs[1]._run end
local function floors_for(rs, names, k)
  local run = run_of(rs)
  if not run then return {} end
  local fl = floors_of(run, names)
  for _, x in ipairs(fl) do x[2] = x[2] * (k or 1) end
  return fl
end
local M = 1e-6          -- charts in millions per second

-- capacity: calibration throughput, achieved/target and p99 by load.
do
  local groups, all = {}, {}
  for _, c in ipairs{ "cap1", "cap8", "cap1_table" } do
    local vals = {}
    for i, h in ipairs{ "c", "lua" } do
      local rs = rs_of(function(r)
        return r.config == c and r.handler == h and r.load_fraction == 0
      end)
      vals[i] = mmm(rs, "throughput_eps", M)
      for _, r in ipairs(rs) do all[#all + 1] = r end
    end
    groups[#groups + 1] = { c .. " (unpaced)", vals }
  end
  g("reset")
  g("set terminal svg size 860,1080 dynamic noenhanced font 'sans,11' background '#ffffff'")
  g("set output '%s/capacity.svg'", outdir)
  g("set multiplot layout 3,1 title 'Capacity family (cap1, cap8, cap1_table): median over trials, min–max bars'")
  g("set lmargin 12")
  bars{ series = { "C consumer", "Lua handler" },
        title = "calibration throughput (unpaced)",
        ylabel = "million envelopes / s (log)", groups = groups, scale = 1e6,
        floors = floors_for(all, { "mutex_ring", "lua_call" }, M) }
  -- The curve: achieved/target and p99 against load, with min-max bars.
  local curves = {}
  for i, ch in ipairs(CAP) do
    local pts = {}
    for _, fr in ipairs{ 0.5, 1.0, 1.5 } do
      local rs = rs_of(function(r)
        return r.config == ch[1] and r.handler == ch[2] and r.load_fraction == fr
      end)
      pts[#pts + 1] = { fr, mmm(rs, "achieved_ratio"), mmm(rs, "p99_us") }
    end
    curves[i] = pts
  end
  local have = false
  for _, pts in ipairs(curves) do
    for _, p in ipairs(pts) do if p[2] then have = true end end
  end
  if have then
    for i, pts in ipairs(curves) do
      g("$curve%d << EOD", i)
      for _, p in ipairs(pts) do
        local a, q = p[2] or { 0 / 0, 0 / 0, 0 / 0 }, p[3] or { 0 / 0, 0 / 0, 0 / 0 }
        g("%.2f %.6g %.6g %.6g %.6g %.6g %.6g", p[1] + (i - 3) * 0.012,
          a[1], a[2], a[3], q[1], q[2], q[3])
      end
      g("EOD")
    end
    g("set style data linespoints")
    g("set title 'the paced sweep: achieved / target'")
    g("set grid")
    g("set xrange [0.4:1.6]")
    g("set xtics (0.5, 1.0, 1.5)")
    g("set key outside right")
    g("set ylabel 'achieved / target'")
    g("set yrange [0:1.2]")
    local parts = {}
    for i, ch in ipairs(CAP) do
      parts[#parts + 1] = string.format("$curve%d using 1:2:3:4 with yerrorlines lw 2 pt 7 lc rgb '%s' title '%s/%s'",
                                        i, COLORS[i], ch[1], ch[2])
    end
    g("plot %s", table.concat(parts, ", "))
    g("set title 'the paced sweep: p99 latency'")
    g("set ylabel 'p99 latency (µs, log)'")
    g("set xlabel 'load fraction (of max throughput)'")
    g("set logscale y")
    g("set yrange [*:*]")
    parts = {}
    for i, ch in ipairs(CAP) do
      parts[#parts + 1] = string.format("$curve%d using 1:5:6:7 with yerrorlines lw 2 pt 7 lc rgb '%s' title '%s/%s'",
                                        i, COLORS[i], ch[1], ch[2])
    end
    g("plot %s", table.concat(parts, ", "))
  end
  g("unset multiplot")
end

-- count: the hand-off, one and two producers.
do
  local groups, all = {}, {}
  for _, np in ipairs{ 1, 2 } do
    local vals = {}
    for i, h in ipairs{ "c", "lua" } do
      local rs = rs_of(function(r)
        return r.config == "count" and r.handler == h and r.producers == np
      end)
      vals[i] = mmm(rs, "throughput_eps", M)
      for _, r in ipairs(rs) do all[#all + 1] = r end
    end
    groups[#groups + 1] = { np .. (np == 1 and " producer" or " producers"), vals }
  end
  bars{ file = "count.svg", series = { "C consumer", "Lua handler" },
        title = "count: the hand-off (median, min–max)", scale = 1e6,
        ylabel = "million envelopes / s (log)", groups = groups,
        floors = floors_for(all, { "mutex_ring", "lua_call" }, M) }
end

-- pipeline: 4 stages, Lua handlers and C consumers.
do
  local groups, all = {}, {}
  local seen = {}
  for _, r in ipairs(rows) do
    local h = r.handler or "lua"
    local key = h .. "/" .. tostring(r.producers)
    if r.config == "pipeline" and not seen[key] then
      seen[key] = true
      local rs = rs_of(function(x)
        return x.config == "pipeline" and x.producers == r.producers and
               (x.handler or "lua") == h
      end)
      for _, x in ipairs(rs) do all[#all + 1] = x end
      groups[#groups + 1] = { h .. ", " .. r.producers ..
        (r.producers == 1 and " producer" or " producers"),
        { mmm(rs, "itineraries_per_s", M), mmm(rs, "handler_calls_per_s", M) } }
    end
  end
  bars{ file = "pipeline.svg", series = { "itineraries / s", "handler calls / s" },
        title = "pipeline: 4 stages by routing slip (median, min–max)",
        ylabel = "million / s (log)", groups = groups, scale = 1e6,
        floors = floors_for(all, { "lua_call" }, M) }
end

-- durable: journal-bound.
do
  local groups, all = {}, {}
  for _, c in ipairs{ "durable1", "durable_batch", "durable_pipeline" } do
    local vals = {}
    for i, sy in ipairs{ "normal", "full" } do
      local rs = rs_of(function(r) return r.config == c and r.sync == sy end)
      vals[i] = mmm(rs, "throughput_eps", 1e-3)
      for _, r in ipairs(rs) do all[#all + 1] = r end
    end
    groups[#groups + 1] = { c, vals }
  end
  bars{ file = "durable.svg", series = { "sync = normal", "sync = full" },
        title = "durable: journaled stages (median, min–max)", scale = 1e3,
        ylabel = "thousand envelopes (or itineraries) / s (log)", groups = groups,
        floors = floors_for(all, { "mutex_ring" }, 1e-3) }
end

-- fanout: handlers that publish into a small stage, against a baseline.
do
  local groups, all = {}, {}
  local caps = {}
  for _, r in ipairs(rows) do
    if r.config == "fanout" then caps[r.capacity] = true end
  end
  local list = {}
  for c in pairs(caps) do list[#list + 1] = c end
  table.sort(list)
  for _, cap in ipairs(list) do
    local vals = {}
    for i, h in ipairs{ "c", "lua" } do
      local rs = rs_of(function(r)
        return r.config == "fanout" and r.handler == h and r.capacity == cap
      end)
      vals[i] = mmm(rs, "throughput_eps", M)
      for _, r in ipairs(rs) do all[#all + 1] = r end
    end
    groups[#groups + 1] = { "sink capacity " .. cap, vals }
  end
  bars{ file = "fanout.svg", series = { "C consumers", "Lua handlers" },
        title = "fanout: 4 handlers x 100 000 publishes, 2 workers (median, min–max)",
        ylabel = "million sink deliveries / s (log)", groups = groups, scale = 1e6,
        floors = floors_for(all, { "mutex_ring", "lua_call" }, M) }
end

-- firehose: seq, par, chan.
do
  local groups, all = {}, {}
  for _, c in ipairs{ "seq", "par", "chan" } do
    local vals = {}
    for i, h in ipairs{ "c", "lua" } do
      local rs = rs_of(function(r) return r.config == c and r.handler == h end)
      vals[i] = mmm(rs, "throughput_eps", M)
      for _, r in ipairs(rs) do all[#all + 1] = r end
    end
    groups[#groups + 1] = { c, vals }
  end
  bars{ file = "firehose.svg", series = { "C consumer", "Lua handler" },
        title = "Firehose: 200 000 envelopes unpaced (median, min–max)",
        ylabel = "million envelopes / s (log)", groups = groups, scale = 1e6,
        floors = floors_for(all, { "mutex_ring", "lua_call" }, M) }
end

f = assert(io.open(gpfile, "w"))
f:write(table.concat(gp, "\n"), "\n")
f:close()
