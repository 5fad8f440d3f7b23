-- tests/lua/io_http_helper.lua -- a tiny HTTP/1.1 server for test_io.lua,
-- run as its own process by the stock interpreter (lua5.4) on LuaSocket:
-- binds 127.0.0.1 on a free port, prints the port on stdout, then serves
-- every connection at once through socket.select (keep-alive: several
-- requests per connection) until GET /quit.
--
--   /echo     200; X-Method, X-Echo-Test (the request's X-Test), two
--             Set-Cookie, X-Conns (connections accepted so far); the body
--             echoed
--   /hang     no answer: waits for the client to give up and close
--   /big?n=N  N bytes of "x" with a Content-Length
--   /redirect 302 to /echo
--   /headers?n=N  200 with N distinct header lines ("x1: 1", ...)
--   /bighdr   200 with one 4 MiB header line
--   /bye      200 "bye" kept alive by its headers, then the server closes
--             its side (the client's cached connection is dead)
--   /quit     200, then the server exits
local socket = require "socket"

local srv = assert(socket.bind("127.0.0.1", 0))
local _, port = srv:getsockname()
io.stdout:write(port, "\n")
io.stdout:flush()

local conns = 0

local function respond(c, status, headers, body)
  local t = { "HTTP/1.1 " .. status .. "\r\n" }
  for _, h in ipairs(headers) do t[#t + 1] = h .. "\r\n" end
  t[#t + 1] = "Content-Length: " .. #body .. "\r\n\r\n"
  t[#t + 1] = body
  return c:send(table.concat(t))
end

-- Read one request from c and answer it: "quit" after /quit, false when
-- the connection is done (closed, or a /hang), true to keep it.
local function serve(c)
  local line = c:receive("*l")
  if not line then return false end
  local method, path = line:match("^(%S+) (%S+)")
  local headers = {}
  while true do
    local h = c:receive("*l")
    if not h then return false end
    if h == "" then break end
    local k, v = h:match("^([^:]+):%s*(.*)$")
    if k then headers[k:lower()] = v end
  end
  local body = ""
  local n = tonumber(headers["content-length"] or "0")
  if n > 0 then
    body = c:receive(n)
    if not body then return false end
  end
  if path == "/quit" then
    respond(c, "200 OK", {}, "bye")
    return "quit"
  elseif path == "/hang" then
    return "hang"               -- no answer; dropped when the client closes
  elseif path:match("^/big%?n=") then
    respond(c, "200 OK", {}, string.rep("x", tonumber(path:match("=(%d+)"))))
  elseif path:match("^/headers%?n=") then
    local t = {}
    for i = 1, tonumber(path:match("=(%d+)")) do t[i] = "x" .. i .. ": 1" end
    respond(c, "200 OK", t, "ok")
    return false                -- the client may have stopped reading
  elseif path == "/bighdr" then
    respond(c, "200 OK", { "X-Big: " .. string.rep("a", 4 << 20) }, "ok")
    return false
  elseif path == "/bye" then
    respond(c, "200 OK", {}, "bye")
    return false                -- closed here, kept by the client
  elseif path == "/redirect" then
    respond(c, "302 Found", { "Location: /echo" }, "")
  else
    respond(c, "200 OK", {
      "X-Method: " .. method,
      "X-Echo-Test: " .. (headers["x-test"] or ""),
      "Set-Cookie: a=1",
      "Set-Cookie: b=2",
      "X-Conns: " .. conns,
      "X-Path: " .. path,
    }, body)
  end
  return true
end

-- Every connection at once (socket.select): a client that keeps its
-- connection open never holds up another.  A request is read whole once
-- its first bytes are in (clients send requests in one piece).
local clients = { srv }
local quit = false
while not quit do
  local ready = socket.select(clients, nil)
  for _, c in ipairs(ready) do
    if c == srv then
      local nc = srv:accept()
      if nc then
        conns = conns + 1
        clients[#clients + 1] = nc
      end
    else
      local r = serve(c)
      if r == "quit" then
        quit = true
      elseif r == "hang" then
        -- Wait for the close: the next read returns nil then.
      elseif not r then
        c:close()
        for i, x in ipairs(clients) do
          if x == c then table.remove(clients, i) break end
        end
      end
    end
  end
end
for _, c in ipairs(clients) do c:close() end
