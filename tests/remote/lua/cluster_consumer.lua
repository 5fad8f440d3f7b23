-- tests/remote/lua/cluster_consumer.lua URLS STREAM [REPLICAS]: a process that
-- consumes the remote stage "cwork" of STREAM (REPLICAS, 3) through
-- every server of a cluster (URLS: comma-separated); prints "ready", then
-- "handled <id>" per envelope it handles.  Run with --serve.
local seda = require "seda"
local urls = {}
for u in arg[1]:gmatch("[^,]+") do urls[#urls + 1] = u end
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "cwork", capacity = 64, concurrency = 2,
  remote = { urls = urls, stream = arg[2], replicas = tonumber(arg[3] or "3"),
             ack_wait = 3 },
  handler = function(env)
    io.write(("handled %s\n"):format(env.id))   -- one write: two workers
    io.flush()
  end }
print("ready")
io.stdout:flush()
