#!/bin/sh
# The control socket (seda-lua --control PATH) and --metrics: mode 0600;
# clients isolated from each other; garbage, an oversized line and a
# client killed mid-command cost only that client; refusing a PATH that is
# a regular file or a live socket; reusing a stale socket; the `metrics`
# request and the --metrics file in Prometheus text format.
. "$(dirname "$0")/lib.sh"

printf '%s\n' \
    'local seda = require "seda"' \
    'B = seda.bus{ workers = 2 }' \
    'B:stage{ name = "parse", handler = function(env) end }' \
    'for i = 1, 10 do B:publish("parse", i) end' >"$D/p.lua"
S="$D/ctl.sock"
M="$D/metrics.prom"
start_server "$D/log" --serve --control "$S" --metrics "$M" "$D/p.lua"
check "server answers" wait_until "$DEADLINE" sock_up "$S"
check "socket mode is 0600" [ "$(stat -c %a "$S")" = 600 ]
check "socket is a socket" [ -S "$S" ]

# Expressions, statements, =expr, multi-line chunks, errors.
out=$(ask "$S" '1 + 1' '=2 * 3' 'x = 5' 'print(x)' 'for i = 1, 2 do' 'io.write(i, ";")' 'end' 'print()' 'error("boom-marker")' 'print("still")')
check "expressions, statements and chunks" \
    [ "$(printf '%s' "$out" | head -5 | tr '\n' '|')" = "2|6|5|1;2;|control:1: boom-marker|" ]
check "an error goes back to the client and the session goes on" contains "$out" "still"

# One command: attach SOCK 'expr' prints and exits 0, or 1 when it raised;
# --json prints results as JSON.
out=$(timeout 20 "$SEDA" attach "$S" 'print(B:stats("parse").capacity)' 2>&1 </dev/null)
rc=$?
check "attach SOCK 'expr' runs it and exits 0 (rc $rc: $out)" [ "$rc" = 0 ] && [ "$out" = 1024 ]
out=$(timeout 20 "$SEDA" attach "$S" 'error("one-shot-marker")' 2>&1 </dev/null)
rc=$?
check "a command that raises exits 1 (rc $rc)" [ "$rc" = 1 ]
check "... and says why" contains "$out" "one-shot-marker"
# Piped lines: every line runs; the exit status is 1 when one raised.
out=$(printf '%s\n' 'error("piped-marker")' 'print("after")' | timeout 20 "$SEDA" attach "$S" 2>&1)
rc=$?
check "piped: a line that raised exits 1 (rc $rc)" [ "$rc" = 1 ]
check "... the later lines still ran" contains "$out" "after"
out=$(printf '%s\n' 'print("fine")' | timeout 20 "$SEDA" attach "$S" 2>&1)
rc=$?
check "piped: no error exits 0 (rc $rc: $out)" [ "$rc" = 0 ]
out=$(printf '%s\n' 'for i = 1, 2 do' | timeout 20 "$SEDA" attach "$S" 2>&1)
rc=$?
check "piped: input ending inside a chunk exits 1 (rc $rc)" [ "$rc" = 1 ]
check "... saying so ($out)" contains "$out" "the input ended inside a chunk"

# stats(STAGE): that stage alone; tap() without a stage: its usage.
out=$(timeout 20 "$SEDA" attach "$S" 'print(stats("parse"))' 2>&1 </dev/null)
check "stats(\"parse\") prints the parse row ($out)" contains "$out" "parse"
check "... and no total row" eval '! contains "$out" "(total)"'
out=$(timeout 20 "$SEDA" attach "$S" 'local t = stats("parse") local n = 0 for _ in pairs(t) do n = n + 1 end print(n, t.parse.capacity)' 2>&1 </dev/null)
check "... returns that stage only ($out)" [ "$out" = "$(printf '1\t1024')" ]
out=$(timeout 20 "$SEDA" attach "$S" 'stats("nope")' 2>&1 </dev/null)
rc=$?
check "stats(\"nope\") raises naming it (rc $rc: $out)" contains "$out" "stats: no such stage 'nope'"
out=$(timeout 20 "$SEDA" attach "$S" 'tap()' 2>&1 </dev/null)
check "tap() prints its usage ($out)" contains "$out" "usage: tap(stage [, n = 10 [, seconds = 10]])"

