-- The seda-lua program (SPEC §7), run as a child process.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")

-- The interpreter running this script: the lowest negative arg index.
local EXE = "build/release/seda-lua"
if arg then
  local i = -1
  while arg[i - 1] do i = i - 1 end
  if arg[i] then EXE = arg[i] end
end

local DIR = T.tmpdir()
local files = {}
local function script(name, text)
  local p = T.write(DIR .. "/" .. name, text)
  files[#files + 1] = p
  return p
end

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Run a shell command line; returns combined output and exit status.
local function run(cmdline, stdin)
  local cmd = cmdline .. " 2>&1"
  if stdin then
    local inp = script("stdin_" .. #files .. ".txt", stdin)
    cmd = cmd .. " < " .. q(inp)
  else
    cmd = cmd .. " < /dev/null"
  end
  local p = io.popen("(" .. cmd .. "); echo \"<rc=$?>\"")
  local out = p:read("a")
  p:close()
  local rc = tonumber(out:match("<rc=(%d+)>%s*$"))
  out = out:gsub("<rc=%d+>%s*$", "")
  return out, rc
end

local function seda_lua(args, stdin)
  return run("timeout 20 " .. q(EXE) .. " " .. args, stdin)
end

T.test("-v prints the version and exits 0", function()
  local out, rc = seda_lua("-v")
  T.eq(rc, 0, "exit status")
  T.ok(out:match("%d+%.%d+%.%d+"), "version number in: " .. out)
  local out2, rc2 = seda_lua("--version")
  T.eq(rc2, 0, "--version exit status")
  T.eq(out2, out, "same output")
end)

T.test("--help exits 0 and describes usage", function()
  local out, rc = seda_lua("--help")
  T.eq(rc, 0, "exit status")
  T.contains(out, "seda-lua", "names the program")
  T.contains(out, "--serve", "lists options")
end)

T.test("an unknown option exits non-zero with a message", function()
  local out, rc = seda_lua("--no-such-option")
  T.ne(rc, 0, "exit status")
  T.contains(out, "no-such-option", "names the option")
end)

T.test("a missing script file exits non-zero", function()
  local out, rc = seda_lua(q(DIR .. "/does_not_exist.lua"))
  T.ne(rc, 0, "exit status")
  T.contains(out, "does_not_exist.lua", "names the file")
end)

T.test("a runtime error exits 1 with message and traceback", function()
  local s = script("rt.lua", "local function f()\n  error('runtime-marker')\nend\nf()\n")
  local out, rc = seda_lua(q(s))
  T.eq(rc, 1, "exit status")
  T.contains(out, "runtime-marker", "message")
  T.contains(out, "rt.lua:2", "file:line")
  T.contains(out, "stack traceback", "traceback")
end)

T.test("a syntax error exits 1 with the location", function()
  local s = script("syn.lua", "print('a')\nlocal = 3\n")
  local out, rc = seda_lua(q(s))
  T.eq(rc, 1, "exit status")
  T.contains(out, "syn.lua:2", "file:line")
  T.ok(not out:find("^a\n"), "nothing ran")
end)

T.test("a non-string error object still exits 1", function()
  local s = script("obj.lua", "error(setmetatable({}, {__tostring = function() return 'obj-marker' end}))\n")
  local out, rc = seda_lua(q(s))
  T.eq(rc, 1, "exit status")
  T.contains(out, "obj-marker", "uses __tostring")
  local s2 = script("obj2.lua", "error({})\n")
  local _, rc2 = seda_lua(q(s2))
  T.eq(rc2, 1, "table error exit status")
end)

T.test("-e runs code; before the script", function()
  local out, rc = seda_lua("-e 'print(1+1)'")
  T.eq(rc, 0, "exit status")
  T.eq(out, "2\n", "output")
  local s = script("after_e.lua", "print(X)\n")
  out, rc = seda_lua("-e 'X = 41 + 1' " .. q(s))
  T.eq(rc, 0, "exit status with script")
  T.eq(out, "42\n", "-e ran first")
  out, rc = seda_lua("-e 'error(\"e-marker\")'")
  T.eq(rc, 1, "error in -e exits 1")
  T.contains(out, "e-marker", "message")
end)

T.test("arg and ... are set like lua's", function()
  local s = script("args.lua", [[
print(arg[0]:match("args%.lua$") ~= nil, arg[1], arg[2], #arg, select("#", ...), ...)
print(arg[-1] ~= nil)
]])
  local out, rc = seda_lua(q(s) .. " one 'two words'")
  T.eq(rc, 0, "exit status")
  T.eq(out, "true\tone\ttwo words\t2\t2\tone\ttwo words\ntrue\n", "arg table")
end)

T.test("a script read from stdin with -", function()
  local out, rc = seda_lua("- x y", "print('stdin', ...)\n")
  T.eq(rc, 0, "exit status")
  T.eq(out, "stdin\tx\ty\n", "output")
end)

T.test("require 'seda' is preloaded and seda.so-style module works", function()
  local out, rc = seda_lua("-e 'local s = require \"seda\"; print(type(s.bus), type(s.now), type(s.shared.get))'")
  T.eq(rc, 0, "exit status")
  T.eq(out, "function\tfunction\tfunction\n", "module")
end)

T.test("a script that publishes and returns: every envelope delivered before exit", function()
  local s = script("nowait.lua", [[
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "slow", concurrency = 2, handler = function(env)
  local d = seda.now() + 0.002
  while seda.now() < d do end
  seda.shared:incr("n", 1)
end }
bus:stage{ name = "last", handler = function(env) end }
local completed = 0
for i = 1, 200 do
  bus:publish("slow", i, { slip = { "last" }, on_complete = function()
    completed = completed + 1
    if completed == 200 then print("completed " .. completed .. " handled " .. seda.shared:get("n")) end
  end })
end
-- returns without waiting
]])
  local out, rc = seda_lua(q(s))
  T.eq(rc, 0, "exit status")
  T.eq(out, "completed 200 handled 200\n", "all delivered and on_complete ran before exit")
end)

T.test("a script error still shuts the bus down and exits 1 (no hang)", function()
  local s = script("err_bus.lua", [[
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "s", handler = function() end }
for i = 1, 10 do bus:publish("s", i) end
error("after-publish-marker")
]])
  local out, rc = seda_lua(q(s))
  T.eq(rc, 1, "exit status")
  T.contains(out, "after-publish-marker", "message")
end)

T.test("--serve exits 0 after SIGTERM, draining", function()
  local s = script("serve.lua", [[
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "s", handler = function(env) seda.shared:incr("n", 1) end }
local done = 0
for i = 1, 50 do
  bus:publish("s", i, { on_complete = function()
    done = done + 1
    if done == 50 then print("served " .. seda.shared:get("n")); io.stdout:flush() end
  end })
end
print("started"); io.stdout:flush()
]])
  local out, rc = run("timeout --preserve-status -s TERM 1 " .. q(EXE) .. " --serve " .. q(s))
  T.eq(rc, 0, "exit status after SIGTERM (143 means killed by the signal)")
  T.contains(out, "started", "script ran")
  T.contains(out, "served 50", "callbacks ran while serving")
  local out2, rc2 = run("timeout --preserve-status -s INT 1 " .. q(EXE) .. " --serve " .. q(s))
  T.eq(rc2, 0, "exit status after SIGINT")
  T.contains(out2, "served 50", "served")
end)

