-- Group commit of durable publishes: a handler's seda.publish into a
-- durable stage waits for its commit without holding its worker, so many
-- handlers' publishes share one transaction (and one fsync); a group that
-- fails fails every publish in it; the main state's on_durable; group_wait
-- and the journal's figures in stats(); hops from memory into a durable
-- stage on a full disk.
--
--   build/<variant>/seda-lua tests/lua/test_durable_group.lua
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local BIN = arg and arg[-1] or "build/release/seda-lua"
local CHILD = T.dir .. "durable/child.lua"

-- What the journal at dir holds for the durable stage "d": a child
-- process replays it and counts each payload.  Returns the total and a
-- table payload -> times replayed.
local function replayed(dir)
  local p = assert(io.popen("timeout -s KILL 170 " .. q(BIN) .. " " .. q(CHILD) ..
                            " dcount " .. q(dir) .. " 2>&1"))
  local out = p:read("a")
  p:close()
  T.contains(out, "idle\n", "replay child: " .. out:sub(1, 400))
  local seen = {}
  for pl, n in out:gmatch("([%w%-]+) (%d+)\n") do seen[pl] = tonumber(n) end
  return tonumber(out:match("total (%d+)")) or -1, seen
end

-- 64 handlers (one src envelope each) rendezvous, then each publishes
-- `per` envelopes into the durable pull stage "d"; returns the bus and
-- the shared key prefix.  The rendezvous makes the 64 calls wait at once
-- (seda.sleep suspends them), so their publishes meet in the journal.
local function publishers(dir, opts, per, payload)
  local k = T.uniq("grp")
  seda.shared:set(k .. ":per", per)
  seda.shared:set(k .. ":pad", payload or "")
  local bus = seda.bus{ data_dir = dir, workers = 2, sync = opts.sync or "full",
                        group_wait = opts.group_wait }
  bus:stage{ name = "d", durable = "at_least_once", pull = true,
             capacity = 100000 }
  bus:stage{ name = "src", concurrency = 64, capacity = 64,
             handler_timeout = 120, handler = function(env)
               local key = env.headers.k
               seda.shared:incr(key .. ":in", 1)
               local deadline = seda.now() + 30
               while (seda.shared:get(key .. ":in") or 0) < 64 and
                     seda.now() < deadline do
                 seda.sleep(0.001)
               end
               local pad = seda.shared:get(key .. ":pad")
               for i = 1, seda.shared:get(key .. ":per") do
                 local p = env.payload .. "-" .. i
                 local ok, err = seda.publish("d", p .. pad)
                 if ok then
                   seda.shared:incr(key .. ":ok", 1)
                   seda.shared:set(key .. ":t:" .. p, true)
                 else
                   seda.shared:incr(key .. ":bad", 1)
                   seda.shared:set(key .. ":f:" .. p, tostring(err))
                 end
               end
               seda.shared:incr(key .. ":done", 1)
             end }
  for h = 1, 64 do
    assert(bus:publish("src", "h" .. h, { headers = { k = k } }))
  end
  T.wait_until(function() return (seda.shared:get(k .. ":done") or 0) == 64 end,
               120, "64 publishing handlers done", bus)
  return bus, k
end

T.test("64 handlers on 2 workers publish into a durable stage: groups > 1, each envelope journaled once", function()
  local dir = T.tmpdir() .. "/data"
  local per = 20
  local bus, k = publishers(dir, { sync = "full", group_wait = 0.05 }, per)
  T.eq(seda.shared:get(k .. ":ok"), 64 * per, "every publish returned true")
  T.eq(seda.shared:get(k .. ":bad"), nil, "no publish refused")
  local s = bus:stats()
  local j = s.journal
  T.ok(j, "stats().journal")
  T.ok(j.group_max > 1, "a commit held more than one publish: " .. j.group_max)
  T.ok(j.group_mean > 1, "mean group size > 1: " .. j.group_mean)
  T.ok(j.requests >= 64 * per, "requests count the publishes: " .. j.requests)
  T.ok(j.commits < 64 * per, "fewer commits than publishes: " .. j.commits)
  T.ok(j.fsyncs >= j.commits, "sync = full: an fsync per commit at least: "
       .. j.fsyncs .. " / " .. j.commits)
  T.eq(s.loans_peak, 0, "no worker lent for the waits")
  bus:shutdown(0)
  bus = nil
  collectgarbage()            -- the bus's journal closes: its lock goes
  local total, seen = replayed(dir)
  T.eq(total, 64 * per, "every envelope in the journal once")
  for h = 1, 64 do
    for i = 1, per do
      T.eq(seen["h" .. h .. "-" .. i], 1, "h" .. h .. "-" .. i .. " once")
    end
  end
end)

