-- tests/lua/harness.lua -- a tiny test harness for seda-lua scripts.
--
--   local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./")
--                    .. "harness.lua")
--   T.test("name", function() T.eq(1, 1) end)
--   T.done()        -- prints "N passed, M failed", exits 0 only if M == 0
--
-- Every wait has a deadline; a missed deadline fails the test, never hangs.
-- os.exit in T.done() skips seda-lua's graceful shutdown, so every test
-- shuts down its own buses (T.cleanup helps: buses registered with T.bus()
-- are shut down after the test whatever happened).

local seda = require "seda"

local T = { passed = 0, failed = 0, failures = {} }

-- Directory of this harness (ends with "/"), for locating sibling files.
T.dir = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./")

local function fmt(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "number" and math.type(v) == "float" then
    if v ~= v then return "nan" end
    if v == 0 and 1 / v < 0 then return "-0.0" end
    return string.format("%.17g(float)", v)
  end
  return tostring(v)
end
T.fmt = fmt

local function fail(msg, level)
  error(msg, (level or 1) + 1)
end
T.fail = fail

function T.ok(cond, msg)
  if not cond then fail("assertion failed: " .. (msg or "?"), 2) end
  return cond
end

-- Strict equality that also distinguishes integer/float and -0.0/0.0 and
-- treats nan == nan.
local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) == "number" then
    if math.type(a) ~= math.type(b) then return false end
    if a ~= a then return b ~= b end
    if a == 0 and b == 0 and math.type(a) == "float" then
      return (1 / a) == (1 / b)
    end
  end
  return a == b
end
T.same = same

function T.eq(a, b, msg)
  if not same(a, b) then
    fail(string.format("%s: expected %s, got %s", msg or "eq", fmt(b), fmt(a)), 2)
  end
end

function T.ne(a, b, msg)
  if same(a, b) then
    fail(string.format("%s: did not expect %s", msg or "ne", fmt(a)), 2)
  end
end

function T.le(a, b, msg)
  if not (a <= b) then
    fail(string.format("%s: expected %s <= %s", msg or "le", fmt(a), fmt(b)), 2)
  end
end

local function deep(a, b, path, seen)
  if type(a) ~= "table" or type(b) ~= "table" then
    if not same(a, b) then
      return string.format("%s: expected %s, got %s", path, fmt(b), fmt(a))
    end
    return nil
  end
  seen = seen or {}
  if seen[a] == b then return nil end
  seen[a] = b
  for k, v in pairs(b) do
    local d = deep(a[k], v, path .. "[" .. fmt(k) .. "]", seen)
    if d then return d end
  end
  for k in pairs(a) do
    if b[k] == nil then
      return string.format("%s[%s]: unexpected key", path, fmt(k))
    end
  end
  return nil
end

-- T.deep_eq(got, expected, msg)
function T.deep_eq(a, b, msg)
  local d = deep(a, b, "value")
  if d then fail((msg or "deep_eq") .. ": " .. d, 2) end
end

-- Assert that fn raises an error whose message contains every given plain
-- substring (case-insensitive). Returns the message.
function T.raises(fn, msg, ...)
  local ok, err = pcall(fn)
  if ok then fail((msg or "raises") .. ": expected an error, got none", 2) end
  err = tostring(err)
  for _, s in ipairs({ ... }) do
    if not err:lower():find(s:lower(), 1, true) then
      fail(string.format("%s: error %q does not mention %q", msg or "raises", err, s), 2)
    end
  end
  return err
end

-- Assert that a string contains a plain substring.
function T.contains(s, sub, msg)
  if type(s) ~= "string" or not s:find(sub, 1, true) then
    fail(string.format("%s: %s does not contain %q", msg or "contains", fmt(s), sub), 2)
  end
end

-- ---- buses created during a test are shut down after it ----

local live = {}

-- Gates: seda.shared keys a handler spins on (with its own deadline). A
-- test closes a gate with T.gate(key) and opens it with T.open(key); every
-- gate is opened again after the test so no handler stays held.
local gates = {}
function T.gate(key)
  seda.shared:set(key, false)
  gates[key] = true
  return key
end
function T.open(key)
  seda.shared:set(key, true)
end
function T.open_all()
  for k in pairs(gates) do pcall(seda.shared.set, seda.shared, k, true) end
end

