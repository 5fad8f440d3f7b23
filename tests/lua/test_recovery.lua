-- Durable stages coming back: when the replay starts (after the program's
-- stages are declared), hops to stages declared late, malformed journal
-- rows (quarantined), a damaged WAL (reported), and whose data_dir is
-- trusted.
--
--   build/<variant>/seda-lua tests/lua/test_recovery.lua
--
-- Journals are prepared by this process (a bus whose pull stage nobody
-- receives from keeps its rows through shutdown(0)) or by a child
-- seda-lua that kills itself with SIGKILL (a WAL left behind), and
-- changed with the sqlite3 tool.
local T = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "harness.lua")
local seda = require "seda"

local BIN = arg and arg[-1] or "build/release/seda-lua"

local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- Run a shell command (bounded); returns stdout+stderr and the exit code.
local function sh(cmd)
  local p = assert(io.popen("timeout -s KILL 120 sh -c " .. q(cmd) .. " 2>&1"))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

local function sqlite(db, sql)
  local out, code = sh("sqlite3 " .. q(db) .. " " .. q(sql))
  T.eq(code, 0, "sqlite3 " .. sql .. ": " .. out)
  return out
end

local function rows(dir, where)
  return tonumber(sqlite(dir .. "/seda.db", "SELECT count(*) FROM envelopes" ..
                         (where and (" WHERE " .. where) or "")))
end

-- A bus's journal is closed (its lock released) when the bus object is
-- collected: shut it down, drop every reference (bus = nil), then gc().
local function free(bus)
  bus:shutdown(0)
end

local function gc()
  collectgarbage()
  collectgarbage()
end

-- Leave n envelopes (payloads p1..pn, ids id1..idn) journaled at durable
-- stage `stage` with slip `slip`: a pull stage nobody receives from keeps
-- them through shutdown(0).
local function fill(dir, stage, n, slip)
  local b = seda.bus{ data_dir = dir, workers = 1 }
  b:stage{ name = stage, durable = "at_least_once", pull = true }
  for i = 1, n do
    assert(b:publish(stage, "p" .. i, { id = "id" .. i, slip = slip }))
  end
  free(b)
end

local function journal(dir, stage, n, slip)
  fill(dir, stage, n, slip)
  gc()
end

-- ---- item: replay starts once the program's stages are declared ---------

T.test("replay waits for the main chunk: a stage declared before its next hop replays nothing yet", function()
  local dir = T.tmpdir() .. "/d"
  journal(dir, "a", 6, { "b" })
  local bus = seda.bus{ data_dir = dir, workers = 2 }
  bus:stage{ name = "a", durable = "at_least_once", handler = function() end }
  -- Declared, not started: nothing replayed, nothing routed.
  local s = bus:stats()
  T.eq(s.accepted, 0, "accepted before start")
  T.eq(bus:stats("a").depth, 0, "a's depth before start")
  bus:stage{ name = "b", handler = function(env) seda.shared:incr("rec_b", 1) end }
  T.idle(bus, 20)                       -- wait starts the bus
  s = T.accounting(bus)
  T.eq(s.accepted, 6, "replayed")
  T.eq(s.completed, 6, "completed through b")
  T.eq(s.dead_lettered, 0, "none dead-lettered no_such_stage")
  T.eq(seda.shared:get("rec_b"), 6, "b handled each")
  free(bus)
  bus = nil
  gc()
end)

