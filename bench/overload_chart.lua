-- SPDX-License-Identifier: MIT
-- bench/overload_chart.lua RESULTS.jsonl OUT.svg -- the overload chart.
--
-- From the `overload_slow` rows of one run (C consumer, 100 us handler,
-- cap1 at load 1.5, paced in 20 ms ticks), the longest sojourn in each
-- 100 ms of the window, without shedding and with shed = {target =
-- 0.005}, and from the `overload_smooth` rows (the same paced in 1 ms
-- ticks) the one with shedding, when the file has them: a gnuplot script
-- on stdout that draws OUT.svg.  Trial 1 of each (the first pair).
local file, svg = arg[1], arg[2] or "bench/overload.svg"
assert(file, "usage: overload_chart.lua RESULTS.jsonl [OUT.svg]")

local series = {}                    -- [shed_target_ms] = { values }
local meta = {}                      -- (smooth: shed_target_ms + 100)
for line in io.lines(file) do
  local smooth = line:find('"config":"overload_smooth"', 1, true)
  if (smooth or line:find('"config":"overload_slow"', 1, true)) and
     line:find('"handler":"c"', 1, true) and line:find('"trial":1,', 1, true) then
    local target = tonumber(line:match('"shed_target_ms":([%d.]+)'))
    if target and smooth then target = target + 100 end
    local arr = line:match('"series_max_sojourn_ms":%[([^%]]*)%]')
    local bucket = tonumber(line:match('"series_bucket_ms":(%d+)')) or 100
    if target and arr then
      local v = {}
      for x in arr:gmatch("[^,]+") do v[#v + 1] = tonumber(x) end
      series[target] = v
      meta[target] = { bucket = bucket,
                       p99 = tonumber(line:match('"sojourn_p99_us":([%d.]+)')),
                       good = tonumber(line:match('"goodput_ratio":([%d.]+)')) }
    end
  end
end
if not series[0] or not series[5] then
  io.stderr:write("overload_chart: no overload_slow C rows with and without shed in ", file, "\n")
  os.exit(1)
end

local out = {}
local function p(...) out[#out + 1] = string.format(...) end
p("set terminal svg size 800,420 dynamic font 'sans,11'")
p("set output '%s'", svg)
p("set title 'cap1 at 1.5x load, 100 us handler: longest queue sojourn per %d ms'",
  meta[0].bucket)
p("set xlabel 'seconds into the window'")
p("set ylabel 'sojourn (ms)'")
p("set key top left")
p("set grid ytics")
p("set yrange [0:*]")
local function block(name, v, bucket)
  p("$%s << EOD", name)
  for i, x in ipairs(v) do p("%g %g", (i - 0.5) * bucket / 1000, x) end
  p("EOD")
end
block("noshed", series[0], meta[0].bucket)
block("shed", series[5], meta[5].bucket)
if series[105] then block("smooth", series[105], meta[105].bucket) end
p("plot $noshed using 1:2 with linespoints lw 2 title 'no shedding (p99 %.0f ms, goodput %.2f)', \\",
  (meta[0].p99 or 0) / 1000, meta[0].good or 0)
p("     $shed using 1:2 with linespoints lw 2 title 'shed = {target = 0.005} (p99 %.0f ms, goodput %.2f)', \\",
  (meta[5].p99 or 0) / 1000, meta[5].good or 0)
if series[105] then
  p("     $smooth using 1:2 with linespoints lw 2 title 'shed, paced in 1 ms ticks (p99 %.0f ms, goodput %.2f)', \\",
    (meta[105].p99 or 0) / 1000, meta[105].good or 0)
end
p("     5 with lines dt 2 lc rgb 'gray' title 'target 5 ms'")
print(table.concat(out, "\n"))
