-- Admission in Lua, adaptive shedding, priorities, retry backoff (SPEC §10).
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

-- A handler that records the order of what it sees under key k, and holds
-- on the first envelope until the gate opens.
local function recorder(env)
  local k = env.headers.k
  local n = seda.shared:incr(k .. ".n", 1)
  seda.shared:set(k .. "." .. n, tostring(env.payload))
  if env.headers.gate then
    local d = seda.now() + 10
    while not seda.shared:get(env.headers.gate) and seda.now() < d do end
  end
end

local function seen(k)
  local t = {}
  for i = 1, seda.shared:get(k .. ".n") or 0 do t[i] = seda.shared:get(k .. "." .. i) end
  return table.concat(t, " ")
end

-- Publish the gate envelope and wait until the handler holds it.
local function hold(bus, stage, k)
  local gate = T.gate(k .. ".gate")
  assert(bus:publish(stage, "gate", { headers = { k = k, gate = gate } }))
  T.wait_until(function() return seda.shared:get(k .. ".n") == 1 end, 10, "held")
  return gate
end

-- ---- admit ----

T.test("admit refuses by header: false, reason; counted refused and dropped", function()
  local k = T.uniq("adm")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = recorder, admit = function(env, stage)
    if env.headers.tenant == "blocked" then return false, "tenant_blocked" end
    return true
  end }
  T.deep_eq({ bus:publish("s", 1, { headers = { k = k, tenant = "ok" } }) }, { true }, "admitted")
  T.deep_eq({ bus:publish("s", 2, { headers = { k = k, tenant = "blocked" } }) },
            { false, "tenant_blocked" }, "refused with the rule's reason")
  local n, err = bus:publish_many("s", { 3, 4 }, { headers = { k = k, tenant = "blocked" } })
  T.eq(n, 0, "publish_many stops at the refusal")
  T.eq(err, "tenant_blocked", "and says why")
  T.idle(bus, 10)
  T.eq(seen(k), "1", "only the admitted one was delivered")
  local s = bus:stats("s")
  T.eq(s.refused, 2, "refused")
  T.eq(s.dropped, 2, "refusals count in dropped")
  local b = T.accounting(bus)
  T.eq(b.accepted, 1, "refusals were never accepted")
end)

T.test("admit sees payload, sender, to, priority and the stage's figures; env is read-only", function()
  local k = T.uniq("view")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "v", capacity = 7, handler = function() end, admit = function(env, stage)
    local key = env.headers.k
    seda.shared:set(key .. ".payload", env.payload.x)
    seda.shared:set(key .. ".sender", env.sender)
    seda.shared:set(key .. ".to", env.to)
    seda.shared:set(key .. ".prio", env.priority)
    seda.shared:set(key .. ".name", stage.name)
    seda.shared:set(key .. ".cap", stage.capacity)
    seda.shared:set(key .. ".depth", stage.depth)
    seda.shared:set(key .. ".p99type", type(stage.sojourn_p99))
    seda.shared:set(key .. ".ratetype", type(stage.rate))
    local ok, e = pcall(function() env.payload = 1 end)
    seda.shared:set(key .. ".ro", ok and "writable" or tostring(e))
    return true
  end }
  assert(bus:publish("v", { x = 42 }, { headers = { k = k }, sender = "me", priority = "high" }))
  T.eq(seda.shared:get(k .. ".payload"), 42, "payload is the Lua value")
  T.eq(seda.shared:get(k .. ".sender"), "me", "sender")
  T.eq(seda.shared:get(k .. ".to"), "v", "to")
  T.eq(seda.shared:get(k .. ".prio"), "high", "priority")
  T.eq(seda.shared:get(k .. ".name"), "v", "stage.name")
  T.eq(seda.shared:get(k .. ".cap"), 7, "stage.capacity")
  T.eq(seda.shared:get(k .. ".depth"), 0, "stage.depth")
  T.eq(seda.shared:get(k .. ".p99type"), "number", "stage.sojourn_p99")
  T.eq(seda.shared:get(k .. ".ratetype"), "number", "stage.rate")
  T.contains(seda.shared:get(k .. ".ro"), "read-only", "env is read-only")
  T.idle(bus, 10)
end)

