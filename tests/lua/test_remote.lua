-- Remote stages from Lua (SPEC §11): the `remote` option checked and its
-- errors naming stage and field; a remote stage's stats (the remote
-- table, handed_off); a slip local -> remote -> local completing with
-- on_complete in this process; a custom id stored once; publish refused
-- "unavailable" while the server is down.  Starts its own nats-server
-- (tests/remote/natsd.sh).  The multi-process properties are in
-- tests/remote/test_*.sh.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local dir = T.tmpdir() .. "/nats"
local URL = assert(T.natsd("start", dir), "nats-server did not start")

local function h() end

T.test("remote option is checked, naming stage and field", function()
  local bus = T.bus{ workers = 1 }
  T.raises(function() bus:stage{ name = "r1", remote = "nats://x" } end,
    "not a table", "r1", "remote must be a table")
  T.raises(function() bus:stage{ name = "r2", remote = {} } end,
    "no url", "r2", "url is required")
  T.raises(function() bus:stage{ name = "r3", remote = { url = 4222 } } end,
    "url type", "r3", "url")
  T.raises(function() bus:stage{ name = "r4", remote = { url = URL, bogus = 1 } } end,
    "unknown key", "r4", "unknown option 'bogus'")
  T.raises(function() bus:stage{ name = "r5", remote = { url = URL, ack_wait = -1 } } end,
    "ack_wait", "r5", "ack_wait")
  T.raises(function() bus:stage{ name = "r6", remote = { url = URL, max_ack_pending = 1.5 } } end,
    "max_ack_pending", "r6", "max_ack_pending")
  T.raises(function() bus:stage{ name = "r7", remote = { url = URL, stream = "a.b" } } end,
    "stream name", "r7", "stream")
  T.raises(function() bus:stage{ name = "r8", durable = true, remote = { url = URL } } end,
    "durable", "r8", "durable")
  T.raises(function() bus:stage{ name = "r9", policy = "drop_oldest", remote = { url = URL } } end,
    "drop_oldest", "r9", "drop_oldest")
  T.raises(function() bus:stage{ name = "r11", remote = { url = URL, low_latency = 1 } } end,
    "low_latency", "r11", "low_latency must be a boolean")
  T.raises(function()
    bus:stage{ name = "r13", remote = { url = URL, token = "t", user = "u", password = "p" } }
  end, "token with user", "r13", "three ways to authenticate: give one")
  T.raises(function() bus:stage{ name = "r14", remote = { url = URL, creds = "/x", token = "t" } } end,
    "creds with token", "r14", "three ways to authenticate")
  local dead = "nats://127.0.0.1:1"
  T.raises(function()
    bus:stage{ name = "r10", remote = { url = dead, connect_timeout = 0.5 } }
  end, "unreachable", "r10", "cannot connect to " .. dead)
  T.eq(next(bus:stats().stages), nil, "no stage was created")
  bus:shutdown(5)
end)

