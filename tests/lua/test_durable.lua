-- Durable stages: crash recovery (SIGKILL), exactly_once across a restart,
-- replay order, dead letters on disk and the `seda-lua dlq` CLI, and the
-- journal's errors (corrupt, locked, unwritable, full disk).
--
--   build/<variant>/seda-lua tests/lua/test_durable.lua
--
-- The restarts are real: every "process" below is a child seda-lua running
-- tests/lua/durable/child.lua on a shared data_dir.  Environment:
--   SEDA_DURABLE_ROUNDS  crash rounds (default 20)
--   SEDA_DURABLE_SEED    random seed of the kill moments (default 1234)
--   SEDA_DLQ_CLI         command for the DLQ CLI (default "<binary> dlq")
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local BIN = arg and arg[-1] or "build/release/seda-lua"
local CHILD = T.dir .. "durable/child.lua"
local ROUNDS = tonumber(os.getenv("SEDA_DURABLE_ROUNDS") or "") or 20
local SEED = tonumber(os.getenv("SEDA_DURABLE_SEED") or "") or 1234

local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local DLQ_CLI = os.getenv("SEDA_DLQ_CLI") or (q(BIN) .. " dlq")
local HAVE_SQLITE = os.execute("command -v sqlite3 >/dev/null 2>&1") == true

local function sleep(s)
  if s > 0 then os.execute(string.format("sleep %.3f", s)) end
end

