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
local O = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") ..
                 "origin_common.lua")
local n, rate = tonumber(arg[3]), tonumber(arg[4])
local bus = O.bus(arg[1], arg[2], 512)
local completed = 0
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
local deadline = start + 240
local accepted, refusals = O.publish(bus, "p", n, done, deadline, rate,
                                     start)
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
O.missing(seen, "p", accepted)