T.test("bus:start() replays at once; publish starts a bus too, replay first", function()
  local dir = T.tmpdir() .. "/d"
  journal(dir, "a", 3, nil)
  local bus = seda.bus{ data_dir = dir, workers = 1 }
  local log = T.uniq("start_order")
  seda.shared:set("start_log", log)
  bus:stage{ name = "a", durable = "at_least_once", concurrency = 1,
             handler = function(env)
               local k = seda.shared:get("start_log")
               seda.shared:set(k, (seda.shared:get(k) or "") .. env.payload .. " ")
             end }
  T.eq(bus:start(), true, "start")
  T.eq(bus:stats().accepted, 3, "replayed by start")
  T.eq(bus:start(), true, "a second start is a no-op")
  T.idle(bus)
  T.eq(bus:stats().accepted, 3, "not replayed twice")
  -- A new bus on the same journal (now empty for a): publish starts it.
  free(bus)
  bus = nil
  gc()
  journal(dir, "a", 2, nil)
  local bus2 = seda.bus{ data_dir = dir, workers = 1 }
  seda.shared:set(log, "")
  bus2:stage{ name = "a", durable = "at_least_once", concurrency = 1,
              handler = function(env)
                local k = seda.shared:get("start_log")
                seda.shared:set(k, (seda.shared:get(k) or "") .. env.payload .. " ")
              end }
  T.eq(bus2:stats().accepted, 0, "not started yet")
  assert(bus2:publish("a", "new", { id = "n1" }))
  T.idle(bus2)
  T.eq(seda.shared:get(log), "p1 p2 new ", "replayed rows before the publish")
  -- Declared after the start: replays at declaration.
  free(bus2)
  bus2 = nil
  gc()
  journal(dir, "late", 2, nil)
  local bus3 = seda.bus{ data_dir = dir, workers = 1 }
  bus3:start()
  bus3:stage{ name = "late", durable = "at_least_once", handler = function() end }
  T.eq(bus3:stats().accepted, 2, "a stage declared after start replays at once")
  T.idle(bus3)
  free(bus3)
  bus3 = nil
  gc()
end)

T.test("a replayed hop to a stage declared after the start waits for it (bounded), never dead-letters", function()
  local dir = T.tmpdir() .. "/d"
  journal(dir, "a", 5, { "b" })
  local bus = seda.bus{ data_dir = dir, workers = 2, hop_timeout = 20 }
  local ran = T.uniq("hop_ran")
  seda.shared:set("hop_ran_key", ran)
  bus:stage{ name = "a", durable = "at_least_once",
             handler = function() seda.shared:incr(seda.shared:get("hop_ran_key"), 1) end }
  bus:start()
  T.wait_until(function() return (seda.shared:get(ran) or 0) >= 1 end, 10,
               "a handled a replayed envelope")
  -- Its hop to b waits now; declare b.
  bus:stage{ name = "b", handler = function() end }
  T.idle(bus, 20)
  local s = T.accounting(bus)
  T.eq(s.completed, 5, "completed")
  T.eq(s.dead_lettered, 0, "dead-lettered")
  free(bus)
  bus = nil
  gc()
end)

T.test("a replayed hop whose stage never comes is dead-lettered no_such_stage after hop_timeout", function()
  local dir = T.tmpdir() .. "/d"
  journal(dir, "a", 4, { "nowhere" })
  local bus = seda.bus{ data_dir = dir, workers = 2, hop_timeout = 0.3,
                     dead_letter = "dlq" }
  local k = T.uniq("dead_reason")
  seda.shared:set("dead_reason_key", k)
  bus:stage{ name = "dlq", handler = function(env)
    seda.shared:set(seda.shared:get("dead_reason_key"), env.headers["x-dead-reason"])
  end }
  bus:stage{ name = "a", durable = "at_least_once", handler = function() end }
  T.idle(bus, 20)
  local s = T.accounting(bus)
  T.eq(s.dead_lettered, 4, "dead-lettered")
  T.eq(s.completed, 0, "completed")
  T.eq(seda.shared:get(k), "no_such_stage", "reason")
  free(bus)
  bus = nil
  gc()
end)

-- seda-lua: the bus starts when the script's main chunk has run; a script
-- that fails leaves the journal for the next run.
local function script(dir, body)
  local path = dir .. "/prog.lua"
  T.write(path, body)
  return sh(q(BIN) .. " " .. q(path))
end

