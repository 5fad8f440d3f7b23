-- lua/seda/test.lua -- seda.test: unit-testing a handler without a bus,
-- and running a bus to idle in a test.
--
--   local T = require "seda.test"
--   local h = T.handler("handlers/parse.lua")   -- a file, a function, or
--                                               -- { handle = fn, init = fn }
--   local r = T.call(h, "order id=1 user=bob", { headers = { k = "v" } })
--   assert(r.ok and r.payload.kind == "order" and r.headers.kind == "order")
--
-- Loadable as `require "seda.test"` from seda-lua (embedded) and from a
-- stock lua5.4 that finds seda.so (installed by `make install` or
-- `luarocks make` beside it).
--
-- DESIGN
--   Written in Lua: what must match the runtime bit for bit is the payload
--   codec, and that is the binding's own (seda.encode / seda.decode, the C
--   code a worker uses).  The rest mirrors src/lua/lenv.c and lbatch.c:
--
--   * the payload is encoded when "published" (a payload that cannot be
--     encoded is refused there, as bus:publish refuses it) and decoded on
--     first read; a table read is one table for the whole call;
--   * env.payload = <function|userdata|thread> raises at once; what a
--     table holds is checked when the call acks and the payload is encoded
--     again -- a failure then nacks the attempt ("handler result: ..."), as
--     in a worker; the result's payload is what the next hop would decode;
--   * headers: a table of strings; numbers become strings; other values
--     and NUL bytes nack the attempt when it acks;
--   * env:forward(s1, s2, ...) inserts hops at the front of the slip;
--   * a handler nacks by returning false or raising; a nack undoes the
--     attempt's changes (payload, headers, forwarded hops);
--   * T.deliver retries a nacked envelope up to max_attempts, attempts
--     counting from 1, as a stage does, and says when it would be
--     dead-lettered;
--   * `seda` is a global while handler code runs, the table handlers see:
--     seda.shared (the real, process-wide one), seda.now, seda.log,
--     seda.worker (0), seda.publish (recorded in the result, not sent),
--     seda.stats (opts.stats, or an empty table); anything else falls
--     through to the module.  It is set as a global when this module is
--     loaded (unless a global `seda` exists), so `dofile` of a handler file
--     works too.
--
--   * env:respond(status, body, headers) as lenv.c has it: the payload
--     becomes { status =, body =, headers = } and the slip ends, undone by
--     a nack; the result's `response` is that answer (nil without one);
--   * T.stub_http(routes | fn) answers seda.http.request inside T.call
--     and T.deliver from a table of canned answers or a function, checking
--     the request's fields as lio.c does, and records every request.
--
--   What it does not model: pub/sub stages with several consumers,
--   handler_timeout, typed stages' checks, suspended calls (seda.sleep
--   and an unstubbed seda.http or seda.socket block the test instead of
--   yielding), and the listener around env:respond (status line, JSON
--   encoding of a table body, the request's timeout).
local seda = require "seda"

local T = {}

-- ---- the handler-side `seda` table ------------------------------------

local current                -- the call running now (its record), or nil
local stub_request           -- seda.http.request under a stub (below)

T.published = {}             -- seda.publish outside any T.call

local hseda = setmetatable({
  worker = 0,
  shared = seda.shared,
  now = seda.now,
  log = seda.log,
}, { __index = seda })

function hseda.publish(to, payload, opts)
  if type(to) ~= "string" then
    error("bad argument #1 to 'publish' (string expected, got " ..
          type(to) .. ")", 2)
  end
  local ok, err = pcall(seda.encode, payload)
  if not ok then
    return false, tostring(err):gsub("^[^:]*:%d+: ", "")
  end
  local list = current and current.published or T.published
  list[#list + 1] = { to = to, payload = seda.decode(err), opts = opts }
  return true
end

function hseda.stats(name)
  local s = current and current.stats or { stages = {} }
  if name then return s.stages and s.stages[name] or nil end
  return s
end

T.seda = hseda
if rawget(_G, "seda") == nil then
  _G.seda = hseda
end

-- ---- stubbing seda.http.request ---------------------------------------

local http_stub              -- the stub T.stub_http installed, or nil

local req_fields = { method = true, url = true, headers = true, body = true,
                     timeout = true, max_size = true, follow = true }
local token = "^[!#$%%&'*+%-.^_`|~%w]+$"

-- The request's options checked as lio.c checks them; raises naming the
-- field.  Returns the request as the stub sees it (a copy).
local function check_request(o)
  if type(o) ~= "table" then
    error("bad argument #1 to 'request' (table expected, got " .. type(o) ..
          ")", 3)
  end
  for k in pairs(o) do
    if not req_fields[k] then
      error("seda.http.request: unknown field " ..
            (type(k) == "string" and k or type(k)), 3)
    end
  end
  local method = o.method
  if method == nil then method = "GET" end
  if type(method) ~= "string" or not method:match(token) then
    error('seda.http.request: field method must be a method name such ' ..
          'as "GET"', 3)
  end
  if type(o.url) ~= "string" then
    error("seda.http.request: field url must be a string", 3)
  end
  if o.url:find("[\r\n\0]") then
    error("seda.http.request: field url has a control character", 3)
  end
  local headers = {}
  if o.headers ~= nil then
    if type(o.headers) ~= "table" then
      error("seda.http.request: field headers must be a table of " ..
            "name = value", 3)
    end
    for k, v in pairs(o.headers) do
      if type(k) ~= "string" or not k:match(token) then
        error("seda.http.request: field headers has a bad name", 3)
      end
      if type(v) ~= "string" and type(v) ~= "number" then
        error(("seda.http.request: field headers.%s must be a string")
              :format(k), 3)
      end
      v = tostring(v)
      if v:find("[\r\n\0]") then
        error(("seda.http.request: field headers.%s has a control " ..
               "character"):format(k), 3)
      end
      headers[k] = v
    end
  end
  if o.body ~= nil and type(o.body) ~= "string" then
    error("seda.http.request: field body must be a string", 3)
  end
  if o.timeout ~= nil and
     (type(o.timeout) ~= "number" or not (o.timeout > 0)) then
    error("seda.http.request: field timeout must be a positive number " ..
          "of seconds", 3)
  end
  if o.max_size ~= nil and
     (math.type(o.max_size) ~= "integer" or o.max_size <= 0) then
    error("seda.http.request: field max_size must be a positive integer " ..
          "(bytes)", 3)
  end
  if o.follow ~= nil and type(o.follow) ~= "boolean" then
    error("seda.http.request: field follow must be a boolean", 3)
  end
  return { method = method, url = o.url, headers = headers, body = o.body,
           timeout = o.timeout or 10, max_size = o.max_size,
           follow = o.follow or false }
end

-- What spec answers req with: a response table, or nil and an error.
local function stub_answer(spec, req)
  local v
  if type(spec) == "function" then
    v = spec
  else
    local base = req.url:match("^[^?#]*")
    for _, key in ipairs{ req.method .. " " .. req.url, req.url,
                          req.method .. " " .. base, base } do
      v = spec[key]
      if v ~= nil then break end
    end
    if v == nil then
      return nil, ("other: %s %s (no answer for it in T.stub_http)")
                  :format(req.method, req.url)
    end
  end
  local err
  if type(v) == "function" then
    v, err = v(req)
    if v == nil then
      return nil, err ~= nil and tostring(err) or
             ("other: %s %s"):format(req.method, req.url)
    end
  end
  if type(v) == "string" then return { status = 200, headers = {}, body = v } end
  if type(v) ~= "table" then
    error(("T.stub_http: the answer to %s %s is a %s (a string, a table " ..
           "{ status =, headers =, body = } or nil, err)")
          :format(req.method, req.url, type(v)), 0)
  end
  local status = v.status == nil and 200 or math.tointeger(v.status)
  if not status or status < 100 or status > 999 then
    error(("T.stub_http: the answer to %s %s has status %s (an integer " ..
           "from 100 to 999)"):format(req.method, req.url,
           tostring(v.status)), 0)
  end
  local headers = {}
  for k, hv in pairs(v.headers or {}) do
    headers[tostring(k):lower()] = tostring(hv)
  end
  local body = v.body == nil and "" or v.body
  if type(body) ~= "string" then
    error(("T.stub_http: the answer to %s %s has a %s body (a string)")
          :format(req.method, req.url, type(body)), 0)
  end
  if req.max_size and #body > req.max_size then
    return nil, ("too_large: %s %s (limit %d bytes)")
                :format(req.method, req.url, req.max_size)
  end
  return { status = status, headers = headers, body = body }
end

-- seda.http.request inside a T.call with a stub: checked, recorded in the
-- call's result (and the stub's list), answered from spec.
stub_request = function(spec, rec, o)
  local req = check_request(o)
  rec.requests[#rec.requests + 1] = req
  if http_stub and spec == http_stub.spec then
    http_stub.requests[#http_stub.requests + 1] = req
  end
  return stub_answer(spec, req)
end

local function check_spec(spec, level)
  if type(spec) == "function" then return end
  if type(spec) ~= "table" then
    error("T.stub_http: give a table of answers by \"METHOD URL\" or " ..
          "URL, or a function(request) (got " .. type(spec) .. ")", level)
  end
  for k, v in pairs(spec) do
    if type(k) ~= "string" then
      error("T.stub_http: a key is a " .. type(k) ..
            " (\"METHOD URL\" or a URL)", level)
    end
    local t = type(v)
    if t ~= "string" and t ~= "table" and t ~= "function" then
      error(("T.stub_http: the answer for '%s' is a %s (a string, a " ..
             "table or a function)"):format(k, t), level)
    end
  end
end

-- T.stub_http(spec): seda.http.request inside T.call and T.deliver is
-- answered from spec until T.stub_http(nil) or stub:restore().  spec: a
-- table keyed by "METHOD URL" or URL (the query string may be left out)
-- whose values are a body string (status 200), a table { status =,
-- headers =, body = } or a function(request) returning either or nil,
-- err; or one such function for every request.  Returns the stub: its
-- requests (every request it saw, checked and defaulted) and restore().
function T.stub_http(spec)
  if spec == nil then
    http_stub = nil
    return nil
  end
  check_spec(spec, 2)
  local stub = { spec = spec, requests = {} }
  function stub.restore()
    if http_stub == stub then http_stub = nil end
  end
  http_stub = stub
  return stub
end

-- ---- loading a handler ------------------------------------------------

-- T.handler(h): a handler as a stage would load it: a path (the file is
-- run with `seda` as a global, its init(0) called once), a function, or a
-- table with handle (and init).  Returns the handle function.
function T.handler(h)
  if type(h) == "string" then
    local chunk, err = loadfile(h)
    if not chunk then error(err, 2) end
    h = chunk()
  end
  if type(h) == "table" then
    if type(h.handle) ~= "function" then
      error("the handler table has no handle function", 2)
    end
    if h.init ~= nil then
      if type(h.init) ~= "function" then
        error("init must be a function (got " .. type(h.init) .. ")", 2)
      end
      h.init(0)
    end
    return h.handle
  end
  if type(h) ~= "function" then
    error("a handler is a path, a function or a table with handle " ..
          "(got " .. type(h) .. ")", 2)
  end
  return h
end

-- ---- the envelope -----------------------------------------------------

local ENV = {}               -- the state of each live env, by env
local valid_name = "^[A-Za-z0-9_.:%-]+$"

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

local function live(env)
  local st = ENV[env]
  if not st then error("envelope used outside its handler", 3) end
  return st
end

local function forward(env, ...)
  local st = live(env)
  local n = select("#", ...)
  if n > 64 then error("forward: at most 64 hops at once", 2) end
  local hops = {}
  for i = 1, n do
    local s = select(i, ...)
    if type(s) ~= "string" and type(s) ~= "number" then
      error(("bad argument #%d to 'forward' (string expected, got %s)")
            :format(i, type(s)), 2)
    end
    s = tostring(s)
    if #s > 64 or not s:match(valid_name) then
      error(("forward: invalid stage name '%s'"):format(s), 2)
    end
    hops[i] = s
  end
  for i = n, 1, -1 do table.insert(st.slip, 1, hops[i]) end
  return true
end

-- env:respond(status, body, headers): the payload becomes the answer and
-- the slip ends here (lenv.c's env_respond, the same argument checks).
local function respond(env, status, body, headers)
  local st = live(env)
  local code = math.tointeger(type(status) == "string" and tonumber(status)
                              or status)
  if code == nil then
    error("bad argument #1 to 'respond' (number expected, got " ..
          (type(status) == "number" and "float" or type(status)) .. ")", 2)
  end
  if code < 200 or code > 599 then
    error(("respond: status must be from 200 to 599 (got %d)"):format(code),
          2)
  end
  local bt = type(body)
  if bt ~= "nil" and bt ~= "string" and bt ~= "table" and bt ~= "number" then
    error("bad argument #2 to 'respond' (string or table expected, got " ..
          bt .. ")", 2)
  end
  if headers ~= nil and type(headers) ~= "table" then
    error("bad argument #3 to 'respond' (table expected, got " ..
          type(headers) .. ")", 2)
  end
  st.payload = { status = code, body = body, headers = headers }
  st.decoded, st.payload_set, st.responded = true, true, true
  st.slip = {}
  return true
end

local env_mt = { __name = "envelope", __metatable = "envelope" }

function env_mt.__index(env, k)
  local st = live(env)
  if type(k) ~= "string" then
    error("bad argument #2 to 'index' (string expected, got " ..
          type(k) .. ")", 2)
  end
  if k == "payload" then
    if st.decoded then return st.payload end
    local v = seda.decode(st.bytes)
    if type(v) == "table" then st.payload, st.decoded = v, true end
    return v
  elseif k == "headers" then
    if not st.headers then st.headers = copy(st.orig_headers) end
    return st.headers
  elseif k == "slip" then
    return copy(st.slip)
  elseif k == "forward" then
    return forward
  elseif k == "respond" then
    return respond
  elseif k == "id" or k == "to" or k == "sender" or k == "attempts" or
         k == "published_at" then
    return st[k]
  end
  return nil
end

function env_mt.__newindex(env, k, v)
  local st = live(env)
  if k == "payload" then
    local t = type(v)
    if t == "function" or t == "thread" or t == "userdata" then
      error("payload: cannot encode a " .. t, 2)
    end
    st.payload, st.decoded, st.payload_set = v, true, true
    return
  end
  if k == "headers" then
    if type(v) ~= "table" then
      error("bad argument #3 to 'newindex' (table expected, got " ..
            type(v) .. ")", 2)
    end
    st.headers = v
    return
  end
  error(("envelope field '%s' cannot be set"):format(tostring(k)), 2)
end

function env_mt.__tostring(env)
  local st = ENV[env]
  if not st then return "envelope (finished)" end
  return ("envelope %s at %s"):format(st.id, st.to)
end

-- The headers as they travel on, or nil and why not.
local function check_headers(h)
  local out = {}
  for k, v in pairs(h) do
    if type(k) ~= "string" then return nil, "headers: keys must be strings" end
    if k:find("\0", 1, true) then
      return nil, "headers: a key contains a NUL byte"
    end
    local t = type(v)
    if t ~= "string" and t ~= "number" then
      return nil, ("headers.%s: expected a string, got %s"):format(k, t)
    end
    v = tostring(v)
    if v:find("\0", 1, true) then
      return nil, ("headers.%s: contains a NUL byte"):format(k)
    end
    out[k] = v
  end
  return out
end

-- The payload as it travels on (encoded again), or nil and why not.
local function encode_payload(st, max_payload)
  local ok, bytes = pcall(seda.encode, st.payload)
  if not ok then
    return nil, (tostring(bytes):gsub("^[^:]*:%d+: ", ""))
  end
  local len = type(st.payload) == "string" and #st.payload or #bytes
  if max_payload and len > max_payload then
    return nil, ("too_large: the payload is %d bytes, over max_payload")
                :format(len)
  end
  return bytes
end

local ids = 0

-- The envelope as published: its bytes and fields, or raises (the test's
-- own mistake, as bus:publish would refuse it).
local function publish_state(payload, opts)
  local ok, bytes = pcall(seda.encode, payload)
  if not ok then error(bytes, 3) end
  ids = ids + 1
  local headers = {}
  for k, v in pairs(opts.headers or {}) do headers[k] = tostring(v) end
  return {
    bytes = bytes,
    orig_headers = headers,
    slip = copy(opts.slip or {}),
    id = opts.id or ("test-" .. ids),
    to = opts.to or "test",
    sender = opts.sender,
    attempts = opts.attempts or 1,
    published_at = seda.now(),
  }
end

-- One attempt on state st.  Returns the result record.
local function attempt(fn, st, opts)
  local env = setmetatable({}, env_mt)
  ENV[env] = st
  local rec = { published = {}, stats = opts.stats, attempts = st.attempts,
                requests = {} }
  local outer = current
  current = rec
  local saved_slip = copy(st.slip)
  st.responded = false
  local spec = opts.http
  if spec == nil and http_stub then spec = http_stub.spec end
  local real_request
  if spec ~= nil then
    real_request = seda.http.request
    seda.http.request = function(o)
      return stub_request(spec, rec, o)
    end
  end
  local ok, res = xpcall(fn, debug.traceback, env)
  if real_request then seda.http.request = real_request end
  current = outer
  ENV[env] = nil
  local acked = ok and res ~= false
  local why = not ok and res or (not acked and "returned false") or nil
  local bytes, headers = st.bytes, st.orig_headers
  if acked and st.headers then
    local h, err = check_headers(st.headers)
    if h then headers = h else acked, why = false, "handler result: " .. err end
  end
  if acked and st.decoded then
    local b, err = encode_payload(st, opts.max_payload)
    if b then bytes = b else acked, why = false, "handler result: " .. err end
  end
  rec.env = env
  rec.ok = acked
  rec.nacked = not acked
  rec.err = (not ok) and res or (not acked and why ~= "returned false" and why)
             or nil
  rec.returned = ok and res or nil
  if acked then
    st.bytes, st.orig_headers = bytes, headers
  else
    st.slip = saved_slip               -- forwarded hops undone too; what
                                       -- it published stays published
  end
  -- A fresh view for the next attempt or hop.
  st.payload, st.decoded, st.payload_set, st.headers = nil, false, false, nil
  rec.payload = seda.decode(st.bytes)
  rec.headers = copy(st.orig_headers)
  rec.slip = copy(st.slip)
  rec.next = rec.ok and rec.slip[1] or nil
  rec.response = (rec.ok and st.responded) and rec.payload or nil
  st.responded = false
  return rec
end

-- T.call(h, payload, opts): one delivery attempt of an envelope carrying
-- payload to handler h (as T.handler takes it).  opts: headers, slip,
-- sender, to (the stage name, "test"), id, attempts (1), max_payload,
-- stats (what seda.stats() returns inside).  Returns a table:
--   ok         true when the handler acked (false: nacked)
--   nacked     not ok
--   err        the error with its traceback, or why the result could not
--              travel on ("handler result: payload.f: cannot encode a
--              function"); nil after an ack or a plain `return false`
--   payload    the payload as the next hop (or a retry) would see it:
--              decoded again from its encoding; after a nack, the one
--              delivered
--   headers    likewise
--   slip       the remaining hops (after env:forward), next = slip[1]
--   published  { {to=, payload=, opts=}, ... } from seda.publish inside
--   returned   what the handler returned
--   env        the env it got (raises if used now, as a kept env does)
function T.call(h, payload, opts)
  opts = opts or {}
  local fn = T.handler(h)
  return attempt(fn, publish_state(payload, opts), opts)
end

-- T.deliver(h, payload, opts): T.call, then again while it nacks, up to
-- opts.max_attempts (1), each attempt seeing the envelope as delivered.
-- Returns the last attempt's result with outcome = "acked" or
-- "dead_lettered" (reason "max_attempts", with x-dead-reason and
-- x-dead-from in its headers as the dead-letter stage would see them),
-- and calls = every attempt's result.
function T.deliver(h, payload, opts)
  opts = opts or {}
  local fn = T.handler(h)
  local st = publish_state(payload, opts)
  local max = opts.max_attempts or 1
  local calls = {}
  while true do
    local r = attempt(fn, st, opts)
    calls[#calls + 1] = r
    r.calls = calls
    if r.ok then
      r.outcome = "acked"
      return r
    end
    if st.attempts >= max then
      r.outcome, r.reason = "dead_lettered", "max_attempts"
      r.headers["x-dead-reason"] = "max_attempts"
      r.headers["x-dead-from"] = st.to
      return r
    end
    st.attempts = st.attempts + 1
  end
end

-- ---- a bus in a test --------------------------------------------------

-- T.run(bus, timeout): run bus until it is idle (on_complete callbacks run
-- here), at most timeout seconds (10).  Raises when it does not go idle
-- or when its counters do not add up (accepted = completed +
-- dead_lettered + dropped + in_system); returns bus:stats().
function T.run(bus, timeout)
  timeout = timeout or 10
  local idle = bus:wait(timeout)
  local s = bus:stats()
  if not idle then
    error(("the bus did not go idle within %g s (in_system %d)")
          :format(timeout, s.in_system), 2)
  end
  if s.accepted ~= s.completed + s.dead_lettered + s.dropped + s.in_system
  then
    error(("the bus's counters do not add up: accepted %d, completed %d, " ..
           "dead_lettered %d, dropped %d, in_system %d"):format(s.accepted,
           s.completed, s.dead_lettered, s.dropped, s.in_system), 2)
  end
  return s
end

return T
