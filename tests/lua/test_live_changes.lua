-- tune, workers and reload while envelopes flow: none lost, none handled
-- twice (run under ThreadSanitizer by `make tsan`).
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

T.test("tune, workers and reload under load lose nothing", function()
  local dir = T.tmpdir()
  local file = dir .. "/h.lua"
  T.write(file, "return function(env) seda.shared:incr('live.n', 1) end\n")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = file, capacity = 64 }
  local published = 0
  for round = 1, 30 do
    for i = 1, 200 do
      T.eq(bus:publish("s", i), true, "publish")
      published = published + 1
    end
    bus:tune("s", { capacity = 32 + (round % 5) * 16,
                    concurrency = (round % 3) + 1,
                    policy = "block" })
    bus:workers((round % 3) + 1)
    if round % 10 == 0 then
      T.write(file, "return function(env) seda.shared:incr('live.n', 1) end -- v" ..
              round .. "\n")
      T.eq(bus:reload("s"), true, "reload")
    end
  end
  T.idle(bus, 20)
  T.eq(seda.shared:get("live.n"), published, "every envelope handled once")
  local s = bus:stats("s")
  T.eq(s.delivered, published, "delivered")
  T.eq(s.depth, 0, "queue empty")
  T.eq(bus:workers(), 1, "pool resized")
  T.accounting(bus)
end)

T.done()