T.test("--serve keeps running until the signal", function()
  local s = script("serve2.lua", "print('up')\n")
  local t0 = require("seda").now()
  local out, rc = run("timeout --preserve-status -s TERM 1 " .. q(EXE) .. " --serve " .. q(s))
  local dt = require("seda").now() - t0
  T.eq(rc, 0, "exit status")
  T.ok(dt >= 0.8, string.format("did not exit before the signal (%.2fs)", dt))
end)

T.test("-i runs a REPL on stdin with the bus live", function()
  local s = script("repl.lua", [[
local seda = require "seda"
B = seda.bus{ workers = 1 }
B:stage{ name = "s", handler = function() end }
]])
  local out, rc = seda_lua("-i " .. q(s), "print(40 + 2)\nB:publish('s', 1)\nprint('idle', B:wait(5))\n")
  T.eq(rc, 0, "exit status at end of input")
  T.contains(out, "42", "expression evaluated")
  T.contains(out, "idle\ttrue", "bus live")
end)

T.test("-i with piped input: on_complete callbacks run between lines", function()
  local s = script("repl_cb.lua", [[
local seda = require "seda"
B = seda.bus{ workers = 1 }
B:stage{ name = "s", handler = function() end }
DONE = 0
]])
  local out, rc = seda_lua("-i " .. q(s),
    "B:publish('s', 1, { on_complete = function() DONE = DONE + 1 end })\n" ..
    "local d = require('seda').now() + 5 while B:stats('s').delivered < 1 and require('seda').now() < d do end\n" ..
    "local d = require('seda').now() + 0.05 while require('seda').now() < d do end\n" ..
    "print('done', DONE)\n")
  T.eq(rc, 0, "exit status")
  T.contains(out, "done\t1", "the callback ran before the next line")
end)

