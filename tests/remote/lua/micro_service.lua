-- tests/remote/lua/micro_service.lua URL (TAG in the environment): a bus answering NATS
-- requests as the service "orders" 1.2.0 (queue group "q"): price =
-- parse then price (answers { total =, subject =, tag =, by = TAG });
-- echo (the body as it came, a string); fail (a handler that raises:
-- dead-lettered); refuse (an admit rule that refuses "closed_for_lunch");
-- slow (longer than the listener's timeout of 1 s).  Each handled price
-- request prints "handled <TAG>".  Prints "ready".  Run with --serve.
local seda = require "seda"
local url = arg[1]
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "parse", handler = function(env)
  local p = env.payload
  env.payload = { qty = p.body.qty, subject = p.subject,
                  tag = p.headers["X-Tag"] }
end }
bus:stage{ name = "price", handler = function(env)
  local p = env.payload
  local tag = os.getenv("TAG") or "a"
  env.payload = { total = p.qty * 3, subject = p.subject, tag = p.tag,
                  by = tag }
  io.write("handled " .. tag .. "\n")
  io.flush()
end }
bus:stage{ name = "echo", handler = function(env)
  env.payload = env.payload.body
end }
bus:stage{ name = "boom", max_attempts = 1, handler = function()
  error("no price for that")
end }
bus:stage{ name = "closed", admit = function() return false, "closed_for_lunch" end,
           handler = function() end }
bus:stage{ name = "slow", handler = function(env)
  seda.sleep(3)
  env.payload = "late"
end }
local L = bus:listen{
  nats = { url = url, service = "orders", version = "1.2.0", queue = "q",
           description = "prices orders" },
  routes = { price = { "parse", "price" }, echo = { "echo" },
             fail = { "boom" }, refuse = { "closed" }, slow = { "slow" } },
  timeout = 1 }
print("ready " .. L:id())
io.stdout:flush()
