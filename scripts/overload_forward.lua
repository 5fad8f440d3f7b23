-- scripts/overload_forward.lua -- shedding at the door for a stage reached
-- only by env:forward, under a constant overload.
--
--   seda-lua scripts/overload_forward.lua [seconds] [factor]
--
-- The shape of examples/service.lua: parse -> route (a slip), route
-- forwarding every envelope to orders; orders takes 2 ms an envelope
-- (500/s, one at a time) with shed = { target = 0.005 }; parse and route
-- shed at 0.05 s.  The main script publishes factor (default 2) times
-- what orders can take, for seconds (default 10), then waits for the bus
-- to drain and prints: publishes accepted and refused by reason and by
-- the stage named, each stage's depth (the largest sampled), sojourn p99
-- and own shedding, and whether every accepted itinerary completed.
local seda = require "seda"
local secs = tonumber(arg and arg[1]) or 10
local factor = tonumber(arg and arg[2]) or 2
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "parse", shed = { target = 0.05 }, handler = function() end }
bus:stage{ name = "route", shed = { target = 0.05 },
           handler = function(env) return env:forward("orders") end }
bus:stage{ name = "orders", shed = { target = 0.005 }, handler = function()
  local d = seda.now() + 0.002
  while seda.now() < d do end
end }

local rate = 500 * factor
local accepted, refused, sent = 0, {}, 0
local maxdepth = { parse = 0, route = 0, orders = 0 }
local p99 = { parse = 0, route = 0, orders = 0 }
local t0 = seda.now()
local next_sample = t0
while seda.now() - t0 < secs do
  local due = math.floor((seda.now() - t0) * rate)
  while sent < due do
    sent = sent + 1
    local ok, why, who = bus:publish("parse", sent, { slip = { "route" },
                                                      timeout = 0 })
    if ok then
      accepted = accepted + 1
    else
      local k = why .. (who and (" for " .. who) or "")
      refused[k] = (refused[k] or 0) + 1
    end
  end
  if seda.now() >= next_sample then
    next_sample = next_sample + 0.01
    for name in pairs(maxdepth) do
      local s = bus:stats(name)
      if s.depth > maxdepth[name] then maxdepth[name] = s.depth end
      if s.sojourn_p99 > p99[name] then p99[name] = s.sojourn_p99 end
    end
  end
end
local drained = bus:wait(60)
local s = bus:stats()
print(("%.0f s at %d/s (%.1fx orders' 500/s): %d published, %d accepted")
      :format(secs, rate, factor, sent, accepted))
for k, v in pairs(refused) do print(("  refused %-18s %d"):format(k, v)) end
for _, name in ipairs{ "parse", "route", "orders" } do
  local st = bus:stats(name)
  print(("  %-6s max depth %4d, sojourn p99 (max seen) %.4f s, shed %d, " ..
         "shed_for %d"):format(name, maxdepth[name], p99[name], st.shed,
                               st.shed_for))
end
print(("drained %s: completed %d of %d accepted, dead-lettered %d, " ..
       "dropped %d"):format(tostring(drained), s.completed, s.accepted,
                            s.dead_lettered, s.dropped))
bus:shutdown(5)