T.test("-i REPL helpers: stats, reload, tune, workers, help", function()
  local s = script("repl2.lua", [[
local seda = require "seda"
B = seda.bus{ workers = 1 }
B:stage{ name = "s", handler = function() end }
]])
  local out, rc = seda_lua("-i " .. q(s), table.concat({
    "print('types', type(stats), type(top), type(reload), type(tune), type(workers), type(help))",
    "print('stats', type(stats()), stats().s ~= nil)",
    "tune('s', {concurrency = 2}); print('tuned', B:stats('s').concurrency)",
    "print('reload', reload('s'))",
  }, "\n") .. "\n")
  T.eq(rc, 0, "exit status")
  T.contains(out, "types\tfunction\tfunction\tfunction\tfunction\tfunction\tfunction", "helpers defined")
  T.contains(out, "stats\ttable\ttrue", "stats() has every stage")
  T.contains(out, "tuned\t2", "tune changes concurrency")
end)

T.test("a mistyped option: did you mean, one short usage line, exit 2", function()
  local s = script("typo.lua", "print('ran')\n")
  local out, rc = seda_lua("--serv " .. q(s))
  T.eq(rc, 2, "a usage error exits 2: " .. out)
  T.contains(out, "unrecognized option '--serv' (did you mean --serve?)", "names it and the likely one")
  local _, nl = out:gsub("\n", "")
  T.ok(nl <= 3, "a short error, not the whole help (" .. nl .. " lines)")
  T.ok(not out:find("ran\n"), "the script did not run")
  out, rc = seda_lua("--contrl=x " .. q(s))
  T.eq(rc, 2)
  T.contains(out, "(did you mean --control?)", "--opt=value too")
  out, rc = seda_lua("--zzzzzz " .. q(s))
  T.eq(rc, 2)
  T.ok(not out:find("did you mean"), "no guess when nothing is close: " .. out)
  out, rc = seda_lua("--drain " .. q(s))
  T.eq(rc, 2, "a bad value is a usage error too: " .. out)
end)

T.test("--watch is an accepted option; --control needs --serve or -i", function()
  local s = script("opts.lua", "print('ran')\n")
  local out, rc = seda_lua("--watch " .. q(s))
  T.eq(rc, 0, "--watch: " .. out)
  T.contains(out, "ran", "--watch ran the script")
  T.contains(out, "--watch has no effect without --serve or -i", "and warned it does nothing there")
  local sock = DIR .. "/ctl.sock"
  out, rc = seda_lua("--control " .. q(sock) .. " " .. q(s))
  T.eq(rc, 2, "--control without --serve or -i, a usage error: " .. out)
  T.contains(out, "--control needs --serve or -i", "says why")
  T.contains(out, "usage:", "usage-style")
  T.ok(not out:find("ran\n"), "the script did not run")
  out, rc = seda_lua("-i --control " .. q(sock) .. " " .. q(s), "")
  T.eq(rc, 0, "--control with -i: " .. out)
  T.contains(out, "ran", "--control -i ran the script")
end)

T.test("a script error drains what it published, then exits 1", function()
  local s = script("err_drain.lua", [[
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "s", capacity = 1000, handler = function(env)
  local d = seda.now() + 0.001
  while seda.now() < d do end
end }
local n = 0
for i = 1, 500 do
  assert(bus:publish("s", i, { on_complete = function()
    n = n + 1
    if n == 500 then print("handled " .. n) end
  end }))
end
error("err-drain-marker")
]])
  local out, rc = seda_lua(q(s))
  T.eq(rc, 1, "exit status")
  T.contains(out, "err-drain-marker", "message")
  T.contains(out, "handled 500", "every envelope handled before exit")
  T.ok(not out:find("dropped"), "nothing dropped: " .. out)
