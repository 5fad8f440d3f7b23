-- examples/testing/handlers_spec.lua: the handlers of examples/pipeline.lua
-- (examples/handlers/) under busted, with seda.test.  docs/testing.md
-- explains it; `make test` runs it (tests/cli/test_busted.sh):
--
--   LUA_CPATH="build/release/?.so;;" LUA_PATH="lua/?.lua;;" \
--     busted --lua=lua5.4 examples/testing
local T = require "seda.test"
local seda = require "seda"

-- The handler files, found from this file's own place.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = here .. "../handlers/"

describe("parse", function()
  local parse = T.handler(H .. "parse.lua")

  before_each(function() seda.shared:delete("parse.unparseable") end)

  it("turns a line into a record and a header", function()
    local r = T.call(parse, "order id=7 amount=12.5 user=bob")
    assert.is_true(r.ok)
    assert.same({ kind = "order", id = 7, amount = 12.5, user = "bob" },
                r.payload)
    assert.equal("order", r.headers.kind)
  end)

  it("raises on the first unparseable line, nacks the rest quietly", function()
    local r = T.call(parse, "%%garbage%%")
    assert.is_false(r.ok)
    assert.matches("unparseable line: %%%%garbage%%%%", r.err)
    assert.equal("%%garbage%%", r.payload)     -- the nack undid nothing
    r = T.call(parse, "%%more garbage%%")
    assert.is_true(r.nacked)
    assert.is_nil(r.err)                         -- returned false
    assert.equal(2, seda.shared:get("parse.unparseable"))
  end)

  it("is dead-lettered after max_attempts", function()
    local r = T.deliver(parse, "???", { max_attempts = 3, to = "parse" })
    assert.equal("dead_lettered", r.outcome)
    assert.equal(3, #r.calls)
    assert.equal("max_attempts", r.headers["x-dead-reason"])
    assert.equal("parse", r.headers["x-dead-from"])
  end)
end)

describe("enrich", function()
  local enrich = T.handler(H .. "enrich.lua")   -- its init runs here

  it("adds the region", function()
    local r = T.call(enrich, { id = 1, user = "carol" })
    assert.is_true(r.ok)
    assert.equal("apac", r.payload.region)
  end)

  it("nacks every 7th record on its first attempt; the retry acks", function()
    local r = T.deliver(enrich, { id = 14, user = "bob" }, { max_attempts = 3 })
    assert.equal("acked", r.outcome)
    assert.equal(2, r.attempts)
    assert.is_false(r.calls[1].ok)
    assert.same({ id = 14, user = "bob" }, r.calls[1].payload)
    assert.equal(2, r.payload.attempts_here)
  end)
end)

describe("route", function()
  local route = T.handler(H .. "route.lua")

  it("forwards orders and alerts", function()
    assert.equal("orders", T.call(route, { kind = "order" }).next)
    local r = T.call(route, { kind = "alert" }, { slip = { "audit" } })
    assert.same({ "alerts", "audit" }, r.slip)
  end)

  it("nacks an unknown kind, and the nack undoes nothing it forwarded", function()
    local r = T.call(route, { kind = "refund" }, { slip = { "audit" } })
    assert.is_false(r.ok)
    assert.same({ "audit" }, r.slip)
  end)
end)

describe("a handler's result must travel", function()
  it("nacks a payload that cannot be encoded, as a worker would", function()
    local r = T.call(function(env) env.payload = { cb = print } end, 1)
    assert.is_false(r.ok)
    assert.matches("payload.cb: cannot encode a function", r.err)
    assert.equal(1, r.payload)
  end)
end)

describe("the sinks on a real bus", function()
  it("count what arrives, run to idle", function()
    seda.shared:delete("sink.orders")
    seda.shared:delete("revenue_cents")
    local bus = seda.bus{ workers = 2 }
    bus:stage{ name = "orders", handler = H .. "sink.lua", concurrency = 2 }
    for i = 1, 20 do
      assert(bus:publish("orders", { amount = i }))
    end
    local s = T.run(bus, 10)                    -- raises if it does not idle
    assert.equal(20, s.completed)
    assert.equal(20, seda.shared:get("sink.orders"))
    assert.equal(21000, seda.shared:get("revenue_cents"))
    assert.is_true(bus:shutdown(10))
  end)
end)
