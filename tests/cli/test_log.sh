#!/bin/sh
# The event log (stderr): one line per event with an RFC 3339 time, a
# level and the stage, tracebacks folded into the line, control bytes
# escaped (a payload cannot retitle the terminal or clear it);
# --log-format json makes each line a JSON object; seda.log for handlers;
# options take --opt=value too.
. "$(dirname "$0")/lib.sh"

cat >"$D/log.lua" <<'LUA'
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "s", handler = function(env)
  if env.payload == "boom" then error("bad \27]0;title\7 and \27[2J\rfake") end
  seda.log("warn", "handled", env.payload)
end }
bus:publish("s", "boom")
bus:publish("s", "fine")
bus:wait()
seda.log("info", "main state")
LUA

"$SEDA" "$D/log.lua" 2>"$D/text.err" >/dev/null
RC=$?
check "runs (exit $RC)" [ "$RC" = 0 ]
check "a handler error is one line with time, level and stage" \
    grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z error stage=s handler error: .*log\.lua:4: bad .* \| stack traceback:' "$D/text.err"
check "no raw escape, bell or carriage return reaches the terminal" \
    sh -c "! grep -q \"\$(printf '\\033')\" '$D/text.err' && ! grep -q \"\$(printf '\\007')\" '$D/text.err' && ! grep -q \"\$(printf '\\r')\" '$D/text.err'"
check "they are shown escaped" grep -q 'bad \\x1b\]0;title\\x07 and \\x1b\[2J\\rfake' "$D/text.err"
check "seda.log in a handler names its stage" grep -qE ' warn stage=s handled fine$' "$D/text.err"
check "seda.log on the main state has none" grep -qE ' info main state$' "$D/text.err"
lines=$(grep -vc 'held its worker' "$D/text.err")
check "one line per event ($lines)" [ "$lines" = 3 ]

"$SEDA" --log-format=json "$D/log.lua" 2>"$D/json.err" >/dev/null
bad=0
while IFS= read -r l; do
    printf '%s\n' "$l" | python3 -m json.tool >/dev/null 2>&1 || bad=$((bad + 1))
done <"$D/json.err"
check "--log-format=json: every line parses as JSON ($bad bad)" [ "$bad" = 0 ]
check "--log-format=json: the fields" python3 - "$D/json.err" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
err = [r for r in rows if r["level"] == "error"][0]
assert err["stage"] == "s" and "stack traceback" in err["msg"] and "\x1b" in err["msg"], err
assert set(err) == {"time", "level", "stage", "msg"}, err
assert any(r["level"] == "info" and "stage" not in r for r in rows), rows
PY
"$SEDA" --log-format yaml -e '' 2>"$D/bad.err"
RC=$?
check "a bad --log-format is refused: a usage error (exit $RC)" [ "$RC" = 2 ]
check "... naming the choices" grep -q "'text' or 'json'" "$D/bad.err"
out=$("$SEDA" --drain=1 -e 'print("ran")' 2>&1)
check "--drain=1 is taken as --drain 1 ($out)" [ "$out" = ran ]
# A NUL in what seda.log is given does not cut the line there.
out=$("$SEDA" -e 'require("seda").log("info", "before\0after", "raw\0")' 2>&1)
check "seda.log keeps what follows a NUL ($out)" contains "$out" 'info before\x00after raw\x00'
for v in '' nan -1; do
    out=$("$SEDA" --drain="$v" -e 'print("ran")' 2>&1)
    rc=$?
    check "--drain='$v' is refused: a usage error (exit $rc: $out)" [ "$rc" = 2 ]
    check "... naming the option and the value" contains "$out" "--drain: not a number of seconds: '$v'"
done
# A handler that holds its worker past hold_warn outside seda's waits: a
# warn line naming the stage and seda.blocking, at most once a minute per
# stage (three long calls, one line), none for a call in seda.blocking.
cat >"$D/hold.lua" <<'LUA'
local seda = require "seda"
local bus = seda.bus{ workers = 1, hold_warn = 0.1 }
for _, name in ipairs{ "a", "b" } do
  bus:stage{ name = name, handler = function()
    local t = seda.now() while seda.now() - t < 0.2 do end end }
end
bus:stage{ name = "c", handler = function()
  seda.blocking(function()
    local t = seda.now() while seda.now() - t < 0.2 do end end) end }
for i = 1, 3 do bus:publish("a", i) end
bus:publish("b", 1)
bus:publish("c", 1)
bus:wait()
print(bus:stats().long_holds)
LUA
out=$("$SEDA" "$D/hold.lua" 2>"$D/hold.err")
check "three long calls of a, one of b counted ($out)" [ "$out" = 4 ]
check "one warn line for a ($(cat "$D/hold.err"))" \
    [ "$(grep -c ' warn stage=a a handler held its worker 0\.[0-9]* s outside seda.s waits.*seda\.blocking(fn, \.\.\.)' "$D/hold.err")" = 1 ]