end)

T.test("a script error whose drain runs out says how many were dropped", function()
  local s = script("err_drop.lua", [[
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "s", capacity = 1000, handler = function(env)
  local d = seda.now() + 0.05
  while seda.now() < d do end
end }
for i = 1, 200 do assert(bus:publish("s", i)) end
error("err-drop-marker")
]])
  local out, rc = seda_lua("--drain 0.1 " .. q(s))
  T.eq(rc, 1, "exit status")
  T.contains(out, "err-drop-marker", "message")
  local n = tonumber(out:match("(%d+) envelopes were dropped at exit: " ..
                               "the drain did not finish within 0%.1s"))
  T.ok(n and n > 0 and n <= 200, "count and reason in: " .. out)
end)

T.test("envelopes left in a pull stage: the message says what happened", function()
  local s = script("pull_left.lua", [[
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "jobs", pull = true }
bus:stage{ name = "s", handler = function() end }
for i = 1, 5 do assert(bus:publish("jobs", i)) end
for i = 1, 3 do assert(bus:publish("s", i)) end
print("published")
]])
  local t0 = require("seda").now()
  local out, rc = seda_lua(q(s))
  T.eq(rc, 0, "exit status")
  T.contains(out, "published", "script ran")
  T.contains(out, "5 envelopes were dropped at exit: 5 envelopes queued " ..
             "in pull stage 'jobs' with no receiver", "count and reason")
  T.ok(not out:find("within"), "claims no wait: " .. out)
  T.ok(require("seda").now() - t0 < 10, "no long wait")
end)

T.test("at exit, a durable stage's envelopes are said kept, not dropped", function()
  local dir = T.tmpdir()
  local s = script("durable_left.lua", ([[
local seda = require "seda"
local bus = seda.bus{ workers = 1, data_dir = %q }
bus:stage{ name = "jobs", pull = true, durable = true }
bus:stage{ name = "mem", pull = true }
if arg[1] == "pub" then
  for i = 1, 2 do assert(bus:publish("jobs", i)) end
  for i = 1, 3 do assert(bus:publish("mem", i)) end
  print("published")
else
  local n = 0
  while bus:receive("jobs", 0.5) do n = n + 1 end
  print("received " .. n)
end
]]):format(dir))
  local out, rc = seda_lua(q(s) .. " pub")
  T.eq(rc, 0, "exit status")
  T.contains(out, "published", "script ran")
  T.contains(out, "2 envelopes were kept at exit in the journal: 2 envelopes " ..
             "in durable pull stage 'jobs'", "kept, naming the stage")
  T.contains(out, "3 envelopes were dropped at exit: 3 envelopes queued " ..
             "in pull stage 'mem' with no receiver", "only the in-memory ones dropped")
  T.ok(not out:find("5 envelopes"), "the two are not added up: " .. out)
  out = seda_lua(q(s))
  T.contains(out, "received 2", "and kept they were: the next run gets them")
end)

T.test("-e without a script: arg like lua's", function()
  local out, rc = seda_lua("-e 'print(arg[0] ~= nil, arg[-1], arg[1], arg[2] ~= nil, #arg)'")
  T.eq(rc, 0, "exit status")
  T.eq(out, "true\tnil\t-e\ttrue\t2\n", "arg[0] is the program, options from 1")
  out = seda_lua("-e 'print(arg[0])'")
  T.ok(out:match("seda%-lua\n$"), "arg[0] is the program: " .. out)
end)

