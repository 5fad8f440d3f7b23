-- examples/orders/service.lua -- an HTTP service on the bus (bus:listen,
-- docs/guide.md "HTTP ingress"): POST /orders goes through parse -> price
-- -> store and the response comes back; price asks an upstream for a quote
-- through seda.http.request (the call suspends, no worker waits);
-- shedding at the door keeps latency bounded under overload.
--
--   seda-lua examples/orders/service.lua [PORT]      (default 8080)
--   open http://127.0.0.1:8080/  or
--   curl -d 'sku=book&qty=2' http://127.0.0.1:8080/orders
--
-- The upstream is this same process (GET /quote, its own route) unless
-- QUOTE_URL names another one.  It runs until SIGINT or SIGTERM, then
-- stops accepting, answers what is in flight and exits.
local seda = require "seda"

local port = tonumber(arg and arg[1] or os.getenv("PORT") or 8080)
local here = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./")

local bus = seda.bus{ workers = 2 }
seda.shared:set("quote_url", os.getenv("QUOTE_URL") or
                ("http://127.0.0.1:" .. port .. "/quote"))

bus:stage{ name = "page", handler = here .. "handlers/page.lua" }
bus:stage{ name = "parse", handler = here .. "handlers/parse.lua" }
-- price waits on the upstream: many calls may wait at once (they hold no
-- worker), and new orders are turned away at the door when its queue
-- wait passes 5 ms.
bus:stage{ name = "price", handler = here .. "handlers/price.lua",
           concurrency = 64, handler_timeout = 2,
           shed = { target = 0.005, interval = 0.1 } }
bus:stage{ name = "store", handler = here .. "handlers/store.lua" }
bus:stage{ name = "quote", handler = here .. "handlers/quote.lua",
           concurrency = 16 }
bus:stage{ name = "health", handler = function(env)
  env.payload = { status = 200, body = { ok = true, orders = seda.shared:get("orders") or 0 } }
end }

bus:listen{
  http = "127.0.0.1:" .. port,
  routes = {
    ["GET /"] = { "page" },
    ["POST /orders"] = { "parse", "price", "store" },
    ["GET /orders"] = { "parse", "price", "store" },      -- from the form
    ["GET /quote"] = { "quote" },
    ["GET /health"] = { "health" },
  },
  timeout = 5, max_body = 65536,
}
print(("orders: listening on http://127.0.0.1:%d/ (Ctrl-C stops)"):format(port))