T.test("seda-lua: the replay starts after the script, whatever the declaration order", function()
  local base = T.tmpdir()
  local dir = base .. "/d"
  journal(dir, "a", 7, { "b", "c" })
  local out, code = script(base, [[
    local seda = require "seda"
    local bus = seda.bus{ data_dir = ]] .. string.format("%q", dir) .. [[ }
    bus:stage{ name = "a", durable = "at_least_once", handler = function() end }
    local t = seda.now() + 0.3
    while seda.now() < t do end           -- what a slow script does
    bus:stage{ name = "b", handler = function() end }
    bus:stage{ name = "c", handler = function(env)
      local f = io.open(]] .. string.format("%q", base .. "/done") .. [[, "a")
      f:write(env.payload, "\n")
      f:close()
    end }
  ]])
  T.eq(code, 0, "exit: " .. out)
  local n = 0
  for _ in io.lines(base .. "/done") do n = n + 1 end
  T.eq(n, 7, "every replayed envelope reached c")
  T.eq(rows(dir), 0, "journal emptied")
end)

T.test("seda-lua: a script that fails before its bus started leaves the journal alone", function()
  local base = T.tmpdir()
  local dir = base .. "/d"
  journal(dir, "a", 4, { "b" })
  local out, code = script(base, [[
    local seda = require "seda"
    local bus = seda.bus{ data_dir = ]] .. string.format("%q", dir) .. [[ }
    bus:stage{ name = "a", durable = "at_least_once", handler = function() end }
    error("the script fails before declaring b")
  ]])
  T.eq(code, 1, "exit")
  T.contains(out, "the script fails", "error said")
  T.eq(rows(dir, "stage = 'a'"), 4, "rows still journaled")
end)

-- ---- item: a malformed row is quarantined, the rest replay ----------------

T.test("malformed journal rows are quarantined and named; the good rows replay in order", function()
  local dir = T.tmpdir() .. "/d"
  journal(dir, "a", 12, nil)
  local db = dir .. "/seda.db"
  sqlite(db, "UPDATE envelopes SET slip = CAST('abc' AS BLOB) WHERE id = 'id3';" ..
             "UPDATE envelopes SET slip = X'0000' WHERE id = 'id5';" ..
             "UPDATE envelopes SET id = printf('%.*c', 10000, 'x') WHERE id = 'id7';" ..
             "UPDATE envelopes SET headers = CAST('k' AS BLOB) WHERE id = 'id9';")
  local bus = seda.bus{ data_dir = dir, workers = 1 }
  local k = T.uniq("q_order")
  seda.shared:set("q_order_key", k)
  bus:stage{ name = "a", durable = "at_least_once", concurrency = 1,
             handler = function(env)
               local key = seda.shared:get("q_order_key")
               seda.shared:set(key, (seda.shared:get(key) or "") .. env.payload .. " ")
             end }
  T.idle(bus, 20)
  local s = T.accounting(bus)
  T.eq(s.quarantined, 4, "quarantined")
  T.eq(s.accepted, 8, "replayed")
  T.eq(seda.shared:get(k), "p1 p2 p4 p6 p8 p10 p11 p12 ", "good rows, in order")
  free(bus)
  bus = nil
  gc()
  T.eq(rows(dir), 0, "no row left to replay")
  local out, code = sh(q(BIN) .. " dlq " .. q(dir) .. " quarantine")
  T.eq(code, 0, "dlq quarantine: " .. out)
  T.contains(out, "slip blob (3 bytes) does not end in NUL", "row 3")
  T.contains(out, 'slip[1] ("") is not a stage name', "row 5")
  T.contains(out, "id is 10000 bytes (at most 127)", "row 7")
  T.contains(out, "headers blob (1 bytes) does not end in NUL", "row 9")
  -- The rows are kept byte for byte.
  T.eq(tonumber(sqlite(dir .. "/seda.db",
       "SELECT length(id) FROM quarantine WHERE key = 7")), 10000, "kept as is")
  -- The next run does not see them again.
  local bus2 = seda.bus{ data_dir = dir, workers = 1 }
  bus2:stage{ name = "a", durable = "at_least_once", handler = function() end }
  T.idle(bus2)
  T.eq(bus2:stats().accepted, 0, "nothing replayed twice")
  T.eq(bus2:stats().quarantined, 0, "nothing new quarantined")
  free(bus2)
  bus2 = nil
  gc()
end)

