-- The I/O loop of a bus is driven by its workers (no I/O thread): a
-- handler's seda.http, seda.sleep and seda.socket calls add no thread to
-- the process, and calls suspended on them complete while every worker
-- is busy in Lua, served between the workers' tasks.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local threads = T.threads

-- An upstream: another bus answering GET /x with "pong" (its listener has
-- no thread either).
local function upstream()
  local up = T.bus{ workers = 1 }
  up:stage{ name = "pong", handler = function(env) env.payload = "pong" end }
  return up:listen{ http = 0, routes = { ["/x"] = { "pong" } } }
end

T.test("a bus's first seda.http, seda.sleep and seda.socket add no thread", function()
  local p = T.uniq("nothr")
  local l = upstream()
  seda.shared:set(p .. ".url", "http://127.0.0.1:" .. l:port() .. "/x")
  seda.shared:set(p .. ".port", l:port())
  seda.shared:set("nothr.key", p)
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "warm", concurrency = 2, handler = function(env) end }
  bus:stage{ name = "io", concurrency = 20, handler = function(env)
    local key = seda.shared:get("nothr.key")
    seda.sleep(0.01)
    local r, err = seda.http.request{ url = seda.shared:get(key .. ".url"), timeout = 10 }
    if r and r.status == 200 and r.body == "pong" then
      seda.shared:incr(key .. ".ok", 1)
    else
      seda.shared:set(key .. ".err", tostring(err or (r and r.status)))
    end
    local s = seda.socket.tcp()
    s:settimeout(10)
    assert(s:connect("127.0.0.1", seda.shared:get(key .. ".port")))
    assert(s:send("GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
    local line = s:receive("*l")
    s:close()
    if line and line:match("^HTTP/1%.1 200") then seda.shared:incr(key .. ".sock", 1) end
  end }
  for i = 1, 4 do bus:publish("warm", i) end
  T.idle(bus, 10)
  local before = threads()
  for i = 1, 40 do T.eq(bus:publish("io", i), true, "publish") end
  T.idle(bus, 30)
  T.eq(seda.shared:get(p .. ".err"), nil, "no call failed")
  T.eq(seda.shared:get(p .. ".ok"), 40, "every seda.http call answered")
  T.eq(seda.shared:get(p .. ".sock"), 40, "every seda.socket exchange answered")
  T.eq(threads(), before, "no thread for the bus's I/O loop")
  T.accounting(bus)
  bus:shutdown(5)
end)

T.test("calls suspended on the network complete while both workers are busy in Lua", function()
  local p = T.uniq("busy")
  local N = 100
  local l = upstream()
  seda.shared:set(p .. ".url", "http://127.0.0.1:" .. l:port() .. "/x")
  seda.shared:set(p .. ".n", N)
  seda.shared:set("busy.key", p)
  local bus = T.bus{ workers = 2 }
  bus:stage{ name = "wait", concurrency = N, capacity = 1000, handler = function(env)
    local key = seda.shared:get("busy.key")
    seda.sleep(0.005 * (env.payload % 5))
    local r = seda.http.request{ url = seda.shared:get(key .. ".url"), timeout = 20 }
    if r and r.body == "pong" then seda.shared:incr(key .. ".done", 1) end
  end }
  -- Three spinners on two workers: each spins 5 ms in Lua and sends itself
  -- on until every waiting call has completed, so from the first publish
  -- to the last completion no worker is ever idle (three stages, so a
  -- spinner's stage always has another waiting behind it: its worker
  -- goes back to the pool between calls, where resumed calls go first).
  for k = 1, 3 do
    bus:stage{ name = "spin" .. k, handler = function(env)
      local key = seda.shared:get("busy.key")
      local n = seda.shared:get(key .. ".n")
      local d = seda.now() + 0.005
      while seda.now() < d do end
      seda.shared:incr(key .. ".spins", 1)
      if (seda.shared:get(key .. ".done") or 0) < n and
         seda.now() < seda.shared:get(key .. ".until") then
        assert(seda.publish(env.payload, env.payload))
      else
        seda.shared:incr(key .. ".stopped", 1)
      end
    end }
  end
  seda.shared:set(p .. ".until", seda.now() + 60)
  for k = 1, 3 do bus:publish("spin" .. k, "spin" .. k) end
  T.wait_until(function()
    return bus:stats("spin1").delivered + bus:stats("spin2").delivered > 4
  end, 10, "the workers spinning", bus)
  for i = 1, N do T.eq(bus:publish("wait", i), true, "publish wait") end
  T.wait_until(function() return seda.shared:get(p .. ".stopped") == 3 end, 90,
               "the spinners stop", bus)
  T.eq(seda.shared:get(p .. ".done"), N,
       "every suspended call completed while the spinners ran (they stop only then)")
  T.ok(seda.shared:get(p .. ".spins") > 6, "the workers spun meanwhile")
  T.idle(bus, 10)
  T.accounting(bus)
  bus:shutdown(5)
end)

T.done()
