-- SPEC §13 and §16: a request refused at the door is answered at once,
-- even while every worker is inside a long handler.  The handlers below
-- cannot end before the test opens their gate, so every assertion is on
-- ordering: the 503 must arrive while both are still running (a request
-- read only between tasks would wait for the gate, and the socket's
-- 20 s deadline fails the test).
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"
local socket = require "socket"

local function connect(port)
  local c = assert(socket.tcp())
  c:settimeout(20)
  assert(c:connect("127.0.0.1", port))
  return c
end

local function read_response(c)
  local line, err = c:receive("*l")
  if not line then return nil, err end
  local status = tonumber(line:match("^HTTP/1%.%d (%d%d%d)"))
  local h = {}
  while true do
    local l = assert(c:receive("*l"))
    if l == "" then break end
    local k, v = l:match("^([^:]+):%s*(.*)$")
    if k then h[k:lower()] = v end
  end
  local n = tonumber(h["content-length"] or "0")
  return status, h, n > 0 and c:receive(n) or ""
end

local function get(c, path)
  assert(c:send("GET " .. path .. " HTTP/1.1\r\nHost: t\r\n\r\n"))
end

-- Both workers spin in Lua until the gate opens (or 120 s pass).
local GATE = "listen_busy.gate"
local function busy_bus()
  local bus = T.bus{ workers = 2, hold_warn = false }
  bus:stage{ name = "long", concurrency = 2, handler = function(env)
    local d = seda.now() + 120
    while not seda.shared:get("listen_busy.gate") and seda.now() < d do end
  end }
  return bus
end

T.test("both workers in long handlers: a full stage's 503 comes before they end", function()
  local gate = T.gate(GATE)
  local bus = busy_bus()
  bus:stage{ name = "tiny", capacity = 1, concurrency = 1, policy = "reject",
             handler = function(env) env.payload = "tiny done" end }
  local l = bus:listen{ http = 0, routes = { ["/tiny"] = { "tiny" } }, timeout = 200 }
  assert(bus:publish("long", 1)); assert(bus:publish("long", 2))
  T.wait_until(function() return bus:stats("long").in_flight == 2 end, 20, "both workers busy")
  local a = connect(l:port())
  get(a, "/tiny")                       -- read while both are busy, queued
  T.wait_until(function() return bus:stats("tiny").depth == 1 end, 20, "A read and queued")
  local b = connect(l:port())
  get(b, "/tiny")                       -- the stage is full
  local s, h = read_response(b)
  T.eq(s, 503, "B refused at the door")
  T.eq(h and h["seda-reason"], "full")
  T.eq(bus:stats("long").in_flight, 2, "while both handlers still run")
  T.eq(bus:stats("long").completed, 0, "and neither has ended")
  T.open(gate)
  local sa, _, ba = read_response(a)
  T.eq(sa, 200, "A answered once a worker is free"); T.eq(ba, "tiny done")
  a:close(); b:close()
  T.ok(bus:wait(60), "idle")
end)

T.test("both workers in long handlers: a shedding stage's 503 comes before they end", function()
  local gate = T.gate(GATE)
  local bus = busy_bus()
  -- A stage that has been slow: its starts waited past target for a whole
  -- interval, so it sheds, and the door refuses new itineraries into it.
  bus:stage{ name = "slow", concurrency = 1, capacity = 1000,
             shed = { target = 0.001, interval = 0.05 }, handler = function(env)
    local d = seda.now() + 0.002
    while seda.now() < d do end
  end }
  local l = bus:listen{ http = 0, routes = { ["/slow"] = { "slow" } }, timeout = 200 }
  for i = 1, 200 do bus:publish("slow", i) end
  T.wait_until(function() return bus:stats("slow").shedding > 0 end, 20,
               "the stage sheds")
  -- Both workers now go into the long handlers, leaving "slow" queued.
  assert(bus:publish("long", 1)); assert(bus:publish("long", 2))
  T.wait_until(function() return bus:stats("long").in_flight == 2 end, 20, "both workers busy")
  T.ok(bus:stats("slow").shedding > 0, "still shedding")
  local c = connect(l:port())
  get(c, "/slow")
  local s, h = read_response(c)
  T.eq(s, 503, "refused at the door")
  T.eq(h and h["seda-reason"], "shed")
  T.eq(bus:stats("long").in_flight, 2, "while both handlers still run")
  T.eq(bus:stats("long").completed, 0, "and neither has ended")
  T.open(gate)
  c:close()
  T.ok(bus:wait(60), "idle")
end)

T.done()
