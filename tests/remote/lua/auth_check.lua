-- tests/remote/lua/auth_check.lua URL OPTS: declare a remote stage with
-- the remote options OPTS (a Lua table constructor: tls, user, password,
-- token, creds), send one envelope through it and back; prints
-- "ok <payload>" or "error <message>" (a declaration refused).
local seda = require "seda"
local url, opts = arg[1], assert(load("return " .. (arg[2] or "{}")))()
opts.url = url
opts.stream = "AUTH"
opts.connect_timeout = 3
local bus = seda.bus{ workers = 1 }
local ok, err = pcall(bus.stage, bus, { name = "secure", format = "json",
  remote = opts, handler = function(env) env.payload = env.payload .. "+handled" end })
if not ok then
  print("error " .. tostring(err))
  os.exit(0)
end
local got
assert(bus:publish("secure", "hello", { on_complete = function(env) got = env.payload end }))
bus:wait(10)
print("ok " .. tostring(got))
bus:shutdown(5)
