-- A small log-processing pipeline:
--
--   parse -> enrich -> route --> orders
--                            `-> alerts
--   anything that fails for good -> dlq
--
-- Run it with `make run` or `seda-lua examples/pipeline.lua [N]`.
--
-- It opens with one traceback on stderr, on purpose: every 50th line
-- below is garbage; handlers/parse.lua raises on the first (a handler
-- error is reported with its traceback) and nacks the rest quietly,
-- counting them.  Those lines end in the dlq stage as dead letters; the
-- summary says how many.  (Every raised error is reported, at most five
-- a second per stage, the rest counted: "35 similar errors suppressed".)
local seda = require "seda"

local N = tonumber(arg and arg[1]) or 2000
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
local completed, by_region = 0, {}

local function on_complete(env)
  completed = completed + 1
  local r = env.payload.region
  by_region[r] = (by_region[r] or 0) + 1
end

local t0 = seda.now()
for i = 1, N do
  local line
  if i % 50 == 0 then
    line = "%%garbage%% " .. i      -- parse raises: a traceback, a dead letter
  elseif i % 10 == 0 then
    line = ("alert id=%d level=high user=%s"):format(i, users[i % 4 + 1])
  elseif i % 97 == 0 then
    line = ("refund id=%d user=%s"):format(i, users[i % 4 + 1]) -- no route
  else
    line = ("order id=%d amount=%.2f user=%s"):format(i, i % 100 + 0.5,
                                                      users[i % 4 + 1])
  end
  assert(bus:publish("parse", line, { slip = { "enrich", "route" },
                                      sender = "example",
                                      on_complete = on_complete }))
end

assert(bus:wait(30), "pipeline did not go idle")
local elapsed = seda.now() - t0
local s = bus:stats()

print(("published %d lines in %.3f s"):format(N, elapsed))
print(("completed %d, dead-lettered %d, in system %d"):format(
  s.completed, s.dead_lettered, s.in_system))
print(("orders %d, alerts %d, revenue %.2f"):format(
  seda.shared:get("sink.orders") or 0, seda.shared:get("sink.alerts") or 0,
  (seda.shared:get("revenue_cents") or 0) / 100))
print(("dead letters: max_attempts %d"):format(
  seda.shared:get("dead.max_attempts") or 0))
print(("unparseable lines: %d, dead-lettered (the first reported above)")
      :format(seda.shared:get("parse.unparseable") or 0))
local regions = {}
for r, n in pairs(by_region) do regions[#regions + 1] = r .. "=" .. n end
table.sort(regions)
print("completed by region: " .. table.concat(regions, " "))
print()
print(("%-8s %8s %8s %8s %8s"):format("stage", "delivered", "nacked",
                                       "dead", "errors"))
for _, name in ipairs{ "parse", "enrich", "route", "orders", "alerts",
                       "dlq" } do
  local st = s.stages[name]
  print(("%-8s %8d %8d %8d %8d"):format(name, st.delivered, st.nacked,
                                        st.dead_lettered, st.errors))
end
assert(s.accepted == s.completed + s.dead_lettered + s.dropped + s.in_system)
assert(completed == s.completed)
bus:shutdown()
