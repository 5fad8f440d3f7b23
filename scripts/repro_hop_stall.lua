-- scripts/repro_hop_stall.lua -- reproducer for hop_timeout stalls.
--
--   seda-lua scripts/repro_hop_stall.lua [total] [hop_timeout] [batch] [many|one]
--
-- Three trivial stages s1 -> s2 -> s3 (capacity 16, policy block, bus
-- workers = 2); the main script publishes `total` envelopes to s1 with
-- slip {s2, s3}, `batch` at a time with bus:publish_many (or one by one
-- with bus:publish), then waits.  A lost hand-off between workers shows as
-- a wait of exactly hop_timeout (and sometimes a `hop_refused` dead
-- letter).  Watchdog: publishes use a 0.05 s timeout and are retried, so
-- the main loop sees a stall while it lasts and prints each stage's stats.
-- The summary line counts stalls of at least 0.95 * hop_timeout (the
-- signature of a lost hand-off) apart from slow calls (>= 0.1 s; a loaded
-- machine makes some).
local seda = require "seda"
local total = tonumber(arg and arg[1]) or 2000000
local hop_timeout = tonumber(arg and arg[2]) or 0.5
local blen = tonumber(arg and arg[3]) or 1000
local use_many = (arg and arg[4] or "many") == "many"

local bus = seda.bus{ workers = 2, hop_timeout = hop_timeout }
for _, n in ipairs{ "s1", "s2", "s3" } do
  bus:stage{ name = n, capacity = 16, policy = "block",
             handler = function(env) end }
end

local function dump(tag)
  local s = bus:stats()
  local parts = {}
  for _, n in ipairs{ "s1", "s2", "s3" } do
    local t = s.stages[n]
    parts[#parts + 1] = string.format("%s depth=%d in_flight=%d delivered=%d dead=%d",
      n, t.depth, t.in_flight, t.delivered, t.dead_lettered)
  end
  io.stderr:write(string.format("[%s t=%.3f] %s\n", tag, seda.now(),
    table.concat(parts, "; ")))
end

local payloads = {}
for i = 1, blen do payloads[i] = i end
local opts = { slip = { "s2", "s3" }, timeout = 0.05 }

local t0 = seda.now()
local sent, slow, hop_stalls, worst = 0, 0, 0, 0
while sent < total do
  local batch = payloads
  local left = math.min(blen, total - sent)
  if left < blen then batch = table.move(payloads, 1, left, 1, {}) end
  local off = 1
  local call_t = seda.now()
  local reported = false
  while off <= #batch do
    local n, err
    if use_many then
      local sub = off == 1 and batch or table.move(batch, off, #batch, 1, {})
      n, err = bus:publish_many("s1", sub, opts)
    else
      local ok
      ok, err = bus:publish("s1", batch[off], opts)
      n = ok and 1 or 0
    end
    off = off + n
    sent = sent + n
    if err and not reported and seda.now() - call_t >= 0.1 then
      reported = true
      dump("STALL")
    end
    bus:poll()
  end
  local waited = seda.now() - call_t
  if reported then
    slow = slow + 1
    if waited >= 0.95 * hop_timeout then hop_stalls = hop_stalls + 1 end
    if waited > worst then worst = waited end
    io.stderr:write(string.format("  stall ended after %.3f s\n", waited))
  end
end
while not bus:wait(0.1) do
  if seda.now() - t0 > 300 then dump("WAIT-TIMEOUT"); break end
end
local s = bus:stats()
print(string.format("total=%d elapsed=%.2f hop_timeout_stalls=%d slow_calls=%d "
  .. "worst=%.3f completed=%d dead_lettered=%d",
  total, seda.now() - t0, hop_stalls, slow, worst, s.completed, s.dead_lettered))
bus:shutdown(5)
