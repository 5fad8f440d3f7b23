-- Typed stages: `accepts` (a type name or a table schema) and `strict`,
-- checked on every publish and every hop.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local function sink(env) seda.shared:incr("typed." .. env.to, 1) end

T.test("type names accept their type and refuse others", function()
  local bus = T.bus{ workers = 2 }
  local cases = {
    { "string", "abc", 42 },
    { "integer", 7, 7.5 },
    { "number", 7.5, "7" },
    { "table", { 1 }, true },
    { "boolean", false, 0 },
  }
  for i, c in ipairs(cases) do
    local name = "t" .. i
    bus:stage{ name = name, accepts = c[1], handler = sink }
    T.eq(bus:publish(name, c[2]), true, c[1] .. " accepts")
    local ok, err = bus:publish(name, c[3])
    T.eq(ok, false, c[1] .. " refuses")
    T.contains(err, "type: payload: expected " .. c[1], "message")
    T.eq(bus:stats(name).invalid, 1, "invalid counted")
  end
  T.idle(bus, 10)
  T.accounting(bus)
end)

T.test("schema: required, optional, extra fields and strict", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "loose", accepts = { id = "integer", name = "string", tags = "table?" },
             handler = sink }
  bus:stage{ name = "strict", accepts = { id = "integer" }, strict = true, handler = sink }
  T.eq(bus:publish("loose", { id = 1, name = "a" }), true, "minimal")
  T.eq(bus:publish("loose", { id = 1, name = "a", tags = { "x" }, more = 1 }), true,
       "optional and extra")
  local ok, err = bus:publish("loose", { id = "1", name = "a" })
  T.eq(ok, false)
  T.eq(err, "type: payload.id: expected integer, got string")
  ok, err = bus:publish("loose", { id = 1 })
  T.eq(err, "type: payload.name: missing (expected string)")
  ok, err = bus:publish("loose", { id = 1, name = "a", tags = "no" })
  T.contains(err, "payload.tags", "optional field still typed")
  ok, err = bus:publish("loose", "not a table")
  T.eq(err, "type: payload: expected table, got string")
  T.eq(bus:publish("strict", { id = 1 }), true)
  ok, err = bus:publish("strict", { id = 1, x = 2 })
  T.eq(err, "type: payload.x: unexpected field (strict)")
  T.idle(bus, 10)
  T.eq(seda.shared:get("typed.loose"), 2, "only valid ones delivered")
  T.eq(bus:stats("loose").invalid, 4)
end)

T.test("a hop that breaks the type dead-letters with reason type", function()
  local bus = T.bus{ workers = 2, dead_letter = "dlq" }
  bus:stage{ name = "dlq", handler = function(env)
    seda.shared:set("typed.dead.reason", env.headers["x-dead-reason"])
    seda.shared:set("typed.dead.from", env.headers["x-dead-from"])
  end }
  bus:stage{ name = "a", handler = function(env) env.payload = { id = "oops" } end }
  bus:stage{ name = "b", accepts = { id = "integer" }, handler = sink }
  local completed = 0
  T.eq(bus:publish("a", { id = 1 }, { slip = { "b" },
    on_complete = function() completed = completed + 1 end }), true)
  T.idle(bus, 10)
  T.eq(seda.shared:get("typed.dead.reason"), "type")
  T.eq(seda.shared:get("typed.dead.from"), "a")
  T.eq(completed, 0, "on_complete never fires")
  T.eq(bus:stats("b").invalid, 1)
  T.eq(bus:stats().dead_lettered, 1)
  T.accounting(bus)
end)

T.test("publish_many stops at the first ill-typed payload", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "n", accepts = "integer", handler = sink }
  local n, err = bus:publish_many("n", { 1, 2, "three", 4 })
  T.eq(n, 2)
  T.contains(err, "type: payload: expected integer")
  T.idle(bus, 10)
end)

T.test("bad schemas fail at bus:stage naming stage and field", function()
  local bus = T.bus{ workers = 1 }
  T.raises(function() bus:stage{ name = "x", accepts = "tabel" } end, "unknown type",
           "stage 'x': accepts: unknown type 'tabel'")
  T.raises(function() bus:stage{ name = "y", accepts = { id = 5 } } end, "bad field",
           "stage 'y'", "accepts.id")
  T.raises(function() bus:stage{ name = "z", strict = "yes", accepts = "table" } end,
           "strict type", "stage 'z'", "strict")
end)

T.done()
