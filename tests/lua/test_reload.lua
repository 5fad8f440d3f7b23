-- C11: hot reload without loss.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

-- A handler file that records, per payload, how many times it was handled
-- and by which code version; also counts calls per module instance.
local function handler_src(version)
  return string.format([[
local VERSION = %d
local calls = 0          -- module-level: per worker, reset on reload
return function(env)
  calls = calls + 1
  local p = env.payload
  seda.shared:incr("rl.n." .. p, 1)
  seda.shared:set("rl.ver." .. p, VERSION)
  seda.shared:set("rl.calls." .. seda.worker, calls)
  seda.shared:set("rl.id." .. env.id, (seda.shared:get("rl.id." .. env.id) or 0) + 1)
end
]], version)
end

T.test("C11 reload while envelopes flow: none lost or doubled, new code wins", function()
  local dir = T.tmpdir()
  local file = T.write(dir .. "/h.lua", handler_src(1))
  local bus = T.bus{ workers = 3 }
  bus:stage{ name = "s", concurrency = 3, capacity = 100000, handler = file }
  local v0 = bus:stats("s").version
  local N, RELOAD_AT = 3000, 1000
  local first_after
  local done = 0
  local ids = {}
  for i = 1, N do
    T.eq(bus:publish("s", i, { on_complete = function(env)
      done = done + 1
      if ids[env.id] then error("completed twice " .. env.id) end
      ids[env.id] = true
    end }), true, "publish " .. i)
    if i == RELOAD_AT then
      T.write(file, handler_src(2))
      local ok, err = bus:reload("s")
      T.eq(ok, true, "reload: " .. tostring(err))
      first_after = i + 1
    end
    if i % 100 == 0 then bus:poll() end
  end
  T.idle(bus, 20)
  T.eq(done, N, "every envelope completed")
  local lost, twice, old_after = {}, {}, {}
  for i = 1, N do
    local n = seda.shared:get("rl.n." .. i)
    if n == nil then lost[#lost + 1] = i elseif n > 1 then twice[#twice + 1] = i end
    if i >= first_after and seda.shared:get("rl.ver." .. i) ~= 2 then old_after[#old_after + 1] = i end
  end
  T.eq(#lost, 0, "lost: " .. table.concat(lost, ",", 1, math.min(#lost, 10)))
  T.eq(#twice, 0, "handled twice: " .. table.concat(twice, ",", 1, math.min(#twice, 10)))
  T.eq(#old_after, 0, "published after reload but old code: "
       .. table.concat(old_after, ",", 1, math.min(#old_after, 10)))
  T.eq(seda.shared:get("rl.ver." .. N), 2, "last envelope saw the new code")
  T.ok(bus:stats("s").version > v0, "stats version increased")
  T.eq(bus:stats("s").delivered, N, "delivered")
  T.accounting(bus)
  bus:shutdown(5)
  os.remove(file)
  os.remove(dir)
end)

T.test("C11 a reload with a syntax error keeps the old code and reports file:line", function()
  local dir = T.tmpdir()
  local file = T.write(dir .. "/bad.lua", handler_src(3))
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 2, handler = file }
  bus:publish("s", "a1")
  T.idle(bus, 10)
  T.eq(seda.shared:get("rl.ver.a1"), 3, "v3 running")
  local v = bus:stats("s").version
  T.write(file, "local x = 1\nreturn function(env)\n  if then end\nend\n")
  local ok, err = bus:reload("s")
  T.eq(ok, false, "reload refused")
  T.eq(type(err), "string", "error message")
  T.contains(err, "bad.lua:3", "file:line in the error")
  T.eq(bus:stats("s").version, v, "version unchanged by a failed reload")
  for i = 1, 20 do bus:publish("s", "a2_" .. i) end
  T.idle(bus, 10)
  for i = 1, 20 do T.eq(seda.shared:get("rl.ver.a2_" .. i), 3, "old code still runs " .. i) end
  -- a top-level runtime error also leaves the old code
  T.write(file, "error('top level boom')\n")
  ok, err = bus:reload("s")
  T.eq(ok, false, "top-level error refused")
  T.contains(err, "top level boom", "message")
  -- a file that returns no handler
  T.write(file, "return 42\n")
  ok, err = bus:reload("s")
  T.eq(ok, false, "non-handler return refused")
  bus:publish("s", "a3")
  T.idle(bus, 10)
  T.eq(seda.shared:get("rl.ver.a3"), 3, "old code still runs after failed reloads")
  -- and a good reload after bad ones works
  T.write(file, handler_src(4))
  T.eq(bus:reload("s"), true, "good reload")
  bus:publish("s", "a4")
  T.idle(bus, 10)
  T.eq(seda.shared:get("rl.ver.a4"), 4, "new code")
  T.ok(bus:stats("s").version > v, "version increased")
  bus:shutdown(5)
  os.remove(file)
  os.remove(dir)
end)

T.test("C11 module-level locals reset on reload; reload(nil) reloads every stage", function()
  local dir = T.tmpdir()
  local f1 = T.write(dir .. "/one.lua", handler_src(5))
  local f2 = T.write(dir .. "/two.lua", handler_src(5))
  local bus = T.bus{ workers = 1 }
  bus:stage{ name = "one", handler = f1 }
  bus:stage{ name = "two", handler = f2 }
  for i = 1, 5 do bus:publish("one", "m1_" .. i) end
  T.idle(bus, 10)
  T.eq(seda.shared:get("rl.calls.0"), 5, "module local counted 5 calls")
  T.write(f1, handler_src(6))
  T.write(f2, handler_src(6))
  local ok, err = bus:reload()
  T.eq(ok, true, "reload all: " .. tostring(err))
  bus:publish("one", "m2")
  bus:publish("two", "m3")
  T.idle(bus, 10)
  T.eq(seda.shared:get("rl.ver.m2"), 6, "stage one reloaded")
  T.eq(seda.shared:get("rl.ver.m3"), 6, "stage two reloaded")
  bus:publish("one", "m4")
  T.idle(bus, 10)
  T.eq(seda.shared:get("rl.calls.0"), 2, "module local reset by reload (2 calls since)")
  local ok, err = bus:reload("nope")
  T.eq(ok, false, "reload of an unknown stage fails")
  T.eq(err, "no_such_stage", "with the reason publish gives")
  bus:shutdown(5)
  os.remove(f1)
  os.remove(f2)
  os.remove(dir)
end)

T.test("C11 init runs again on reload", function()
  local dir = T.tmpdir()
  local src = [[
local state
return {
  init = function() state = "%s"; seda.shared:incr("rl.init.%s", 1) end,
  handle = function(env) seda.shared:set("rl.state." .. env.payload, state) end,
}
]]
  local f = T.write(dir .. "/init.lua", src:format("A", "A"))
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = f }
  bus:publish("s", "i1")
  T.idle(bus, 10)
  T.eq(seda.shared:get("rl.state.i1"), "A", "init ran before handle")
  T.write(f, src:format("B", "B"))
  T.eq(bus:reload("s"), true, "reload")
  bus:publish("s", "i2")
  T.idle(bus, 10)
  T.eq(seda.shared:get("rl.state.i2"), "B", "new init ran")
  T.ok((seda.shared:get("rl.init.B") or 0) >= 1, "init B counted")
  bus:shutdown(5)
  os.remove(f)
  os.remove(dir)
end)

T.test("C11 reload runs the current code of modules the handler requires", function()
  local dir = T.tmpdir()
  local mod = T.write(dir .. "/rlmod_x.lua", 'return { tag = "m1" }\n')
  local file = T.write(dir .. "/h.lua", [[
local m = require "rlmod_x"
return function(env) seda.shared:set("rlm.tag." .. env.payload, m.tag) end
]])
  local saved = package.path
  package.path = dir .. "/?.lua;" .. package.path  -- worker states copy it
  local bus = T.bus{ workers = 2 }
  package.path = saved
  bus:stage{ name = "s", concurrency = 2, handler = file }
  for i = 1, 20 do bus:publish("s", "a" .. i) end
  T.idle(bus, 10)
  T.eq(seda.shared:get("rlm.tag.a20"), "m1", "first module")
  T.write(mod, 'return { tag = "m2" }\n')
  T.eq(bus:reload("s"), true, "reload")
  for i = 1, 20 do bus:publish("s", "b" .. i) end
  T.idle(bus, 10)
  for i = 1, 20 do
    T.eq(seda.shared:get("rlm.tag.b" .. i), "m2", "after reload, every worker has the new module")
  end
  bus:shutdown(5)
  os.remove(mod)
  os.remove(file)
  os.remove(dir)
end)

-- ---- a reload is taken by every worker or by none ----

-- A handler file whose handle records its tag, and whose init raises
-- `fail_when` (a Lua expression of seda.worker) is true.
local function init_src(tag, fail_when)
  return string.format([[
return {
  init = function()
    if %s then error("init refuses worker " .. seda.worker) end
  end,
  handle = function(env) seda.shared:set("ra." .. env.payload, %q) end,
}
]], fail_when, tag)
end

T.test("C11 a reload whose init fails on every worker: checks run the top level only, the workers go back to the old code", function()
  local dir = T.tmpdir()
  local file = T.write(dir .. "/h.lua", init_src("v1", "false"))
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 2, handler = file }
  for i = 1, 10 do assert(bus:publish("s", "w" .. i)) end
  T.idle(bus, 10)
  T.write(file, init_src("v2", "seda.worker >= 0"))
  -- init runs only in states that will handle envelopes: the check
  -- passes, the workers refuse it when they load it.
  T.eq(bus:reload("s"), true, "the top level checks out")
  for i = 1, 20 do assert(bus:publish("s", "a" .. i)) end
  T.idle(bus, 10)
  local st = bus:stats("s")
  T.eq(st.version, 1, "back to version 1")
  T.contains(st.last_error, "init refuses worker", "last_error")
  for i = 1, 20 do T.eq(seda.shared:get("ra.a" .. i), "v1", "old code everywhere") end
  bus:shutdown(5)
end)

T.test("C11 a syntax or top-level error still fails the reload at once, naming it", function()
  local dir = T.tmpdir()
  local file = T.write(dir .. "/h.lua", init_src("v1", "false"))
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 2, handler = file }
  T.write(file, "error('top level refuses worker ' .. seda.worker)\nreturn function() end")
  local ok, err = bus:reload("s")
  T.eq(ok, false, "refused")
  T.contains(err, "stage 's'", "names the stage")
  T.contains(err, "top level refuses worker", "the error")
  T.eq(bus:stats("s").version, 1, "version unchanged")
  bus:shutdown(5)
end)

T.test("C11 a declaration whose init fails on a worker: its envelopes nack, naming the error", function()
  local dir = T.tmpdir()
  local file = T.write(dir .. "/h.lua", init_src("v1", "seda.worker >= 0"))
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", handler = file }
  assert(bus:publish("s", "x"))
  T.idle(bus, 10)
  T.eq(bus:stats("s").dead_lettered, 1, "not handled")
  local st = bus:stats("s")
  T.ok(st.last_error == nil or st.last_error:find("init refuses worker", 1, true),
       "the error is reported")
  bus:shutdown(5)
end)

T.test("C11 a worker that cannot load code that passed validation takes every worker back", function()
  local dir = T.tmpdir()
  local file = T.write(dir .. "/h.lua", init_src("v1", "false"))
  local arm = T.uniq("ra_arm")
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "s", concurrency = 2, handler = file }
  -- Warm both workers up with v1.
  for i = 1, 50 do assert(bus:publish("s", "w" .. i)) end
  T.idle(bus, 10)
  -- v2 passes validation (the arm is off) but fails in the workers.
  T.write(file, init_src("v2", string.format("seda.shared:get(%q)", arm)))
  T.eq(bus:reload("s"), true, "validated")
  T.eq(bus:stats("s").version, 2, "version 2 for now")
  seda.shared:set(arm, true)
  for i = 1, 200 do assert(bus:publish("s", "b" .. i)) end
  T.idle(bus, 10)
  local st = bus:stats("s")
  T.eq(st.version, 1, "back to version 1")
  T.contains(st.last_error, "could not load version 2", "last_error")
  T.contains(st.last_error, "every worker went back to version 1", "last_error says so")
  for i = 1, 200 do
    T.eq(seda.shared:get("ra.b" .. i), "v1", "handled by v1: b" .. i)
  end
  T.eq(st.delivered, 250, "nothing lost")
  -- The fixed code reloads as usual.
  seda.shared:set(arm, false)
  T.write(file, init_src("v3", "false"))
  T.eq(bus:reload("s"), true, "reload after the roll back")
  assert(bus:publish("s", "c1"))
  T.idle(bus, 10)
  T.eq(seda.shared:get("ra.c1"), "v3", "new code")
  T.eq(bus:stats("s").version, 3, "a version number is never reused: the rolled-back 2 stays taken")
  bus:shutdown(5)
end)

T.done()