check "... one for b" [ "$(grep -c ' warn stage=b a handler held its worker' "$D/hold.err")" = 1 ]
check "... none for c (in seda.blocking)" sh -c "! grep -q 'stage=c' '$D/hold.err'"
# Levels: debug is left out by default (1000 envelopes logging at debug
# wrote 1000 lines); --log-level and seda.log_level() set the least level
# written, live; a bad level is refused naming the choices.
cat >"$D/levels.lua" <<'LUA'
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "s", handler = function(env)
  seda.log("debug", "got", env.payload)
end }
for i = 1, 1000 do bus:publish("s", i) end
bus:wait()
seda.log("info", "main info")
seda.log("warn", "main warn")
LUA
"$SEDA" "$D/levels.lua" 2>"$D/lv.err" >/dev/null
check "no debug line by default ($(grep -c ' debug ' "$D/lv.err"))" \
    [ "$(grep -c ' debug ' "$D/lv.err")" = 0 ]
check "... info and warn are written" \
    [ "$(grep -cE ' (info main info|warn main warn)$' "$D/lv.err")" = 2 ]
"$SEDA" --log-level debug "$D/levels.lua" 2>"$D/lv.err" >/dev/null
check "--log-level debug: every debug line ($(grep -c ' debug stage=s got ' "$D/lv.err"))" \
    [ "$(grep -c ' debug stage=s got ' "$D/lv.err")" = 1000 ]
"$SEDA" --log-level=warn "$D/levels.lua" 2>"$D/lv.err" >/dev/null
check "--log-level=warn: the warn line alone ($(cat "$D/lv.err"))" \
    [ "$(wc -l <"$D/lv.err")" = 1 ] && grep -q ' warn main warn$' "$D/lv.err"
out=$("$SEDA" --log-level warn -e 'local seda = require "seda"
  print(seda.log_level("debug"), seda.log_level())
  seda.log("debug", "shown now")
  seda.log_level("error"); seda.log("warn", "not shown")' 2>&1)
check "seda.log_level() sets the level live and returns the one before ($out)" \
    contains "$out" "warn	debug"
check "... a debug line shows after it" contains "$out" "debug shown now"
check "... and a warn line not after error" sh -c '! printf "%s" "$1" | grep -q "not shown"' _ "$out"
out=$("$SEDA" --log-level loud -e '' 2>&1)
rc=$?
check "a bad --log-level is refused, a usage error (exit $rc): $out" [ "$rc" = 2 ]
check "... naming the choices" contains "$out" "--log-level: 'debug', 'info', 'warn' or 'error', not 'loud'"
out=$("$SEDA" -e 'require("seda").log_level("verbose")' 2>&1)
check "seda.log_level('verbose') raises naming the choices ($out)" \
    contains "$out" "seda.log_level: 'debug', 'info', 'warn' or 'error', not 'verbose'"
# Fields: a last table argument is the line's fields, k=v in text (sorted,
# quoted when needed), JSON keys with their types under json.
cat >"$D/fields.lua" <<'LUA'
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "s", handler = function(env)
  seda.log("info", "order placed", { id = env.payload, user = "bob smith",
                                     paid = true, total = 12.5, q = 'a"b' })
end }
bus:publish("s", 7)
bus:wait()
LUA
"$SEDA" "$D/fields.lua" 2>"$D/f.err" >/dev/null
check "fields in text are k=v after the message ($(cat "$D/f.err"))" \
    grep -qE ' info stage=s order placed id=7 paid=true q="a\\"b" total=12\.5 user="bob smith"$' "$D/f.err"
"$SEDA" --log-format json "$D/fields.lua" 2>"$D/f.err" >/dev/null
check "fields under json are keys with their types ($(cat "$D/f.err"))" python3 - "$D/f.err" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert r["msg"] == "order placed" and r["stage"] == "s", r
assert r["id"] == 7 and r["paid"] is True and r["total"] == 12.5, r
assert r["user"] == "bob smith" and r["q"] == 'a"b', r
PY
for bad in '{ ["a b"] = 1 }:field name' '{ msg = 1 }:the line' \
           '{ t = {} }:fields.t is a table' '{ [1] = 2 }:keys must be strings'; do
    out=$("$SEDA" -e "require('seda').log('info', 'm', ${bad%%:*})" 2>&1)
    check "seda.log with fields ${bad%%:*} raises ($out)" contains "$out" "${bad#*:}"