T.test("admit lowers priority to low: delivered after normal ones", function()
  local k = T.uniq("low")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = recorder, admit = function(env)
    if env.headers.bulk then return "low" end
  end }
  local gate = hold(bus, "s", k)
  assert(bus:publish("s", "bulk1", { headers = { k = k, bulk = "1" } }))
  assert(bus:publish("s", "n1", { headers = { k = k } }))
  assert(bus:publish("s", "bulk2", { headers = { k = k, bulk = "1" } }))
  assert(bus:publish("s", "n2", { headers = { k = k } }))
  T.eq(bus:stats("s").depth_low, 2, "two in the low lane")
  T.open(gate)
  T.idle(bus, 10)
  T.eq(seen(k), "gate n1 n2 bulk1 bulk2", "normal before low, in order within each")
end)

T.test("admit that errors refuses with admit_error and is reported", function()
  local k = T.uniq("err")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "e", handler = recorder, admit = function(env)
    if env.payload == "boom" then error("rule broke") end
    if env.payload == "weird" then return 42 end
    return true
  end }
  T.deep_eq({ bus:publish("e", "boom", { headers = { k = k } }) }, { false, "admit_error" }, "error")
  T.deep_eq({ bus:publish("e", "weird", { headers = { k = k } }) }, { false, "admit_error" }, "bad result")
  T.deep_eq({ bus:publish("e", "fine", { headers = { k = k } }) }, { true }, "next publish fine")
  T.idle(bus, 10)
  local s = bus:stats("e")
  T.eq(s.refused, 2, "refused")
  T.ok(s.errors >= 2, "reported (errors " .. s.errors .. ")")
  T.eq(seen(k), "fine", "only the admitted one")
end)

T.test("a rule must not wait: seda.sleep, http.request, socket and blocking raise in it (SPEC 12)", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "w", handler = recorder, admit = function(env)
    local p = env.payload
    if p == "sleep" then seda.sleep(0.01)
    elseif p == "http" then seda.http.request{ url = "http://127.0.0.1:1/" }
    elseif p == "tcp" then seda.socket.tcp()
    elseif p == "blocking" then seda.blocking(function() end)
    end
    return true
  end }
  for _, what in ipairs{ "sleep", "http", "tcp", "blocking" } do
    T.deep_eq({ bus:publish("w", what) }, { false, "admit_error" }, what .. " refused")
  end
  local errs = {}
  for _, e in ipairs(bus:errors("w")) do errs[#errs + 1] = e.message end
  local all = table.concat(errs, "\n")
  for _, name in ipairs{ "seda.sleep", "seda.http.request", "seda.socket.tcp", "seda.blocking" } do
    T.ok(all:find(name .. ": an admit rule must not wait", 1, true), name .. " named")
  end
  -- In a worker's state too (seda.publish from a handler); and outside a
  -- rule the same calls work.
  bus:stage{ name = "src", handler = function(env)
    local ok, err = seda.publish("w", "sleep")
    seda.sleep(0.001)
    seda.shared:set("adm.nowait", tostring(ok) .. "," .. tostring(err))
  end }
  assert(bus:publish("src", 1))
  T.idle(bus, 10)
  T.eq(seda.shared:get("adm.nowait"), "false,admit_error", "refused from a worker")
  T.deep_eq({ bus:publish("w", "fine") }, { true }, "a rule that does not wait admits")
  T.idle(bus, 10)
end)

T.test("admit runs in the publisher's worker state for seda.publish", function()
  local k = T.uniq("wk")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "sink", handler = recorder, admit = function(env)
    seda.shared:set(env.headers.k .. ".w", seda.worker)
    return env.payload ~= "no", "said_no"
  end }
  bus:stage{ name = "src", handler = function(env)
    local ok, err = seda.publish("sink", env.payload, { headers = { k = env.headers.k } })
    seda.shared:set(env.headers.k .. ".res", tostring(ok) .. "," .. tostring(err))
  end }
  assert(bus:publish("src", "no", { headers = { k = k } }))
  T.idle(bus, 10)
  T.eq(seda.shared:get(k .. ".res"), "false,said_no", "refused inside a handler")
  T.ok(seda.shared:get(k .. ".w") >= 0, "ran on a worker")
  assert(bus:publish("sink", "main", { headers = { k = k } }))
  T.idle(bus, 10)
  T.eq(seda.shared:get(k .. ".w"), nil, "on the main state seda.worker is nil")
end)

