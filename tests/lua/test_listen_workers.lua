-- SPEC §16: a listener has no thread of its own.  Its sockets are served
-- by the bus's workers: listening adds no thread; with one worker, that
-- worker reads a request, runs its itinerary and writes the answer; a
-- worker busy with a long run of tasks reads between them, so a request
-- is refused at the door (503) while every worker is still busy; the
-- threads option is refused naming why.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local threads = T.threads

local function connect(port) return T.http_connect(port, 20) end
local read_response = T.http_read

local function get(c, path)
  assert(c:send("GET " .. path .. " HTTP/1.1\r\nHost: t\r\n\r\n"))
end

T.test("listening adds no thread; one worker reads, runs and answers", function()
  local bus = seda.bus{ workers = 1 }
  bus:stage{ name = "a", handler = function(env) env.payload.n = 1 end }
  bus:stage{ name = "b", handler = function(env) env.payload = "ran " .. env.payload.n end }
  local before = threads()
  local l = bus:listen{ http = 0, routes = { ["/ab"] = { "a", "b" } } }
  T.eq(threads(), before, "no thread for the listener")
  local c = connect(l:port())
  for i = 1, 100 do
    get(c, "/ab")
    local s, _, b = read_response(c)
    T.eq(s, 200); T.eq(b, "ran 1")
  end
  c:close()
  T.eq(threads(), before, "none after serving either")
  T.eq(l:stats().requests, 100)
  bus:shutdown(5)
end)

T.test("every worker busy: a request is still read between tasks and refused at the door", function()
  local bus = seda.bus{ workers = 2, batch = 1 }
  bus:stage{ name = "busy", concurrency = 2, capacity = 2000, handler = function(env)
    local t = seda.now() + 0.005
    while seda.now() < t do end
  end }
  bus:stage{ name = "tiny", capacity = 1, concurrency = 1, policy = "reject", handler = function(env)
    local t = seda.now() + tonumber(env.payload.query.t or "0")
    while seda.now() < t do end
    env.payload = "tiny done"
  end }
  local l = bus:listen{ http = 0, routes = { ["/tiny"] = { "tiny" } }, timeout = 60 }
  for i = 1, 600 do assert(bus:publish("busy", i)) end
  local a = connect(l:port())
  get(a, "/tiny?t=3")                   -- holds one worker for 3 s
  T.wait_until(function() return bus:stats("tiny").in_flight == 1 end, 20, "A runs")
  local b = connect(l:port())
  get(b, "/tiny")                       -- queued behind A
  T.wait_until(function() return bus:stats("tiny").depth == 1 end, 20, "B queued")
  local c = connect(l:port())
  get(c, "/tiny")                       -- the stage is full
  local s, h = read_response(c)
  local busy = bus:stats("busy")
  local tiny = bus:stats("tiny")
  T.eq(s, 503, "C refused at the door")
  T.eq(h["seda-reason"], "full")
  T.eq(tiny.in_flight, 1, "while A still holds its worker")
  T.ok(busy.depth > 0, "and the other still has queued work (" .. busy.depth .. " left)")
  T.eq((read_response(a)), 200, "A answered")
  T.eq((read_response(b)), 200, "B answered")
  a:close(); b:close(); c:close()
  T.ok(bus:wait(60), "idle")
  bus:shutdown(5)
end)

T.test("threads is refused, naming why", function()
  local bus = seda.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function() end }
  local ok, err = pcall(bus.listen, bus, { http = 0, routes = { ["/s"] = { "s" } }, threads = 4 })
  T.ok(not ok)
  T.contains(err, "threads is not an option")
  T.contains(err, "bus:workers(n)")
  bus:shutdown(5)
end)

T.done()