done
# Under --log-format json every line of the program's own is one JSON
# object: a script's fatal error with its traceback, a syntax error, a bad
# option (even before --log-format), a warning about options.
printf 'local function f() error("fatal here") end\nf()\n' >"$D/fatal.lua"
printf 'local x = = 1\n' >"$D/syntax.lua"
for run in "$D/fatal.lua" "$D/syntax.lua" "--bogus" "--metrics $D/m.prom -e ''"; do
    eval "\"\$SEDA\" --log-format json $run" 2>"$D/j.err" >/dev/null
    check "--log-format json $run: every stderr line is a JSON event ($(cat "$D/j.err"))" \
        python3 - "$D/j.err" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines, "no line"
for l in lines:
    r = json.loads(l)
    assert {"time", "level", "msg"} <= set(r), r
PY
done
"$SEDA" --log-format json "$D/fatal.lua" 2>"$D/j.err" >/dev/null
check "... the fatal error is one line, traceback included" python3 - "$D/j.err" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
r = json.loads(lines[0])
assert r["level"] == "error" and "fatal here" in r["msg"], r
assert "stack traceback:" in r["msg"] and "fatal.lua:2" in r["msg"], r
PY
"$SEDA" --bogus --log-format=json 2>"$D/j.err" >/dev/null
check "... a bad option before --log-format json too ($(cat "$D/j.err"))" \
    python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).read()); assert "--bogus" in r["msg"], r' "$D/j.err"
"$SEDA" "$D/fatal.lua" 2>"$D/t.err" >/dev/null
check "under text the fatal error is as before: message and traceback" \
    grep -q '^seda-lua: .*fatal.lua:1: fatal here$' "$D/t.err"
# The REPL's errors(), dlq() and stats() show a handler's error with its
# control bytes escaped too.
cat >"$D/repl.lua" <<'EOF'
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "s", max_attempts = 1, handler = function()
  error("bad \27]0;title\7 and \27[2J\rfake")
end }
bus:publish("s", 1)
bus:wait(5)
errors()
dlq()
stats()
EOF
"$SEDA" -i "$D/repl.lua" </dev/null >"$D/repl.out" 2>/dev/null
check "errors() and dlq() show the error escaped" \
    [ "$(grep -c 'bad \\x1b\]0;title\\x07 and \\x1b\[2J\\x0dfake' "$D/repl.out")" = 2 ]
check "... and no raw escape reaches the terminal" \
    sh -c "! grep -q \"\$(printf '\\033')\" '$D/repl.out'"
# A serving process's own events (the --http address, a signal, a --watch
# reload) are log lines too: with --log-format json every stderr line of
# the run parses (they used to be plain "seda-lua: ..." lines).
mkdir -p "$D/srv"
printf 'return function(env) end\n' >"$D/srv/h.lua"
printf '%s\n' 'local seda = require "seda"' \
    'local bus = seda.bus{ workers = 1 }' \
    'bus:stage{ name = "w", handler = "h.lua" }' >"$D/srv/main.lua"
start_server "$D/srv.log" --serve --watch --http 0 --log-format=json "$D/srv/main.lua"
listening() { grep -q 'http: listening on http://' "$1"; }
check "the json server says where it listens" wait_until "$DEADLINE" listening "$D/srv.log"
printf 'return function(env) return true end\n' >"$D/srv/h.lua.new"
mv "$D/srv/h.lua.new" "$D/srv/h.lua"
reloaded() { grep -q "watch: reloaded stage 'w'" "$D/srv.log"; }
check "... and that --watch reloaded the stage" wait_until "$DEADLINE" reloaded
stop_server
check "it exits 0 on SIGTERM ($SRC)" [ "$SRC" = 0 ]
check "every line of its stderr is a JSON log event" python3 - "$D/srv.log" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert all(set(r) >= {"time", "level", "msg"} for r in rows), rows
msgs = [r["msg"] for r in rows]
assert any(m.startswith("http: listening on http://127.0.0.1:") for m in msgs), msgs
assert "signal received, draining" in msgs, msgs
w = [r for r in rows if "reloaded stage 'w'" in r["msg"]]
assert w and w[0]["stage"] == "w" and w[0]["level"] == "info", rows
PY
start_server "$D/srvt.log" --serve --http 0 "$D/srv/main.lua"
check "the text server says where it listens" wait_until "$DEADLINE" listening "$D/srvt.log"
stop_server
check "... as log lines: time, level, message" \
    grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z info http: listening on http://127\.0\.0\.1:[0-9]+/$' "$D/srvt.log"
check "... the signal too" \
    grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z info signal received, draining$' "$D/srvt.log"
finish
