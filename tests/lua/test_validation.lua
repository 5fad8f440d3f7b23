-- C5: configuration validation fails fast, naming stage and field.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local function h() end

-- stage(opts) must raise an error mentioning every string in `want`.
local function bad(bus, opts, label, ...)
  return T.raises(function() bus:stage(opts) end, label, ...)
end

T.test("C5 numeric fields out of range", function()
  local bus = T.bus{ workers = 1 }
  bad(bus, { name = "cap0", capacity = 0, handler = h }, "capacity 0", "cap0", "capacity")
  bad(bus, { name = "capneg", capacity = -1, handler = h }, "capacity -1", "capneg", "capacity")
  bad(bus, { name = "capflt", capacity = 1.5, handler = h }, "capacity 1.5", "capflt", "capacity")
  bad(bus, { name = "capstr", capacity = "many", handler = h }, "capacity string", "capstr", "capacity")
  bad(bus, { name = "conc0", concurrency = 0, handler = h }, "concurrency 0", "conc0", "concurrency")
  bad(bus, { name = "concneg", concurrency = -3, handler = h }, "concurrency -3", "concneg", "concurrency")
  bad(bus, { name = "ma0", max_attempts = 0, handler = h }, "max_attempts 0", "ma0", "max_attempts")
  bad(bus, { name = "maneg", max_attempts = -1, handler = h }, "max_attempts -1", "maneg", "max_attempts")
  bad(bus, { name = "pt", publish_timeout = -1, handler = h }, "publish_timeout -1", "pt", "publish_timeout")
  bad(bus, { name = "ht", handler_timeout = -1, handler = h }, "handler_timeout -1", "ht", "handler_timeout")
  -- numbers only, as for every numeric option: "10" is not a capacity
  bad(bus, { name = "capnum", capacity = "10", handler = h }, "capacity numeric string",
      "capnum", "capacity", "string")
  bad(bus, { name = "concnum", concurrency = "2", handler = h }, "concurrency numeric string",
      "concnum", "concurrency")
  bad(bus, { name = "manum", max_attempts = "2", handler = h }, "max_attempts numeric string",
      "manum", "max_attempts")
  bad(bus, { name = "ptnum", publish_timeout = "1", handler = h }, "publish_timeout numeric string",
      "ptnum", "publish_timeout")
  bad(bus, { name = "capf", capacity = 1.5, handler = h }, "fraction shown", "capf", "1.5")
  T.raises(function() T.bus{ workers = "2" } end, "bus workers numeric string", "workers")
  T.raises(function() T.bus{ batch = "4" } end, "bus batch numeric string", "batch")
  T.raises(function() T.bus{ hop_timeout = "5" } end, "bus hop_timeout numeric string", "hop_timeout")
  T.eq(next(bus:stats().stages), nil, "no stage was created")
  bus:shutdown(5)
end)

T.test("C5 unknown policy and delivery", function()
  local bus = T.bus{ workers = 1 }
  bad(bus, { name = "pol", policy = "lifo", handler = h }, "policy", "pol", "policy")
  bad(bus, { name = "pol2", policy = 1, handler = h }, "policy type", "pol2", "policy")
  bad(bus, { name = "del", delivery = "broadcast", handler = h }, "delivery", "del", "delivery")
  bus:shutdown(5)
end)

T.test("C5 duplicate and malformed names", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "dup", handler = h }
  bad(bus, { name = "dup", handler = h }, "duplicate", "dup")
  bad(bus, { name = "a b", handler = h }, "space in name", "a b", "name")
  bad(bus, { name = string.rep("n", 65), handler = h }, "65-char name", string.rep("n", 65), "name")
  bad(bus, { name = "", handler = h }, "empty name", "name")
  bad(bus, { name = "é", handler = h }, "non-ASCII name", "name")
  bad(bus, { handler = h }, "missing name", "name")
  bad(bus, { name = 7, handler = h }, "number name", "name")
  -- the limits themselves are fine
  bus:stage{ name = string.rep("m", 64), handler = h }
  bus:stage{ name = "A-z_0.9:x", handler = h }
  local names = {}
  for k in pairs(bus:stats().stages) do names[#names + 1] = k end
  table.sort(names)
  T.deep_eq(names, { "A-z_0.9:x", "dup", string.rep("m", 64) }, "stages")
  bus:shutdown(5)
end)

T.test("C5 unknown option key", function()
  local bus = T.bus{ workers = 1 }
  bad(bus, { name = "unk", handler = h, capacityy = 3 }, "typo", "unk", "capacityy")
  bad(bus, { name = "unk2", handler = h, [1] = "x" }, "positional entry", "unk2",
      "option keys must be strings")
  bad(bus, { name = "unk3", handler = h, [true] = "x" }, "boolean key", "unk3",
      "option keys must be strings")
  T.raises(function() bus:stage("notatable") end, "opts not a table")
  T.raises(function() T.bus{ workers = 1, wokers = 2 } end, "bus unknown option", "wokers")
  T.raises(function() T.bus{ workers = -1 } end, "bus workers -1", "workers")
  T.raises(function() T.bus{ batch = 0 } end, "bus batch 0", "batch")
  T.raises(function() T.bus{ hop_timeout = -1 } end, "bus hop_timeout", "hop_timeout")
  bus:shutdown(5)
end)