out=$(timeout 20 "$SEDA" attach --json "$S" 'B:stats("parse").delivered, { ok = true }' 2>&1 </dev/null)
check "--json prints results as JSON ($out)" [ "$out" = '[10,{"ok":true}]' ]
out=$(timeout 20 "$SEDA" attach "$S" 'for i = 1, 2 do' 2>&1 </dev/null)
rc=$?
check "an unfinished command exits 1 (rc $rc)" [ "$rc" = 1 ]
# --json runs statements too, and every command is one chunk whatever its
# lines: a later line that raises exits 1.  seda.null and bytes that are not
# UTF-8 still make valid JSON.
out=$(timeout 20 "$SEDA" attach --json "$S" 'local n = B:stats("parse").delivered' 2>&1 </dev/null)
rc=$?
check "--json runs a statement: [] (rc $rc: $out)" [ "$rc" = 0 ] && [ "$out" = '[]' ]
out=$(timeout 20 "$SEDA" attach --json "$S" 'B:stats("parse").delivered -- a comment' 2>&1 </dev/null)
check "--json takes a trailing comment ($out)" [ "$out" = 10 ]
out=$(timeout 20 "$SEDA" attach --json "$S" '1, nil, seda.null, "\255ok"' 2>&1 </dev/null)
check "--json: nil and seda.null are null, bad UTF-8 U+FFFD ($out)" \
    [ "$out" = "$(printf '[1,null,null,"\357\277\275ok"]')" ]
out=$(timeout 20 "$SEDA" attach "$S" "$(printf 'local t = {}\nfor i = 1, 3 do t[#t + 1] = i end\nprint(#t)')" 2>&1 </dev/null)
rc=$?
check "a command of several lines is one chunk (rc $rc: $out)" [ "$rc" = 0 ] && [ "$out" = 3 ]
out=$(timeout 20 "$SEDA" attach "$S" "$(printf 'print("first")\nerror("second-line-marker")')" 2>&1 </dev/null)
rc=$?
check "its later line raising exits 1 (rc $rc)" [ "$rc" = 1 ]
check "... and says why" contains "$out" "second-line-marker"

# Isolation: a client's globals are its own.
mkfifo "$D/fifo"
timeout 30 "$SEDA" attach "$S" <"$D/fifo" >"$D/a.out" 2>&1 &
APID=$!
PIDS="$PIDS $APID"
exec 3>"$D/fifo"
echo 'only_a = "A-secret"' >&3
echo 'print("a sees", only_a)' >&3
check "client A sees its global" wait_until "$DEADLINE" grep -q 'a sees	A-secret' "$D/a.out"
check "client B does not see A's global" ask_is "$S" nil 'print(only_a)'
check "B's print goes to B only" ask_is "$S" "to-b" 'print("to-b")'
check "nothing of B's reached A" sh -c "! grep -q to-b '$D/a.out'"
check "script globals are shared (B reads the bus)" ask_is "$S" 10 'print(B:stats("parse").delivered)'
check "the REPL shows seda.null as seda.null (not userdata: (nil))" \
    ask_is "$S" "{ 1, seda.null, a = seda.null }" '{ 1, seda.null, a = seda.null }'

# The REPL names buses by their stable names (as /metrics and the page
# do) and says the window of the p99 columns; it used to say "bus 1",
# "bus 2" whatever the name.
out=$(ask "$S" 'N = require("seda").bus{ name = "orders", workers = 1, stats_window = 3 }' \
    'N:stage{ name = "named" }' 'stats()' 'workers()' 'N:shutdown(5)')
check "stats() starts a bus's block with its name ($out)" contains "$out" "
bus1: workers=2 "
check "... a named bus's too" contains "$out" "
orders: workers=1 "
check "... and says the p99 window" contains "$out" "sojourn99, service99: last 3 s"
check "workers() names the buses" contains "$out" "orders: 1 workers"
out=$(ask "$S" 'os.exit(7)' 'print("after exit")')
check "os.exit from a client is refused ($out)" contains "$out" "not from an attached client"
check "and that client goes on" contains "$out" "after exit"
check "the server still serves" ask_is "$S" alive 'print("alive")'
exec 3>&-
wait "$APID"

