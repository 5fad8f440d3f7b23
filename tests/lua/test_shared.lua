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

-- Wait until at least secs have passed on the monotonic clock (an expiry
-- is a lower bound: after it, the key reads as absent whatever the load).
local function pass(secs)
  local t = seda.now() + secs
  while seda.now() < t do seda.sleep(0.01) end
end

T.test("set with an exptime: the key reads as absent once it passed (lua_shared_dict)", function()
  local ok, err, forcible = sh:set("ttl.a", "v", 0.05)
  T.eq(ok, true, "set returns true")
  T.eq(err, nil)
  T.eq(forcible, false, "nothing evicted")
  sh:set("ttl.forever", 1, 0)                  -- 0: never expires
  sh:set("ttl.long", 2, 3600)
  T.eq(sh:get("ttl.long"), 2, "a far expiry reads back")
  local left = sh:ttl("ttl.long")
  T.ok(left > 3500 and left <= 3600, "ttl counts down from 3600: " .. tostring(left))
  T.eq(sh:ttl("ttl.forever"), 0, "ttl 0: never expires")
  pass(0.1)
  T.eq(sh:get("ttl.a"), nil, "get of an expired key is nil")
  local none, why = sh:ttl("ttl.a")
  T.eq(none, nil)
  T.eq(why, "not found")
  T.eq(sh:get("ttl.forever"), 1, "no exptime never expires")
  for _, k in ipairs(sh:keys()) do T.ok(k ~= "ttl.a", "keys skips an expired key") end
  T.ok(sh:stats().expired >= 1, "expired ones counted")
end)

T.test("add on an expired key succeeds; on a live one says exists; incr restarts it", function()
  sh:set("ttl.add", "old", 0.05)
  local ok, err = sh:add("ttl.add", "other")
  T.eq(ok, false, "add on a live key fails")
  T.eq(err, "exists")
  sh:set("ttl.incr", 40, 0.05)
  T.eq(sh:incr("ttl.incr", 2), 42, "incr of a live key keeps counting")
  pass(0.1)
  T.eq(sh:add("ttl.add", "new"), true, "add on an expired key succeeds")
  T.eq(sh:get("ttl.add"), "new")
  T.eq(sh:ttl("ttl.add"), 0, "without an exptime it never expires")
  T.eq(sh:incr("ttl.incr", 1), 1, "incr of an expired key starts afresh")
  sh:set("ttl.exp", 1)
  T.eq(sh:expire("ttl.exp", 0.05), true, "expire sets one")
  pass(0.1)
  T.eq(sh:get("ttl.exp"), nil, "expired by expire")
  T.eq(select(2, sh:expire("ttl.exp", 1)), "not found")
end)

T.test("a bad exptime raises naming it", function()
  T.raises(function() sh:set("ttl.bad", 1, -1) end, "negative", "exptime must be a number of seconds >= 0")
  T.raises(function() sh:set("ttl.bad", 1, 0 / 0) end, "nan", "exptime")
  T.raises(function() sh:set("ttl.bad", 1, "10") end, "a string", "exptime must be a number", "string")
  T.raises(function() sh:add("ttl.bad", 1, math.huge) end, "inf", "exptime")
  T.raises(function() sh:expire("ttl.bad") end, "missing", "exptime missing")
  T.eq(sh:get("ttl.bad"), nil, "nothing stored")
end)

T.test("a size bound: least recently used entries are evicted, counted in stats", function()
  local old = sh:capacity()
  T.eq(old, 64 * 1024 * 1024, "the default bound: 64 MiB")
  -- Room for 8 entries of ~1 KB (what the other tests left is removed:
  -- the oldest entries are the first evicted).
  for _, k in ipairs(sh:keys()) do sh:delete(k) end
  T.eq(sh:stats().bytes, 0, "empty")
  local base = 0
  sh:capacity(base + 8 * 1100)
  local before = sh:stats().evicted
  local v = string.rep("x", 1000)
  for i = 1, 8 do T.eq(select(3, sh:set("lru." .. i, v)), false, "fits: " .. i) end
  T.eq(sh:get("lru.1"), v, "lru.1 used: now the most recent")
  local ok, _, forcible = sh:set("lru.9", v)
  T.eq(ok, true)
  T.eq(forcible, true, "set says it evicted a live entry (forcible)")
  T.eq(sh:get("lru.2"), nil, "the least recently used went")
  T.eq(sh:get("lru.1"), v, "the one read just before stayed")
  T.eq(sh:get("lru.9"), v)
  local st = sh:stats()
  T.ok(st.evicted > before, "evictions counted: " .. st.evicted)
  T.ok(st.bytes <= st.capacity, "within the bound: " .. st.bytes .. " <= " .. st.capacity)
  T.eq(st.capacity, base + 8 * 1100)
  T.raises(function() sh:set("lru.huge", string.rep("y", 20000)) end, "bigger than the bound",
           "needs more than the table's whole capacity")
  T.eq(sh:get("lru.1"), v, "a refused set changes nothing")
  T.raises(function() sh:capacity(10) end, "a tiny bound", "capacity: bytes must be an integer >= 4096")
  sh:capacity(old)
  for i = 1, 9 do sh:delete("lru." .. i) end
end)

T.done()
