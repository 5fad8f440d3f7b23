-- C10 from Lua: payload round trips and refusals.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local nan = 0 / 0

-- A value covering every supported kind (no nan here: deep_eq treats nan
-- equal to nan, but table keys cannot be nan).
local function sample()
  local t = {
    int_max = math.maxinteger, int_min = math.mininteger,
    zero = 0, neg = -1, big = 1 << 53, bigp1 = (1 << 53) + 1,
    f = 1.5, fzero = 0.0, fnegzero = -0.0, inf = math.huge, ninf = -math.huge,
    nan = nan, tiny = 5e-324, fmax = 1.7976931348623157e308, third = 1 / 3,
    two_f = 2.0,
    s = "hello", empty = "", bin = "a\0b\0\255\1\n\r",
    all_bytes = (function()
      local b = {}
      for i = 0, 255 do b[#b + 1] = string.char(i) end
      return table.concat(b)
    end)(),
    long = string.rep("xyz", 100000),
    yes = true, no = false,
    nested = { a = { b = { c = { d = { e = "deep" } } } } },
    arr = { 1, 2, 3, "four", 5.0, { six = 6 } },
    holes = { [1] = "a", [3] = "c", [100] = "z" },
    empty_t = {},
  }
  -- mixed keys stay distinct
  t.mixed = { [1] = "int", [1.5] = "float", ["1"] = "string", [true] = "true",
              [false] = "false", [-1] = "neg", [math.maxinteger] = "max",
              [math.mininteger] = "min", [2.0 ^ 60] = "bigfloat" }
  return t
end

T.test("C10 seda.encode / seda.decode round trip", function()
  T.eq(type(seda.encode), "function", "seda.encode exists")
  T.eq(type(seda.decode), "function", "seda.decode exists")
  local v = sample()
  local bytes = seda.encode(v)
  T.eq(type(bytes), "string", "encode gives bytes")
  T.deep_eq(seda.decode(bytes), v, "round trip")
  for _, x in ipairs({ 0, 1, -1, math.maxinteger, math.mininteger, 0.0, -0.0,
                       math.huge, -math.huge, 1.5, "", "\0", true, false }) do
    T.eq(seda.decode(seda.encode(x)), x, "scalar " .. T.fmt(x))
  end
  local d = seda.decode(seda.encode(nan))
  T.ok(d ~= d, "nan survives")
  T.eq(math.type(seda.decode(seda.encode(2.0))), "float", "2.0 stays a float")
  T.eq(math.type(seda.decode(seda.encode(2))), "integer", "2 stays an integer")
  T.eq(seda.decode(seda.encode(nil)), nil, "nil")
end)

T.test("C10 mixed keys stay distinct", function()
  local v = seda.decode(seda.encode(sample().mixed))
  T.eq(v[1], "int", "t[1]")
  T.eq(v[1.5], "float", "t[1.5]")
  T.eq(v["1"], "string", "t['1']")
  T.eq(v[true], "true", "t[true]")
  T.eq(v[false], "false", "t[false]")
  T.eq(v[math.maxinteger], "max", "t[maxinteger]")
  T.eq(v[math.mininteger], "min", "t[mininteger]")
  T.eq(v[2.0 ^ 60], "bigfloat", "t[2^60]")
end)

T.test("C10 payload round trip through a handler and on_complete", function()
  local bus = T.bus{ workers = 2 }
  -- the handler checks the payload against a freshly built sample in the
  -- worker's own state, then marks it and passes it on
  bus:stage{ name = "check", handler = function(env)
    local p = env.payload
    local ok = p.int_max == math.maxinteger and math.type(p.int_max) == "integer"
      and p.int_min == math.mininteger
      and p.bigp1 == (1 << 53) + 1
      and p.inf == math.huge and p.ninf == -math.huge
      and p.nan ~= p.nan
      and math.type(p.fnegzero) == "float" and 1 / p.fnegzero == -math.huge
      and math.type(p.fzero) == "float" and 1 / p.fzero == math.huge
      and math.type(p.two_f) == "float"
      and p.bin == "a\0b\0\255\1\n\r" and #p.all_bytes == 256
      and #p.long == 300000
      and p.nested.a.b.c.d.e == "deep"
      and p.mixed[1] == "int" and p.mixed[1.5] == "float" and p.mixed["1"] == "string"
      and p.mixed[true] == "true"
      and p.holes[3] == "c" and p.holes[2] == nil
      and p.yes == true and p.no == false
    seda.shared:set("pl.check", ok)
    p.seen = "check"
    env.payload = p
  end }
  bus:stage{ name = "pass", handler = function(env)
    -- touch nothing: the payload must go through untouched (lazy decode)
  end }
  local got
  local v = sample()
  T.eq(bus:publish("check", v, { slip = { "pass" }, on_complete = function(env) got = env.payload end }),
       true, "publish")
  T.idle(bus, 10)
  T.eq(seda.shared:get("pl.check"), true, "handler saw exact values")
  v.seen = "check"
  T.deep_eq(got, v, "on_complete payload")
  bus:shutdown(5)
end)

T.test("C10 scalar payloads through a handler", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "id", handler = function(env) env.payload = env.payload end }
  local values = { math.maxinteger, math.mininteger, -0.0, 0.0, math.huge, -math.huge,
                   "\0\0", "", true, false, 42, 4.2 }
  local got = {}
  for i, x in ipairs(values) do
    bus:publish("id", x, { on_complete = function(env) got[i] = env.payload end })
  end
  local gotnan
  bus:publish("id", nan, { on_complete = function(env) gotnan = env.payload end })
  T.idle(bus, 10)
  for i, x in ipairs(values) do T.eq(got[i], x, "value " .. i) end
  T.ok(gotnan ~= nil and gotnan ~= gotnan, "nan")
  bus:shutdown(5)
end)

