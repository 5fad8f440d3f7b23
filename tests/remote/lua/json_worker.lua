-- tests/remote/lua/json_worker.lua URL: a process that consumes the
-- remote stage "enrich" (stream NODE, format json) for clients in other
-- languages: it answers { n =, doubled =, tags = } with the header
-- done = "yes"; dead letters print "dead <reason> <detail>".  Prints
-- "ready".  Run with --serve.
local seda = require "seda"
local url = arg[1]
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "dlq", handler = function(env)
  io.write(("dead %s %s\n"):format(env.headers["x-dead-reason"],
                                    env.headers["x-dead-detail"] or ""))
  io.flush()
end }
bus:stage{ name = "enrich", format = "json", dead_letter = "dlq",
  remote = { url = url, stream = "NODE", tap = true,
             reach = { "results.>" } },   -- the client asks for results.node
  handler = function(env)
    local p = env.payload
    env.payload = { n = p.n, doubled = p.n * 2, tags = p.tags,
                    null_kept = p.tags[2] == seda.null }
    env.headers.done = "yes"
    io.write(("handled %d\n"):format(p.n))
    io.flush()
  end }
print("ready")
io.stdout:flush()