T.test("admit from a file is hot-reloaded under load: nothing lost, new rule from the next publish", function()
  local dir = T.tmpdir()
  local rule = dir .. "/rule.lua"
  T.write(rule, 'return function(env) if env.payload % 2 == 0 then return false, "v1" end end')
  local k = T.uniq("hot")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "h", capacity = 64, admit = rule, handler = function(env)
    seda.shared:incr(env.headers.k .. ".got", 1)
  end }
  T.ok((bus:handler_files().h or {})[1] == rule, "the rule's file is watched with the handlers")
  local accepted, refused = 0, {}
  for i = 1, 3000 do
    if i == 1500 then
      T.write(rule, 'return function(env) if env.payload % 3 == 0 then return false, "v2" end end')
      T.eq(bus:reload("h"), true, "reload")
    end
    local ok, why = bus:publish("h", i, { headers = { k = k } })
    if ok then accepted = accepted + 1 else refused[why] = (refused[why] or 0) + 1
      if i < 1500 then T.eq(why, "v1", "old rule before the reload") else T.eq(why, "v2", "new rule after") end
    end
  end
  T.idle(bus, 20)
  T.eq(seda.shared:get(k .. ".got"), accepted, "every admitted envelope delivered once")
  T.eq(refused.v1, 749, "v1 refusals (even numbers below 1500)")
  T.eq(refused.v2, 501, "v2 refusals (multiples of 3 from 1500 to 3000)")
  T.accounting(bus)
  -- A broken rule file: reload fails, the old rule stays.
  T.write(rule, 'return function(env) syntax error here end')
  local ok, err = bus:reload("h")
  T.eq(ok, false, "broken rule refused")
  T.contains(err, "admit", "the error names the rule")
  T.deep_eq({ bus:publish("h", 3, { headers = { k = k } }) }, { false, "v2" }, "old rule still applies")
end)

T.test("bus:tune sets and removes admit, shed, retry and starve_after; bad values change nothing", function()
  local k = T.uniq("tune")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "t", handler = recorder }
  T.eq(bus:tune("t", { admit = function(env) return false, "closed_for_now" end }), true, "tune admit")
  T.deep_eq({ bus:publish("t", 1, { headers = { k = k } }) }, { false, "closed_for_now" }, "applies")
  T.eq(bus:tune("t", { admit = false }), true, "remove the rule")
  T.deep_eq({ bus:publish("t", 2, { headers = { k = k } }) }, { true }, "gone")
  T.raises(function() bus:tune("t", { shed = { target = -1 } }) end, "shed.target")
  T.raises(function() bus:tune("t", { retry = { backoff = 0.1, multiplier = 0.5 } }) end, "retry.multiplier")
  T.raises(function() bus:tune("t", { starve_after = 0 }) end, "starve_after")
  T.raises(function() bus:tune("t", { admit = 42 }) end, "admit")
  T.raises(function() bus:tune("t", { shed = { target = 0.01, whatever = 1 } }) end, "unknown option 'whatever'")
  T.eq(bus:tune("t", { shed = { target = 0.01, interval = 0.05 }, retry = { backoff = 0.02 },
                       starve_after = 2 }), true, "good values")
  T.idle(bus, 10)
end)

