-- SPEC §13: bus:listen -- HTTP requests as itineraries, with real clients:
-- curl, and a raw client (the harness's, on LuaSocket) for keep-alive,
-- pipelining, slow clients and garbage.  Every status the listener gives
-- (200, early answers, 404, 413, 400, 431, 500, 503 for each admission
-- refusal, 504), 10 000 requests over keep-alive connections each
-- answered exactly once with the bus's accounting identity holding,
-- shedding at the door (an overloaded inner stage turns new work away at
-- the entrance while what it accepted completes), 1 000 idle connections
-- beside a working one, and a client that leaves mid-itinerary.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"
local socket = require "socket"

-- ---- a raw HTTP/1.1 client ----

local connect, read_response = T.http_connect, T.http_read

local function request_text(method, path, body, extra)
  body = body or ""
  return method .. " " .. path .. " HTTP/1.1\r\nHost: t\r\n" .. (extra or "") ..
         "Content-Length: " .. #body .. "\r\n\r\n" .. body
end

-- One request on a fresh connection.
local function http(port, method, path, body, extra)
  local c = connect(port)
  assert(c:send(request_text(method, path, body, extra)))
  local s, h, b = read_response(c)
  c:close()
  return s, h, b
end

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- curl: status code, then the body.
local function curl(args)
  local p = assert(io.popen("curl -s -w '\\n%{http_code}' " .. args, "r"))
  local out = p:read("a")
  p:close()
  local body, code = out:match("^(.*)\n(%d+)$")
  return tonumber(code), body
end

local function wait_for(what, fn, limit)
  local t0 = seda.now()
  while not fn() do
    if seda.now() - t0 > (limit or 10) then T.fail("timed out waiting for " .. what) end
    socket.sleep(0.01)
  end
end

local function identity(bus)
  local s = bus:stats()
  return s.accepted == s.completed + s.dead_lettered + s.dropped + s.in_system, s
end

-- ---- the service most tests use ----

local bus = seda.bus{ workers = 2 }
bus:stage{ name = "parse", handler = function(env)
  local p = env.payload
  p.n = tonumber(p.query.n or "1")
  env.payload = p
end }
bus:stage{ name = "price", max_attempts = 1, concurrency = 64, handler = function(env)
  local p = env.payload
  if p.query.early then
    return env:respond(201, { early = true, n = p.n }, { ["X-Early"] = "yes" })
  end
  if p.query.fail then error("price failed on purpose") end
  if p.query.bad then return env:respond(400, { error = "bad" }) end
  if p.query.integral then return env:respond(200, { total = 2 * 1.5, n = 3, neg = -0.0, big = 1e300, list = { 1, 1.0 } }, { ["X-Total"] = 2 * 1.5 }) end
  if p.query.nan then return env:respond(200, { order = { total = 0 / 0 } }) end
  if p.query.float then env.payload = { body = { x = 19.37, y = 0.1 + 0.2 } }; return env:respond(200, { x = 19.37, y = 1 / 3 }) end
  if p.query.sleep then seda.sleep(tonumber(p.query.sleep)) end
  p.price = p.n * 10
  env.payload = p
end }
bus:stage{ name = "store", handler = function(env)
  local p = env.payload
  if p.query.str then env.payload = "plain " .. p.price; return end
  if p.query.i then env.payload = p.query.i; return end
  if p.query.record then env.payload = { status = "shipped", id = 7 }; return end
  env.payload = { status = 200, headers = { ["X-Store"] = "1" },
                  body = { price = p.price, method = p.method, body = p.body,
                           ua = p.headers["user-agent"], list = { 1, 2, 3 } } }
end }
bus:stage{ name = "slow", capacity = 1, concurrency = 1, policy = "reject",
           handler = function(env) seda.sleep(0.15); env.payload = "slow done" end }
bus:stage{ name = "forwarder", handler = function(env) return env:forward("nosuchstage") end }
bus:stage{ name = "guarded", admit = function(env, stage)
             if env.payload.headers["x-deny"] then return false, "denied" end
             return true
           end,
           handler = function(env) env.payload = "let in" end }

local L = bus:listen{
  http = "127.0.0.1:0",
  routes = {
    ["POST /orders"] = { "parse", "price", "store" },
    ["GET /orders"] = { "parse", "price", "store" },
    ["GET /slow"] = { "slow" },
    ["GET /guarded"] = { "guarded" },
    ["GET /missing"] = { "forwarder" },
  },
  timeout = 0.5, max_body = 1000, max_header = 2048,
  max_connections = 1100, client_timeout = 1,
}
local port = L:port()
local base = "http://127.0.0.1:" .. port

T.test("a route's payload comes back: a table as JSON, headers, status", function()
  local code, body = curl("-X POST -d hello " .. sh_quote(base .. "/orders?n=3"))
  T.eq(code, 200, "status")
  T.ok(body:find('"price":30', 1, true), body)
  T.ok(body:find('"body":"hello"', 1, true), body)
  T.ok(body:find('"method":"POST"', 1, true), body)
  T.ok(body:find('"list":[1,2,3]', 1, true), body)
  T.ok(body:find('"ua":"curl/', 1, true), body)
  local s, h = http(port, "GET", "/orders?n=1")
  T.eq(s, 200)
  T.eq(h["x-store"], "1", "a header the handler set")
  T.eq(h["content-type"], "application/json", "a table body is JSON")
end)

T.test("a table whose status is not a number is data, sent as JSON", function()
  local s, h, b = http(port, "GET", "/orders?n=1&record=1")
  T.eq(s, 200)
  T.eq(h["content-type"], "application/json")
  T.ok(b:find('"status":"shipped"', 1, true) and b:find('"id":7', 1, true), b)
end)

T.test("a route naming the method wins over one for any method, whatever the table order", function()
  local b2 = seda.bus{ workers = 1 }
  b2:stage{ name = "any", handler = function(env) env.payload = "any" end }
  b2:stage{ name = "get", handler = function(env) env.payload = "get" end }
  -- Tables of different sizes iterate their keys in different orders.
  for pad = 0, 11 do
    local routes = { ["/d"] = { "any" }, ["GET /d"] = { "get" } }
    for i = 1, pad * 3 do routes["/pad" .. i] = { "any" } end
    local l = b2:listen{ http = 0, routes = routes }
    local _, _, body = http(l:port(), "GET", "/d")
    T.eq(body, "get", "GET /d with " .. pad * 3 .. " more routes")
    _, _, body = http(l:port(), "POST", "/d")
    T.eq(body, "any", "POST /d")
    l:close()
  end
  T.ok(b2:shutdown(5))
end)

T.test("a string payload is a 200 text body", function()
  local s, h, b = http(port, "GET", "/orders?n=2&str=1")
  T.eq(s, 200)
  T.eq(b, "plain 20")
  T.ok(h["content-type"]:find("text/plain", 1, true))
end)

T.test("env:respond answers early and ends the itinerary", function()
  T.ok(bus:wait(5))
  local before = bus:stats("store").delivered
  local s, h, b = http(port, "GET", "/orders?early=1&n=4")
  T.ok(bus:wait(5))
  T.eq(s, 201)
  T.eq(h["x-early"], "yes")
  T.ok(b:find('"early":true', 1, true) and b:find('"n":4', 1, true), b)
  T.eq(bus:stats("store").delivered, before, "store never saw it")
end)

T.test("env:respond with a body alone; JSON numbers read back exactly", function()
  local s, h, b = http(port, "GET", "/orders?bad=1")
  T.eq(s, 400)
  T.eq(b, '{"error":"bad"}')
  s, h, b = http(port, "GET", "/orders?float=1")
  T.eq(s, 200)
  T.ok(b:find('"x":19.37', 1, true), b)
  T.ok(b:find('"y":0.33333333333333331', 1, true) or b:find('"y":0.3333333333333333', 1, true), b)
  -- A float with an integral value is written so it reads back a float
  -- (3.0), an integer as an integer: as the remote JSON format writes
  -- them (before, the answer said 3 for 2 * 1.5).
  s, h, b = http(port, "GET", "/orders?integral=1")
  T.eq(s, 200)
  T.ok(b:find('"total":3.0', 1, true), b)
  T.ok(b:find('"n":3[,}]'), b)
  T.ok(b:find('"neg":-0.0', 1, true), b)
  T.ok(b:find('"big":1e+300', 1, true), b)
  T.ok(b:find('"list":[1,1.0]', 1, true), b)
  T.eq(h["x-total"], "3.0", "a number header value alike")
  -- nan is the only kind of number refused: 500 naming its path.
  s, h, b = http(port, "GET", "/orders?nan=1")
  T.eq(s, 500)
  T.eq(h["seda-reason"], "bad_response")
  T.contains(b, "payload.body.order.total: JSON cannot carry nan", "names the path")
end)

T.test("a dead letter is 500 with the reason", function()
  local s, h, b = http(port, "GET", "/orders?fail=1")
  T.eq(s, 500)
  T.eq(h["seda-reason"], "max_attempts")
  T.ok(b:find("stage price", 1, true), b)
end)

T.test("no route is 404; a body over max_body is 413 (length or chunked)", function()
  T.eq((http(port, "GET", "/nothing")), 404)
  T.eq((http(port, "DELETE", "/orders")), 404, "a path with another method")
  T.eq((http(port, "POST", "/orders", string.rep("x", 1001))), 413)
  local code = curl("-X POST -H 'Transfer-Encoding: chunked' --data-binary @- " ..
                    sh_quote(base .. "/orders") .. " < /dev/null")
  T.eq(code, 200, "an empty chunked body is fine")
  local p = assert(io.popen("head -c 5000 /dev/zero | curl -s -o /dev/null -w '%{http_code}' " ..
                            "-X POST -H 'Transfer-Encoding: chunked' --data-binary @- " ..
                            sh_quote(base .. "/orders"), "r"))
  local c2 = p:read("a"); p:close()
  T.eq(tonumber(c2), 413, "a chunked body over max_body")
end)

T.test("garbage is 400; headers over max_header are refused", function()
  local c = connect(port)
  c:send("THIS IS NOT HTTP\r\n\r\n")
  local s = read_response(c)
  c:close()
  T.eq(s, 400, "a malformed request line")
  c = connect(port)
  c:send("GET /orders HTTP/1.1\r\nHost: t\r\nX-Big: " .. string.rep("a", 3000) .. "\r\n\r\n")
  s = read_response(c)
  c:close()
  T.eq(s, 431, "headers over max_header")
  c = connect(port)
  c:send("GET /orders HTTP/1.1\r\nHost: t\r\nX-Big: " .. string.rep("a", 20000) .. "\r\n\r\n")
  s = read_response(c)
  c:close()
  T.ok(s == 431 or s == 413 or s == 414 or s == 400 or s == nil,
       "far over (refused by libmicrohttpd's own pool): " .. tostring(s))
  T.eq((http(port, "GET", "/orders?n=1", nil, "X-Fine: " .. string.rep("a", 1500) .. "\r\n")), 200,
       "under max_header")
  c = connect(port)
  c:send("GET /orders HTTP/1.1\r\nHost: t\r\nContent-Length: banana\r\n\r\n")
  s = read_response(c)
  c:close()
  T.eq(s, 400, "a bad Content-Length")
end)

T.test("every admission refusal is 503 with Retry-After and Seda-Reason", function()
  -- full: capacity 1, one in service, one queued, the third refused
  local cs = {}
  for i = 1, 3 do
    cs[i] = connect(port)
    cs[i]:send(request_text("GET", "/slow"))
    socket.sleep(0.02)
  end
  local got = {}
  for i = 1, 3 do
    local s, h = read_response(cs[i])
    got[#got + 1] = s
    if s == 503 then
      T.eq(h["seda-reason"], "full")
      T.eq(h["retry-after"], "1")
    end
    cs[i]:close()
  end
  table.sort(got)
  T.eq(table.concat(got, ","), "200,200,503", "two served, one refused")
  -- an admit rule
  local s, h = http(port, "GET", "/guarded", nil, "X-Deny: 1\r\n")
  T.eq(s, 503)
  T.eq(h["seda-reason"], "denied")
  T.eq((http(port, "GET", "/guarded")), 200, "admitted without the header")
  T.eq(bus:stats("guarded").refused, 1, "counted in refused")
  -- paused
  bus:pause()
  s, h = http(port, "GET", "/orders")
  bus:resume()
  T.eq(s, 503)
  T.eq(h["seda-reason"], "paused")
  -- a request that meets a stage that does not exist (forwarded there):
  -- 500 naming that stage, not 503 (retrying cannot help)
  local body
  s, h, body = http(port, "GET", "/missing")
  T.eq(s, 500)
  T.eq(h["seda-reason"], "no_such_stage")
  T.contains(body, "stage nosuchstage does not exist; forwarded there by stage forwarder",
             "names the missing stage and the one that forwarded")
end)

T.test("listen raises for a route naming a stage that does not exist", function()
  T.raises(function()
    bus:listen{ http = "127.0.0.1:0", routes = { ["GET /a"] = { "parse" }, ["POST /b"] = { "parse", "prise" } } }
  end, "listen: route 'POST /b': stage 'prise' does not exist")
  T.raises(function()
    bus:listen{ http = "127.0.0.1:0", routes = { ["/c"] = { "nosuchstage" } } }
  end, "listen: route '/c': stage 'nosuchstage' does not exist")
end)

T.test("past timeout the answer is 504; the itinerary still completes", function()
  local done = bus:stats("store").delivered
  local t0 = seda.now()
  local s, h = http(port, "GET", "/orders?sleep=1")
  T.eq(s, 504)
  T.ok(seda.now() - t0 < 0.9, "answered at the timeout, not at the end")
  wait_for("the late itinerary", function() return bus:stats("store").delivered == done + 1 end)
  T.eq(L:stats().timeouts >= 1, true)
end)

T.test("keep-alive: pipelined requests are answered in order", function()
  local c = connect(port)
  local parts = {}
  for i = 1, 100 do
    local slow = (i % 10 == 0) and "&sleep=0.02" or ""
    parts[#parts + 1] = request_text("GET", "/orders?i=" .. i .. slow)
  end
  assert(c:send(table.concat(parts)))
  for i = 1, 100 do
    local s, _, b = read_response(c)
    T.eq(s, 200, "response " .. i)
    T.eq(b, tostring(i), "in order")
  end
  c:close()
end)

T.test("10 000 requests over keep-alive: each answered exactly once", function()
  T.ok(bus:wait(5), "idle first")
  local before = bus:stats()
  local conns, per, window = 4, 2500, 32
  local cs, sent, got = {}, {}, {}
  for k = 1, conns do cs[k] = connect(port); sent[k] = 0; got[k] = 0 end
  local seen, bad = {}, 0
  -- Each connection keeps `window` requests in flight.
  local active = conns
  while active > 0 do
    active = 0
    for k = 1, conns do
      if got[k] < per then
        active = active + 1
        local batch = {}
        while sent[k] < per and sent[k] - got[k] < window do
          sent[k] = sent[k] + 1
          batch[#batch + 1] = request_text("GET", "/orders?i=" .. (k * 100000 + sent[k]))
        end
        if #batch > 0 then assert(cs[k]:send(table.concat(batch))) end
        while got[k] < sent[k] do
          local s, _, b = read_response(cs[k])
          if s ~= 200 then bad = bad + 1 end
          got[k] = got[k] + 1
          local id = tonumber(b)
          if not id or seen[id] or id ~= k * 100000 + got[k] then bad = bad + 1 end
          if id then seen[id] = true end
          if got[k] % window == 0 then break end
        end
      end
    end
  end
  -- Nothing more arrives: each request had exactly one answer.
  for k = 1, conns do
    cs[k]:settimeout(0.05)
    local extra = cs[k]:receive(1)
    T.eq(extra, nil, "no extra bytes on connection " .. k)
    cs[k]:close()
  end
  T.eq(bad, 0, "wrong, missing or repeated answers")
  local n = 0
  for _ in pairs(seen) do n = n + 1 end
  T.eq(n, conns * per, "distinct answers")
  T.ok(bus:wait(5), "idle after")
  local ok, s = identity(bus)
  T.ok(ok, "accepted == completed + dead_lettered + dropped + in_system")
  T.eq(s.accepted - before.accepted, conns * per, "accepted")
  T.eq(s.completed - before.completed, conns * per, "completed")
  local ls = bus:stats().listeners[L:stats().address]
  T.ok(ls.requests >= conns * per, "the listener counted them")
  T.ok(ls.responses["2xx"] >= conns * per, "2xx counted")
  T.ok(ls.latency_count > 0 and ls.latency_p99 > 0, "latency measured")
end)

T.test("a slow client is cut at client_timeout even while it drips bytes", function()
  local c = connect(port)
  c:settimeout(0.3)
  local text = "GET /orders HTTP/1.1\r\nHost: t\r\nX-Slow: " .. string.rep("a", 200)
  local t0, closed = seda.now(), false
  for i = 1, #text do
    local ok = c:send(text:sub(i, i))
    if not ok then closed = true; break end
    local _, err = c:receive(1)
    if err == "closed" then closed = true; break end
    if seda.now() - t0 > 4 then break end
  end
  c:close()
  T.ok(closed, "the server closed the connection")
  T.ok(seda.now() - t0 < 3, "within about client_timeout")
  T.ok(L:stats().slow_clients >= 1, "counted")
end)

T.test("1 000 idle connections do not stop service", function()
  local idle = {}
  for i = 1, 1000 do idle[i] = connect(port) end
  wait_for("1000 open", function() return L:stats().open_connections >= 1000 end)
  local code, body = curl(sh_quote(base .. "/orders?n=5&str=1"))
  T.eq(code, 200)
  T.eq(body, "plain 50")
  for _, c in ipairs(idle) do c:close() end
  wait_for("closed", function() return L:stats().open_connections < 10 end)
end)

T.test("a client that leaves mid-itinerary loses nothing else", function()
  T.ok(bus:wait(5))
  local before = bus:stats()
  local leaver = connect(port)
  leaver:send(request_text("GET", "/orders?sleep=0.2&n=1"))
  local stay = {}
  for i = 1, 10 do
    stay[i] = connect(port)
    stay[i]:send(request_text("GET", "/orders?sleep=0.1&i=" .. i))
  end
  socket.sleep(0.05)
  leaver:close()
  for i = 1, 10 do
    local s, _, b = read_response(stay[i])
    T.eq(s, 200)
    T.eq(b, tostring(i))
    stay[i]:close()
  end
  T.ok(bus:wait(5))
  local ok, s = identity(bus)
  T.ok(ok, "identity")
  T.eq(s.completed - before.completed, 11, "the leaver's itinerary completed too")
  T.eq(s.dead_lettered, before.dead_lettered, "no dead letters")
end)

-- ---- shedding at the door ----

T.test("an overloaded inner stage sheds new work at the door; accepted work completes", function()
  local b2 = seda.bus{ workers = 2 }
  b2:stage{ name = "front", handler = function(env) end }
  b2:stage{ name = "inner", concurrency = 1, capacity = 1000,
            shed = { target = 0.005, interval = 0.05 },
            -- CPU work: a call suspended in seda.sleep does not feed
            -- the shedding clock (its sojourn is not sampled per batch).
            handler = function(env)
              local t = os.clock()
              while os.clock() - t < 0.004 do end
            end }
  local l2 = b2:listen{ http = 0, routes = { ["POST /work"] = { "front", "inner" } } }
  -- Flood: far more than inner can take in its target.
  local accepted, refused = 0, 0
  local t0 = seda.now()
  while seda.now() - t0 < 1.5 and refused == 0 do
    for _ = 1, 20 do
      local ok, err = b2:publish("front", "x", { slip = { "inner" } })
      if ok then accepted = accepted + 1
      else T.eq(err, "shed", "the refusal"); refused = refused + 1 end
    end
    socket.sleep(0.005)
  end
  T.ok(refused > 0, "publish refused at the door (accepted " .. accepted .. ")")
  T.ok(b2:stats("inner").shedding > 0, "inner is shedding")
  -- A request now is refused at the door too.
  local s, h = http(l2:port(), "POST", "/work", "x")
  T.eq(s, 503)
  T.eq(h["seda-reason"], "shed")
  T.ok(b2:stats("inner").shed_for >= 2, "inner caused them: shed_for")
  T.eq(b2:stats("front").shed_for, 0, "front caused none")
  T.ok(b2:stats("front").shed >= 2, "refused at front, the door")
  -- A high-priority itinerary still goes in; hops are never shed.
  T.ok(b2:publish("front", "vip", { slip = { "inner" }, priority = "high" }), "high")
  T.ok(b2:wait(30), "everything accepted completes")
  local ok, st = identity(b2)
  T.ok(ok, "identity")
  T.eq(st.completed, accepted + 1, "all accepted work completed")
  T.eq(st.dead_lettered, 0)
  T.eq(b2:stats("inner").dropped, 0, "no hop was shed")
  -- Once the queue is gone, the door opens again.
  wait_for("admission again", function()
    return b2:publish("front", "y", { slip = { "inner" } })
  end)
  T.eq((http(l2:port(), "POST", "/work", "x")), 200, "served again")
  b2:shutdown(5)
end)

T.test("several listeners per bus; each in stats()", function()
  local l3 = bus:listen{ http = 0, routes = { ["/any"] = { "guarded" } } }
  T.eq((http(l3:port(), "PUT", "/any")), 200, "a route for any method")
  local ls = bus:stats().listeners
  local n = 0
  for _ in pairs(ls) do n = n + 1 end
  T.eq(n, 2)
  local addr = l3:stats().address
  T.eq(addr, "127.0.0.1:" .. l3:port(), "named by its address")
  l3:close()
  T.eq(bus:stats().listeners[addr].open, false, "closed")
end)

T.test("a route whose first stage is durable: pipelined requests share group commits, each answered once", function()
  local dbus = T.bus{ workers = 2, data_dir = T.tmpdir() .. "/data", group_wait = 0.02 }
  dbus:stage{ name = "in", durable = "at_least_once", handler = function(env)
    env.payload = "got " .. env.payload.query.i
  end }
  local dl = dbus:listen{ http = 0, routes = { ["GET /d"] = { "in" } } }
  local conns, per = 4, 16
  local cs = {}
  for k = 1, conns do
    cs[k] = connect(dl:port())
    local batch = {}
    for i = 1, per do batch[i] = request_text("GET", "/d?i=" .. (k * 1000 + i)) end
    assert(cs[k]:send(table.concat(batch)))
  end
  local bad = 0
  for k = 1, conns do
    for i = 1, per do
      local s, _, b = read_response(cs[k])
      if s ~= 200 or b ~= "got " .. (k * 1000 + i) then bad = bad + 1 end
    end
    cs[k]:close()
  end
  T.eq(bad, 0, "every request answered 200 with its own payload, in order")
  local j = dbus:stats().journal
  T.ok(j.group_max > 1, "requests shared a commit: group_max " .. j.group_max)
  T.ok(j.commits < conns * per * 2, "fewer commits than an insert and a delete per request: "
       .. j.commits)
  T.ok(dbus:wait(5), "idle")
  local ok = identity(dbus)
  T.ok(ok, "accepted == completed + dead_lettered + dropped + in_system")
end)

T.test("listen misuse raises naming the field", function()
  local ok, err = pcall(bus.listen, bus, { http = 0 })
  T.ok(not ok and err:find("routes", 1, true), err)
  ok, err = pcall(bus.listen, bus, { http = 0, routes = { ["GET x"] = { "parse" } } })
  T.ok(not ok and err:find("METHOD /path", 1, true), err)
  ok, err = pcall(bus.listen, bus, { http = "example.com:80", routes = { ["/"] = { "parse" } } })
  T.ok(not ok and err:find("numeric", 1, true), err)
  ok, err = pcall(bus.listen, bus, { http = 0, routes = { ["/"] = { "parse" } }, bogus = 1 })
  T.ok(not ok and err:find("bogus", 1, true), err)
  -- A route no request could match raises naming it.
  for _, c in ipairs{ { "get /a", "upper-case" }, { " /a", "method is empty" } } do
    ok, err = pcall(bus.listen, bus, { http = 0, routes = { [c[1]] = { "parse" } } })
    T.ok(not ok and err:find(c[1], 1, true) and err:find(c[2], 1, true), tostring(err))
  end
  -- A numeric option out of range names it and its range (the message
  -- once failed to format, and huge values reached integer casts).
  for _, c in ipairs{
    { "timeout", -1, "timeout must be a number >= 0.001" },
    { "timeout", "x", "timeout must be a number >= 0.001" },
    { "max_body", -5, "max_body must be a number from 0 to" },
    { "max_body", 1e300, "max_body must be a number from 0 to" },
    { "max_header", 10, "max_header must be a number from 1024 to" },
    { "max_connections", 1e10, "max_connections must be a number from 1 to" },
    { "client_timeout", 1e300, "client_timeout must be a number from 0.001 to" },
    { "threads", 2, "threads is not an option: a listener has no threads to size" },
  } do
    ok, err = pcall(bus.listen, bus, { http = 0, routes = { ["/"] = { "parse" } }, [c[1]] = c[2] })
    T.ok(not ok and err:find(c[3], 1, true), tostring(err))
  end
end)

T.test("while the bus shuts down: no new connections, a request on an open one is 503 closed, in-flight work answered", function()
  local b3 = seda.bus{ workers = 2 }
  b3:stage{ name = "s", concurrency = 8, handler = function(env)
    seda.sleep(tonumber(env.payload.query.t or "0"))
    env.payload = "ok"
  end }
  local l4 = b3:listen{ http = 0, routes = { ["/s"] = { "s" } } }
  local p4 = l4:port()
  -- Another process keeps a connection open: one request now, another
  -- 0.4 s later, during the shutdown below.
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(([[
local socket = require "socket"
local c = socket.tcp(); c:settimeout(5); assert(c:connect("127.0.0.1", %d))
local function rq()
  c:send("GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
  local line = c:receive("*l") or "none"
  local reason, len = "-", 0
  while true do
    local h = c:receive("*l")
    if not h or h == "" then break end
    local k, v = h:match("^([^:]+):%%s*(.*)$")
    if k and k:lower() == "seda-reason" then reason = v end
    if k and k:lower() == "content-length" then len = tonumber(v) end
  end
  if len > 0 then c:receive(len) end
  return line:match("%%d%%d%%d") .. " " .. reason
end
io.write(rq(), "\n"); io.flush()
socket.sleep(0.4)
io.write(rq(), "\n")
-- A new connection during the drain is refused at once (the listening
-- socket is shut down, though kept open until the server stops).
local c2, e2 = socket.connect("127.0.0.1", %d)
io.write(c2 and "connected" or tostring(e2), "\n")
]]):format(p4, p4))
  f:close()
  local client = assert(io.popen("exec lua5.4 " .. sh_quote(script), "r"))
  local first = client:read("l")
  T.eq(first, "200 -", "the client's first request")
  local slow = connect(p4)
  slow:send(request_text("GET", "/s?t=0.8"))
  socket.sleep(0.1)
  local t0 = seda.now()
  T.ok(b3:shutdown(5), "drained")
  T.ok(seda.now() - t0 > 0.4, "the shutdown waited for the slow one")
  local s, _, body = read_response(slow)
  T.eq(s, 200, "in-flight work answered")
  T.eq(body, "ok")
  slow:close()
  T.eq(client:read("l"), "503 closed", "a request during the drain")
  T.eq(client:read("l"), "connection refused", "a new connection during the drain")
  client:close()
  os.remove(script)
  local c, err = socket.connect("127.0.0.1", p4)
  T.eq(c, nil, "no new connections after (" .. tostring(err) .. ")")
end)

bus:shutdown(5)
T.done()
