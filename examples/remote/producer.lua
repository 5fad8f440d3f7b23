-- examples/remote/producer.lua URL [N]: the process that takes orders in.
-- "parse" is a local stage; "enrich" is remote (declared here without a
-- handler: this process only publishes to it, the workers handle it).
-- Each order's on_complete runs here, in the process that published it,
-- whichever worker priced it.
local seda = require "seda"
local url = arg[1] or os.getenv("SEDA_NATS_URL") or "nats://127.0.0.1:4222"
local n = tonumber(arg[2] or "10")
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "parse", handler = function(env)
  local item, qty, price = env.payload:match("^(%a+) (%d+) ([%d.]+)$")
  if not item then error("bad order: " .. env.payload) end
  env.payload = { item = item, qty = tonumber(qty), price = tonumber(price) }
end }
bus:stage{ name = "enrich", remote = { url = url, stream = "ORDERS" } }

local by = {}
for i = 1, n do
  local ok, err = bus:publish("parse", ("widget %d %.2f"):format(i, 1.5), {
    slip = { "enrich" },
    on_complete = function(env)
      local o = env.payload
      by[o.worker] = (by[o.worker] or 0) + 1
      print(("order %s: %d x %s = %.2f (priced by %s)"):format(
        env.id, o.qty, o.item, o.total, env.headers.priced_by))
    end })
  if not ok then print("refused: " .. err) end
end
assert(bus:wait(30), "some orders did not complete")
for w, c in pairs(by) do print(("%s priced %d"):format(w, c)) end
local s = bus:stats()
print(("accepted %d, handed to JetStream %d, in system %d"):format(
  s.accepted, s.handed_off, s.in_system))
