-- Plausible calls that did nothing, or nonsense that was accepted
-- silently, now raise naming what was wrong (or, where it happens at run
-- time in an answer, write a log line): env:respond outside an HTTP
-- itinerary and twice in one call, a status or header an answer cannot
-- carry, a route whose stage name holds a NUL or whose path a CR/LF,
-- socket:setoption of an unknown option, l:close(-1).
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"
local socket = require "socket"

-- The interpreter running this script (a child runs the log-line cases).
local EXE = "build/release/seda-lua"
if arg then
  local i = -1
  while arg[i - 1] do i = i - 1 end
  if arg[i] then EXE = arg[i] end
end

-- One GET on a fresh connection: status, body.
local function get(port, path)
  local c = assert(socket.tcp())
  c:settimeout(10)
  assert(c:connect("127.0.0.1", port))
  assert(c:send("GET " .. path .. " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
  local all = c:receive("*a")
  c:close()
  return tonumber(all:match("^HTTP/1%.%d (%d+)")), all:match("\r\n\r\n(.*)$")
end

-- The recent error of stage on bus that mentions text (its message),
-- waiting for it (an error is recorded as the call fails, the answer may
-- come first).
local function error_with(bus, stage, text)
  local msg
  T.wait_until(function()
    for _, e in ipairs(bus:errors(stage) or {}) do
      if e.message:find(text, 1, true) then msg = e.message; return true end
    end
    return false
  end, 10, "an error on " .. stage .. " mentioning " .. text)
  return msg
end

T.test("env:respond outside an HTTP request's itinerary raises, naming why", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", max_attempts = 1, handler = function(env)
    env:respond(200, "hello")
  end }
  bus:publish("s", { n = 1 })
  T.idle(bus, 10)
  local msg = error_with(bus, "s", "respond: this envelope is not an HTTP request's")
  T.contains(msg, "set env.payload", "and says what to do instead")
  T.eq(bus:stats("s").dead_lettered, 1, "the call failed (the payload was not replaced)")
  bus:shutdown(5)
end)

T.test("env:respond twice, a fractional status, a bad header raise in the handler", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "h", max_attempts = 1, handler = function(env)
    local q = env.payload.query
    if q.twice then env:respond(200, "a"); env:respond(201, "b") end
    if q.frac then env:respond(200.5, "x") end
    if q.crlf then env:respond(200, "x", { ["X-A"] = "1\r\nSet-Cookie: evil=1" }) end
    if q.name then env:respond(200, "x", { ["Bad Name"] = "1" }) end
    if q.ok then env:respond(202, "fine", { ["X-Ok"] = 7 }) end
  end }
  local l = bus:listen{ http = "127.0.0.1:0", routes = { ["GET /h"] = { "h" } } }
  local port = l:port()
  local s, b = get(port, "/h?ok=1")
  T.eq(s, 202, "a good respond still answers")
  T.eq(b, "fine")
  for _, c in ipairs{
    { "twice", "respond: already called in this call" },
    { "frac", "respond: status must be an integer from 200 to 599 (got 200.5)" },
    { "crlf", "respond: header 'X-A': the value holds a CR, LF or NUL" },
    { "name", "respond: header 'Bad Name' is not a header name" },
  } do
    s = get(port, "/h?" .. c[1] .. "=1")
    T.eq(s, 500, c[1] .. ": the request is answered 500 (the handler failed)")
    T.contains(error_with(bus, "h", c[2]), c[2], c[1])
  end
  l:close()
  bus:shutdown(5)
end)

T.test("a route whose stage name holds a NUL or whose path a CR/LF is refused at listen", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "a", handler = function() end }
  bus:stage{ name = "b", handler = function() end }
  local err = T.raises(function()
    bus:listen{ http = 0, routes = { ["GET /x"] = { "a\0b" } } }
  end, "a NUL in a stage name", "[1] is not a valid stage name", "a\\x00b")
  T.ok(not err:find("\0", 1, true), "the NUL is shown escaped")
  T.raises(function()
    bus:listen{ http = 0, routes = { ["GET /x\r\nX: y"] = { "a" } } }
  end, "CR/LF in a path", "must not hold control characters", "/x\\x0d\\x0aX: y")
  T.raises(function()
    bus:listen{ http = 0, routes = { ["GET /x\0y"] = { "a" } } }
  end, "a NUL in a path", "must not hold control characters")
  bus:shutdown(5)
end)

T.test("l:close(-1) raises; l:close(0) closes", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "a", handler = function() end }
  local l = bus:listen{ http = "127.0.0.1:0", routes = { ["/"] = { "a" } } }
  T.raises(function() l:close(-1) end, "a negative grace", "grace must be a number of seconds >= 0")
  T.raises(function() l:close(0 / 0) end, "nan", "grace must be")
  T.ok(l:port() > 0, "still open after the refused close")
  l:close(0)
  T.raises(function() l:port() end, "closed", "closed listener")
  bus:shutdown(5)
end)

T.test("socket:setoption of an unknown option raises naming it; known ones are accepted", function()
  local s = seda.socket.tcp()
  T.eq(s:setoption("tcp-nodelay", true), 1)
  T.eq(s:setoption("keepalive", true), 1)
  T.raises(function() s:setoption("bogus", true) end, "unknown", "unknown option 'bogus'", "keepalive")
  T.raises(function() s:setoption("keepalive") end, "a value is needed", "value expected")
  s:close()
end)

T.test("an answer table whose status or header cannot be sent says so on the log", function()
  local dir = T.tmpdir()
  local f = T.write(dir .. "/child.lua", [[
local seda = require "seda"
local socket = require "socket"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "frac", handler = function(env) env.payload = { status = 200.5, body = "x" } end }
bus:stage{ name = "hdr", handler = function(env)
  env.payload = { status = 200, body = "y", headers = { ["X-A"] = "1\r\nInjected: 1" } }
end }
bus:stage{ name = "bad", handler = function(env)
  env.payload = { status = 200, body = "z", headers = { ["Bad Name"] = "1" } }
end }
local l = bus:listen{ http = "127.0.0.1:0",
                      routes = { ["/frac"] = { "frac" }, ["/hdr"] = { "hdr" }, ["/bad"] = { "bad" } } }
for _, p in ipairs{ "/frac", "/hdr", "/bad" } do
  local c = assert(socket.tcp())
  c:settimeout(10)
  assert(c:connect("127.0.0.1", l:port()))
  c:send("GET " .. p .. " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
  print(p, (c:receive("*a"):match("^HTTP/1%.%d (%d+)")))
  c:close()
  socket.sleep(1.1)       -- the log says at most one such line a second
end
bus:shutdown(5)
]])
  local out = T.sh("timeout 60 '" .. EXE .. "' '" .. f .. "' 2>&1")
  T.ok(out, "the child ran")
  T.contains(out, "/frac\t500", "a fractional status is answered 500")
  T.contains(out, "the handler's status 200.5 is outside 200-599",
             "... and logged")
  T.contains(out, "/hdr\t200", "the header is dropped, the answer sent")
  T.contains(out, "header 'X-A' was dropped: its value holds a CR, LF or NUL",
             "... and logged, naming it")
  T.ok(not out:find("Injected", 1, true), "nothing injected")
  T.contains(out, "header 'Bad Name' was dropped: not a header name", "a bad name logged")
end)

T.done()
