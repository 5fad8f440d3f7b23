-- Payload formats of remote stages (SPEC §15, docs/wire.md): seda.null
-- (and cjson.null, the same NULL light userdata) in every format and in
-- the local codec; format = "json" | "msgpack" | "raw" round trips, and
-- the refusals naming the path; a stage reads a message by its
-- Content-Type whatever its own format.  Starts its own nats-server
-- (tests/remote/natsd.sh).
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local dir = T.tmpdir() .. "/nats"
local URL = assert(T.natsd("start", dir), "nats-server did not start")

T.test("seda.null is the NULL light userdata and travels in the codec", function()
  T.eq(type(seda.null), "userdata", "type")
  local ok, cjson = pcall(require, "cjson")
  if ok then T.ok(cjson.null == seda.null, "cjson.null is seda.null") end
  local bus = T.bus{ workers = 1 }
  local seen
  bus:stage{ name = "n", handler = function(env)
    local p = env.payload
    env.payload = { is_null = p.x == seda.null, slot = p.list[2] == seda.null,
                    n = #p.list }
  end }
  local got
  assert(bus:publish("n", { x = seda.null, list = { 1, seda.null, 3 } },
    { on_complete = function(env) got = env.payload end }))
  T.ok(bus:wait(10), "idle")
  T.ok(got.is_null and got.slot, "seda.null in a field and a slot")
  T.eq(got.n, 3, "a null slot keeps the list's length")
  bus:shutdown(5)
end)

-- A stage of the given format; its handler answers what it saw.
local function echo_stage(bus, name, format, stream)
  bus:stage{ name = name, format = format,
             remote = { url = URL, stream = stream },
             handler = function(env)
               local p = env.payload
               local types = {}
               if type(p) == "table" then
                 for k, v in pairs(p) do
                   types[tostring(k)] = math.type(v) or
                     (v == seda.null and "null") or type(v)
                 end
               end
               env.payload = { got = p, types = types, ptype = type(p) }
             end }
end

local function round_trip(bus, stage, payload)
  local got, err
  local ok, why = bus:publish(stage, payload, {
    on_complete = function(env) got = env.payload end })
  if not ok then return nil, why end
  T.ok(bus:wait(20), "idle")
  return got
end

T.test("format json: tables, arrays, seda.null, numbers; refusals name the path", function()
  local bus = T.bus{ workers = 2 }
  echo_stage(bus, "j", "json", "FJ1")
  local r = round_trip(bus, "j", { name = "x", n = 7, f = 1.5, t = true,
    list = { 1, "two", seda.null, { deep = { 1, 2 } } }, big = math.maxinteger,
    none = seda.null })
  T.eq(r.got.name, "x", "string")
  T.eq(r.types.n, "integer", "integer stays an integer")
  T.eq(r.types.f, "float", "float")
  T.eq(r.got.big, math.maxinteger, "64-bit integer exact")
  T.eq(r.types.none, "null", "seda.null field")
  T.ok(r.got.list[3] == seda.null, "seda.null slot")
  T.eq(r.got.list[4].deep[2], 2, "nested")
  T.eq(round_trip(bus, "j", "plain").got, "plain", "a string payload")
  local function refused(payload, ...)
    local ok, err = bus:publish("j", payload)
    T.eq(ok, false, "refused")
    for _, s in ipairs{ ... } do T.contains(err, s, "error") end
  end
  refused({ a = { b = "\xff\xfe" } }, "payload.a.b", "binary string")
  -- A float with an integral value is written 3.0 and reads back a float;
  -- an integer stays an integer (before, 2.0 was refused: "JSON cannot
  -- tell the float 2 from an integer").
  r = round_trip(bus, "j", { x = 1.5 * 2, n = 3, neg = -0.0, big = 1e300, tiny = 5e-324,
                             third = 1 / 3, k = 2^53 })
  T.eq(r.got.x, 3.0, "1.5 * 2 round-trips as 3.0 ...")
  T.eq(r.types.x, "float", "... a float")
  T.eq(r.got.n, 3, "3 stays 3 ...")
  T.eq(r.types.n, "integer", "... an integer")
  T.eq(r.got.neg, -0.0, "-0.0")
  T.eq(r.got.big, 1e300, "1e300 exact")
  T.eq(r.got.tiny, 5e-324, "the smallest subnormal exact")
  T.eq(r.got.third, 1 / 3, "1/3 exact (shortest text that reads back)")
  T.eq(r.got.k, 2^53, "2^53 as a float")
  refused({ x = 0 / 0 }, "payload.x", "nan")
  refused({ x = math.huge }, "payload.x", "inf")
  refused({ 1, 2, k = 3 }, "payload", "both list items and other keys")
  refused({ [true] = 1 }, "payload", "key")
  T.eq(bus:stats("j").dropped >= 0, true, "stats")
  bus:shutdown(5)
end)

T.test("a table decoded by lua-cjson (cjson.null) is published as it is", function()
  local okc, cjson = pcall(require, "cjson")
  if not okc then
    print("skip: lua-cjson is not installed (apt-get install lua-cjson)")
    return
  end
  T.ok(cjson.null == seda.null, "cjson.null is seda.null")
  local bus = T.bus{ workers = 2 }
  echo_stage(bus, "cj", "json", "FJ2")
  -- (lua-cjson decodes every number as a float, 3 too: it travels as 3.0
  -- and comes back a float)
  local v = cjson.decode('{"sku":"A-1","note":null,"list":["a",null,"c"],"price":9.5}')
  local r = round_trip(bus, "cj", v)
  T.eq(r.got.sku, "A-1", "field")
  T.ok(r.got.note == cjson.null, "null field back as cjson.null")
  T.ok(r.got.list[2] == cjson.null, "null slot")
  T.eq(r.got.list[3], "c", "after the null")
  T.eq(r.got.price, 9.5, "a float")
  -- and through a local stage, in the codec
  bus:stage{ name = "loc", handler = function(env)
    seda.shared:set("cj.loc", tostring(env.payload.note == seda.null))
  end }
  T.eq(bus:publish("loc", v), true, "published")
  T.ok(bus:wait(10), "idle")
  T.eq(seda.shared:get("cj.loc"), "true", "seda.null in the handler")
  bus:shutdown(5)
end)

T.test("format msgpack: exact for binary strings, floats, nan, any keys", function()
  local bus = T.bus{ workers = 2 }
  echo_stage(bus, "m", "msgpack", "FM1")
  local r = assert(round_trip(bus, "m", { bin = "\0\xff\xfe", f = 2.0, i = 2,
    nan = 0 / 0, [10] = "ten", [1.5] = "x", list = { seda.null, 2 },
    neg = math.mininteger }))
  T.eq(r.got.bin, "\0\xff\xfe", "binary string")
  T.eq(r.types.f, "float", "2.0 stays a float")
  T.eq(r.types.i, "integer", "2 stays an integer")
  T.ok(r.got.nan ~= r.got.nan, "nan")
  T.eq(r.got[10], "ten", "integer key")
  T.eq(r.got[1.5], "x", "float key")
  T.ok(r.got.list[1] == seda.null, "seda.null")
  T.eq(r.got.neg, math.mininteger, "min integer")
  bus:shutdown(5)
end)

T.test("format raw: the string's bytes; anything else refused", function()
  local bus = T.bus{ workers = 1 }
  echo_stage(bus, "w", "raw", "FW1")
  T.eq(round_trip(bus, "w", "\0bytes\xff").got, "\0bytes\xff", "bytes")
  local ok, err = bus:publish("w", { 1 })
  T.eq(ok, false, "a table refused")
  T.contains(err, 'format "raw" carries a string', "why")
  bus:shutdown(5)
end)

T.test("a stage reads a message by its Content-Type, whatever its format", function()
  -- One bus publishes JSON and MessagePack into the subject another
  -- bus's "seda" stage consumes.
  local pub = T.bus{ workers = 1 }
  pub:stage{ name = "pj", format = "json",
             remote = { url = URL, stream = "FX1", subject = "seda.FX1.in" } }
  pub:stage{ name = "pm", format = "msgpack",
             remote = { url = URL, stream = "FX1", subject = "seda.FX1.in" } }
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "in", remote = { url = URL, stream = "FX1", subject = "seda.FX1.in" },
             handler = function(env) env.payload = "read " .. env.payload.v end }
  local got = {}
  local function done(env) got[#got + 1] = env.payload end
  assert(pub:publish("pj", { v = "json" }, { on_complete = done }))
  assert(pub:publish("pm", { v = "msgpack" }, { on_complete = done }))
  T.wait_until(function() pub:poll() return #got == 2 end, 20, "both handled", bus)
  table.sort(got)
  T.eq(got[1], "read json", "JSON read")
  T.eq(got[2], "read msgpack", "MessagePack read")
  pub:shutdown(5)
  bus:shutdown(5)
end)

T.test("a nats:<subject> hop publishes the result to a plain subject", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "work", format = "json", remote = { url = URL, stream = "FN1" },
             handler = function(env) env.payload = { total = env.payload.n * 2 }
                                     env.headers.tenant = "acme" end }
  -- What a plain subscriber gets: the stream also keeps results.fn1, so a
  -- stage on that subject reads it back.
  bus:stage{ name = "res", remote = { url = URL, stream = "FN1", subject = "results.fn1" },
             handler = function(env)
               -- A failed check nacks: dead-lettered, counted below.
               assert(env.payload.total == 42, "total")
               assert(env.headers.tenant == "acme", "the user header")
             end }
  local done = 0
  assert(bus:publish("work", { n = 21 }, { slip = { "nats:results.fn1" },
    on_complete = function(env) done = done + 1 end }))
  T.wait_until(function() return done == 1 end, 20, "the itinerary completed", bus)
  T.wait_until(function() return bus:stats("res").delivered == 1 end, 20,
    "the result arrived on results.fn1", bus)
  local s = bus:stats("res")
  T.eq(s.remote.bad_messages, 0, "read as JSON")
  T.eq(s.dead_lettered, 0, "the payload and the header as the handler left them")
  bus:shutdown(5)
end)

-- A slip that came in a message (another process wrote it: here another
-- bus, whose publishes this bus never saw) may send results only to the
-- subjects the stage's remote.reach lists; this bus's own slips may name
-- any.  Before, any publisher on the stage's subject could make the
-- consumer publish a chosen body to any subject with its credentials.
T.test("a nats: hop reaches what remote.reach lists or the program's own slips name", function()
  local key = T.uniq("reach")
  seda.shared:set("reach.key", key)
  local cons = T.bus{ workers = 2 }
  cons:stage{ name = "dl", handler = function(env)
    local k = seda.shared:get("reach.key")
    seda.shared:set(k .. ".reason", env.headers["x-dead-reason"])
    seda.shared:set(k .. ".detail", env.headers["x-dead-detail"])
  end }
  cons:stage{ name = "rw", dead_letter = "dl", handler = function(env) end,
              remote = { url = URL, stream = "REACH", reach = { "results.*", "x.>" } } }
  cons:stage{ name = "ok", handler = function(env) end,
              remote = { url = URL, stream = "REACH", subject = "results.ok" } }
  cons:stage{ name = "evil", handler = function(env) end,
              remote = { url = URL, stream = "REACH", subject = "evil.x" } }
  local pub = T.bus{ workers = 1 }
  pub:stage{ name = "rw", remote = { url = URL, stream = "REACH" } }
  assert(pub:publish("rw", "a", { slip = { "nats:results.ok" } }))
  assert(pub:publish("rw", "b", { slip = { "nats:evil.x" } }))
  T.wait_until(function()
    return cons:stats("ok").delivered == 1 and seda.shared:get(key .. ".detail")
  end, 20, "one result sent, one refused", cons)
  T.eq(seda.shared:get(key .. ".reason"), "hop_refused", "dead-lettered hop_refused")
  T.contains(seda.shared:get(key .. ".detail"), "nats:evil.x: the subject is out of the reach of stage 'rw'",
             "naming the subject")
  -- This bus's own slip may send anywhere.
  assert(cons:publish("rw", "c", { slip = { "nats:evil.x" } }))
  T.wait_until(function() return cons:stats("evil").delivered == 1 end, 20,
               "the program's own slip reaches evil.x", cons)
  T.eq(cons:stats("rw").dead_lettered, 1, "only the foreign one refused")
  -- Patterns are checked when the stage is declared.
  for _, bad in ipairs{ "a..b", "a.>.b", "", "a b", "a.*x" } do
    T.raises(function()
      cons:stage{ name = "bad", remote = { url = URL, stream = "REACH", reach = { bad } } }
    end, "bad pattern " .. bad, "stage 'bad': remote: reach[1]", "not a NATS subject pattern")
  end
  T.raises(function()
    cons:stage{ name = "bad", remote = { url = URL, stream = "REACH", reach = 5 } }
  end, "not a list", "reach must be a list")
  pub:shutdown(5)
  cons:shutdown(5)
end)

T.test("tap = true on a stream made without it is refused, saying what to do", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "t1", remote = { url = URL, stream = "FT1" } }
  local ok, err = pcall(bus.stage, bus, { name = "t2",
    remote = { url = URL, stream = "FT1", tap = true } })
  if not ok then      -- nats-server 2.9 cannot change RePublish
    T.contains(err, "was made without the tap", "why")
    T.contains(err, "where the stream is first made", "what to do")
  end
  bus:stage{ name = "t4", remote = { url = URL, stream = "FT2", tap = true } }
  T.raises(function()
    bus:stage{ name = "t3", remote = { url = URL, stream = "FT1", tap = 1 } }
  end, "tap type", "t3", "tap must be a boolean")
  bus:shutdown(5)
end)

T.test("format is checked: a name, and only on remote stages", function()
  local bus = T.bus{ workers = 1 }
  T.raises(function()
    bus:stage{ name = "f1", format = "xml", remote = { url = URL } }
  end, "bad name", "f1", "format must be")
  T.raises(function() bus:stage{ name = "f2", format = "json" } end,
    "local", "f2", "remote stages")
  bus:shutdown(5)
end)

T.natsd("stop", dir)
os.execute("rm -rf '" .. dir .. "'")
T.done()