# Garbage: binary bytes, NUL, an unknown control request.
out=$(printf '\377\376 ]]] \000 garbage\n\001bogus\nprint("after-garbage")\n' | timeout 20 "$SEDA" attach "$S" 2>&1)
check "garbage gets an error" contains "$out" "unexpected symbol"
check "unknown control request is an error" contains "$out" "unknown control request"
check "the session goes on after garbage" contains "$out" "after-garbage"

# An oversized line (200 KB): error, buffer discarded, the session goes on.
out=$( (head -c 200000 /dev/zero | tr '\0' 'x'; printf '\nprint("after-big")\n') | timeout 20 "$SEDA" attach "$S" 2>&1)
check "an oversized line gets an error" contains "$out" "line too long"
check "the session goes on after the oversized line" contains "$out" "after-big"
check "no part of the oversized line was run" sh -c "! printf '%s' '$out' | grep -q xxxx"

# A client killed in the middle of a command with a large reply.
printf '%s\n' "io.open('$D/busy', 'w'):close(); local t = seda.now() + 1; while seda.now() < t do end; print(string.rep('y', 4000000))" >"$D/cmd"
timeout 30 "$SEDA" attach "$S" <"$D/cmd" >/dev/null 2>&1 &
KPID=$!
check "the long command started" wait_until "$DEADLINE" [ -e "$D/busy" ]
kill -9 "$KPID" 2>/dev/null
wait "$KPID" 2>/dev/null
check "server survives a client killed mid-command" \
    wait_until "$DEADLINE" ask_is "$S" alive 'print("alive")'
check "server process still running" kill -0 "$SPID"

# Several clients at once.
CP=""
for i in 1 2 3 4 5; do
    ask "$S" "print('c$i', B:stats('parse').delivered)" >"$D/c$i.out" &
    CP="$CP $!"
done
for p in $CP; do wait "$p"; done
allok=true
for i in 1 2 3 4 5; do
    [ "$(cat "$D/c$i.out")" = "c$i	10" ] || allok=false
done
check "five concurrent clients each get their own answer" $allok

# Prometheus text: the metrics request and the --metrics file.
out=$(ask "$S" metrics)
check "metrics: delivered counter" contains "$out" 'seda_stage_delivered_total{bus="bus1",stage="parse"} 10'
check "metrics: TYPE line" contains "$out" '# TYPE seda_stage_delivered_total counter'
check "metrics: HELP line" contains "$out" '# HELP seda_stage_depth'
check "metrics: depth gauge" contains "$out" 'seda_stage_depth{bus="bus1",stage="parse"} 0'
check "metrics: bus in_system" contains "$out" 'seda_bus_in_system{bus="bus1"} 0'
check "metrics: latency histogram" contains "$out" 'seda_stage_service_seconds_bucket{bus="bus1",stage="parse",le="+Inf"} 10'
check "metrics: dead letters by reason" contains "$out" 'seda_stage_dead_lettered_total{bus="bus1",stage="parse",reason="hop_refused"} 0'
check "metrics: handed_off, the last term of the books" contains "$out" 'seda_bus_handed_off_total{bus="bus1"} 0'
check "metrics: build info" contains "$out" 'seda_build_info{version="'
check "metrics: process figures" contains "$out" 'process_resident_memory_bytes '
bad=$(printf '%s\n' "$out" | grep -v '^#' | grep -Ev '^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [-+0-9.eE]+(Inf|NaN)?$' | head -3)
check "metrics: every sample line well formed ($bad)" [ -z "$bad" ]
check "--metrics file written" wait_until "$DEADLINE" grep -q 'seda_stage_delivered_total{bus="bus1",stage="parse"} 10' "$M"
check "--metrics file is replaced atomically (no .tmp left)" [ ! -e "$M.tmp" ]

# Refusals: a live socket, a regular file.
out=$(timeout 20 "$SEDA" --serve --control "$S" "$D/p.lua" 2>&1)
rc=$?
check "refuses a socket in use (rc $rc)" [ "$rc" != 0 ]
check "says it is in use ($out)" contains "$out" "in use"
: >"$D/regular"
out=$(timeout 20 "$SEDA" --serve --control "$D/regular" "$D/p.lua" 2>&1)
rc=$?
check "refuses a regular file (rc $rc)" [ "$rc" != 0 ]
check "says it is not a socket ($out)" contains "$out" "not a socket"
check "the regular file is untouched" [ -f "$D/regular" ]

