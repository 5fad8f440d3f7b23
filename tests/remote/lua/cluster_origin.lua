-- tests/remote/lua/cluster_origin.lua URLS STREAM N: publish N envelopes
-- into the remote stage "cwork" of STREAM (replicas = 3) through every
-- server of a cluster, each with an on_complete; a publish refused while
-- the connection moves to another server is tried again.  Prints
-- "published <i>" every 500, then, once every on_complete fired (or 120
-- s passed), "origin <accepted> <completed> <dead_lettered> <dropped>
-- <refusals>" (completed: distinct payloads whose on_complete fired)
-- and "remote <republished> <duplicates> <publish_failed>".
local seda = require "seda"
local O = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") ..
                 "origin_common.lua")
local n = tonumber(arg[3])
local bus = O.bus(arg[1], arg[2], 256)
local completed = 0
local seen = {}
local function done(env)
  -- on_complete fires for completed itineraries only, once each.
  if not seen[env.payload] then completed = completed + 1 end
  seen[env.payload] = true
end
local accepted, refusals = O.publish(bus, "c", n, done, seda.now() + 120)
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
O.missing(seen, "c", accepted)
