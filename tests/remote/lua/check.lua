-- tests/remote/lua/check.lua URL: declare the remote stage "work" (stream
-- SHARE) without a handler and print what JetStream says of its consumer
-- once it answered: "js_pending <n> js_ack_pending <n>".
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "work", remote = { url = arg[1], stream = "SHARE" } }
local r
local deadline = seda.now() + 20
repeat
  r = bus:stats("work").remote
  bus:wait(0.05)
until (r.js_age >= 0 and r.js_age < 0.5) or seda.now() > deadline
print("js_pending " .. r.js_pending .. " js_ack_pending " .. r.js_ack_pending)
