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
lines=$(wc -l <"$D/text.err")
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