T.test("C5 handler option errors", function()
  local bus = T.bus{ workers = 1 }
  bad(bus, { name = "hmiss", handler = "no/such/handler_file.lua" }, "missing file",
      "hmiss", "handler", "handler_file")
  bad(bus, { name = "htype", handler = 42 }, "handler type", "htype", "handler")
  bad(bus, { name = "hs", handlers = { h, 5 } }, "handlers entry type", "hs", "handler")
  bad(bus, { name = "hboth", handler = h, handlers = { h } }, "handler and handlers", "hboth", "handler")
  bad(bus, { name = "hkeys", handlers = { a = h } }, "handlers with a string key", "hkeys", "handlers")

  local dir = T.tmpdir()
  local f = T.write(dir .. "/syntax_err.lua", "return function(env)\n  local x = = 1\nend\n")
  local e = bad(bus, { name = "hsyn", handler = f }, "syntax error", "hsyn", "handler", "syntax_err.lua:2")
  local g = T.write(dir .. "/top_err.lua", "local x = 1\nerror('top-level failure')\n")
  bad(bus, { name = "htop", handler = g }, "top-level error", "htop", "top-level failure")
  local r = T.write(dir .. "/returns_num.lua", "return 42\n")
  bad(bus, { name = "hret", handler = r }, "file returning a number", "hret", "handler")
  local r2 = T.write(dir .. "/returns_tbl.lua", "return { init = function() end }\n")
  bad(bus, { name = "hret2", handler = r2 }, "table without handle", "hret2", "handle")
  local r3 = T.write(dir .. "/bad_init.lua", "return { handle = function() end, init = 5 }\n")
  bad(bus, { name = "hret3", handler = r3 }, "init not a function", "hret3", "init must be a function")
  for _, p in ipairs({ f, g, r, r2, r3 }) do os.remove(p) end
  os.remove(dir)
  T.eq(next(bus:stats().stages), nil, "no stage was created")
  bus:shutdown(5)
end)

T.test("C5 inline handler capturing a local upvalue", function()
  local bus = T.bus{ workers = 1 }
  local counter = 0
  local e = bad(bus, { name = "upv", handler = function() counter = counter + 1 end },
                "upvalue", "upv", "counter")
  local limit = 3
  bad(bus, { name = "upv2", handlers = { h, function(env) return env.payload < limit end } },
      "upvalue in handlers", "upv2", "limit")
  -- no upvalues but _ENV and seda: fine
  bus:stage{ name = "fine", handler = function(env) seda.shared:set("val.fine", env.payload) end }
  bus:stage{ name = "fine2", handler = function(env) return tostring(env.payload) ~= "" end }
  bus:publish("fine", 5)
  T.idle(bus, 10)
  T.eq(seda.shared:get("val.fine"), 5, "inline handler with only seda works")
  bus:shutdown(5)
end)

T.test("C5 dead_letter naming an unknown stage", function()
  local bus = T.bus{ workers = 1 }
  -- Either refused at creation, or accepted and the dead letter counted
  -- (no_such_stage); but never lost.
  local ok = pcall(bus.stage, bus, { name = "s", dead_letter = "missing_dlq",
                                     handler = function() return false end })
  if ok then
    bus:publish("s", 1)
    T.idle(bus, 10)
    local s = T.accounting(bus)
    T.eq(s.dead_lettered, 1, "counted")
  end
  bus:shutdown(5)
end)

T.test("C5 the bus still works after rejected configurations", function()
  local bus = T.bus{ workers = 1 }
  pcall(bus.stage, bus, { name = "x", capacity = 0, handler = h })
  bus:stage{ name = "x", handler = function() seda.shared:incr("val.x", 1) end }
  T.eq(bus:publish("x", 1), true, "publish")
  T.idle(bus, 10)
  T.eq(seda.shared:get("val.x"), 1, "handled")
  bus:shutdown(5)
end)

T.test("validation names the field at fault: shed.interval, a NUL in a name, rule results", function()
  local bus = T.bus{ workers = 1 }
  T.raises(function() bus:stage{ name = "a", handler = function() end, shed = { interval = 0 } } end,
           "shed.interval", "shed.interval must be")
  T.raises(function() bus:stage{ name = "a", handler = function() end, shed = {} } end,
           "shed.target", "shed.target must be")
  T.raises(function() bus:stage{ name = "a\0b", handler = function() end } end,
           "a NUL", "holds a NUL")
  T.eq(bus:stats("a"), nil, "nothing declared")
  bus:stage{ name = "r", admit = function(env, st) return env.payload end, handler = function() end }
  for _, p in ipairs{ "high", "normal", "medium" } do
    local ok, why = bus:publish("r", p)
    T.eq(ok, false, p .. " is no rule result")
    T.eq(why, "admit_error", p .. ": admit_error")
  end
  T.eq(bus:publish("r", "low"), true, "low lowers the priority")
  bus:stage{ name = "r2", admit = function(env, st) return false, "no\0way" end, handler = function() end }
  local ok, why = bus:publish("r2", 1)
  T.eq(ok, false, "refused")
  T.eq(why, "no\\0way", "a NUL in the reason is shown, not a cut")
  bus:shutdown(5)
end)

T.done()