T.test("each stage keeps its own rule: twelve stages, two buses, rules replaced between publishes", function()
  -- A publishing state remembers the rules it has compiled in a few
  -- slots: more stages than slots, used in turn from the main state and
  -- from a worker, must each still get their own rule and its latest
  -- version.
  local buses = { T.bus{ workers = 1 }, T.bus{ workers = 1 } }
  for b = 1, 2 do
    for i = 1, 12 do
      buses[b]:stage{ name = "r" .. i, handler = function() end, admit = load(
        "return function() return false, 'b" .. b .. "_r" .. i .. "' end")() }
    end
  end
  for round = 1, 3 do
    for i = 12, 1, -1 do
      for b = 1, 2 do
        T.deep_eq({ buses[b]:publish("r" .. i, round) }, { false, "b" .. b .. "_r" .. i },
                  "round " .. round .. ": bus " .. b .. " stage r" .. i)
      end
    end
  end
  -- Replace every other rule; the next publish applies the new one.
  for i = 1, 12, 2 do
    T.eq(buses[1]:tune("r" .. i, { admit = load(
      "return function() return false, 'new_r" .. i .. "' end")() }), true, "tune r" .. i)
  end
  for i = 1, 12 do
    T.deep_eq({ buses[1]:publish("r" .. i, 0) }, { false, (i % 2 == 1 and "new_r" or "b1_r") .. i },
              "after tune: r" .. i)
  end
  -- The same from a worker's state: a handler publishing to every stage.
  local k = T.uniq("slots")
  buses[1]:stage{ name = "fan", handler = function(env)
    local got = {}
    for i = 1, 12 do
      local ok, why = seda.publish("r" .. i, 1)
      got[#got + 1] = tostring(ok) .. ":" .. tostring(why)
    end
    seda.shared:set(env.headers.k, table.concat(got, " "))
  end }
  assert(buses[1]:publish("fan", 1, { headers = { k = k } }))
  T.idle(buses[1], 10)
  local want = {}
  for i = 1, 12 do want[i] = "false:" .. (i % 2 == 1 and "new_r" or "b1_r") .. i end
  T.eq(seda.shared:get(k), table.concat(want, " "), "worker sees each stage's rule")
  -- A bus method called on something that is not a bus still says so.
  T.raises(function() buses[1].publish({}, "r1", 1) end, "seda.bus expected")
  T.raises(function() buses[1].publish(io.stdout, "r1", 1) end, "seda.bus expected")
end)

T.test("a stage made where a closed one was gets its own rule, not the old one", function()
  -- Buses closed and collected one after another: the allocator tends to
  -- give each new stage the memory of the last, at the same version.
  for i = 1, 40 do
    local bus = seda.bus{ workers = 1 }
    bus:stage{ name = "x", handler = function() end, admit = load(
      "return function() return false, 'rule_" .. i .. "' end")() }
    T.deep_eq({ bus:publish("x", i) }, { false, "rule_" .. i }, "bus " .. i)
    bus:shutdown(5)
    bus = nil
    collectgarbage()
    collectgarbage()
  end
end)

T.test("option validation names the stage and field", function()
  local bus = T.bus{ workers = 1 }
  local h = function() end
  T.raises(function() bus:stage{ name = "a", handler = h, shed = { target = 0 } } end, "shed.target")
  T.raises(function() bus:stage{ name = "a", handler = h, shed = 0.01 } end, "shed must be a table")
  T.raises(function() bus:stage{ name = "a", handler = h, shed = { target = 0.01, interval = 0 } } end, "shed.interval")
  T.raises(function() bus:stage{ name = "a", handler = h, retry = { backoff = "x" } } end, "retry.backoff")
  T.raises(function() bus:stage{ name = "a", handler = h, retry = { backoff = 1, max_backoff = 0.5 } } end, "retry.max_backoff")
  T.raises(function() bus:stage{ name = "a", handler = h, retry = { jitter = 1 } } end, "retry.jitter")
  T.raises(function() bus:stage{ name = "a", handler = h, starve_after = -1 } end, "starve_after")
  T.raises(function() bus:stage{ name = "a", handler = h, admit = 7 } end, "stage 'a': admit")
  T.raises(function() bus:stage{ name = "a", handler = h, admit = "/nonexistent/rule.lua" } end, "admit")
  local up = 1
  T.raises(function() bus:stage{ name = "a", handler = h, admit = function() return up end } end, "upvalue 'up'")
  T.raises(function() bus:publish("nope", 1, { priority = "urgent" }) end, "priority must be")
  T.eq(bus:stats("a"), nil, "no stage was made")
end)

-- ---- priorities ----

T.test("priority lanes: high before normal before low, in order within each", function()
  local k = T.uniq("prio")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "p", handler = recorder }
  local gate = hold(bus, "p", k)
  local pub = function(p, pr) assert(bus:publish("p", p, { headers = { k = k }, priority = pr })) end
  pub("n1"); pub("l1", "low"); pub("h1", "high"); pub("n2", "normal"); pub("h2", "high"); pub("l2", "low")
  local s = bus:stats("p")
  T.eq(s.depth, 6, "depth counts every lane")
  T.eq(s.depth_high, 2, "high lane")
  T.eq(s.depth_low, 2, "low lane")
  T.open(gate)
  T.idle(bus, 10)
  T.eq(seen(k), "gate h1 h2 n1 n2 l1 l2", "order")
end)

T.test("high jumps the queue but not the capacity", function()
  local k = T.uniq("cap")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "c", capacity = 2, policy = "reject", handler = recorder }
  local gate = hold(bus, "c", k)
  assert(bus:publish("c", "n1", { headers = { k = k } }))
  assert(bus:publish("c", "n2", { headers = { k = k } }))
  T.deep_eq({ bus:publish("c", "h", { headers = { k = k }, priority = "high" }) }, { false, "full" }, "full is full")
  T.open(gate)
  T.idle(bus, 10)
