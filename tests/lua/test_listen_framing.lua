-- SPEC §13, §16: bus:listen reads requests strictly (RFC 9112), so no
-- request can hide inside another on a kept-open connection.  Each case
-- speaks raw TCP (LuaSocket): 400 and the connection closed for
-- Content-Length with Transfer-Encoding, differing or repeated
-- Content-Lengths, whitespace before a header's colon, a folded header
-- line, a bare CR or a NUL in a header, a missing or repeated Host on
-- HTTP/1.1, %00 in the path or query; 501 for a transfer coding other than
-- chunked, at once.  A handler's status outside 200-599 is a 500 naming
-- it.  And the writing side: an answer larger than the socket takes is
-- written as the client reads, a client that leaves half-way through its
-- answer costs nothing else, 1 000 idle connections while both workers
-- are busy in Lua.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local connect, read_response = T.http_connect, T.http_read

-- The connection is closed by the server: a read ends (within 5 s).
local function closed(c)
  c:settimeout(5)
  local _, err = c:receive(1)
  return err == "closed"
end

local bus = seda.bus{ workers = 2 }
local seen = 0
bus:stage{ name = "echo", concurrency = 8, handler = function(env)
  local p = env.payload
  env.payload = p.method .. " " .. p.path .. " " .. #p.body
end }
bus:stage{ name = "status", handler = function(env)
  env.payload = { status = tonumber(env.payload.query.s), body = "x" }
end }
bus:stage{ name = "big", handler = function(env)
  env.payload = string.rep("abcdefgh", tonumber(env.payload.query.n) // 8)
end }
bus:stage{ name = "spin", concurrency = 2, handler = function(env)
  local t = seda.now() + tonumber(env.payload.query.t)
  while seda.now() < t do end
  env.payload = "spun"
end }

local L = bus:listen{
  http = 0,
  routes = { ["/echo"] = { "echo" }, ["/status"] = { "status" },
             ["/big"] = { "big" }, ["/spin"] = { "spin" } },
  timeout = 20, client_timeout = 20, max_connections = 1100,
}
local port = L:port()

-- text sent on a fresh connection: the first answer's status and
-- headers, and whether the server closed the connection after it (no
-- second answer, whatever followed).
local function one(text)
  local c = connect(port)
  assert(c:send(text))
  local s, h, b = read_response(c)
  local cl = s and closed(c)
  c:close()
  return s, h or {}, b, cl
end

local function refused(name, text, want, reason)
  T.test(name, function()
    local s, h, b, cl = one(text)
    T.eq(s, want or 400, "the status")
    T.ok(cl, "the connection was closed after it (nothing behind it read)")
    T.eq(h.connection, "close", "said so")
    if reason then T.contains(b, reason, "the body says why") end
  end)
end

local GET = "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n"

T.test("a plain request and a pipelined second on one connection are both answered (the baseline)", function()
  local c = connect(port)
  c:send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello" .. GET)
  local s1, _, b1 = read_response(c)
  local s2, _, b2 = read_response(c)
  c:close()
  T.eq(s1, 200); T.eq(b1, "POST /echo 5")
  T.eq(s2, 200); T.eq(b2, "GET /echo 0")
end)

refused("Content-Length with Transfer-Encoding: 400, the tail is not a second request",
  "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" ..
  "0\r\n\r\n" .. GET, 400, "Transfer-Encoding")
refused("Transfer-Encoding before Content-Length: 400 too",
  "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" ..
  "0\r\n\r\n" .. GET, 400)
refused("two differing Content-Lengths: 400",
  "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 36\r\n\r\nhello" .. GET,
  400, "differing")
refused("a repeated Content-Length, even the same: 400",
  "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello" .. GET, 400)
refused("whitespace before a header's colon: 400, the body is not the next request",
  "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length : 36\r\n\r\n" .. GET, 400, "colon")
refused("a folded header line (obs-fold): 400",
  "GET /echo HTTP/1.1\r\nHost: t\r\nX-A: a\r\n  folded\r\n\r\n", 400, "obs-fold")
refused("a bare CR in a header: 400",
  "GET /echo HTTP/1.1\r\nHost: t\r\nX-A: a\rContent-Length: 36\r\n\r\n" .. GET, 400, "bare CR")
refused("a NUL in a header: 400",
  "GET /echo HTTP/1.1\r\nHost: t\r\nX-A: a\0b\r\n\r\n", 400, "NUL")
refused("HTTP/1.1 without Host: 400",
  "GET /echo HTTP/1.1\r\nX-A: a\r\n\r\n", 400, "Host")
refused("HTTP/1.1 with two Hosts: 400",
  "GET /echo HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "Host")
refused("%00 in the path: 400, not routed to the path before it",
  "GET /echo%00.x HTTP/1.1\r\nHost: t\r\n\r\n", 400, "%00")
refused("%00 in the query: 400",
  "GET /echo?a=b%00c HTTP/1.1\r\nHost: t\r\n\r\n", 400, "%00")
refused("a garbage request line: 400",
  "THIS IS NOT HTTP\r\n\r\n", 400)

T.test("an unknown transfer coding: 501 at once, not a cut at client_timeout", function()
  local t0 = seda.now()
  local s, h, b, cl = one("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\nxxxx")
  T.eq(s, 501)
  T.contains(b, "gzip", "names the coding")
  T.ok(cl, "closed after")
  T.ok(seda.now() - t0 < 5, "answered, not timed out")
  s = one("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")
  T.eq(s, 501, "a list with chunked last")
end)

T.test("HTTP/1.0 needs no Host; a chunked body is decoded", function()
  local s, _, b = one("GET /echo HTTP/1.0\r\n\r\n")
  T.eq(s, 200); T.eq(b, "GET /echo 0")
  local c = connect(port)
  c:send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n" .. GET)
  local s1, _, b1 = read_response(c)
  local s2, _, b2 = read_response(c)
  c:close()
  T.eq(s1, 200); T.eq(b1, "POST /echo 7")
  T.eq(s2, 200, "the request after a chunked body"); T.eq(b2, "GET /echo 0")
end)

T.test("a handler's status outside 200-599 is a 500 naming it; the connection stays usable", function()
  local c = connect(port)
  for _, st in ipairs({ 99, 100, 150, 199, 600, 999, 1000, 200.5 }) do
    c:send("GET /status?s=" .. st .. " HTTP/1.1\r\nHost: t\r\n\r\n")
    local s, h, b = read_response(c)
    T.eq(s, 500, "status " .. st)
    T.eq(h["seda-reason"], "bad_status")
    T.contains(b, tostring(st), "the body names " .. st)
  end
  c:send("GET /status?s=201 HTTP/1.1\r\nHost: t\r\n\r\n")
  T.eq((read_response(c)), 201, "an ordinary status after them")
  c:close()
end)

T.test("an answer larger than the socket takes is written as the client reads it", function()
  local n = 8 * 1024 * 1024
  local c = connect(port)
  c:send("GET /big?n=" .. n .. " HTTP/1.1\r\nHost: t\r\n\r\n")
  -- Not read until the itinerary is over: the server is left with the rest.
  T.wait_until(function() return bus:stats().completed >= 1 and bus:stats("big").completed == 1 end,
               10, "the itinerary ended")
  local s, h, b = read_response(c)
  T.eq(s, 200)
  T.eq(tonumber(h["content-length"]), n)
  T.eq(#b, n, "every byte")
  T.eq(b:sub(1, 8), "abcdefgh"); T.eq(b:sub(-8), "abcdefgh")
  c:send(GET)
  T.eq((read_response(c)), 200, "the connection serves the next request")
  c:close()
end)

T.test("a client that leaves half-way through its answer costs nothing else", function()
  local before = L:stats().open_connections
  local c = connect(port)
  c:send("GET /big?n=" .. (16 * 1024 * 1024) .. " HTTP/1.1\r\nHost: t\r\n\r\n")
  local line = c:receive("*l")
  T.contains(line, "200")
  c:receive(100000)
  c:close()
  T.wait_until(function() return L:stats().open_connections <= before end, 10,
               "its connection closed")
  local c2 = connect(port)
  c2:send(GET)
  local s, _, b = read_response(c2)
  c2:close()
  T.eq(s, 200); T.eq(b, "GET /echo 0")
  T.ok(bus:wait(5))
  local st = bus:stats()
  T.eq(st.accepted, st.completed + st.dead_lettered + st.dropped + st.in_system, "the identity")
end)

T.test("1 000 idle connections while both workers are busy in Lua: all answered after", function()
  local idle = {}
  for i = 1, 1000 do idle[i] = connect(port) end
  T.wait_until(function() return L:stats().open_connections >= 1000 end, 20, "1000 open")
  local spin = {}
  for i = 1, 2 do
    spin[i] = connect(port)
    spin[i]:send("GET /spin?t=0.5 HTTP/1.1\r\nHost: t\r\n\r\n")
  end
  T.wait_until(function() return bus:stats("spin").in_flight == 2 end, 10, "both workers spin")
  local c = connect(port)
  c:send(GET)
  for i = 1, 2 do
    local s, _, b = read_response(spin[i])
    T.eq(s, 200); T.eq(b, "spun")
    spin[i]:close()
  end
  local s, _, b = read_response(c)
  T.eq(s, 200, "the request sent while they spun"); T.eq(b, "GET /echo 0")
  c:close()
  for i = 1, 1000 do idle[i]:close() end
  T.wait_until(function() return L:stats().open_connections < 10 end, 20, "closed")
end)

T.test("the listener's counts: 400s and 501s are 4xx and 5xx answers", function()
  local r = L:stats().responses
  T.ok(r["4xx"] >= 13, "4xx counted (" .. r["4xx"] .. ")")
  T.ok(r["5xx"] >= 10, "5xx counted (" .. r["5xx"] .. ")")
end)

bus:shutdown(5)
T.done()
