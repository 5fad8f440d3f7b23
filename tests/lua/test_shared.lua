-- seda.shared: the bus-wide table of scalars kept in C.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"
local sh = seda.shared

T.test("get / set / delete of every scalar kind", function()
  local vals = { true, false, 0, -1, math.maxinteger, math.mininteger, 1.5, -0.0,
                 math.huge, -math.huge, "", "str", "bin\0ary" }
  for i, v in ipairs(vals) do
    sh:set("sh.v" .. i, v)
    T.eq(sh:get("sh.v" .. i), v, "value " .. i)
  end
  sh:set("sh.nan", 0 / 0)
  local n = sh:get("sh.nan")
  T.ok(n ~= n, "nan")
  T.eq(math.type(sh:get("sh.v3")), "integer", "integer stays integer")
  T.eq(sh:get("sh.absent"), nil, "absent is nil")
  sh:set("sh.v1", nil)
  T.eq(sh:get("sh.v1"), nil, "set nil removes")
  sh:delete("sh.v2")
  T.eq(sh:get("sh.v2"), nil, "delete removes")
  sh:delete("sh.never") -- deleting an absent key is fine
end)

T.test("a table, function or userdata value is refused with an error", function()
  T.raises(function() sh:set("sh.t", {}) end, "table refused")
  T.raises(function() sh:set("sh.f", print) end, "function refused")
  T.raises(function() sh:set("sh.u", io.stdout) end, "userdata refused")
  T.raises(function() sh:add("sh.t2", { 1 }) end, "add of a table refused")
  T.eq(sh:get("sh.t"), nil, "nothing stored")
end)

T.test("incr returns the new value; add only if absent", function()
  T.eq(sh:incr("sh.c", 1), 1, "incr of absent starts at 0")
  T.eq(sh:incr("sh.c", 5), 6, "incr by 5")
  T.eq(sh:incr("sh.c", -6), 0, "incr by -6")
  T.eq(sh:get("sh.c"), 0, "get after incr")
  sh:set("sh.cs", "text")
  T.raises(function() sh:incr("sh.cs", 1) end, "incr of a string raises")
  T.eq(sh:add("sh.a", "first"), true, "add absent")
  T.eq(sh:add("sh.a", "second"), false, "add present")
  T.eq(sh:get("sh.a"), "first", "kept the first")
end)

T.test("keys lists every key", function()
  sh:set("keys.a", 1)
  sh:set("keys.b", "x")
  sh:set("keys.c", true)
  local found = {}
  for _, k in ipairs(sh:keys()) do
    if k:sub(1, 5) == "keys." then found[#found + 1] = k end
  end
  table.sort(found)
  T.deep_eq(found, { "keys.a", "keys.b", "keys.c" }, "keys")
  sh:delete("keys.b")
  found = {}
  for _, k in ipairs(sh:keys()) do
    if k:sub(1, 5) == "keys." then found[#found + 1] = k end
  end
  table.sort(found)
  T.deep_eq(found, { "keys.a", "keys.c" }, "keys after delete")
end)

T.test("concurrent incr from many workers: totals exact", function()
  local bus = T.bus{ workers = 4 }
  bus:stage{ name = "s", concurrency = 4, handler = function(env)
    for i = 1, 100 do
      seda.shared:incr("cc.total", 1)
      seda.shared:incr("cc.w" .. seda.worker, 1)
    end
    seda.shared:incr("cc.float", 0.5)
    seda.shared:add("cc.first", env.payload)
    if seda.shared:add("cc.once." .. (env.payload % 10), env.payload) then
      seda.shared:incr("cc.adds", 1)
    end
  end }
  local N = 400
  for i = 1, N do bus:publish("s", i) end
  T.idle(bus, 20)
  T.eq(sh:get("cc.total"), N * 100, "incr total exact")
  T.eq(sh:get("cc.float"), N * 0.5, "float incr exact")
  T.eq(sh:get("cc.adds"), 10, "add succeeded once per key")
  T.ok(sh:get("cc.first") ~= nil, "first add kept")
  local sum = 0
  for w = 0, 3 do sum = sum + (sh:get("cc.w" .. w) or 0) end
  T.eq(sum, N * 100, "per-worker counts sum up")
  bus:shutdown(5)
end)

T.test("concurrent set/get/delete/keys from workers and main do not corrupt", function()
  local bus = T.bus{ workers = 4 }
  bus:stage{ name = "s", concurrency = 4, handler = function(env)
    local k = "race." .. (env.payload % 7)
    for i = 1, 50 do
      seda.shared:set(k, string.rep("v", i))
      local v = seda.shared:get(k)
      if v ~= nil and (type(v) ~= "string" or v:gsub("v", "") ~= "") then
        seda.shared:set("race.bad", true)
      end
      if i % 10 == 0 then seda.shared:delete(k) end
      if i % 25 == 0 then seda.shared:keys() end
    end
  end }
  for i = 1, 200 do bus:publish("s", i) end
  -- the main state works the table at the same time
  local d = seda.now() + 10
  while bus:stats().in_system > 0 and seda.now() < d do
    sh:keys()
    sh:set("race.main", sh:incr("race.mainc", 1))
  end
  T.idle(bus, 20)
  T.eq(sh:get("race.bad"), nil, "no torn values")
  bus:shutdown(5)
end)

T.test("shared is visible to handlers and the main state both ways", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = function(env)
    seda.shared:set("vis.reply", (seda.shared:get("vis.ask") or "none") .. "!")
  end }
  sh:set("vis.ask", "ping")
  bus:publish("s", 1)
  T.idle(bus, 10)
  T.eq(sh:get("vis.reply"), "ping!", "round trip")
  bus:shutdown(5)
end)

T.done()