T.test("sync = normal: the same publishes, commits without an fsync each", function()
  local dir = T.tmpdir() .. "/data"
  local bus, k = publishers(dir, { sync = "normal" }, 10)
  T.eq(seda.shared:get(k .. ":ok"), 640, "every publish returned true")
  local j = bus:stats().journal
  T.ok(j.fsyncs < j.commits, "normal: fsyncs only at checkpoints: " .. j.fsyncs
       .. " / " .. j.commits)
  bus:shutdown(0)
  bus = nil
  collectgarbage()
  T.eq(replayed(dir), 640, "every envelope in the journal")
end)

T.test("a handler's publish into a durable stage that refuses: false, reason at once", function()
  local dir = T.tmpdir() .. "/data"
  local k = T.uniq("ref")
  local bus = T.bus{ data_dir = dir, workers = 2 }
  bus:stage{ name = "e", durable = "exactly_once", pull = true }
  bus:stage{ name = "src", concurrency = 4, handler = function(env)
    local ok, err = seda.publish("e", "x", { id = env.payload })
    seda.shared:set(env.headers.k .. ":" .. env.payload .. ":" ..
                    seda.shared:incr(env.headers.k .. ":" .. env.payload, 1),
                    tostring(ok) .. " " .. tostring(err))
  end }
  assert(bus:publish("src", "a", { headers = { k = k } }))
  T.idle(bus, 30)
  assert(bus:publish("src", "a", { headers = { k = k } }))
  T.idle(bus, 30)
  T.eq(seda.shared:get(k .. ":a:1"), "true nil", "first publish accepted")
  T.eq(seda.shared:get(k .. ":a:2"), "false duplicate", "the repeat: false, duplicate")
  -- refused before anything is queued (the stage's payload check): the
  -- call resumes at once with the check's reason
  bus:stage{ name = "typed", durable = "at_least_once", pull = true,
             accepts = { n = "integer" } }
  bus:stage{ name = "src2", handler = function(env)
    local ok, err = seda.publish("typed", { n = env.payload })
    seda.shared:set(env.headers.k .. ":typed:" .. tostring(env.payload),
                    tostring(ok) .. " " .. tostring(err))
  end }
  assert(bus:publish("src2", "x", { headers = { k = k } }))
  assert(bus:publish("src2", 7, { headers = { k = k } }))
  T.idle(bus, 30)
  T.contains(seda.shared:get(k .. ":typed:x"), "false type: payload.n: expected integer")
  T.eq(seda.shared:get(k .. ":typed:7"), "true nil", "a good payload goes")
end)

T.test("the main state's bus:publish with on_durable: told once the row is committed", function()
  local dir = T.tmpdir() .. "/data"
  local bus = T.bus{ data_dir = dir, workers = 2 }
  bus:stage{ name = "d", durable = "exactly_once", pull = true }
  bus:stage{ name = "m", handler = function() end }
  local told = {}
  for i = 1, 50 do
    local ok, err = bus:publish("d", "p" .. i, { id = "i" .. i, on_durable = function(ok2, why)
      told[#told + 1] = { i, ok2, why }
    end })
    T.eq(ok, true, "publish queued: " .. tostring(err))
  end
  -- a repeat of an accepted id: queued, then told false, duplicate
  T.eq(bus:publish("d", "again", { id = "i1", on_durable = function(ok2, why)
    told[#told + 1] = { "dup", ok2, why }
  end }), true)
  -- bus:wait returns once every on_durable report has run
  T.eq(bus:wait(30), true, "idle")
  T.eq(#told, 51, "51 reports")
  for n = 1, 50 do
    T.deep_eq(told[n], { n, true, nil }, "report " .. n)
  end
  T.deep_eq(told[51], { "dup", false, "duplicate" }, "the repeat's report")
  T.raises(function() bus:publish("m", "x", { on_durable = function() end }) end,
           "in-memory stage", "on_durable", "'m' is not durable")
  T.raises(function() bus:publish("d", "x", { on_durable = 1 }) end,
           "not a function", "on_durable must be a function")
  T.raises(function() bus:publish_many("d", { "x" }, { on_durable = function() end }) end,
           "publish_many", "on_durable is for bus:publish")
  T.raises(function() seda.bus{ group_wait = 2 } end, "group_wait range",
           "group_wait must be a number of seconds in [0, 1]")
  T.raises(function() seda.bus{ group_wait = "x" } end, "group_wait type",
           "group_wait must be a number")
end)

T.test("a handler may not pass on_durable (its publish already waits without its worker)", function()
  local k = T.uniq("od")
  local bus = T.bus{ data_dir = T.tmpdir() .. "/data", workers = 1 }
  bus:stage{ name = "d", durable = "at_least_once", pull = true }
  bus:stage{ name = "src", handler = function(env)
    local ok, err = pcall(seda.publish, "d", "x", { on_durable = function() end })
    seda.shared:set(env.payload, tostring(ok) .. " " .. tostring(err))
  end }
  assert(bus:publish("src", k))
  T.idle(bus, 30)
  T.contains(seda.shared:get(k), "on_durable is only available on the main state")
end)

-- A full disk (a tmpfs of 1 MiB, most of it taken by a filler): 64
-- handlers publish 4 KB envelopes until commits fail.  Every publish
-- returned true or false, "io"; after making room, the journal holds
-- exactly the envelopes whose publish returned true (a failed group left
-- no row of any of its publishes, and told each of them false).
T.test("full disk (tmpfs): a failed group fails every publish in it, none half-written", function()
  local mnt = T.tmpdir()
  if os.execute("mount -t tmpfs -o size=1m tmpfs " .. q(mnt) .. " 2>/dev/null") ~= true then
    print("  skipped: cannot mount a tmpfs here (not root?)")
    return
  end
  local ok, err = pcall(function()
    os.execute("dd if=/dev/zero of=" .. q(mnt .. "/filler") .. " bs=1k count=500 2>/dev/null")
    local dir = mnt .. "/data"
    local bus, k = publishers(dir, { sync = "full", group_wait = 0.02 }, 8,
                              string.rep("z", 4000))
    local oks, bads = seda.shared:get(k .. ":ok") or 0, seda.shared:get(k .. ":bad") or 0
    T.eq(oks + bads, 512, "every publish answered")
    T.ok(bads > 0, "some publishes refused (disk full): " .. bads)
    T.ok(oks > 0, "some accepted before: " .. oks)
    local want = {}
    for h = 1, 64 do
      for i = 1, 8 do
        local p = "h" .. h .. "-" .. i
        local t, f = seda.shared:get(k .. ":t:" .. p), seda.shared:get(k .. ":f:" .. p)
        T.ok((t == true) ~= (f ~= nil), p .. ": true or false, not both")
        if f then T.eq(f, "io", p .. ": refused with io") end
        want[p] = t == true
      end
    end
    bus:shutdown(0)
    bus = nil
    collectgarbage()
    os.remove(mnt .. "/filler")
    local total, seen = replayed(dir)
    T.eq(total, oks, "the journal holds the accepted envelopes only")
    for p, accepted in pairs(want) do
      T.eq(seen[p] or 0, accepted and 1 or 0,
           p .. (accepted and ": accepted, in the journal once" or ": refused, not in the journal"))
    end
    print(string.format("  %d accepted, %d refused with io", oks, bads))
  end)
  os.execute("umount " .. q(mnt) .. " 2>/dev/null")
  if not ok then error(err, 0) end
end)

-- A full disk again, now for hops from an in-memory stage into a durable
-- one: 64 handlers of "m" forward 4 KB envelopes into "d2" until commits
-- fail.  Their workers never wait for those commits; a hop whose group
-- failed is reported on d2 ("journal: insert failed") and goes on without
-- a row, as the synchronous insert always did: every envelope is handled
-- by d2 once and completes, and bus:wait returns.
T.test("full disk (tmpfs): hops from memory into a durable stage whose group failed are reported and go on", function()
  local mnt = T.tmpdir()
  if os.execute("mount -t tmpfs -o size=1m tmpfs " .. q(mnt) .. " 2>/dev/null") ~= true then
    print("  skipped: cannot mount a tmpfs here (not root?)")
    return
  end
  local ok, err = pcall(function()
    os.execute("dd if=/dev/zero of=" .. q(mnt .. "/filler") .. " bs=1k count=500 2>/dev/null")
    local k = T.uniq("hop")
    local bus = seda.bus{ data_dir = mnt .. "/data", workers = 2, sync = "full" }
    bus:stage{ name = "d2", durable = "at_least_once", capacity = 1000,
               handler = function(env)
                 seda.shared:incr(env.headers.k .. ":d2", 1)
                 return true
               end }
    bus:stage{ name = "m", concurrency = 64, capacity = 1000,
               handler = function(env) return env:forward("d2") end }
    local n = 300
    local pad = string.rep("z", 4000)
    for i = 1, n do
      assert(bus:publish("m", "e" .. i .. pad, { headers = { k = k } }))
    end
    T.ok(bus:wait(60), "bus:wait returns once every hop settled")
    T.eq(seda.shared:get(k .. ":d2") or 0, n, "every forwarded envelope reached d2 once")
    local st = bus:stats()
    T.eq(st.completed, n, "every itinerary completed")
    local failed = 0
    for _, e in ipairs(bus:errors("d2") or {}) do
      local msg = type(e) == "table" and (e.message or e.msg) or tostring(e)
      if tostring(msg):find("journal: insert failed", 1, true) then failed = failed + 1 end
    end
    T.ok(failed > 0, "d2 reports the hops whose commit failed")
    print(string.format("  %d hops, insert failures reported: %d distinct", n, failed))
    bus:shutdown(0)
    bus = nil
    collectgarbage()
  end)
  os.execute("umount " .. q(mnt) .. " 2>/dev/null")
  if not ok then error(err, 0) end
end)

T.done()
