-- SPDX-License-Identifier: MIT
-- bench/report.lua RESULTS.jsonl OUTDIR -- run by bench/report.
--
-- Reads the JSON rows of one benchmark run and writes OUTDIR/report.md
-- (Markdown tables: median over trials, min-max; durable rows in a
-- "Durable" table by config and sync) and GNUPLOT_SCRIPT, a
-- gnuplot script with the data inline that draws OUTDIR/throughput.svg
-- (throughput by config and handler) and OUTDIR/capacity.svg (the capacity
-- curve: achieved/target and p99 against load fraction).  Rows that did
-- not drain are listed but never averaged in (WORKLOAD.md).

local file, outdir, gpfile = arg[1], arg[2] or "bench", arg[3]
assert(file, "usage: report.lua RESULTS.jsonl [OUTDIR [GNUPLOT_SCRIPT]]")
gpfile = gpfile or (outdir .. "/report.gp")

-- The rows are flat objects of strings, numbers, booleans and null.
local rows = {}
for line in io.lines(file) do
  if line:match("^%s*{") then
    local r = {}
    for k, q, v in line:gmatch('"([%w_]+)":("?)([^,}"]*)') do
      if q == '"' then r[k] = v
      elseif v == "true" then r[k] = true
      elseif v == "false" then r[k] = false
      elseif v ~= "null" then r[k] = tonumber(v) end
    end
    rows[#rows + 1] = r
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
  out("## Pipeline (4 Lua stages, routing slip)")
  out("")
  out("| producers | itineraries/s | handler calls/s | p50 µs | p99 µs | lost | not drained |")
  out("|---|---|---|---|---|---|---|")
  local seen = {}
  for _, r in ipairs(pipe) do
    if not seen[r.producers] then
      seen[r.producers] = true
      local rs = select(function(x) return x.config == "pipeline" and x.producers == r.producers end)
      local lost = 0
      for _, x in ipairs(rs) do lost = lost + (x.lost or 0) end
      out("| %d | %s | %s | %s | %s | %d | %d |", r.producers,
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
out("Charts: `throughput.svg` (throughput by config and handler), " ..
    "`capacity.svg` (capacity curve).")

local f = assert(io.open(outdir .. "/report.md", "w"))
f:write(table.concat(md, "\n"), "\n")
f:close()

-- ---- gnuplot ----
local gp = {}
local function g(fmt, ...) gp[#gp + 1] = string.format(fmt, ...) end

local function thr_of(config, handler)
  local rs = select(function(r)
    return r.config == config and r.handler == handler and
           (r.load_fraction == nil or r.load_fraction == 0)
  end)
  local m = med(rs, "throughput_eps")
  return m and string.format("%.4f", m / 1e6) or "NaN"
end

g("$thr << EOD")
for _, c in ipairs{"cap1", "cap8", "seq", "par", "chan", "cap1_table"} do
  g("%s %s %s", c, thr_of(c, "c"), thr_of(c, "lua"))
end
g("EOD")
for i, ch in ipairs(CAP) do
  g("$cap%d << EOD", i)
  for _, fr in ipairs{0.5, 1.0, 1.5} do
    local rs = select(function(r)
      return r.config == ch[1] and r.handler == ch[2] and r.load_fraction == fr
    end)
    local a, p = med(rs, "achieved_ratio"), med(rs, "p99_us")
    g("%.1f %s %s", fr, a and string.format("%.4f", a) or "NaN",
      p and string.format("%.2f", p) or "NaN")
  end
  g("EOD")
end
g("set terminal svg size 800,450 dynamic noenhanced font 'sans,11' background '#ffffff'")
g("set output '%s/throughput.svg'", outdir)
g("set title 'Throughput by config and handler (cap*: unpaced calibration; median)'")
g("set ylabel 'million envelopes / s'")
g("set style data histograms")
g("set style histogram clustered gap 1")
g("set style fill solid 0.85 border -1")
g("set boxwidth 0.9")
g("set grid ytics")
g("set yrange [0:*]")
g("set key top right")
g("plot $thr using 2:xtic(1) title 'C consumer' lc rgb '#4e79a7', '' using 3 title 'Lua handler' lc rgb '#f28e2b'")
g("reset")
g("set terminal svg size 800,700 dynamic noenhanced font 'sans,11' background '#ffffff'")
g("set output '%s/capacity.svg'", outdir)
g("set multiplot layout 2,1 title 'Capacity curve (median over trials)'")
g("set lmargin 12")
g("set grid")
g("set xrange [0.4:1.6]")
g("set xtics (0.5, 1.0, 1.5)")
g("set key outside right")
g("set ylabel 'achieved / target'")
g("set yrange [0:1.2]")
local colors = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1"}
local parts = {}
for i, ch in ipairs(CAP) do
  parts[#parts + 1] = string.format("$cap%d using 1:2 with linespoints lw 2 pt 7 lc rgb '%s' title '%s/%s'",
                                    i, colors[i], ch[1], ch[2])
end
g("plot %s", table.concat(parts, ", "))
g("set ylabel 'p99 latency (µs)'")
g("set xlabel 'load fraction (of max throughput)'")
g("set logscale y")
g("set yrange [*:*]")
parts = {}
for i, ch in ipairs(CAP) do
  parts[#parts + 1] = string.format("$cap%d using 1:3 with linespoints lw 2 pt 7 lc rgb '%s' title '%s/%s'",
                                    i, colors[i], ch[1], ch[2])
end
g("plot %s", table.concat(parts, ", "))
g("unset multiplot")

f = assert(io.open(gpfile, "w"))
f:write(table.concat(gp, "\n"), "\n")
f:close()
