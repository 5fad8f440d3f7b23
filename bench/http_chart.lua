-- bench/http_chart.lua -- the overload chart of bench/http.sh's
-- http_overload rows: the p99 of 2xx latency in each second of the run
-- (from each request's scheduled send time), seda-lua beside OpenResty,
-- one line per trial, on a log scale.  Runs under a stock lua5.4:
--
--   lua5.4 bench/http_chart.lua bench/results/FILE.jsonl > bench/http_overload.svg

local file = assert(arg[1], "usage: lua5.4 bench/http_chart.lua RESULTS.jsonl")
local rows = {}
for line in io.lines(file) do
  if line:find('"config":"http_overload"', 1, true) then
    local server = line:match('"server":"([^"]+)"')
    local trial = tonumber(line:match('"trial":(%d+)'))
    local series = {}
    for v in (line:match('"series_p99_2xx_us":%[([^%]]*)%]') or ""):gmatch("[%d.]+") do
      series[#series + 1] = tonumber(v)
    end
    rows[#rows + 1] = { server = server, trial = trial, series = series,
                        goodput = line:match('"goodput_ratio":([%d.]+)') }
  end
end
assert(#rows > 0, "no http_overload rows in " .. file)

local W, H, L, R, T, B = 720, 380, 70, 170, 40, 50
local lo, hi = 1e3, 2e7                  -- 1 ms .. 20 s, in microseconds
local function x(i, n) return L + (W - L - R) * (i - 0.5) / n end
local function y(us)
  us = math.max(lo, math.min(hi, us))
  return T + (H - T - B) * (1 - (math.log(us) - math.log(lo)) / (math.log(hi) - math.log(lo)))
end
local colors = { ["seda-lua"] = { "#1f77b4", "#6baed6" }, openresty = { "#d62728", "#ff9896" } }
local out = {}
local function add(s, ...) out[#out + 1] = string.format(s, ...) end
add('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">', W, H)
add('<rect width="100%%" height="100%%" fill="white"/>')
add('<text x="%d" y="22" font-size="14">http_overload: p99 of 2xx latency per second, 2x capacity offered (log scale)</text>', L)
for _, t in ipairs({ 1e3, 1e4, 1e5, 1e6, 1e7 }) do
  local label = t >= 1e6 and string.format("%g s", t / 1e6) or string.format("%g ms", t / 1e3)
  add('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>', L, W - R, y(t), y(t))
  add('<text x="%d" y="%.1f" text-anchor="end">%s</text>', L - 6, y(t) + 4, label)
end
local n = 0
for _, r in ipairs(rows) do n = math.max(n, #r.series) end
for i = 1, n do
  add('<text x="%.1f" y="%d" text-anchor="middle">%d</text>', x(i, n), H - B + 16, i)
end
add('<text x="%d" y="%d" text-anchor="middle">second of the run</text>', (L + W - R) // 2, H - 12)
local ly = T + 10
for _, r in ipairs(rows) do
  local c = (colors[r.server] or { "#555", "#999" })[r.trial == 1 and 1 or 2]
  local pts = {}
  for i, v in ipairs(r.series) do
    if v > 0 then pts[#pts + 1] = string.format("%.1f,%.1f", x(i, n), y(v)) end
  end
  add('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>', c, table.concat(pts, " "))
  add('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>', W - R + 10, W - R + 30, ly, ly, c)
  add('<text x="%d" y="%d">%s #%d (goodput %s)</text>', W - R + 34, ly + 4, r.server, r.trial, r.goodput or "?")
  ly = ly + 18
end
add('</svg>')
io.write(table.concat(out, "\n"), "\n")
