-- tests/remote/lua/origin_common.lua -- what the cluster origins
-- (cluster_origin.lua, partition_origin.lua) share: the bus with its
-- remote stage "cwork" (replicas = 3) reached through every server of a
-- cluster, the publishing loop that tries a refused publish again as the
-- same envelope, and the list of envelopes whose on_complete never
-- fired.  Loaded with dofile from the origin's own folder:
--
--   local O = dofile((debug.getinfo(1, "S").source:match("^@(.*/)")
--                     or "./") .. "origin_common.lua")
local seda = require "seda"

local O = {}

-- A bus (2 workers) with the remote stage "cwork" of stream, capacity
-- deep, on the servers of urls ("nats://a,nats://b,...").
function O.bus(urls, stream, capacity)
  local list = {}
  for u in urls:gmatch("[^,]+") do list[#list + 1] = u end
  local bus = seda.bus{ workers = 2 }
  bus:stage{ name = "cwork", capacity = capacity, publish_timeout = 60,
    remote = { urls = list, stream = stream, replicas = 3 } }
  return bus
end

-- Publish prefix .. 1 to prefix .. n into "cwork", each with on_complete
-- done, until deadline (seda.now() seconds); at rate a second from
-- start when rate is given.  A refused publish (the connection moving to
-- another server) is tried again 50 ms later, as the same envelope.
-- Prints "published <i>" every 500.  Returns accepted, refusals.
function O.publish(bus, prefix, n, done, deadline, rate, start)
  local i, accepted, refusals = 1, 0, 0
  while i <= n and seda.now() < deadline do
    if rate then
      local due = start + (i - 1) / rate
      if seda.now() < due then bus:wait(due - seda.now()) end
    end
    local ok = bus:publish("cwork", prefix .. i, { on_complete = done })
    if ok then
      accepted = accepted + 1
      if i % 500 == 0 then print("published " .. i); io.stdout:flush() end
      i = i + 1
    else
      refusals = refusals + 1
      bus:wait(0.05)
    end
  end
  return accepted, refusals
end

-- When some of the accepted envelopes prefix .. 1 .. accepted are not in
-- seen (payload -> true once its on_complete fired), print "missing"
-- and the first 20 of them.
function O.missing(seen, prefix, accepted)
  local missing = {}
  for k = 1, accepted do
    if not seen[prefix .. k] then missing[#missing + 1] = prefix .. k end
  end
  if #missing > 0 then
    print("missing " .. table.concat(missing, " ", 1,
                                     math.min(#missing, 20)))
  end
end

return O
