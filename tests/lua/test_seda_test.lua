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

H.done()