T.test("REPL helpers: errors are just the message; stats() names work", function()
  local s = script("repl_err.lua", [[
local seda = require "seda"
B = seda.bus{ workers = 1 }
B:stage{ name = "a", handler = function() end }
B2 = seda.bus{ workers = 1 }
B2:stage{ name = "a", handler = function() end }
]])
  local out, rc = seda_lua("-i " .. q(s), table.concat({
    "tune('a', {capacity = 1.5})",
    "tune('nope', {})",
    "workers(1e9)",
    "workers(100000)",
    "workers(0)",
    "top(-1)",
    "print('names', stats()['a#2'] ~= nil)",
    "tune('a#2', {concurrency = 3})",
    "print('conc', B:stats('a').concurrency, B2:stats('a').concurrency)",
    "print('reload', reload('a#2'))",
    "print('reload3', reload('a#3'))",
  }, "\n") .. "\n")
  T.eq(rc, 0, "exit status")
  T.ok(not out:find("seda%-lua cli"), "no built-in code position: " .. out)
  T.ok(not out:find("traceback"), "no traceback: " .. out)
  T.contains(out, "tune: stage 'a': capacity must be an integer (got 1.5)\n", "tune: the value")
  T.contains(out, "tune: no such stage 'nope'\n", "tune: no such stage")
  local _, nw = out:gsub("workers: n must be an integer in 1%.%.1024\n", "")
  T.eq(nw, 3, "one message for every bad n: " .. out)
  T.contains(out, "top: seconds must be a positive number\n", "top")
  T.contains(out, "names\ttrue", "stats() shows a#2")
  T.contains(out, "a#2: concurrency=3", "tune accepts a#2")
  T.contains(out, "conc\t1\t3", "tune changed the second bus's stage only")
  T.contains(out, "reload\ttrue", "reload accepts a#2")
  T.contains(out, "reload3\tfalse\tno such stage 'a#3'", "a#3 does not exist")
end)

T.test("a plain run waits for every bus: callbacks of one bus publishing into another all complete", function()
  local s = script("twobus.lua", [[
local seda = require "seda"
local b1 = seda.bus{ workers = 1 }
local b2 = seda.bus{ workers = 1 }
b1:stage{ name = "a", handler = function(env) end }
b2:stage{ name = "a", handler = function(env)
  local t = seda.now() while seda.now() - t < 0.05 do end
end }
local done = 0
local function step(k)
  -- a chain that alternates buses: b2, b1, b2, b1, ...
  local bus = k % 2 == 0 and b2 or b1
  assert(bus:publish("a", k, { on_complete = function(e)
    if k < 6 then step(k + 1) else io.write("chain done\n") end
  end }))
end
step(0)
]])
  local out, rc = seda_lua(q(s))
  T.eq(rc, 0, "exit status: " .. out)
  T.contains(out, "chain done", "every step of the chain ran")
  T.ok(not out:find("closed", 1, true), "no publish refused: " .. out)
end)

T.test("os.exit in a script drains what was published first, keeping its status", function()
  local s = script("osexit.lua", [[
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "s", handler = function(env)
  local t = seda.now() while seda.now() - t < 0.01 do end
end }
for i = 1, 5 do bus:publish("s", i, { on_complete = function(e) io.write("c", e.payload, "\n") end }) end
os.exit(3)
]])
  local out, rc = seda_lua(q(s))
  T.eq(rc, 3, "os.exit's status: " .. out)
  for i = 1, 5 do T.contains(out, "c" .. i, "callback " .. i .. " ran before the exit") end
end)

T.test("-i: input that ends inside a statement is reported; a failed reload prints once", function()
  local s = script("incomplete.lua", "local seda = require 'seda'\nbus = seda.bus{ workers = 1 }\n")
  local out, rc = seda_lua("-i " .. q(s), "for i = 1, 3 do\n")
  T.eq(rc, 0, "exit status: " .. out)
  T.contains(out, "'end' expected near <eof>", "the unfinished statement is reported")
  out = seda_lua("-i " .. q(s), "reload('nope')\n")
  local _, n = out:gsub("no such stage 'nope'", "")
  T.eq(n, 1, "the failure shows once: " .. out)
end)

T.test("on_complete errors are rate-limited, and the suppressed count is said", function()
  local s = script("cberr.lua", [[
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "s", handler = function(env) end }
for i = 1, 50 do bus:publish("s", i, { on_complete = function() error("cb-fail-" .. i) end }) end
assert(bus:wait(10))
bus:shutdown()
]])
  local out, rc = seda_lua(q(s))
  T.eq(rc, 0, "callback errors do not fail the run: " .. out)
  local _, shown = out:gsub("cb%-fail%-", "")
  local counted = 0
  for n in out:gmatch("on_complete/timer: (%d+) similar errors suppressed") do counted = counted + tonumber(n) end
  T.ok(shown >= 1 and shown < 50, "reports are limited, got " .. shown)
  T.eq(shown + counted, 50, "every error shown or counted: " .. out)
end)

for _, p in ipairs(files) do os.remove(p) end
os.remove(DIR .. "/ctl.sock")
os.remove(DIR)

T.done()
