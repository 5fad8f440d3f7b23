-- tests/remote/lua/partition_origin.lua URLS STREAM N RATE: publish N
-- envelopes ("p1" .. "pN") at RATE a second into the remote stage
-- "cwork" of STREAM (replicas = 3) through every server of a cluster,
-- each with an on_complete; a publish refused (the connection moving to
-- another server) is tried again a little later, as the same envelope.
-- Prints "published <i>" every 500, then, once every on_complete fired
-- or 240 s passed, "origin <accepted> <completed> <dead_lettered>
-- <dropped> <refusals> <longest stall in seconds>" (completed: distinct
-- payloads whose on_complete fired; the stall: the longest time between
-- two completions, or from the first publish to the first, while some
-- were still awaited) and "remote <republished> <duplicates>
-- <publish_failed> <reconnects>".
local seda = require "seda"
local urls = {}
for u in arg[1]:gmatch("[^,]+") do urls[#urls + 1] = u end
local n, rate = tonumber(arg[3]), tonumber(arg[4])
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "cwork", capacity = 512, publish_timeout = 60,
  remote = { urls = urls, stream = arg[2], replicas = 3 } }
local completed, refusals, accepted = 0, 0, 0
local seen = {}
local start = seda.now()
local last, stall = start, 0
local function done(env)
  local now = seda.now()
  if now - last > stall then stall = now - last end
  last = now
  if not seen[env.payload] then completed = completed + 1 end
  seen[env.payload] = true
end
local i = 1
local deadline = start + 240
while i <= n and seda.now() < deadline do
  local due = start + (i - 1) / rate
  if seda.now() < due then bus:wait(due - seda.now()) end
  local ok = bus:publish("cwork", "p" .. i, { on_complete = done })
  if ok then
    accepted = accepted + 1
    if i % 500 == 0 then print("published " .. i); io.stdout:flush() end
    i = i + 1
  else
    refusals = refusals + 1
    bus:wait(0.05)
  end
end
while completed < accepted and seda.now() < deadline do
  bus:wait(0.1)
end
if completed < accepted and seda.now() - last > stall then
  stall = seda.now() - last
end
bus:wait(2)
local s = bus:stats()
print(("origin %d %d %d %d %d %.1f"):format(accepted, completed,
  s.dead_lettered, s.dropped, refusals, stall))
local r = bus:stats("cwork").remote
print(("remote %d %d %d %d"):format(r.republished, r.duplicates,
  r.publish_failed, r.reconnects))
if completed < accepted then
  local missing = {}
  for k = 1, accepted do
    if not seen["p" .. k] then missing[#missing + 1] = "p" .. k end
  end
  print("missing " .. table.concat(missing, " ", 1, math.min(#missing, 20)))
end
