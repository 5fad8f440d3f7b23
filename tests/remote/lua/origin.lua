-- tests/remote/lua/origin.lua URL N: N itineraries parse (local, here) ->
-- work (remote: another process) -> sink (local to that process); prints
-- "complete <id> <to> <payload>" for each on_complete that fires here,
-- then "books <accepted> <completed> <dead> <dropped> <handed_off>
-- <in_system>".
local seda = require "seda"
local url, n = arg[1], tonumber(arg[2])
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "parse", handler = function(env)
  env.payload = env.payload .. "+parse"
end }
bus:stage{ name = "work", remote = { url = url, stream = "SHARE" } }
for i = 1, n do
  assert(bus:publish("parse", "o" .. i, { slip = { "work", "sink" },
    on_complete = function(env)
      print("complete " .. env.id .. " " .. env.to .. " " .. env.payload)
    end }))
end
assert(bus:wait(30), "completions did not all come back")
local s = bus:stats()
print(("books %d %d %d %d %d %d"):format(s.accepted, s.completed,
  s.dead_lettered, s.dropped, s.handed_off, s.in_system))