# A stale socket (its server was killed): reused.
kill -9 "$SPID"
wait "$SPID" 2>/dev/null
check "killed server left its socket behind" [ -S "$S" ]
start_server "$D/log2" --serve --control "$S" "$D/p.lua"
check "a stale socket is reused" wait_until "$DEADLINE" sock_up "$S"
check "reused socket mode is 0600" [ "$(stat -c %a "$S")" = 600 ]

# A client that goes away while its command waits on callbacks stops the
# command, never a callback: all 200 callbacks run, none is interrupted.
# (The client leaves once every publish is made and the command waits on
# the callbacks -- a fixed timeout raced a slow start under the
# sanitizers.  The command says so through a file, since the server runs
# one command at a time and would answer a question only after it.)
printf '%s\n' 'local function burn() local t = seda.now() while seda.now() - t < 0.003 do end end for i = 1, 200 do B:publish("parse", i, { on_complete = function() burn(); seda.shared:incr("cbn") end }) end io.open("'"$D/cbpub"'", "w"):close() print(B:wait())' >"$D/cbcmd"
"$SEDA" attach "$S" <"$D/cbcmd" >/dev/null 2>&1 &
APID=$!
check "the callbacks' command is waiting" wait_until "$DEADLINE" [ -e "$D/cbpub" ]
kill "$APID" 2>/dev/null
wait "$APID" 2>/dev/null
cbs_done() { [ "$(ask "$S" 'print(seda.shared:get("cbn"))')" = 200 ]; }
check "every callback ran after the client left" wait_until "$DEADLINE" cbs_done
check "no callback was interrupted" sh -c "! grep -q 'on_complete: .*interrupted' '$D/log2'"
stop_server
check "exits 0 on SIGTERM (got $SRC)" [ "$SRC" = 0 ]
check "socket removed at exit" [ ! -e "$S" ]

# attach to nothing.
out=$(timeout 20 "$SEDA" attach "$D/nothing.sock" 2>&1 </dev/null)
rc=$?
check "attach to a missing socket fails (rc $rc)" [ "$rc" != 0 ]
check "and says why ($out)" contains "$out" "cannot connect"

# Bad attach arguments say what was wrong (an unknown option is not taken
# for the PATH).
out=$(timeout 20 "$SEDA" attach --bogus "$D/nothing.sock" 2>&1 </dev/null)
rc=$?
check "attach --bogus fails: a usage error, 2 (rc $rc)" [ "$rc" = 2 ]
check "... naming the option ($out)" contains "$out" "unknown option '--bogus'"
out=$(timeout 20 "$SEDA" attach "$D/nothing.sock" --json 1 2>&1 </dev/null)
check "extra arguments are named ($out)" contains "$out" "more than PATH and one command"
out=$(timeout 20 "$SEDA" attach --json "$D/nothing.sock" 2>&1 </dev/null)
check "--json without a command is named ($out)" contains "$out" "--json needs a command"

# A --metrics path that cannot be written stops the start (as a bad --http).
out=$(timeout 20 "$SEDA" --serve --metrics "$D/no/such/dir/m.prom" -e 'print("started")' 2>&1 </dev/null)
rc=$?
check "a bad --metrics path fails the start (rc $rc)" [ "$rc" = 1 ]
check "... naming the path ($out)" contains "$out" "cannot write '$D/no/such/dir/m.prom'"
check "... before the script ran" sh -c "! printf '%s' \"\$1\" | grep -q started" _ "$out"

# attach to a socket that is not seda-lua's.
python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)
c, _ = s.accept(); time.sleep(8)' "$D/other.sock" &
PYP=$!
wait_until "$DEADLINE" [ -S "$D/other.sock" ]
out=$(timeout 20 "$SEDA" attach "$D/other.sock" 'print(1)' 2>&1 </dev/null)
rc=$?
kill "$PYP" 2>/dev/null
check "attach to another program's socket fails (rc $rc)" [ "$rc" = 1 ]
check "and says it is not seda-lua's ($out)" contains "$out" "not a seda-lua control socket"
finish