end)

T.test("drop_oldest evicts the oldest low first", function()
  local k = T.uniq("evict")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "d", capacity = 3, policy = "drop_oldest", handler = recorder }
  local gate = hold(bus, "d", k)
  local pub = function(p, pr) assert(bus:publish("d", p, { headers = { k = k }, priority = pr })) end
  pub("n1"); pub("l1", "low"); pub("h1", "high")
  pub("n2")                                    -- evicts l1
  pub("n3")                                    -- evicts n1 (no low left)
  T.open(gate)
  T.idle(bus, 10)
  T.eq(seen(k), "gate h1 n2 n3", "l1 then n1 evicted")
  T.eq(bus:stats("d").dropped, 2, "two evictions")
  T.accounting(bus)
end)

T.test("no starvation: a low envelope waiting past starve_after goes next", function()
  local k = T.uniq("starve")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", starve_after = 0.05, handler = function(env)
    local key = env.headers.k
    local n = seda.shared:incr(key .. ".n", 1)
    seda.shared:set(key .. "." .. n, tostring(env.payload))
    local d = seda.now() + (env.headers.gate and 10 or 0.002)
    while seda.now() < d and not (env.headers.gate and seda.shared:get(env.headers.gate)) do end
  end }
  local gate = hold(bus, "s", k)
  assert(bus:publish("s", "low", { headers = { k = k }, priority = "low" }))
  for i = 1, 200 do assert(bus:publish("s", "h" .. i, { headers = { k = k }, priority = "high" })) end
  T.open(gate)
  T.idle(bus, 20)
  local pos
  for i = 1, seda.shared:get(k .. ".n") do
    if seda.shared:get(k .. "." .. i) == "low" then pos = i end
  end
  T.ok(pos and pos < 150, "the low envelope was not left behind all 200 high ones (position " ..
       tostring(pos) .. ")")
  T.ok(pos and pos > 2, "but it did wait for starve_after first")
end)

T.test("priority travels to the next hop", function()
  local k = T.uniq("hop")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "b", handler = recorder }
  bus:stage{ name = "a", handler = function(env) end }
  local gate = hold(bus, "b", k)
  assert(bus:publish("a", "n", { headers = { k = k }, slip = { "b" } }))
  T.wait_until(function() return bus:stats("b").depth == 1 end, 10, "n queued at b")
  assert(bus:publish("a", "h", { headers = { k = k }, slip = { "b" }, priority = "high" }))
  T.wait_until(function() return bus:stats("b").depth == 2 end, 10, "h queued at b")
  T.eq(bus:stats("b").depth_high, 1, "still high at the next stage")
  T.open(gate)
  T.idle(bus, 10)
  T.eq(seen(k), "gate h n", "high first at the next hop too")
end)

-- ---- adaptive shedding ----

T.test("shed engages under overload (low first, then normal; never high) and disengages", function()
  local bus = T.bus{ workers = 2 }
  -- 2 ms a handler: 500/s.  target 10 ms, interval 30 ms.
  bus:stage{ name = "slow", capacity = 1000, shed = { target = 0.01, interval = 0.03 }, handler = function()
    local d = seda.now() + 0.002
    while seda.now() < d do end
  end }
  local shed_low, shed_normal, high_refused = 0, 0, 0
  local t_end = seda.now() + 10
  while seda.now() < t_end and shed_normal == 0 do
    local ok, why = bus:publish("slow", 1, { priority = "low" })
    if not ok then T.eq(why, "shed", "reason"); shed_low = shed_low + 1 end
    ok, why = bus:publish("slow", 1)
    if not ok then T.eq(why, "shed", "reason"); shed_normal = shed_normal + 1 end
    if not bus:publish("slow", 1, { priority = "high" }) then high_refused = high_refused + 1 end
  end
  T.ok(shed_low > 0, "low shed")
  T.ok(shed_normal > 0, "normal shed once low was not enough")
  T.eq(high_refused, 0, "high is never shed")
  local s = bus:stats("slow")
  T.ok(s.shed >= shed_low + shed_normal, "counted in shed")
  T.ok(s.shedding >= 1, "shedding now")
  T.accounting(bus)
  -- Stop publishing: the queue drains and shedding ends.
  T.idle(bus, 30)
  T.deep_eq({ bus:publish("slow", 1) }, { true }, "accepted again once the queue is good")
  T.eq(bus:stats("slow").shedding, 0, "disengaged")
  T.idle(bus, 10)
  T.accounting(bus)
end)

