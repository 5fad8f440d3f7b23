-- tests/remote/lua/json_numbers.lua URL: a process that consumes the
-- remote stage "price" (stream PYJSON, format json) for a client in
-- another language: total = qty * unit when the body has them, the Lua
-- types it saw in types, and the envelope's id in id.  Prints "ready";
-- dead letters print "dead <reason> <detail>".  Run with --serve.
local seda = require "seda"
local url = arg[1]
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "dlq", handler = function(env)
  io.write(("dead %s %s\n"):format(env.headers["x-dead-reason"],
                                    env.headers["x-dead-detail"] or ""))
  io.flush()
end }
bus:stage{ name = "price", format = "json", dead_letter = "dlq",
  remote = { url = url, stream = "PYJSON", reach = { "results.>" } },
  handler = function(env)
    local p = env.payload
    if p.qty then p.total = p.qty * p.unit end
    local types = {}
    for k, v in pairs(p) do types[k] = math.type(v) or type(v) end
    p.lua_types = types
    p.id = env.id
  end }
print("ready")
io.stdout:flush()
