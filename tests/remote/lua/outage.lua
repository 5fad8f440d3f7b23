-- tests/remote/lua/outage.lua URL: publish "q1", "q2", ... into the remote
-- stage "work" (stream SHARE), about one every 2 ms, printing "accepted
-- <payload>" for each publish that returned true and "refused <reason>"
-- the first time in a row one did not; stop once 30 were accepted after
-- a refusal (or after 60 s), wait until JetStream acknowledged all, and
-- print "total <accepted> <refused>".
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "work", remote = { url = arg[1], stream = "SHARE" } }
local accepted, refused, after, i = 0, 0, 0, 0
local last_ok = true
local deadline = seda.now() + 60
while seda.now() < deadline and (refused == 0 or after < 30) do
  i = i + 1
  local ok, why = bus:publish("work", "q" .. i)
  if ok then
    accepted = accepted + 1
    if refused > 0 then after = after + 1 end
    print("accepted q" .. i)
  else
    refused = refused + 1
    if last_ok then print("refused " .. tostring(why)) end
  end
  last_ok = ok
  io.stdout:flush()
  local t = seda.now() + 0.002
  while seda.now() < t do end
end
assert(bus:wait(30), "not all acknowledged")
print("total " .. accepted .. " " .. refused)