T.test("a quarantined row is named on stderr with its key and the fault", function()
  local base = T.tmpdir()
  local dir = base .. "/d"
  journal(dir, "a", 3, nil)
  sqlite(dir .. "/seda.db", "UPDATE envelopes SET slip = CAST('zz' AS BLOB) WHERE id = 'id2'")
  local out, code = sh(q(BIN) .. " -e " .. q([[
    local b = require "seda".bus{ data_dir = ]] .. string.format("%q", dir) .. [[ }
    b:stage{ name = "a", durable = "at_least_once", handler = function() end }
  ]]))
  T.eq(code, 0, "exit: " .. out)
  T.contains(out, "journal row 2 (id \"id2\") is malformed: slip blob (2 bytes) does not end in NUL; quarantined", "named")
  T.contains(out, "1 malformed journal row quarantined, 2 envelopes replayed", "summary")
end)

-- ---- item: a damaged WAL is reported, not discarded silently --------------

-- A child journals 12 envelopes (one commit each) and is SIGKILLed: the
-- rows are in the WAL only.
local function crash_with_wal(dir)
  local out, code = sh(q(BIN) .. " -e " .. q([[
    local seda = require "seda"
    local b = seda.bus{ data_dir = ]] .. string.format("%q", dir) .. [[, workers = 1 }
    b:stage{ name = "a", durable = "at_least_once", pull = true }
    for i = 1, 12 do assert(b:publish("a", "p" .. i, { id = "w" .. i })) end
    local pid = io.open("/proc/self/stat"):read("n")
    os.execute("kill -9 " .. pid)
  ]]))
  T.eq(code, 137, "child killed: " .. out)
  local f = assert(io.open(dir .. "/seda.db-wal", "rb"))
  local size = f:seek("end")
  f:close()
  return size
end

local function damage(path, off, n)
  local f = assert(io.open(path, "r+b"))
  f:seek("set", off)
  local t = {}
  for i = 1, n do t[i] = string.char((i * 37 + 11) % 256) end
  f:write(table.concat(t))
  f:close()
end

local function reopen_report(dir)
  return sh(q(BIN) .. " -e " .. q([[
    local b = require "seda".bus{ data_dir = ]] .. string.format("%q", dir) .. [[ }
    b:stage{ name = "a", durable = "at_least_once", pull = true }
    b:start()
    local s = b:stats()
    print("stats", s.wal_discarded_frames, s.wal_discarded_bytes, b:stats("a").depth)
  ]]))
end

for _, case in ipairs({
  { name = "200 bytes at offset 100", how = function(p) damage(p, 100, 200) end,
    cause = "checksum mismatch at frame 1" },
  { name = "its first 32 bytes", how = function(p) damage(p, 0, 32) end,
    cause = "the WAL header is damaged" },
  { name = "truncated to 5000 bytes",
    how = function(p) assert(os.execute("truncate -s 5000 " .. q(p))) end,
    cause = "cut short" },
}) do
  T.test("a damaged WAL (" .. case.name .. ") is reported on stderr and in stats", function()
    local dir = T.tmpdir() .. "/d"
    local size = crash_with_wal(dir)
    case.how(dir .. "/seda.db-wal")
    local out, code = reopen_report(dir)
    T.eq(code, 0, "exit: " .. out)
    T.contains(out, "seda.db-wal: ", "the WAL named")
    T.contains(out, "discarded by recovery: ", "said")
    T.contains(out, case.cause, "the cause")
    local frames, bytes, depth = out:match("stats\t(%d+)\t(%d+)\t(%d+)")
    T.ok(frames, "stats line in: " .. out)
    frames, bytes, depth = tonumber(frames), tonumber(bytes), tonumber(depth)
    T.ok(frames >= 1, "frames counted: " .. frames)
    T.ok(bytes > 0 and bytes <= size, "bytes counted: " .. bytes)
    T.ok(depth < 12, "rows lost: " .. depth)
  end)
