-- examples/remote/worker.lua URL NAME: a worker process.  It declares the
-- remote stage "enrich" with a handler, so it takes its share of the
-- stage's messages from JetStream; run as many as you like, on as many
-- hosts as can reach the server:
--
--     seda-lua --serve examples/remote/worker.lua nats://127.0.0.1:4222 w1
local seda = require "seda"
local url = arg[1] or os.getenv("SEDA_NATS_URL") or "nats://127.0.0.1:4222"
seda.shared:set("name", arg[2] or "worker")
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "enrich", handler = "enrich.lua", capacity = 16,
           max_attempts = 3,
           remote = { url = url, stream = "ORDERS" } }
print(("%s: consuming 'enrich' from %s"):format(arg[2] or "worker", url))
io.stdout:flush()