-- T.bus(opts) -> seda.bus(opts), registered for shutdown after the test.
function T.bus(opts)
  local b = seda.bus(opts or {})
  live[#live + 1] = b
  return b
end

local function cleanup()
  for i = #live, 1, -1 do
    local b = live[i]
    live[i] = nil
    T.open_all()
    local ok, err = pcall(b.shutdown, b, 5)
    if not ok then
      io.stderr:write("harness: shutdown raised: ", tostring(err), "\n")
    elseif err ~= true then
      pcall(b.shutdown_now, b)
    end
  end
end

-- ---- waiting ----

-- Busy-wait (no sleep primitive in plain Lua) for s seconds.
function T.spin(s)
  local d = seda.now() + s
  while seda.now() < d do end
end

-- T.wait_until(pred, timeout_s, msg [, bus]): call pred until it returns a
-- truthy value (which is returned). Between calls, run bus:poll() on the
-- given bus (or on every bus created through T.bus) and spin briefly. On the
-- deadline, fail with msg.
function T.wait_until(pred, timeout_s, msg, bus)
  local deadline = seda.now() + (timeout_s or 5)
  while true do
    local v = pred()
    if v then return v end
    if seda.now() > deadline then
      fail(string.format("timed out after %.1fs waiting for: %s",
                         timeout_s or 5, msg or "condition"), 2)
    end
    if bus then bus:poll() else for _, b in ipairs(live) do pcall(b.poll, b) end end
    T.spin(0.001)
  end
end

-- Wait until the bus is idle, failing after timeout_s.
function T.idle(bus, timeout_s, msg)
  local ok = bus:wait(timeout_s or 10)
  if ok ~= true then
    fail("bus not idle after " .. (timeout_s or 10) .. "s: " .. (msg or ""), 2)
  end
end

-- The accounting identity of SPEC §3 at a quiet moment.
function T.accounting(bus, msg)
  local s = bus:stats()
  local rhs = s.completed + s.dead_lettered + s.dropped + s.in_system
  if s.accepted ~= rhs then
    fail(string.format("%s: accepted %d ~= completed %d + dead_lettered %d + dropped %d + in_system %d",
                       msg or "accounting", s.accepted, s.completed, s.dead_lettered,
                       s.dropped, s.in_system), 2)
  end
  return s
end

-- Unique names so tests do not collide in seda.shared.
local uniq = 0
function T.uniq(prefix)
  uniq = uniq + 1
  return (prefix or "k") .. "_" .. uniq
end

-- Temporary directory (mktemp -d under $TMPDIR or /tmp), removed with
-- everything in it when the script ends (T.done).
local tmpdirs = {}
function T.tmpdir()
  local p = io.popen("mktemp -d \"${TMPDIR:-/tmp}/seda-test.XXXXXX\"")
  local base = p:read("l")
  p:close()
  assert(base and #base > 0, "mktemp failed")
  tmpdirs[#tmpdirs + 1] = base
  return base
end

local function remove_tmpdirs()
  for _, d in ipairs(tmpdirs) do
    if d:match("/seda%-test%.[%w]+$") then os.execute("rm -rf '" .. d .. "'") end
  end
  tmpdirs = {}
end

-- Run a shell command: its output without trailing space, or nil when
-- it failed.
function T.sh(cmd)
  local p = io.popen(cmd)
  local out = p:read("a")
  local ok = p:close()
  return ok and (out:gsub("%s+$", "")) or nil
end

-- tests/remote/natsd.sh WHAT DIR: "start" a nats-server with JetStream
-- (its store in DIR) and give its url, or "stop" it.
function T.natsd(what, dir)
  return T.sh("sh " .. T.dir .. "../remote/natsd.sh " .. what .. " " .. dir)
end

function T.write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

-- How many threads this process has now (/proc/self/task).
function T.threads()
  local n = 0
  for _ in io.popen("ls /proc/" .. io.open("/proc/self/stat"):read("n") .. "/task"):lines() do
    n = n + 1
  end
  return n
end

-- ---- a raw HTTP/1.1 client (LuaSocket, loaded on first use) ----

-- A TCP connection to 127.0.0.1:port whose reads and writes give up
-- after timeout_s seconds (10 unless given).
function T.http_connect(port, timeout_s)
  local socket = require "socket"
  local c = assert(socket.tcp())
  c:settimeout(timeout_s or 10)
  assert(c:connect("127.0.0.1", port))
  return c
end

-- Read one response from c: status, headers (lower-case names), body; or
-- nil, err when the connection ends first.
function T.http_read(c)
  local line, err = c:receive("*l")
  if not line then return nil, err end
  local status = tonumber(line:match("^HTTP/1%.%d (%d%d%d)"))
  if not status then return nil, "bad status line: " .. line end
  local h = {}
  while true do
    local l, e = c:receive("*l")
    if not l then return nil, e end
    if l == "" then break end
    local k, v = l:match("^([^:]+):%s*(.*)$")
    if k then h[k:lower()] = v end
  end
  local body = ""
  local n = tonumber(h["content-length"] or "0")
  if n > 0 then
    local b, e = c:receive(n)
    if not b then return nil, e end
    body = b
  end
  return status, h, body
end

-- ---- running ----

function T.test(name, fn)
  local t0 = seda.now()
  local ok, err = xpcall(fn, debug.traceback)
  local cok, cerr = pcall(cleanup)
  if ok and not cok then ok, err = false, "cleanup: " .. tostring(cerr) end
  if ok then
    T.passed = T.passed + 1
    print(string.format("ok %s (%.2fs)", name, seda.now() - t0))
  else
    T.failed = T.failed + 1
    T.failures[#T.failures + 1] = name
    print(string.format("FAIL %s: %s", name, tostring(err)))
  end
  io.stdout:flush()
end

function T.done()
  pcall(cleanup)
  remove_tmpdirs()
  print(string.format("%d passed, %d failed", T.passed, T.failed))
  io.stdout:flush()
  io.stderr:flush()
  os.exit(T.failed == 0 and 0 or 1)
end

return T
