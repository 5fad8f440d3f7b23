-- tests/remote/lua/publisher.lua URL N: publish N envelopes ("p1".."pN")
-- into the remote stage "work" (stream SHARE) from a process that only
-- publishes, wait until JetStream holds them all, print the counts.
local seda = require "seda"
local url, n = arg[1], tonumber(arg[2])
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "work", remote = { url = url, stream = "SHARE" } }
for i = 1, n do assert(bus:publish("work", "p" .. i)) end
assert(bus:wait(30), "not all were acknowledged by JetStream")
local s = bus:stats()
print("published " .. s.stages.work.remote.published ..
      " handed_off " .. s.handed_off .. " in_system " .. s.in_system)
