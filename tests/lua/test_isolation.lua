-- C3: handler failure isolation.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local EXE = arg and arg[-1] or "build/release/seda-lua"

-- Raises on every 5th payload; records every other payload as delivered.
local function every_fifth(env)
  local p = env.payload
  if p % 5 == 0 then error("boom on " .. p) end
  local n = seda.shared:incr(env.headers.tag .. ".got." .. p, 1)
  seda.shared:incr(env.headers.tag .. ".ok", 1)
  if n > 1 then seda.shared:set(env.headers.tag .. ".dup", true) end
end

T.test("C3 a handler raising on every Nth envelope: all others delivered", function()
  local bus = T.bus{ workers = 3 }
  bus:stage{ name = "dlq", handler = function() seda.shared:incr("iso.dlq", 1) end }
  bus:stage{ name = "s", concurrency = 3, dead_letter = "dlq", handler = every_fifth }
  local N = 500
  local done = 0
  for i = 1, N do
    T.eq(bus:publish("s", i, { headers = { tag = "iso" },
      on_complete = function() done = done + 1 end }), true, "publish " .. i)
  end
  T.idle(bus, 20)
  T.eq(seda.shared:get("iso.ok"), N - N // 5, "every other envelope delivered")
  T.eq(seda.shared:get("iso.dup"), nil, "no duplicates")
  for i = 1, N do
    if i % 5 ~= 0 then T.eq(seda.shared:get("iso.got." .. i), 1, "payload " .. i) end
  end
  T.eq(done, N - N // 5, "on_complete for every acked envelope")
  T.eq(seda.shared:get("iso.dlq"), N // 5, "failures dead-lettered")
  local s = bus:stats("s")
  T.eq(s.errors, N // 5, "errors counted")
  T.eq(s.nacked, N // 5, "errors are nacks")
  T.accounting(bus)
  -- the bus keeps running: no worker lost, later envelopes delivered
  for i = N + 1, N + 50 do bus:publish("s", i, { headers = { tag = "iso" } }) end
  T.idle(bus, 20)
  T.eq(seda.shared:get("iso.ok"), (N + 50) - (N + 50) // 5, "later envelopes delivered")
  T.eq(bus:stats().workers, 3, "workers intact")
  T.eq(bus:shutdown(5), true, "shutdown")
end)

T.test("C3 a failing stage does not disturb another stage", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "bad", concurrency = 2, handler = function() error("always") end }
  bus:stage{ name = "good", concurrency = 2, handler = function() seda.shared:incr("iso2.good", 1) end }
  for i = 1, 200 do
    bus:publish("bad", i)
    bus:publish("good", i)
  end
  T.idle(bus, 20)
  T.eq(seda.shared:get("iso2.good"), 200, "good stage delivered everything")
  T.eq(bus:stats("bad").errors, 200, "errors counted")
  T.eq(bus:stats().dead_lettered, 200, "bad envelopes dead-lettered")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("C3 non-string error values and error(nil) are nacks too", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function(env)
    local k = env.payload
    if k == 1 then error({ code = 1 }) end
    if k == 2 then error(nil) end
    if k == 3 then error(setmetatable({}, { __tostring = function() error("nested") end })) end
    if k == 4 then local t = nil; return t.x end
    seda.shared:incr("iso3.ok", 1)
  end }
  for i = 1, 5 do bus:publish("s", i) end
  T.idle(bus, 10)
  T.eq(seda.shared:get("iso3.ok"), 1, "only the last acked")
  local s = bus:stats("s")
  T.eq(s.nacked, 4, "four nacks")
  T.eq(s.errors, 4, "four errors")
  T.eq(bus:stats().dead_lettered, 4, "four dead letters")
  bus:publish("s", 5)
  T.idle(bus, 10)
  T.eq(seda.shared:get("iso3.ok"), 2, "still serving")
  bus:shutdown(5)
end)

T.test("C3 the error is reported on stderr with file:line and traceback", function()
  local dir = T.tmpdir()
  local script = T.write(dir .. "/iso.lua", [[
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "s", handler = function(env)
  if env.payload % 3 == 0 then error("isolation-marker " .. env.payload) end
end }
for i = 1, 30 do bus:publish("s", i) end
assert(bus:wait(10))
io.stdout:write("errors=", bus:stats("s").errors, "\n")
assert(bus:shutdown(5))
]])
  local p = io.popen("'" .. EXE .. "' '" .. script .. "' 2>&1; echo rc=$?")
  local out = p:read("a")
  p:close()
  T.contains(out, "errors=10", "errors counted")
  T.contains(out, "isolation-marker", "error message on stderr")
  T.contains(out, "iso.lua:4", "file:line of the raise")
  T.contains(out, "traceback", "traceback")
  T.contains(out, "rc=0", "exit 0: a handler error is not a script error")
  os.remove(script)
  os.remove(dir)
end)

T.done()