local function readall(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

local function lines(path)
  local t = {}
  local f = io.open(path, "r")
  if not f then return t end
  for l in f:lines() do t[#t + 1] = l end
  f:close()
  return t
end

-- Run a shell command (bounded by `timeout`); returns output (stdout and
-- stderr) and the exit code.
local function sh(cmd)
  local p = assert(io.popen("timeout -s KILL 170 sh -c " .. q(cmd) .. " 2>&1"))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

-- Run child.lua MODE ... to the end: output, exit code.
local function child(...)
  local a = {}
  for i, v in ipairs({ ... }) do a[i] = q(v) end
  return sh(q(BIN) .. " " .. q(CHILD) .. " " .. table.concat(a, " "))
end

-- Start child.lua MODE ... in the background; returns a handle with
-- :readline(), :kill() and :close() (exit code; output after the kill).
-- stderr goes to errfile.
local function spawn(errfile, ...)
  local a = {}
  for i, v in ipairs({ ... }) do a[i] = q(v) end
  local cmd = "echo $$; exec " .. q(BIN) .. " " .. q(CHILD) .. " " ..
              table.concat(a, " ") .. " 2>>" .. q(errfile)
  -- popen's shell prints its own pid, then becomes the child (exec).
  local p = assert(io.popen(cmd))
  local pid = assert(tonumber(p:read("l")), "spawn: no pid")
  local h = { pid = pid }
  function h:readline() return p:read("l") end
  function h:kill() os.execute("kill -9 " .. pid .. " 2>/dev/null") end
  function h:close()
    local rest = p:read("a")
    local _, what, code = p:close()
    if what == "signal" then code = 128 + code end   -- as a shell reports it
    return code, rest
  end
  return h
end

local function dlq_cli(dir, ...)
  local a = {}
  for i, v in ipairs({ ... }) do a[i] = q(v) end
  return sh(DLQ_CLI .. " " .. q(dir) .. " " .. table.concat(a, " "))
end

local function sqlite(db, sql)
  local out, code = sh("sqlite3 " .. q(db) .. " " .. q(sql))
  T.eq(code, 0, "sqlite3 " .. sql .. ": " .. out)
  return out
end

-- ---- crash recovery -------------------------------------------------------
--
-- Each round: a publisher child publishes R<k>-1, R<k>-2, ... to s1 of the
-- durable pipeline s1 -> s2 -> s3 (ids whose number is a multiple of 50 are
-- nacked by s2 and end in the durable dead-letter stage dlq), appending each
-- id to a file once publish returned true, and is SIGKILLed at a random
-- moment.  A recovery child then opens the same data_dir (replay) and runs
-- until idle; in about a third of the rounds the first recovery is killed
-- too and a second one finishes.  The data_dir is shared by every round.
--
-- Every handler logs "h STAGE ID" when it starts and "fin STAGE ID" at the
-- end of the itinerary (s3 or dlq).  Checks per round, for every id:
--   * none lost: every id whose publish returned true reaches the end of its
--     itinerary -- its last "h" record is its last stage, and the same
--     process logged "fin" for it;
--   * only published ids appear (plus at most the one id whose publish was
--     committed but not yet recorded when the kill came);
--   * its stages are handled in itinerary order, each once per process, and
--     a stage is handled again only across a kill and only if it was the
--     id's LAST record in the killed process (the id was inside a handler,
--     or in a delivered batch whose commit had not happened yet: a durable
--     stage commits a batch's decisions after the whole batch ran) and is
--     the id's FIRST record in the next process;
--   * the number of such duplicates per kill is at most the envelopes that
--     can be delivered-but-uncommitted at once: for each stage, concurrency
--     x batch (s1, s2, s3: 2 x 8; dlq 1 x 8) = 56;
--   * the journal is empty after the final recovery (sqlite3, if present).

local DUP_BOUND = 3 * 2 * 8 + 1 * 8
local ITIN = { normal = { s1 = 1, s2 = 2, s3 = 3 }, dead = { s1 = 1, s2 = 2, dlq = 3 } }

local function check_round(round, prefix, pubfile, logs)
  local pub = lines(pubfile)
  for i, id in ipairs(pub) do
    T.eq(id, prefix .. i, "round " .. round .. ": published ids are consecutive")
  end
  local maxpub = #pub
  local ev = {}             -- id -> { {p, idx}, ... } in process, file order
  local fin = {}            -- id -> { [p] = true }
  for p, log in ipairs(logs) do
    for _, line in ipairs(lines(log)) do
      local kind, st, id = line:match("^(%a+) (%S+) (%S+)$")
      T.ok(kind, "round " .. round .. ": bad log line " .. line)
      T.ok(id:sub(1, #prefix) == prefix,
           "round " .. round .. ": foreign id " .. id .. " (an earlier round's envelope came back)")
      local num = tonumber(id:sub(#prefix + 1))
      local itin = num % 50 == 0 and ITIN.dead or ITIN.normal
      local idx = itin[st]
      T.ok(idx, "round " .. round .. ": " .. id .. " handled by " .. st .. ", not on its itinerary")
      if kind == "h" then
        ev[id] = ev[id] or {}
        table.insert(ev[id], { p = p, idx = idx, st = st })
      elseif kind == "fin" then
        fin[id] = fin[id] or {}
        fin[id][p] = true
      else
        T.fail("round " .. round .. ": bad log line " .. line)
      end
    end
  end
  local dups = {}
  for p = 1, #logs do dups[p] = 0 end
  local function last_in(e, k)   -- is e[k] the id's last record in its process?
    return e[k + 1] == nil or e[k + 1].p ~= e[k].p
  end
  local function first_in(e, k)
    return k == 1 or e[k - 1].p ~= e[k].p
  end
  for id, e in pairs(ev) do
    local num = tonumber(id:sub(#prefix + 1))
    T.ok(num <= maxpub + 1, string.format(
      "round %d: %s handled but never published (last published %d)", round, id, maxpub))
    T.eq(e[1].idx, 1, "round " .. round .. ": " .. id .. " first handled at")
    for k = 2, #e do
      local a, b = e[k - 1], e[k]
      if b.idx == a.idx + 1 then
        -- the next hop
      elseif b.idx == a.idx and b.p > a.p and last_in(e, k - 1) and first_in(e, k) then
        dups[a.p] = dups[a.p] + 1
      else
        T.fail(string.format(
          "round %d: %s handled by %s (process %d) after %s (process %d): "
          .. "not a replay of an envelope that was in a handler at the kill",
          round, id, b.st, b.p, a.st, a.p))
      end
    end
    local last = e[#e]
    T.ok(last.idx == 3 and fin[id] and fin[id][last.p], string.format(
      "round %d: %s lost: last handled by %s in process %d, no completion after it",
      round, id, last.st, last.p))
  end
  for i = 1, maxpub do
    T.ok(ev[prefix .. i], string.format("round %d: %s%d published but never handled (lost)",
                                        round, prefix, i))
  end
  local total = 0
  for p = 1, #logs - 1 do
    T.le(dups[p], DUP_BOUND, "round " .. round .. ": duplicates after kill " .. p)
    total = total + dups[p]
  end
  return maxpub, total
end

T.test("crash recovery: SIGKILL at random moments, nothing lost, duplicates only from handlers at the kill", function()
  math.randomseed(SEED)
  local base = T.tmpdir()
  local data = base .. "/data"
  local errfile = base .. "/stderr"
  local total_pub, total_dup, killed_recoveries, killed_publishing = 0, 0, 0, 0
  for round = 1, ROUNDS do
    local rdir = base .. "/r" .. round
    os.execute("mkdir -p " .. q(rdir))
    local prefix = "R" .. round .. "-"
    local pubfile = rdir .. "/pub"
    local sync = round % 2 == 0 and "normal" or "full"
    local logs = { rdir .. "/p1.log" }
    local h = spawn(errfile, "pipe", data, logs[1], pubfile, prefix, sync)
    T.eq(h:readline(), "ready", "round " .. round .. ": publisher started (stderr: "
         .. readall(errfile) .. ")")
    sleep(math.random() * 0.35)
    h:kill()
    local code, rest = h:close()
    T.eq(code, 137, "round " .. round .. ": publisher killed (" .. tostring(rest) .. ")")
    if #lines(pubfile) > 0 then killed_publishing = killed_publishing + 1 end
    -- Sometimes kill the first recovery too.
    if math.random() < 0.35 then
      logs[#logs + 1] = rdir .. "/p" .. (#logs + 1) .. ".log"
      local r = spawn(errfile, "recover", data, logs[#logs], sync)
      T.eq(r:readline(), "ready", "round " .. round .. ": recovery started (stderr: "
           .. readall(errfile) .. ")")
      sleep(math.random() * 0.08)
      r:kill()
      r:close()
      killed_recoveries = killed_recoveries + 1
    end
    logs[#logs + 1] = rdir .. "/p" .. (#logs + 1) .. ".log"
    local out, code2 = child("recover", data, logs[#logs], sync)
    T.eq(code2, 0, "round " .. round .. ": recovery exit: " .. out .. readall(errfile))
    T.contains(out, "idle", "round " .. round .. ": recovery went idle")
    local np, nd = check_round(round, prefix, pubfile, logs)
    total_pub, total_dup = total_pub + np, total_dup + nd
    if HAVE_SQLITE then
      -- Nothing live is left; what stays is dead letters the DLQ's
      -- handler was done with (kept on disk for seda-lua dlq).
      T.eq(sqlite(data .. "/seda.db", "SELECT count(*) FROM envelopes WHERE done_at IS NULL"),
           "0\n", "round " .. round .. ": no live row after recovery")
      T.eq(sqlite(data .. "/seda.db", "SELECT count(*) FROM envelopes WHERE stage <> 'dlq' "
           .. "OR instr(headers, CAST('x-dead-reason' AS BLOB)) = 0"), "0\n",
           "round " .. round .. ": only done dead letters are kept")
    end
  end
  print(string.format("  seed %d, %d rounds: %d envelopes published, %d rounds killed "
    .. "while publishing, %d recoveries killed, %d duplicate deliveries",
    SEED, ROUNDS, total_pub, killed_publishing, killed_recoveries, total_dup))
  T.ok(total_pub > 0, "something was published before the kills")
  T.eq(readall(errfile), "", "children's stderr")
  os.execute("rm -rf " .. q(base))
end)

-- ---- crash recovery of group commits -----------------------------------------
--
-- Each round: a child's 64 concurrent handlers publish into the durable
-- stage "d" at sync = full (their publishes wait suspended and share group
-- commits), each recording its id once publish returned true; the child is
-- SIGKILLed at a random moment, mid-group (commits follow each other
-- back to back while it runs).  A recovery child replays "d" until idle.
-- Every id whose publish returned true was handled by d (before the kill or
-- after the replay): none lost.

T.test("crash recovery of group commits: 64 publishing handlers, SIGKILL mid-group, nothing lost", function()
  math.randomseed(SEED + 1)
  local base = T.tmpdir()
  local data = base .. "/data"
  local errfile = base .. "/stderr"
  local total = 0
  for round = 1, 5 do
    local rdir = base .. "/g" .. round
    os.execute("mkdir -p " .. q(rdir))
    local prefix = "G" .. round .. "-"
    local pubfile = rdir .. "/pub"
    local logs = { rdir .. "/p1.log", rdir .. "/p2.log" }
    local h = spawn(errfile, "grouppub", data, logs[1], pubfile, prefix)
    T.eq(h:readline(), "ready", "round " .. round .. ": publisher started (stderr: "
         .. readall(errfile) .. ")")
    sleep(0.1 + math.random() * 0.4)
    h:kill()
    local code, rest = h:close()
    T.eq(code, 137, "round " .. round .. ": publisher killed (" .. tostring(rest) .. ")")
    local out, code2 = child("grouprec", data, logs[2])
    T.eq(code2, 0, "round " .. round .. ": recovery exit: " .. out .. readall(errfile))
    T.contains(out, "idle", "round " .. round .. ": recovery went idle")
    local fin = {}
    for _, log in ipairs(logs) do
      for _, l in ipairs(lines(log)) do
        local id = l:match("^fin (%S+)$")
        T.ok(id, "round " .. round .. ": bad log line " .. l)
        T.eq(id:sub(1, #prefix), prefix, "round " .. round .. ": foreign id " .. id)
        fin[id] = true
      end
    end
    local pub = lines(pubfile)
    local lost = {}
    for _, id in ipairs(pub) do
      if not fin[id] then lost[#lost + 1] = id end
    end
    T.eq(#lost, 0, "round " .. round .. ": publishes that returned true and were "
         .. "never handled: " .. table.concat(lost, " ", 1, math.min(#lost, 10)))
    total = total + #pub
  end
  print(string.format("  5 rounds: %d publishes returned true before the kills", total))
  T.ok(total > 0, "something was published before the kills")
  T.eq(readall(errfile), "", "children's stderr")
  os.execute("rm -rf " .. q(base))
end)

-- ---- exactly_once across a restart -----------------------------------------

T.test("exactly_once refuses an id accepted before a restart", function()
  local dir = T.tmpdir() .. "/data"
  local out, code = child("dedup", dir, "a", "b", "a")
  T.eq(code, 0, "first process: " .. out)
  T.contains(out, "a true nil\n", "a accepted")
  T.contains(out, "b true nil\n", "b accepted")
  T.contains(out, "a false duplicate\n", "a refused in the same process")
  T.contains(out, "handled 2\n", "two handled")
  out, code = child("dedup", dir, "a", "c", "b")
  T.eq(code, 0, "second process: " .. out)
  T.contains(out, "a false duplicate\n", "a refused after the restart")
  T.contains(out, "b false duplicate\n", "b refused after the restart")
  T.contains(out, "c true nil\n", "c accepted")
  T.contains(out, "handled 1\n", "only c handled")
  os.execute("rm -rf " .. q(dir))
end)

-- ---- replay order -----------------------------------------------------------

T.test("replay: rows come back in publish order, before new envelopes", function()
  local base = T.tmpdir()
  local dir = base .. "/data"
  local out, code = child("fill", dir, "100")
  T.eq(code, 0, "fill: " .. out)
  T.contains(out, "published 100", "fill published")
  if HAVE_SQLITE then
    T.eq(sqlite(dir .. "/seda.db", "SELECT count(*) FROM envelopes WHERE stage = 'q'"),
         "100\n", "rows kept after shutdown(0)")
  end
  out, code = child("order", dir, base .. "/log", "10")
  T.eq(code, 0, "order: " .. out)
  T.contains(out, "idle", "order went idle")
  local want = {}
  for i = 1, 100 do want[#want + 1] = "p" .. i end
  for i = 1, 10 do want[#want + 1] = "n" .. i end
  T.deep_eq(lines(base .. "/log"), want, "handling order")
  if HAVE_SQLITE then
    T.eq(sqlite(dir .. "/seda.db", "SELECT count(*) FROM envelopes"), "0\n", "journal empty")
  end
  os.execute("rm -rf " .. q(base))
end)

-- ---- dead letters on disk, the DLQ CLI ----------------------------------------

T.test("a durable dead letter for a missing stage keeps x-dead-stage in the journal", function()
  local base = T.tmpdir()
  local dir = base .. "/data"
  -- In a process of its own: the journal is free for the CLI once it ends.
  local script = T.write(base .. "/missing.lua", ([[
local seda = require "seda"
local bus = seda.bus{ data_dir = %q, workers = 1, dead_letter = "dlq" }
bus:stage{ name = "dlq", durable = "at_least_once", pull = true }
bus:stage{ name = "work", durable = "at_least_once",
           handler = function(env) return env:forward("gone") end }
assert(bus:publish("work", "x", { id = "m1" }))
local deadline = seda.now() + 20
while bus:stats().dead_lettered < 1 and seda.now() < deadline do bus:poll() end
print("dead_lettered " .. bus:stats().dead_lettered)
bus:shutdown(0)
]]):format(dir))
  local out, code = sh(q(BIN) .. " " .. q(script))
  T.contains(out, "dead_lettered 1", "dead-lettered")
  out, code = dlq_cli(dir, "show", "m1")
  T.eq(code, 0, "show exit: " .. out)
  T.contains(out, '"x-dead-reason": "no_such_stage"', "reason")
  T.contains(out, '"x-dead-stage": "gone"', "the missing stage survived the journal")
  T.contains(out, '"x-dead-attempts": "1"', "attempts")
  T.ok(out:match('"x%-dead%-at": "%d%d%d%d%-'), "when: " .. out)
end)

T.test("dead letters stay in a durable DLQ; seda-lua dlq list/show/replay/purge", function()
  local base = T.tmpdir()
  local dir = base .. "/data"
  local out, code = child("dlq_fill", dir, "4")
  T.eq(code, 0, "dlq_fill: " .. out)
  T.contains(out, "dead_lettered 4", "four dead letters")
  if HAVE_SQLITE then
    T.eq(sqlite(dir .. "/seda.db", "SELECT id FROM envelopes WHERE stage = 'dlq' ORDER BY key"),
         "w1\nw2\nw3\nw4\n", "dead letters on disk (sqlite3)")
    T.eq(sqlite(dir .. "/seda.db", "SELECT count(*) FROM envelopes WHERE stage = 'dlq' AND "
         .. "instr(headers, CAST('x-dead-reason' AS BLOB)) > 0"), "4\n", "x-dead-reason in headers")
  end
  -- list
  out, code = dlq_cli(dir, "list")
  T.eq(code, 0, "list exit: " .. out)
  local rows = {}
  for l in out:gmatch("[^\n]+") do rows[#rows + 1] = l end
  T.eq(#rows, 5, "header + 4 rows: " .. out)
  T.eq(rows[1], "ID\tSTAGE\tFROM\tREASON\tATTEMPTS\tBYTES\tKEY\tSTATE\tPUBLISHED",
       "header")
  for i = 1, 4 do
    local id, stage, from, reason, attempts, bytes, _, state, published =
      rows[i + 1]:match("^(%S+)\t(%S+)\t(%S+)\t(%S+)\t(%d+)\t(%d+)\t(%d+)\t(%S+)\t(%S+)$")
    T.eq(state, "queued", "list state: waiting in dlq")
    T.ok(published and published:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d"),
         "list: a wall-clock publish time, got " .. tostring(published))
    T.eq(id, "w" .. i, "list id")
    T.eq(stage, "dlq", "list stage")
    T.eq(from, "work", "list x-dead-from")
    T.eq(reason, "max_attempts", "list x-dead-reason")
    T.eq(attempts, "2", "list attempts: the one it died on (x-dead-attempts)")
    if i % 2 == 1 then T.eq(bytes, tostring(#("payload\t" .. i)), "list payload size") end
  end
  -- show
  out, code = dlq_cli(dir, "show", "w1")
  T.eq(code, 0, "show exit: " .. out)
  T.contains(out, '"tag": "t1"', "show headers")
  T.contains(out, '"x-dead-reason": "max_attempts"', "show x-dead-reason")
  T.contains(out, '"x-dead-from": "work"', "show x-dead-from")
  -- Every x-dead-* header survived the journal, not just reason and from.
  T.contains(out, '"x-dead-error": "handler error: boom w1"', "show x-dead-error")
  T.contains(out, '"x-dead-attempts": "2"', "show x-dead-attempts")
  T.ok(out:match('"x%-dead%-at": "%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ"'),
       "show x-dead-at: " .. out)
  T.contains(out, "attempts: 1 in its dead-letter stage; it died on attempt 2",
             "show: both attempt counts")
  T.contains(out, '"payload\\t1"', "show raw payload, escaped")
  T.contains(out, "slip:", "show slip")
  out, code = dlq_cli(dir, "show", "w2")
  T.eq(code, 0, "show w2 exit: " .. out)
  T.contains(out, "(a Lua value", "show a Lua-encoded payload ...")
  T.contains(out, "{ n = 2 }", "... decoded, as the REPL prints it: " .. out)
  T.contains(out, "state: queued", "show: still waiting in its stage")
  T.ok(out:match("published: %d%d%d%d%-%d%d%-%d%dT"), "show: wall-clock time: " .. out)
  -- Every time it prints is wall-clock: no monotonic figure (seconds since
  -- some boot) that means nothing outside the publishing process.
  T.ok(not out:find("monotonic", 1, true), "show: no monotonic time: " .. out)
  T.ok(not out:find("%d+%.%d%d%d%d%d%d"), "show: no bare seconds: " .. out)
  out, code = dlq_cli(dir, "show", "nope")
  T.eq(code, 1, "show unknown id: " .. out)
  out, code = dlq_cli(dir, "show", "h1")
  T.eq(code, 1, "show a row that is not a dead letter: " .. out)
  -- A dead letter whose x-dead-from is no stage name is never replayed.
  if HAVE_SQLITE then
    local saved = sqlite(dir .. "/seda.db", "SELECT hex(headers) FROM envelopes WHERE id = 'w4'")
    sqlite(dir .. "/seda.db", "UPDATE envelopes SET headers = CAST(replace(CAST(headers AS TEXT), "
           .. "'work', '../../etc') AS BLOB) WHERE id = 'w4'")
    out, code = dlq_cli(dir, "replay", "w4")
    T.eq(code, 1, "replay of a bad x-dead-from refused: " .. out)
    T.contains(out, "is not a stage name", "says why")
    T.eq(sqlite(dir .. "/seda.db", "SELECT stage FROM envelopes WHERE id = 'w4'"), "dlq\n",
         "the row stays where it was")
    sqlite(dir .. "/seda.db", "UPDATE envelopes SET headers = X'" .. saved:gsub("%s", "")
           .. "' WHERE id = 'w4'")
  end
  -- replay w3: back to "work", then a restart handles it there
  out, code = dlq_cli(dir, "replay", "w3")
  T.eq(code, 0, "replay exit: " .. out)
  T.contains(out, "w3", "replay names the id")
  out = dlq_cli(dir, "list")
  T.ok(not out:find("w3", 1, true), "w3 no longer listed: " .. out)
  T.contains(out, "w4", "w4 still listed")
  if HAVE_SQLITE then
    T.eq(sqlite(dir .. "/seda.db", "SELECT stage, attempts, instr(headers, CAST('x-dead' AS BLOB)) "
         .. "FROM envelopes WHERE id = 'w3'"), "work|1|0\n", "w3 moved back, x-dead-* removed")
  end
  out, code = child("dlq_recover", dir, base .. "/log", "1")
  T.eq(code, 0, "dlq_recover: " .. out)
  T.deep_eq(lines(base .. "/log"), { "w3 t3 nil 1 string" }, "w3 handled again by work")
  T.contains(out, "work completed 1\n", "work completed the replayed dead letter")
  T.contains(out, "dlq depth 3 held depth 1", "the other dead letters and held replayed")
  -- purge: only dead letters
  out, code = dlq_cli(dir, "purge")
  T.eq(code, 0, "purge exit: " .. out)
  T.contains(out, "purged 3", "purge count")
  out, code = dlq_cli(dir, "list")
  T.eq(code, 0, "list after purge")
  T.eq(out, "ID\tSTAGE\tFROM\tREASON\tATTEMPTS\tBYTES\tKEY\tSTATE\tPUBLISHED\n",
       "empty list after purge")
  if HAVE_SQLITE then
    T.eq(sqlite(dir .. "/seda.db", "SELECT stage, id FROM envelopes ORDER BY key"),
         "held|h1\n", "purge kept the row that is not a dead letter")
  end
  -- usage and errors
  _, code = dlq_cli(dir, "bogus")
  T.eq(code, 2, "unknown command: usage")
  _, code = dlq_cli(dir, "replay")
  T.eq(code, 2, "replay without ID: usage")
  out, code = dlq_cli(base .. "/nowhere", "list")
  T.eq(code, 1, "no journal: " .. out)
  T.ok(not io.open(base .. "/nowhere/seda.db"), "the CLI does not create a journal")
  os.execute("rm -rf " .. q(base))
end)

T.test("a handler on a durable DLQ: dead letters stay on disk, done, and never come back", function()
  local base = T.tmpdir()
  local dir = base .. "/data"
  local before = os.time()
  local out, code = child("dlq_handled", dir, "3")
  T.eq(code, 0, "dlq_handled: " .. out)
  T.contains(out, "dlq delivered 3 seen 3", "the DLQ's handler acked all three")
  out, code = dlq_cli(dir, "list")
  T.eq(code, 0, "list exit: " .. out)
  local n = 0
  for l in out:gmatch("[^\n]+") do
    local id, state = l:match("^(w%d)\t.*\t(%S+)\t%S+$")
    if id then
      n = n + 1
      T.eq(state, "done", id .. ": done, kept on disk")
    end
  end
  T.eq(n, 3, "every handled dead letter is listed: " .. out)
  out, code = dlq_cli(dir, "show", "w2")
  T.eq(code, 0, "show exit: " .. out)
  T.contains(out, "state: done 20", "show: done, with a wall-clock time")
  T.contains(out, 'tags = { "a", "b" }', "show decodes the Lua payload: " .. out)
  T.contains(out, "n = 2", "... every field")
  local y, mo, d, h, mi, se = out:match("published: (%d+)%-(%d+)%-(%d+)T(%d+):(%d+):(%d+)")
  local t = y and os.time{ year = tonumber(y), month = tonumber(mo), day = tonumber(d),
                           hour = tonumber(h), min = tonumber(mi), sec = tonumber(se) }
  T.ok(t and t >= before - 1 and t <= os.time() + 1,
       "published is the wall clock of the run: " .. tostring(t) .. " vs " .. before)
  -- A restart declares the DLQ with its handler again: nothing replayed.
  out, code = child("dlq_again", dir)
  T.eq(code, 0, "dlq_again: " .. out)
  T.contains(out, "dlq depth 0 enqueued 0", "done dead letters are not replayed")
  T.contains(out, "handled 0", "... nor handled again")
  -- replay one: it is live again, in its x-dead-from stage
  out, code = dlq_cli(dir, "replay", "w1")
  T.eq(code, 0, "replay a done dead letter: " .. out)
  if HAVE_SQLITE then
    T.eq(sqlite(dir .. "/seda.db", "SELECT stage, done_at IS NULL FROM envelopes WHERE id = 'w1'"),
         "work|1\n", "replayed: live again in work")
  end
  out, code = dlq_cli(dir, "purge")
  T.contains(out, "purged 2", "purge removes done dead letters too: " .. out)
  os.execute("rm -rf " .. q(base))
end)

T.test("a schema 1 journal opens: upgraded in place, its rows replayed", function()
  if not HAVE_SQLITE then return end
  local base = T.tmpdir()
  local dir = base .. "/data"
  os.execute("mkdir -p " .. q(dir))
  local db = dir .. "/seda.db"
  sqlite(db, "CREATE TABLE envelopes(key INTEGER PRIMARY KEY, stage TEXT NOT NULL, "
    .. "id TEXT NOT NULL, attempts INTEGER, sender TEXT, headers BLOB, slip BLOB, "
    .. "kind INTEGER, payload BLOB, published_at REAL); "
    .. "CREATE TABLE dedup(stage TEXT, id TEXT, seq INTEGER, PRIMARY KEY(stage, id)) WITHOUT ROWID; "
    .. "CREATE TABLE meta(k TEXT PRIMARY KEY, v); "
    .. "INSERT INTO meta VALUES('schema_version', 1); "
    .. "INSERT INTO envelopes VALUES(1, 'dlq', 'old1', 1, NULL, "
    .. "CAST('x-dead-reason' || char(0) || 'max_attempts' || char(0) || 'x-dead-from' || char(0) || 'work' || char(0) AS BLOB), "
    .. "CAST('' AS BLOB), 0, CAST('old payload' AS BLOB), 12.5);")
  local out, code = dlq_cli(dir, "show", "old1")
  T.eq(code, 0, "the CLI reads an old journal: " .. out)
  T.contains(out, "published: unknown", "no wall clock in an old row")
  T.contains(out, '"old payload"', "the payload")
  T.eq(sqlite(db, "SELECT v FROM meta WHERE k = 'schema_version'"), "3\n", "upgraded to the current schema (3)")
  out, code = child("dlq_again", dir)
  T.eq(code, 0, "a bus opens it: " .. out)
  T.contains(out, "handled 1", "the old live row is replayed and handled")
  os.execute("rm -rf " .. q(base))
end)

-- ---- journal errors ---------------------------------------------------------

T.test("locked: a second bus or process on a data_dir in use, and the CLI", function()
  local base = T.tmpdir()
  local dir = base .. "/data"
  local h = spawn(base .. "/stderr", "hold", dir, base .. "/stop")
  T.eq(h:readline(), "ready", "holder started: " .. readall(base .. "/stderr"))
  T.raises(function() seda.bus{ data_dir = dir } end, "second bus", "bus: data_dir", "locked")
  local out, code = child("dedup", dir, "x")
  T.eq(code, 1, "second process fails: " .. out)
  T.contains(out, "locked", "second process error")
  out, code = dlq_cli(dir, "list")
  T.eq(code, 1, "CLI on a running bus's dir: " .. out)
  T.contains(out, dir .. " is in use by a running bus", "CLI message")
  T.write(base .. "/stop", "")
  T.eq(h:readline(), "released", "holder released")
  h:close()
  -- released: now it opens
  out, code = child("dedup", dir, "x")
  T.eq(code, 0, "after release: " .. out)
  out, code = dlq_cli(dir, "list")
  T.eq(code, 0, "CLI after release: " .. out)
  -- in one process: two buses
  local b1 = T.bus{ data_dir = dir }
  T.raises(function() seda.bus{ data_dir = dir } end, "second bus in-process", "locked")
  b1:shutdown(1)
  os.execute("rm -rf " .. q(base))
end)

T.test("corrupt journal: seda.bus raises 'not a database'", function()
  local dir = T.tmpdir()
  T.write(dir .. "/seda.db", string.rep("this is not a database, it is garbage\n", 200))
  T.raises(function() seda.bus{ data_dir = dir } end, "corrupt", "bus: data_dir", "not a database")
  -- the CLI says so too
  local out, code = dlq_cli(dir, "list")
  T.eq(code, 1, "CLI on a corrupt journal: " .. out)
  T.contains(out, "not a database", "CLI message")
  -- an empty file is what SQLite calls a new database: that opens
  T.write(dir .. "/seda.db", "")
  local b = T.bus{ data_dir = dir }
  b:shutdown(1)
  os.execute("rm -rf " .. q(dir))
end)

T.test("unwritable data_dir: a clear error", function()
  local base = T.tmpdir()
  T.write(base .. "/file", "x")
  T.raises(function() seda.bus{ data_dir = base .. "/file/sub" } end, "under a file",
           "bus: data_dir", base .. "/file/sub", "not writable")
  T.raises(function() seda.bus{ data_dir = base .. "/file" } end, "a file",
           "bus: data_dir", "not writable")
  os.execute("rm -rf " .. q(base))
end)

-- Full disk: fill the journal until publish refuses with "io"; then make
-- room and restart: every envelope accepted before is replayed, in order.
-- data: the data_dir; side: a path prefix for the logs, outside the full
-- file system; wrap(cmd): the shell command that runs the filling child.
local function full_disk(data, side, wrap, payload_size, make_room)
  local ids = side .. ".ids"
  local log = side .. ".log"
  local out, code = sh(wrap(q(BIN) .. " " .. q(CHILD) .. " diskfill " .. q(data)
                             .. " " .. q(ids) .. " " .. payload_size))
  T.eq(code, 0, "diskfill exit: " .. out)
  local accepted = tonumber(out:match("accepted (%d+)"))
  T.ok(accepted and accepted > 0, "some publishes accepted: " .. out)
  T.contains(out, "refused false io", "publish refused with io")
  local after = out:match("after (%a+)")
  make_room()
  out, code = child("diskcheck", data, log)
  T.eq(code, 0, "diskcheck exit: " .. out)
  T.contains(out, "idle", "diskcheck idle")
  local want = {}
  for i = 1, accepted do want[i] = "d" .. i end
  if after == "true" then want[#want + 1] = "after" end
  T.deep_eq(lines(log), want, "every accepted envelope replayed, in order")
  return accepted
end

T.test("full disk (tmpfs of 1 MiB): publish refuses with io, accepted rows survive", function()
  local mnt = T.tmpdir()
  local side = T.tmpdir() .. "/j"
  if os.execute("mount -t tmpfs -o size=1m tmpfs " .. q(mnt) .. " 2>/dev/null") ~= true then
    print("  skipped: cannot mount a tmpfs here (not root?)")
    os.execute("rm -rf " .. q(mnt))
    return
  end
  local ok, err = pcall(function()
    -- a filler takes most of the space; removing it makes room again
    os.execute("dd if=/dev/zero of=" .. q(mnt .. "/filler") .. " bs=1k count=600 2>/dev/null")
    local n = full_disk(mnt .. "/data", side, function(c) return c end, 4000, function()
      os.remove(mnt .. "/filler")
    end)
    print(string.format("  %d envelopes accepted before the disk was full", n))
  end)
  sh("umount " .. q(mnt))
  os.execute("rm -rf " .. q(mnt) .. " " .. q(side:match("^(.*)/j$")))
  if not ok then error(err, 0) end
end)

T.test("full disk (size-limited files, RLIMIT_FSIZE): publish refuses with io, accepted rows survive", function()
  local base = T.tmpdir()
  -- 1 MiB limit (ulimit -f counts 512-byte blocks in dash, 1024 in bash: use
  -- a value that is small either way), SIGXFSZ ignored so writes fail EFBIG.
  local n = full_disk(base .. "/data", base .. "/j", function(c)
    return "ulimit -f 1024; trap '' XFSZ; exec " .. c
  end, 4000, function() end)
  print(string.format("  %d envelopes accepted before the file size limit", n))
  os.execute("rm -rf " .. q(base))
end)

T.done()
