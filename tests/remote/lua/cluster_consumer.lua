-- tests/remote/lua/cluster_consumer.lua URLS STREAM [REPLICAS]: a process that
-- consumes the remote stage "cwork" of STREAM (REPLICAS, 3) through
-- every server of a cluster (URLS: comma-separated); prints "ready", then
-- "handled <id> <payload>" per envelope it handles.  Run with --serve.
local seda = require "seda"
local urls = {}
for u in arg[1]:gmatch("[^,]+") do urls[#urls + 1] = u end
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "cwork", capacity = 64, concurrency = 2,
  remote = { urls = urls, stream = arg[2], replicas = tonumber(arg[3] or "3"),
             ack_wait = 3 },
  handler = function(env)
    io.write(("handled %s %s\n"):format(env.id, tostring(env.payload)))  -- one write: two workers
    io.flush()
  end }
-- Its completion figures, once a second, to stderr's neighbour
-- STATS_FILE (the test prints them when on_complete falls short).
local sf = os.getenv("STATS_FILE")
if sf then
  seda.every(1, function()
    local r = bus:stats("cwork").remote
    local f = io.open(sf, "w")
    if f then
      f:write(("dead %d sent %d received %d resent %d dropped %d refused %d " ..
               "acked %d naked %d termed %d held_twice %d state %s\n"):format(
        bus:stats("cwork").dead_lettered, r.completions_sent, r.completions_received, r.completions_resent,
        r.completions_dropped, r.completions_refused, r.acked, r.naked,
        r.termed, r.held_twice, r.state))
      f:close()
    end
  end)
end
print("ready")
io.stdout:flush()