-- Shedding at the door reaches the stages a slip stage forwards to: the
-- shape of examples/service.lua (parse -> route, route forwarding to
-- orders, orders slow and shedding).  Before, orders shed nothing (only
-- hops reached it) and parse and route filled behind it.
T.test("door: a stage reached only by env:forward sheds at the entrance", function()
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "parse", capacity = 10000, handler = function() end }
  bus:stage{ name = "route", capacity = 10000, handler = function(env)
    return env:forward("orders")
  end }
  -- 2 ms an envelope: 500/s; published at twice that.
  bus:stage{ name = "orders", shed = { target = 0.005, interval = 0.03 }, handler = function()
    local d = seda.now() + 0.002
    while seda.now() < d do end
  end }
  local accepted, shed, other, sent = 0, 0, {}, 0
  local t0, deadline = seda.now(), seda.now() + 30
  while shed < 50 and seda.now() < deadline do
    local due = math.floor((seda.now() - t0) * 1000)
    while sent < due do
      sent = sent + 1
      local ok, why, who = bus:publish("parse", sent, { slip = { "route" }, timeout = 0 })
      if ok then
        accepted = accepted + 1
      elseif why == "shed" then
        T.eq(who, "orders", "the refusal names the stage that sheds")
        shed = shed + 1
      else
        other[#other + 1] = why
      end
    end
  end
  T.ok(shed >= 50, "new itineraries refused at the entrance (" .. shed .. " of " .. sent .. ")")
  T.deep_eq(other, {}, "every refusal was shed (none for a full queue)")
  T.idle(bus, 60)
  local s = T.accounting(bus)
  T.eq(s.completed, accepted, "every accepted itinerary completed")
  T.eq(s.dead_lettered, 0, "none dead-lettered")
  T.eq(bus:stats("parse").shed, shed, "counted shed at the entrance")
  T.eq(bus:stats("orders").shed_for, shed, "and in shed_for at the stage that caused it")
  T.eq(bus:stats("orders").shed, 0, "orders itself refused nothing: hops are never shed")
  T.eq(bus:stats("route").shed_for, 0, "route caused none")
  -- A publish with high priority still goes in; one to orders alone is the
  -- stage's own refusal (third value: the stage itself).
  T.eq(bus:publish("parse", 1, { slip = { "route" }, priority = "high" }), true, "high is never shed")
  T.idle(bus, 30)
end)

T.test("door: a forward target is forgotten when unused for stats_window", function()
  local bus = T.bus{ workers = 2, stats_window = 1 }
  local function fwd(env) if env.payload == "fwd" then return env:forward("slow") end end
  bus:stage{ name = "c", handler = fwd }
  bus:stage{ name = "d", handler = fwd }
  bus:stage{ name = "slow", shed = { target = 0.005, interval = 0.02 }, handler = function()
    local d = seda.now() + 0.01
    while seda.now() < d do end
  end }
  -- c forwards to slow once, then the window passes: forgotten.
  assert(bus:publish("c", "fwd"))
  T.idle(bus, 10)
  T.spin(1.2)
  -- d keeps forwarding to slow; slow is driven into shedding.  A new
  -- itinerary at d is refused for slow; one at c goes in (c's target was
  -- forgotten), and d is refused again after it (slow still shed then).
  local d_refused, c_ok = 0, 0
  T.wait_until(function()
    -- slow's queue is kept short (a few at a time, and d's forwards
    -- only while it is): enough to shed, quick to drain.
    local depth = bus:stats("slow").depth
    if depth < 10 then
      for i = 1, 5 do bus:publish("slow", i, { timeout = 0 }) end
    end
    if depth >= 50 then return false end
    local ok, why, who = bus:publish("d", "fwd", { timeout = 0 })
    if ok then return false end
    T.deep_eq({ why, who }, { "shed", "slow" }, "d refused for slow")
    d_refused = d_refused + 1
    local okc, whyc = bus:publish("c", "x", { timeout = 0 })
    T.eq(okc, true, "c's forward target was forgotten (" .. tostring(whyc) .. ")")
    c_ok = c_ok + 1
    return (bus:publish("d", "fwd", { timeout = 0 })) == false
  end, 30, "d refused, c accepted, d refused again")
  T.ok(d_refused >= 1 and c_ok >= 1, "both seen")
  T.idle(bus, 30)
  T.accounting(bus)
