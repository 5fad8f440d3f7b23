-- tests/remote/lua/consumer.lua URL [DELAY] [CAPACITY]: a process that
-- consumes the remote stage "work" (stream SHARE) and owns the local stage
-- "sink"; it prints "ready", then one line per envelope it handles:
-- "handled <id> <payload>" (work) and "sink <id> <payload>" (sink).
-- DELAY: seconds each work handler spins (0).  Run with --serve.
local seda = require "seda"
local url, delay, cap = arg[1], tonumber(arg[2] or "0"), tonumber(arg[3] or "8")
seda.shared:set("delay", delay)
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "sink", handler = function(env)
  env.payload = env.payload .. "+sink"
  -- One write per line: two workers print at once.
  io.write(("sink %s %s\n"):format(env.id, env.payload))
  io.flush()
end }
bus:stage{ name = "work", capacity = cap, concurrency = 2,
  remote = { url = url, stream = "SHARE", ack_wait = 2 },
  handler = function(env)
    local t = seda.now() + seda.shared:get("delay")
    while seda.now() < t do end
    env.payload = env.payload .. "+work"
    io.write(("handled %s %s\n"):format(env.id, env.payload))
    io.flush()
  end }
print("ready")
io.stdout:flush()
