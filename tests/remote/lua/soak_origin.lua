-- tests/remote/lua/soak_origin.lua URL STREAM SECONDS: publish into the
-- remote stage "cwork" of STREAM (one replica) for SECONDS, about one
-- envelope a millisecond, each with an on_complete; a publish refused
-- while the server is away is tried again.  Prints "progress <accepted>
-- <completed>" every 10 s, then, once every on_complete fired (or 180 s
-- passed), "origin <accepted> <completed> <dead> <dropped> <refusals>" and
-- "books <accepted> <completed> <dead> <dropped> <handed_off>
-- <in_system>" (this process's bus).
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "cwork", capacity = 256, publish_timeout = 120,
  remote = { url = arg[1], stream = arg[2], replicas = 1 } }
local completed, refusals, accepted, i = 0, 0, 0, 1
local seen = {}
local function done(env)
  if not seen[env.payload] then completed = completed + 1 end
  seen[env.payload] = true
end
local stop = seda.now() + tonumber(arg[3])
local report = seda.now() + 10
while seda.now() < stop do
  local ok = bus:publish("cwork", "s" .. i, { on_complete = done })
  if ok then accepted = accepted + 1; i = i + 1
  else refusals = refusals + 1 end
  bus:wait(ok and 0.001 or 0.05)
  if seda.now() > report then
    print(("progress %d %d"):format(accepted, completed))
    io.stdout:flush()
    report = seda.now() + 10
  end
end
local t = seda.now() + 180
while completed < accepted and seda.now() < t do bus:wait(0.2) end
bus:wait(5)
local s = bus:stats()
print(("origin %d %d %d %d %d"):format(accepted, completed, s.dead_lettered,
  s.dropped, refusals))
print(("books %d %d %d %d %d %d"):format(s.accepted, s.completed,
  s.dead_lettered, s.dropped, s.handed_off, s.in_system))
