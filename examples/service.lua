-- A long-running service: the pipeline of examples/pipeline.lua, fed by
-- a timer instead of a loop, so it keeps going until you stop it.
--
--   make serve
--   seda-lua --serve --http 8080 examples/service.lua    (the same)
--
-- then open http://127.0.0.1:8080/ for the live page (stages, queue
-- depths, rates, latency, recent errors; /metrics and /stats.json beside
-- it).  Ctrl-C drains the bus and exits.  With -i instead of --serve
-- you get a REPL on the live bus: stats(), top(), tune("enrich",
-- {concurrency = 4}).
--
--   feed (timer, RATE lines a second) -> parse -> enrich -> route
--                                                   -> orders | alerts
--   anything that fails for good -> dlq
--
-- Arguments: seda-lua --serve --http 8080 examples/service.lua [RATE]
-- (lines a second, default 200).  A summary line goes to stdout every
-- 10 seconds.
local seda = require "seda"

local RATE = tonumber(arg and arg[1]) or 200
local TICK = 0.1                        -- seconds between batches
local bus = seda.bus{ dead_letter = "dlq" }

bus:stage{ name = "parse",  handler = "handlers/parse.lua", capacity = 256,
           concurrency = 2 }
bus:stage{ name = "enrich", handler = "handlers/enrich.lua", concurrency = 2,
           max_attempts = 3 }
bus:stage{ name = "route",  handler = "handlers/route.lua" }
bus:stage{ name = "orders", handler = "handlers/sink.lua" }
bus:stage{ name = "alerts", handler = "handlers/sink.lua" }
bus:stage{ name = "dlq",    handler = "handlers/dlq.lua" }

local users = { "alice", "bob", "carol", "dave" }
local n = 0

local function line(i)
  if i % 500 == 0 then
    return "%%garbage%% " .. i          -- parse nacks it: a dead letter
  elseif i % 10 == 0 then
    return ("alert id=%d level=high user=%s"):format(i, users[i % 4 + 1])
  elseif i % 97 == 0 then
    return ("refund id=%d user=%s"):format(i, users[i % 4 + 1]) -- no route
  end
  return ("order id=%d amount=%.2f user=%s"):format(i, i % 100 + 0.5,
                                                    users[i % 4 + 1])
end

-- Each tick publishes RATE * TICK lines; a refusal (a full queue: the
-- pipeline cannot keep up) is counted, not retried.
local refused = 0
seda.every(TICK, function()
  for _ = 1, math.max(1, math.floor(RATE * TICK + 0.5)) do
    n = n + 1
    if not bus:publish("parse", line(n), { slip = { "enrich", "route" },
                                           sender = "service",
                                           timeout = 0 }) then
      refused = refused + 1
    end
  end
end)

local t0 = seda.now()
seda.every(10, function()
  local s = bus:stats()
  print(("%6.0f s: published %d, completed %d, dead-lettered %d, " ..
         "refused %d, in system %d"):format(seda.now() - t0, n, s.completed,
         s.dead_lettered, refused, s.in_system))
end)

print(("service: %d lines a second into parse -> enrich -> route; " ..
       "Ctrl-C to stop"):format(RATE))