T.test("C10 a table shared twice is copied twice", function()
  local shared = { x = 1 }
  local v = seda.decode(seda.encode({ a = shared, b = shared }))
  T.deep_eq(v, { a = { x = 1 }, b = { x = 1 } }, "value")
  T.ok(v.a ~= v.b, "two copies")
end)

T.test("C10 unsupported values are refused with the path", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function() seda.shared:incr("pl.refused_ran", 1) end }
  local ok, err = bus:publish("s", { cb = function() end })
  T.eq(ok, false, "function refused")
  T.contains(err, "payload.cb", "path named")
  T.contains(err, "function", "kind named")
  ok, err = bus:publish("s", { items = { 1, 2, { cb = print } } })
  T.eq(ok, false, "nested function refused")
  T.contains(err, "payload.items[3].cb", "nested path")
  ok, err = bus:publish("s", function() end)
  T.eq(ok, false, "top-level function refused")
  T.contains(err, "payload", "path")
  ok, err = bus:publish("s", { co = coroutine.create(function() end) })
  T.eq(ok, false, "thread refused")
  T.contains(err, "payload.co", "thread path")
  ok, err = bus:publish("s", { f = io.stdout })
  T.eq(ok, false, "userdata refused")
  T.contains(err, "payload.f", "userdata path")
  ok, err = bus:publish("s", { [print] = 1 })
  T.eq(ok, false, "function key refused")
  local cyc = { a = {} }
  cyc.a.back = cyc
  ok, err = bus:publish("s", cyc)
  T.eq(ok, false, "cycle refused")
  T.ok(type(err) == "string" and #err > 0, "cycle error message")
  local self = {}
  self[1] = self
  ok, err = bus:publish("s", self)
  T.eq(ok, false, "self cycle refused")
  local s = bus:stats()
  T.eq(s.accepted, 0, "nothing accepted")
  T.eq(bus:stats("s").enqueued, 0, "nothing enqueued")
  T.eq(seda.shared:get("pl.refused_ran"), nil, "handler never ran")
  T.raises(function() seda.encode({ cb = print }) end, "seda.encode refuses", "cb")
  bus:shutdown(5)
end)

T.test("C10 a handler setting an unencodable payload is a nack, not a crash", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", max_attempts = 1, handler = function(env)
    if env.payload == 1 then
      local ok = pcall(function() env.payload = { f = print } end)
      if ok then return true end -- assignment accepted: must fail at the hop
      seda.shared:set("pl.assign_raised", true)
      return true
    end
    seda.shared:incr("pl.later", 1)
  end }
  bus:stage{ name = "t", handler = function() seda.shared:incr("pl.t", 1) end }
  local done = 0
  bus:publish("s", 1, { slip = { "t" }, on_complete = function() done = done + 1 end })
  bus:publish("s", 2, { on_complete = function() done = done + 1 end })
  T.idle(bus, 10)
  T.eq(seda.shared:get("pl.later"), 1, "worker still serving")
  local s = T.accounting(bus)
  T.eq(s.in_system, 0, "nothing stuck")
  bus:shutdown(5)