end

T.test("a clean crash reports nothing discarded and loses nothing", function()
  local dir = T.tmpdir() .. "/d"
  crash_with_wal(dir)
  local out, code = reopen_report(dir)
  T.eq(code, 0, "exit: " .. out)
  T.ok(not out:find("discarded", 1, true), "nothing said: " .. out)
  T.contains(out, "stats\t0\t0\t12", "every row")
end)

-- ---- item: a data_dir is trusted only if it is ours ------------------------

T.test("a data_dir or journal owned by another user is refused, naming it", function()
  local dir = T.tmpdir() .. "/d"
  journal(dir, "pay", 1, nil)
  local st = io.popen("id -u"):read("l")
  if st ~= "0" then print("  (skipped: chown needs root)") return end
  assert(os.execute("chown -R 65534 " .. q(dir)))
  local err = T.raises(function() seda.bus{ data_dir = dir } end, "foreign dir",
                      "owned by uid 65534", "not trusted")
  T.contains(err, dir, "path named")
  assert(os.execute("chown 0 " .. q(dir) .. " " .. q(dir .. "/seda.lock")))
  T.raises(function() seda.bus{ data_dir = dir } end, "foreign db",
           "seda.db: owned by uid 65534")
  assert(os.execute("chown -R 0 " .. q(dir) .. " && chmod 0777 " .. q(dir)))
  T.raises(function() seda.bus{ data_dir = dir } end, "world-writable dir",
           "writable by group or others (mode 0777)")
  assert(os.execute("chmod 0700 " .. q(dir)))
  local b = seda.bus{ data_dir = dir }
  free(b)
  b = nil
  gc()
end)

T.test("a new data_dir is private: 0700, journal files 0600", function()
  local base = T.tmpdir()
  local dir = base .. "/new/d"
  local b = seda.bus{ data_dir = dir }
  b:stage{ name = "s", durable = "at_least_once", pull = true }
  assert(b:publish("s", "secret", { id = "1" }))
  local out = sh("stat -c '%a %n' " .. q(dir) .. " " .. q(base .. "/new") .. " " ..
                 q(dir .. "/seda.db") .. " " .. q(dir .. "/seda.db-wal") .. " " ..
                 q(dir .. "/seda.lock"))
  T.contains(out, "700 " .. dir .. "\n", "dir")
  T.contains(out, "700 " .. base .. "/new\n", "parent made")
  T.contains(out, "600 " .. dir .. "/seda.db\n", "db")
  T.contains(out, "600 " .. dir .. "/seda.db-wal\n", "wal")
  T.contains(out, "600 " .. dir .. "/seda.lock\n", "lock")
  free(b)
  b = nil
  gc()
end)

T.test("a bus that does not declare a stage with journaled rows says they wait", function()
  local dir = T.tmpdir() .. "/data"
  journal(dir, "gone", 3, nil)
  local script = T.write(T.tmpdir() .. "/o.lua", [[
local seda = require "seda"
local bus = seda.bus{ data_dir = ]] .. string.format("%q", dir) .. [[, workers = 1 }
bus:stage{ name = "other", durable = "at_least_once", handler = function() end }
bus:start()
print("started")
bus:shutdown(5)
]])
  local p = io.popen("'" .. BIN .. "' '" .. script .. "' 2>&1")
  local out = p:read("a")
  p:close()
  T.contains(out, "started", "the bus started")
  T.contains(out, "stage=gone", "names the stage")
  T.contains(out, "holds 3 envelopes", "counts its rows")
  T.contains(out, "does not declare", "says why they wait")
  -- Declared, they replay (nothing was lost).
  local b = seda.bus{ data_dir = dir, workers = 1 }
  b:stage{ name = "gone", durable = "at_least_once", pull = true }
  b:start()
  T.eq(b:stats("gone").depth, 3, "replayed once declared")
  free(b)
  b = nil
  gc()
end)

T.done()
