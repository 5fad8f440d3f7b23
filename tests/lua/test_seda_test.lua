-- seda.test (lua/seda/test.lua), loaded from seda-lua (embedded): a
-- handler's env and results as a worker would give them, checked against
-- a real bus where the two can be compared.
local H = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"
local T = require "seda.test"

H.test("seda is a global with the handler's view (seda.shared, publish)", function()
  H.eq(rawget(_G, "seda"), T.seda, "the global")
  H.eq(seda.shared, T.seda.shared, "the real seda.shared")
  local g = rawget(_G, "seda")        -- what a handler file's `seda` is
  local r = T.call(function(env)
    g.shared:incr("st.n")
    H.eq(g.worker, 0, "seda.worker")
    return g.publish("audit", { env.payload })
  end, 5)
  H.ok(r.ok, "acked")
  H.eq(seda.shared:get("st.n"), 1, "shared incremented")
  H.eq(#r.published, 1, "one publish recorded")
  H.eq(r.published[1].to, "audit")
  H.deep_eq(r.published[1].payload, { 5 })
  local ok, err = T.seda.publish("x", { f = print })
  H.eq(ok, false, "an unencodable publish is refused")
  H.contains(err, "cannot encode a function")
end)

H.test("the env: fields, forward, the slip, an env kept past its call", function()
  local seen
  local r = T.call(function(env)
    seen = env
    H.eq(env.attempts, 1)
    H.eq(env.to, "parse")
    H.eq(env.sender, "me")
    H.eq(env.headers.k, "v")
    H.deep_eq(env.slip, { "b" })
    H.eq(env:forward("a1", "a2"), true, "forward returns true")
    H.deep_eq(env.slip, { "a1", "a2", "b" })
    H.raises(function() env.to = "x" end, "fields cannot be set")
    H.raises(function() env.payload = print end, "a function payload")
    H.raises(function() env:forward("bad name") end, "a bad hop name")
  end, "p", { to = "parse", sender = "me", headers = { k = "v" },
              slip = { "b" } })
  H.ok(r.ok, r.err)
  H.eq(r.next, "a1")
  H.raises(function() return seen.payload end, "kept env raises")
  H.eq(tostring(seen), "envelope (finished)")
end)

H.test("a nack undoes payload, headers and hops; false vs an error", function()
  local r = T.call(function(env)
    env.payload.x = 2
    env.headers.h = "changed"
    env:forward("z")
    return false
  end, { x = 1 }, { headers = { h = "orig" } })
  H.ok(r.nacked)
  H.eq(r.err, nil, "a plain false has no error")
  H.deep_eq(r.payload, { x = 1 })
  H.eq(r.headers.h, "orig")
  H.deep_eq(r.slip, {})
  r = T.call(function() error("boom") end, 1)
  H.ok(r.nacked)
  H.contains(r.err, "boom")
  H.contains(r.err, "stack traceback")
  r = T.call(function() return nil, "not a nack" end, 1)
  H.ok(r.ok, "nil acks")
end)

H.test("encode-on-return and headers as a worker sees them", function()
  local r = T.call(function(env) env.payload = { 1, { f = io.stdout } } end, 0)
  H.ok(r.nacked)
  H.contains(r.err, "handler result: payload[2].f: cannot encode a userdata")
  r = T.call(function(env) env.headers.n = 3; env.headers.bad = {} end, 0)
  H.ok(r.nacked)
  H.contains(r.err, "headers.bad: expected a string")
  r = T.call(function(env) env.headers.n = 3 end, 0)
  H.eq(r.headers.n, "3", "numbers become strings")
  r = T.call(function(env) env.payload = string.rep("x", 11) end, 0,
             { max_payload = 10 })
  H.contains(r.err, "too_large")
  H.raises(function() T.call(function() end, print) end,
           "an unencodable payload cannot be published")
  r = T.call(function(env) env.payload = { i = 1, f = 1.0 } end, 0)
  H.eq(math.type(r.payload.i), "integer")
  H.eq(math.type(r.payload.f), "float")
end)

H.test("T.deliver retries to max_attempts, like a stage; T.run", function()
  local r = T.deliver(function(env) return env.attempts == 3 end, "p",
                      { max_attempts = 5 })
  H.eq(r.outcome, "acked")
  H.eq(#r.calls, 3)
  r = T.deliver(function() return false end, "p", { max_attempts = 2 })
  H.eq(r.outcome, "dead_lettered")
  H.eq(r.headers["x-dead-reason"], "max_attempts")
  -- The same handler on a real bus: two attempts, then the dlq.
  local bus = H.bus{ workers = 1, dead_letter = "dlq" }
  bus:stage{ name = "s", max_attempts = 2,
             handler = function() return false end }
  bus:stage{ name = "dlq", handler = function(env)
    seda.shared:set("st.dead", env.headers["x-dead-reason"]) end }
  bus:publish("s", "p")
  local s = T.run(bus, 10)
  H.eq(s.stages.s.nacked, 2, "two attempts")
  H.eq(seda.shared:get("st.dead"), "max_attempts")
end)

H.test("a handler file's init runs once; a bad handler is refused", function()
  local dir = H.tmpdir()
  local f = assert(io.open(dir .. "/h.lua", "w"))
  f:write([[
local n = 0
return { init = function(w) seda.shared:set("st.init", w) end,
         handle = function(env) n = n + 1; env.payload = n end }]])
  f:close()
  local h = T.handler(dir .. "/h.lua")
  H.eq(seda.shared:get("st.init"), 0)
  H.eq(T.call(h, 0).payload, 1)
  H.eq(T.call(h, 0).payload, 2, "module locals persist across calls")
  H.raises(function() T.handler({}) end, "no handle")
  H.raises(function() T.handler(42) end, "not a handler")
end)

-- The project's own HTTP handlers (examples/orders/handlers), from the top
-- of the tree or from tests/lua.
local ORDERS = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") ..
               "../../examples/orders/handlers/"

H.test("env:respond: the answer, the slip ended, undone by a nack", function()
  local r = T.call(ORDERS .. "parse.lua",
                   { method = "GET", path = "/orders", query = { qty = "0" },
                     headers = {} }, { slip = { "price", "store" } })
  H.ok(r.ok, r.err)
  H.deep_eq(r.response, { status = 400,
                          body = { error = "give sku and a qty >= 1" } })
  H.deep_eq(r.payload, r.response, "the payload is the answer")
  H.deep_eq(r.slip, {}, "the itinerary ends here")
  H.eq(r.next, nil)
  r = T.call(ORDERS .. "parse.lua",
             { method = "GET", path = "/orders",
               query = { sku = "book", qty = "2" }, headers = {} },
             { slip = { "price", "store" } })
  H.ok(r.ok, r.err)
  H.eq(r.response, nil, "no answer: the itinerary goes on")
  H.eq(r.next, "price")
  -- A respond then a nack: undone, as a worker undoes it.
  r = T.call(function(env)
    env:respond(201, "made", { Location = "/x" })
    return false
  end, "p", { slip = { "b" } })
  H.ok(r.nacked)
  H.eq(r.response, nil)
  H.eq(r.payload, "p")
  H.deep_eq(r.slip, { "b" })
  r = T.call(function(env) return env:respond("204") end, "p")
  H.eq(r.response.status, 204, "a numeric string, as luaL_checkinteger")
  H.eq(r.returned, true, "respond returns true")
  -- The worker's argument checks.
  for _, bad in ipairs{
      { function(env) env:respond(99) end, "from 200 to 599" },
      { function(env) env:respond(nil) end, "bad argument #1 to 'respond'" },
      { function(env) env:respond(200, print) end, "bad argument #2" },
      { function(env) env:respond(200, "b", "h") end, "bad argument #3" },
      { function(env) env:respond(200, { f = print }) end,
        "handler result: payload.body.f: cannot encode a function" } } do
    r = T.call(bad[1], "p")
    H.ok(r.nacked, bad[2])
    H.contains(r.err, bad[2])
  end
end)

H.test("T.stub_http answers seda.http.request and records it", function()
  local real = seda.http.request
  seda.shared:set("quote_url", "http://quote.test/quote")
  local stub = T.stub_http{
    ["GET http://quote.test/quote"] = { status = 200, body = "4.25" },
  }
  local r = T.call(ORDERS .. "price.lua", { sku = "book", qty = 2 },
                   { slip = { "store" } })
  H.ok(r.ok, r.err)
  H.eq(r.payload.unit, 4.25)
  H.eq(r.payload.total, 8.5)
  H.eq(r.next, "store")
  H.eq(#r.requests, 1, "the call's requests")
  H.eq(r.requests[1].method, "GET")
  H.eq(r.requests[1].url, "http://quote.test/quote?sku=book")
  H.eq(r.requests[1].timeout, 1)
  H.eq(#stub.requests, 1, "the stub's requests")
  H.eq(seda.http.request, real, "the real function is back after the call")
  -- A failure the handler must handle: 502 with the error.
  T.stub_http{ ["http://quote.test/quote"] = function(req)
    return nil, "timeout: GET " .. req.url .. " (after 1 s)" end }
  r = T.call(ORDERS .. "price.lua", { sku = "book", qty = 2 })
  H.ok(r.ok, r.err)
  H.eq(r.response.status, 502)
  H.contains(r.response.body.error, "quote: timeout: GET")
  -- A request nothing answers: nil, err naming it and the stub.
  T.stub_http{}
  r = T.call(ORDERS .. "price.lua", { sku = "pen", qty = 1 })
  H.eq(r.response.status, 502)
  H.contains(r.response.body.error,
             "GET http://quote.test/quote?sku=pen (no answer for it in " ..
             "T.stub_http)")
  -- One function for every request; a per-call stub wins.
  local seen = {}
  stub = T.stub_http(function(req)
    seen[#seen + 1] = req.method .. " " .. (req.body or "")
    return { status = 201, headers = { ["X-A"] = 1 }, body = "ok" }
  end)
  r = T.call(function()
    local res = seda.http.request{ method = "POST", url = "http://u/x",
                                   body = "b", headers = { A = "1" } }
    return res.status == 201 and res.headers["x-a"] == "1" and
           res.body == "ok"
  end, 0)
  H.ok(r.ok and r.returned == true, r.err)
  H.deep_eq(seen, { "POST b" })
  r = T.call(function()
    return seda.http.request{ url = "http://u/y" }.body
  end, 0, { http = { ["http://u/y"] = "per call" } })
  H.eq(r.returned, "per call")
  H.eq(#stub.requests, 1, "a per-call stub's requests are the call's only")
  -- Bad requests raise as seda.http.request does, naming the field.
  for _, bad in ipairs{
      { { url = "http://u", tmeout = 1 }, "unknown field tmeout" },
      { { method = "GE T", url = "http://u" }, "field method" },
      { { url = 7 }, "field url must be a string" },
      { { url = "http://u", headers = { a = {} } },
        "field headers.a must be a string" },
      { { url = "http://u", body = {} }, "field body must be a string" },
      { { url = "http://u", timeout = 0 }, "field timeout" } } do
    r = T.call(function() seda.http.request(bad[1]) end, 0)
    H.ok(r.nacked, bad[2])
    H.contains(r.err, bad[2])
  end
  -- A bad answer in the stub is the test's mistake, named.
  T.stub_http{ ["http://u"] = { status = 42 } }
  r = T.call(function() seda.http.request{ url = "http://u" } end, 0)
  H.contains(r.err, "T.stub_http: the answer to GET http://u has status 42")
  H.raises(function() T.stub_http(42) end, "stub_http", "got number")
  H.raises(function() T.stub_http{ u = 1 } end, "answer for 'u' is a number")
  -- T.deliver retries under the stub; restore ends it.
  local n = 0
  stub = T.stub_http(function()
    n = n + 1
    if n == 1 then return nil, "connection: refused" end
    return "1.00"
  end)
  r = T.deliver(ORDERS .. "price.lua", { sku = "a", qty = 3 },
                { max_attempts = 2 })
  H.eq(r.outcome, "acked")
  H.eq(r.response.status, 502, "the first answer was a 502 respond (an ack)")
  stub.restore()
  H.eq(T.stub_http(nil), nil)
  r = T.call(function()
    return seda.http.request == real
  end, 0)
  H.eq(r.returned, true, "no stub: the real seda.http.request")
end)

H.done()