end)

T.test("C10 assigning a function as the payload raises at the assignment", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "s", handler = function(env)
    local ok, err = pcall(function() env.payload = print end)
    seda.shared:set("pl.fn.ok", ok)
    seda.shared:set("pl.fn.err", err)
  end }
  bus:publish("s", 1)
  T.idle(bus, 10)
  T.eq(seda.shared:get("pl.fn.ok"), false, "assignment raised")
  T.contains(seda.shared:get("pl.fn.err"), "payload: cannot encode a function", "message")
  T.contains(seda.shared:get("pl.fn.err"), "test_payload.lua:", "names the handler's line")
  bus:shutdown(5)
end)

T.test("C10 decoding hostile bytes gives an error, never a crash", function()
  local good = seda.encode(sample())
  -- truncations
  -- an error is either raised or returned as nil, message
  local function fails(bytes)
    local ok, v, err = pcall(seda.decode, bytes)
    return not ok or (v == nil and type(err) == "string")
  end
  for n = 0, math.min(#good - 1, 300) do
    T.ok(fails(good:sub(1, n)), "truncated at " .. n .. " gives an error")
  end
  -- bit flips and random strings: any outcome but a crash
  local rnd = 12345
  local function rand(n) rnd = (rnd * 1103515245 + 12345) % 2147483648; return rnd % n end
  local small = seda.encode({ a = 1, b = { "x", 2.5, true }, c = "str" })
  for i = 1, 2000 do
    local pos = rand(#small) + 1
    local b = small:byte(pos) ~ (1 << rand(8))
    pcall(seda.decode, small:sub(1, pos - 1) .. string.char(b) .. small:sub(pos + 1))
  end
  for i = 1, 2000 do
    local t = {}
    for j = 1, rand(40) do t[j] = string.char(rand(256)) end
    pcall(seda.decode, table.concat(t))
  end
  T.eq(pcall(seda.decode, {}), false, "a table argument raises")
end)

T.test("C10 a deep path in an encode error keeps its ends", function()
  local t = {}
  local c = t
  for i = 1, 250 do c.n = {}; c = c.n end
  local ok, err = pcall(seda.encode, t)
  T.eq(ok, false, "too deep refused")
  T.contains(err, "payload.n.n.n.n.n.n.n.n.<184 more>.n.n", "elided in the middle")
  T.contains(err, "nested deeper than 200 levels", "reason")
  T.ok(#err < 200, "short message: " .. #err .. " bytes")
  local u = {}
  c = u
  for i = 1, 10 do c.n = {}; c = c.n end
  c.f = print
  ok, err = pcall(seda.encode, u)
  T.contains(err, "payload" .. string.rep(".n", 10) .. ".f: cannot encode a function", "short paths in full")
end)

T.test("C10 a handler's header with a NUL byte is a nack naming the header", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "dlq", handler = function(env)
    seda.shared:incr("pl.nul.dlq", 1)
  end }
  bus:stage{ name = "s", dead_letter = "dlq", handler = function(env)
    if env.payload == "v" then env.headers.z = "abc\0def"
    elseif env.payload == "k" then env.headers["k\0ey"] = "v"
    else env.headers.fine = "yes" end
  end }
  bus:stage{ name = "t", handler = function(env)
    seda.shared:set("pl.nul.t." .. env.payload, env.headers.z or env.headers.k or env.headers.fine)
  end }
  for _, p in ipairs{ "v", "k", "ok" } do bus:publish("s", p, { slip = { "t" } }) end
  T.idle(bus, 10)
  T.eq(seda.shared:get("pl.nul.dlq"), 2, "both NUL headers nacked and dead-lettered")
  T.eq(seda.shared:get("pl.nul.t.v"), nil, "never reached the next hop cut short")
  T.eq(seda.shared:get("pl.nul.t.k"), nil, "nor the key")
  T.eq(seda.shared:get("pl.nul.t.ok"), "yes", "a plain header travels")
  T.eq(bus:stats("s").nacked, 2, "two nacks")
  bus:shutdown(5)
end)

T.done()