T.test("slip local -> remote -> local fires on_complete here; stats", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "a", handler = function(env) env.payload = env.payload .. "+a" end }
  bus:stage{ name = "r", remote = { url = URL, stream = "LT1" },
             handler = function(env) env.payload = env.payload .. "+r"
                                     env.headers.seen = "r" end }
  bus:stage{ name = "z", handler = function(env) env.payload = env.payload .. "+z" end }
  local got = {}
  for i = 1, 5 do
    assert(bus:publish("a", "p" .. i, { slip = { "r", "z" }, headers = { k = "" },
      on_complete = function(env) got[#got + 1] = env end }))
  end
  T.ok(bus:wait(20), "idle")
  T.eq(#got, 5, "completions")
  table.sort(got, function(x, y) return x.payload < y.payload end)
  T.eq(got[1].payload, "p1+a+r+z", "final payload")
  T.eq(got[1].to, "z", "to")
  T.eq(got[1].headers.seen, "r", "header set remotely")
  T.eq(got[1].headers.k, "", "an empty header value survives")
  local s = bus:stats()
  T.eq(s.handed_off, 5, "handed_off")
  T.eq(s.in_system, 0, "in_system")
  T.eq(s.accepted, s.completed + s.dead_lettered + s.dropped + s.handed_off + s.in_system,
       "books")
  local r = s.stages.r.remote
  T.eq(r.state, "connected", "state")
  T.eq(r.stream, "LT1", "stream")
  T.eq(r.consumer, "seda_r", "consumer")
  T.eq(r.subject, "seda.LT1.r", "subject")
  T.eq(r.consuming, true, "consuming")
  T.eq(r.published, 5, "published")
  T.eq(r.acked, 5, "acked")
  T.eq(r.completions_sent, 5, "completions sent")
  T.eq(r.completions_received, 5, "completions received")
  T.eq(r.awaiting, 0, "awaiting")
  -- JetStream's own counts come in the background.
  local deadline = seda.now() + 10
  repeat r = bus:stats("r").remote bus:wait(0.05)
  until r.js_age >= 0 or seda.now() > deadline
  T.eq(r.js_pending, 0, "js_pending")
  T.eq(r.js_ack_pending, 0, "js_ack_pending")
  T.eq(s.stages.a.remote, nil, "a local stage has no remote table")
  bus:shutdown(5)
end)

T.test("low_latency: a connection of its own, the same behaviour", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "fast", remote = { url = URL, stream = "LT5", low_latency = true },
             handler = function(env) seda.shared:incr("fast") end }
  bus:stage{ name = "slow", remote = { url = URL, stream = "LT5" },
             handler = function(env) seda.shared:incr("slow") end }
  for i = 1, 10 do assert(bus:publish("fast", i)) assert(bus:publish("slow", i)) end
  T.ok(bus:wait(20), "idle")
  T.eq(seda.shared:get("fast"), 10, "fast")
  T.eq(seda.shared:get("slow"), 10, "slow")
  bus:shutdown(5)
end)

T.test("a custom id is stored once; a publish-only stage", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "once", remote = { url = URL, stream = "LT2" } }
  T.eq(bus:publish("once", "x", { id = "order-1" }), true, "first")
  T.eq(bus:publish("once", "x", { id = "order-1" }), true, "repeat accepted")
  T.ok(bus:wait(10), "acknowledged")
  local r = bus:stats("once").remote
  T.eq(r.consuming, false, "publishes only")
  T.eq(r.published, 1, "stored once")
  T.eq(r.duplicates, 1, "one duplicate")
  T.eq(bus:stats("once").dropped, 1, "the repeat is counted dropped")
  bus:shutdown(5)
end)

T.test("publish refuses 'unavailable' while the server is down", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "svc", remote = { url = URL, stream = "LT3" } }
  T.eq(bus:publish("svc", "x"), true, "up")
  T.ok(bus:wait(10), "acknowledged")
  assert(T.natsd("stop", dir))
  local deadline = seda.now() + 20
  local ok, why
  repeat ok, why = bus:publish("svc", "x") until not ok or seda.now() > deadline
  T.eq(ok, false, "refused")
  T.eq(why, "unavailable", "reason")
  T.eq(bus:stats("svc").remote.state ~= "connected", true, "state says so")
  assert(T.natsd("start", dir), "restart")
  deadline = seda.now() + 20
  repeat ok, why = bus:publish("svc", "y") until ok or seda.now() > deadline
  T.eq(ok, true, "accepted again after the restart")
  T.ok(bus:wait(20), "acknowledged after the restart")
  bus:shutdown(5)
end)

T.test("the REPL's stats() shows a remote stage and JetStream's counts", function()
  local exe = "build/release/seda-lua"
  if arg then
    local i = -1
    while arg[i - 1] do i = i - 1 end
    if arg[i] then exe = arg[i] end
  end
  local f = T.tmpdir() .. "/script.lua"
  local h = assert(io.open(f, "w"))
  h:write([[
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "r", remote = { url = arg[1], stream = "LT4" },
           handler = function(env) end }
for i = 1, 3 do assert(bus:publish("r", i)) end
assert(bus:wait(20))
local d = seda.now() + 10
repeat bus:wait(0.05) until bus:stats("r").remote.js_age >= 0 or seda.now() > d
]])
  h:close()
  local out = T.sh("printf 'stats()\\n' | timeout 30 " .. exe .. " -i " .. f ..
                 " " .. URL .. " 2>&1")
  os.remove(f)
  T.contains(out, "handed_off=3", "bus line")
  T.contains(out, "remote r: connected " .. URL .. " stream LT4 consumer seda_r",
             "where")
  T.contains(out, "jetstream pending=0 unacked=0", "JetStream's counts")
  T.contains(out, "published=3 publishing=0 failed=0 | taken=3 acked=3", "figures")
end)

T.test("bus:listen{ nats = }: options checked, naming the field; stats", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "up", handler = function(env)
    env.payload = { got = env.payload.body.n, subject = env.payload.subject }
  end }
  T.raises(function() bus:listen{ nats = "x", routes = { a = { "up" } } } end,
    "not a table", "nats must be a table")
  T.raises(function() bus:listen{ nats = { url = URL }, routes = { a = { "up" } } } end,
    "no service", "nats.service is required")
  T.raises(function()
    bus:listen{ nats = { url = URL, service = "s", bogus = 1 }, routes = { a = { "up" } } }
  end, "unknown key", "unknown option 'bogus'")
  T.raises(function()
    bus:listen{ nats = { url = URL, service = "a.b" }, routes = { a = { "up" } } }
  end, "service name", "letters, digits, _ and -")
  T.raises(function()
    bus:listen{ nats = { url = URL, service = "s", version = "1.2" }, routes = { a = { "up" } } }
  end, "version", "not a semantic version")
  T.raises(function()
    bus:listen{ nats = { url = URL, service = "s" }, routes = { a = { "up", subject = "x.>.y" } } }
  end, "subject", "not a subject requests can be sent to")
  T.raises(function()
    bus:listen{ nats = { url = URL, service = "s" }, routes = { a = {} } }
  end, "empty route", "must be an array of stage names")
  T.raises(function()
    bus:listen{ nats = { url = URL, service = "s", format = "xml" }, routes = { a = { "up" } } }
  end, "format", "nats.format must be")
  T.raises(function()
    bus:listen{ nats = { service = "s" }, routes = { a = { "up" } } }
  end, "no url", "url is required")
  T.raises(function()
    bus:listen{ nats = { url = "nats://127.0.0.1:1", service = "s", connect_timeout = 0.5 },
                routes = { a = { "up" } } }
  end, "unreachable", "service 's': cannot connect to nats://127.0.0.1:1")
  local L = bus:listen{ nats = { url = URL, service = "lt", version = "2.0.1" },
                        routes = { up = { "up" }, other = { "up", subject = "lt.v2.other" } } }
  T.eq(#L:id(), 22, "a NUID")
  local st = L:stats()
  T.eq(st.service, "lt", "service")
  T.eq(st.version, "2.0.1", "version")
  T.eq(st.endpoints.other.subject, "lt.v2.other", "a subject given")
  T.eq(st.endpoints.up.subject, "lt.up", "the default subject")
  T.eq(st.endpoints.up.requests, 0, "no request yet (tests/remote/test_micro.sh sends them)")
  T.ok(st.open, "open")
  L:close()
  T.ok(not L:stats().open, "closed")
end)

T.natsd("stop", dir)
os.execute("rm -rf '" .. dir .. "'")
T.done()
