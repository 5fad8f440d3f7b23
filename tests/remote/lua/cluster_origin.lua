-- tests/remote/lua/cluster_origin.lua URLS STREAM N: publish N envelopes
-- into the remote stage "cwork" of STREAM (replicas = 3) through every
-- server of a cluster, each with an on_complete; a publish refused while
-- the connection moves to another server is tried again.  Prints
-- "published <i>" every 500, then, once every on_complete fired (or 120
-- s passed), "origin <accepted> <completed> <dead_lettered> <dropped>
-- <refusals>" (completed: distinct payloads whose on_complete fired)
-- and "remote <republished> <duplicates> <publish_failed>".
local seda = require "seda"
local urls = {}
for u in arg[1]:gmatch("[^,]+") do urls[#urls + 1] = u end
local n = tonumber(arg[3])
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "cwork", capacity = 256, publish_timeout = 60,
  remote = { urls = urls, stream = arg[2], replicas = 3 } }
local completed, refusals = 0, 0
local seen = {}
local function done(env)
  -- on_complete fires for completed itineraries only, once each.
  if not seen[env.payload] then completed = completed + 1 end
  seen[env.payload] = true
end
local i, accepted = 1, 0
local deadline = seda.now() + 120
while i <= n and seda.now() < deadline do
  local ok = bus:publish("cwork", "c" .. i, { on_complete = done })
  if ok then
    accepted = accepted + 1
    if i % 500 == 0 then print("published " .. i); io.stdout:flush() end
    i = i + 1
  else
    refusals = refusals + 1
    bus:wait(0.05)
  end
end
local t = seda.now() + 120
while completed < accepted and seda.now() < t do
  bus:wait(0.2)
end
bus:wait(5)
local s = bus:stats()
print(("origin %d %d %d %d %d"):format(accepted, completed, s.dead_lettered,
  s.dropped, refusals))
local r = bus:stats("cwork").remote
print(("remote %d %d %d"):format(r.republished, r.duplicates,
  r.publish_failed))
print(("completions received %d refused %d awaiting %d lost %d"):format(
  r.completions_received, r.completions_refused, r.awaiting,
  r.completions_lost))
if completed < accepted then
  local missing = {}
  for k = 1, accepted do
    if not seen["c" .. k] then missing[#missing + 1] = "c" .. k end
  end
  print("missing " .. table.concat(missing, " ", 1, math.min(#missing, 20)))
end