end)

-- ---- retry backoff ----

T.test("retry backoff: delays grow by multiplier, at least as long as asked, in order", function()
  local k = T.uniq("bo")
  local bus = T.bus{ workers = 2, dead_letter = "dlq" }
  bus:stage{ name = "dlq", handler = function(env)
    seda.shared:set(env.headers.k .. ".dead", env.headers["x-dead-reason"])
  end }
  bus:stage{ name = "r", max_attempts = 4, retry = { backoff = 0.04, multiplier = 2, jitter = false },
             handler = function(env)
    seda.shared:set(env.headers.k .. ".t" .. env.attempts, seda.now())
    return false
  end }
  assert(bus:publish("r", 1, { headers = { k = k } }))
  T.wait_until(function() return bus:stats("r").delayed == 1 end, 10, "a retry waits")
  T.ok(bus:stats().in_system == 1, "it counts in in_system")
  T.idle(bus, 10)
  local t = {}
  for a = 1, 4 do t[a] = seda.shared:get(k .. ".t" .. a) end
  T.ok(t[2] - t[1] >= 0.04, "first retry after backoff (" .. (t[2] - t[1]) .. ")")
  T.ok(t[3] - t[2] >= 0.08, "second after backoff * 2 (" .. (t[3] - t[2]) .. ")")
  T.ok(t[4] - t[3] >= 0.16, "third after backoff * 4 (" .. (t[4] - t[3]) .. ")")
  T.eq(seda.shared:get(k .. ".dead"), "max_attempts", "then dead-lettered")
  T.eq(bus:stats("r").delayed, 0, "nothing delayed any more")
  T.accounting(bus)
end)

T.test("retry backoff: max_backoff caps, jitter keeps the lower bound", function()
  local k = T.uniq("cap")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "r", max_attempts = 4, retry = { backoff = 0.03, multiplier = 10, max_backoff = 0.06 },
             handler = function(env)
    seda.shared:set(env.headers.k .. ".t" .. env.attempts, seda.now())
    return env.attempts == 4
  end }
  assert(bus:publish("r", 1, { headers = { k = k } }))
  T.idle(bus, 10)
  local t = {}
  for a = 1, 4 do t[a] = seda.shared:get(k .. ".t" .. a) end
  T.ok(t[2] - t[1] >= 0.03, "first >= backoff")
  T.ok(t[3] - t[2] >= 0.06 and t[4] - t[3] >= 0.06, "then max_backoff")
  T.eq(bus:stats().completed, 1, "acked on the 4th attempt")
end)

T.test("a delayed retry holds no worker", function()
  local k = T.uniq("free")
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "r", max_attempts = 2, retry = { backoff = 60, jitter = false }, handler = function(env)
    return env.attempts == 2
  end }
  bus:stage{ name = "other", handler = function(env) seda.shared:incr(env.headers.k .. ".o", 1) end }
  assert(bus:publish("r", 1))
  T.wait_until(function() return bus:stats("r").delayed == 1 end, 10, "retry delayed")
  for i = 1, 50 do assert(bus:publish("other", i, { headers = { k = k } })) end
  T.wait_until(function() return seda.shared:get(k .. ".o") == 50 end, 30,
               "the only worker runs other work while the retry waits")
  T.eq(bus:stats("r").delayed, 1, "still waiting")
  bus:shutdown_now()
  local s = T.accounting(bus)
  T.eq(s.completed, 50, "the other work completed")
  T.eq(s.dropped, 1, "the waiting retry was swept")
end)

T.test("shutdown with a retry still delayed: swept and counted dropped", function()
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "r", max_attempts = 2, retry = { backoff = 30 }, handler = function() return false end }
  assert(bus:publish("r", 1))
  T.wait_until(function() return bus:stats("r").delayed == 1 end, 10, "retry delayed")
  T.eq(bus:wait(0.05), false, "not idle while a retry waits")
  T.eq(bus:shutdown(0.1), false, "not drained")
  local s = T.accounting(bus)
  T.eq(s.dropped, 1, "the delayed retry was swept")
  T.eq(bus:stats("r").delayed, 0, "none left")
end)

T.done()
