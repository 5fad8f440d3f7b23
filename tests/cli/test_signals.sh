#!/bin/sh
# Signals and the end of a run: SIGTERM/SIGINT while a --serve or -i
# script still runs (drain once it returns; a second signal interrupts
# it), a second signal during the drain, --drain running out, and the
# control socket: a client's endless command interrupted by Ctrl-C
# (SIGINT to attach), by the client going away and by a signal to the
# server; attach saying the server went away.
. "$(dirname "$0")/lib.sh"

# ---- a signal while the script runs ----

# The script publishes N envelopes, says so, then spins until $D/go
# exists: the test signals it mid-script, then lets it return.
cat >"$D/early.lua" <<'EOF'
local seda = require "seda"
local go = arg[1]
B = seda.bus{ workers = 2 }
B:stage{ name = "a", capacity = 5000, handler = function(env)
  local t = seda.now() + 0.001
  while seda.now() < t do end
end }
local n = 0
for i = 1, 500 do
  assert(B:publish("a", i, { on_complete = function()
    n = n + 1
    if n == 500 then print("handled " .. n); io.stdout:flush() end
  end }))
end
print("published"); io.stdout:flush()
while not io.open(go) do end
print("script returned"); io.stdout:flush()
EOF

published() { grep -q '^published' "$1"; }

for sig in TERM INT; do
    rm -f "$D/go"
    start_server "$D/e_$sig.log" --serve "$D/early.lua" "$D/go"
    check "--serve $sig: script running" wait_until "$DEADLINE" published "$D/e_$sig.log"
    kill -"$sig" "$SPID"
    : >"$D/go"
    waitpid_bounded "$SPID"
    check "--serve $sig during the script: exit 0 (got $WRC)" [ "$WRC" = 0 ]
    check "--serve $sig during the script: the script finished" \
        grep -q '^script returned' "$D/e_$sig.log"
    check "--serve $sig during the script: every envelope handled" \
        grep -q '^handled 500' "$D/e_$sig.log"
    check "--serve $sig: says it drains" \
        grep -q 'signal received, draining' "$D/e_$sig.log"
done

# -i: the same; no REPL after the signal.
rm -f "$D/go"
mkfifo "$D/in"
"$SEDA" -i "$D/early.lua" "$D/go" <"$D/in" >"$D/i.log" 2>&1 &
SPID=$!
PIDS="$PIDS $SPID"
exec 4>"$D/in"
check "-i: script running" wait_until "$DEADLINE" published "$D/i.log"
kill -INT "$SPID"
: >"$D/go"
echo 'print("repl-" .. "ran")' >&4
exec 4>&-
waitpid_bounded "$SPID"
check "-i INT during the script: exit 0 (got $WRC)" [ "$WRC" = 0 ]
check "-i INT during the script: every envelope handled" grep -q '^handled 500' "$D/i.log"
check "-i INT during the script: no REPL" sh -c "! grep -q repl-ran '$D/i.log'"
check "-i INT: says it drains" grep -q 'signal received, draining' "$D/i.log"

# A second signal interrupts a script that does not return ($D/never is
# never created); the drain still runs; a script error exits 1.  (The
# loop calls into C: under TSan a signal waits for the next intercepted
# call, and a bare `while true do end` in the uninstrumented liblua never
# makes one.)
start_server "$D/f.log" --serve "$D/early.lua" "$D/never"
check "endless script running" wait_until "$DEADLINE" published "$D/f.log"
kill -TERM "$SPID"
kill -INT "$SPID"
waitpid_bounded "$SPID"
check "second signal: the script is interrupted (exit $WRC)" [ "$WRC" = 1 ]
check "second signal: says interrupted" grep -q 'interrupted!' "$D/f.log"
check "second signal: every envelope still handled" grep -q '^handled 500' "$D/f.log"

# ---- the drain ----

cat >"$D/slow.lua" <<'EOF'
local seda = require "seda"
B = seda.bus{ workers = 2 }
B:stage{ name = "a", capacity = 1000, handler = function(env)
  local t = seda.now() + 0.05
  while seda.now() < t do end
end }
for i = 1, 400 do assert(B:publish("a", i)) end
print("published"); io.stdout:flush()
EOF

# A second signal during the drain stops it (400 x 50 ms on 2 workers
# would take 10 s) and says how many were dropped.
start_server "$D/d.log" --serve "$D/slow.lua"
check "slow server up" wait_until "$DEADLINE" published "$D/d.log"
kill -TERM "$SPID"
check "drain started" wait_until "$DEADLINE" grep -q 'draining' "$D/d.log"
kill -INT "$SPID"
waitpid_bounded "$SPID"
check "second signal during the drain: exit 0 (got $WRC)" [ "$WRC" = 0 ]
check "second signal during the drain: count and reason ($(tail -1 "$D/d.log"))" \
    grep -Eq '[1-9][0-9]* envelopes were dropped at exit: a signal stopped the drain' "$D/d.log"

# --drain running out: the count and the reason.
start_server "$D/t.log" --serve --drain 0.2 "$D/slow.lua"
check "server up (--drain 0.2)" wait_until "$DEADLINE" published "$D/t.log"
kill -TERM "$SPID"
waitpid_bounded "$SPID"
check "--drain ran out: exit 0 (got $WRC)" [ "$WRC" = 0 ]
check "--drain ran out: count and reason ($(tail -1 "$D/t.log"))" \
    grep -Eq '[1-9][0-9]* envelopes were dropped at exit: the drain did not finish within 0.2s' "$D/t.log"

# ---- the control socket ----

printf '%s\n' 'local seda = require "seda"' 'B = seda.bus{ workers = 1 }' \
    'B:stage{ name = "s", handler = function() end }' >"$D/svc.lua"
S="$D/ctl.sock"
start_server "$D/c.log" --serve --control "$S" "$D/svc.lua"
check "control server answers" wait_until "$DEADLINE" sock_up "$S"

# A client that died must fail a check, not kill this script: writes to
# its fifo then fail with EPIPE instead of raising SIGPIPE here.
trap '' PIPE

# attach_bg OUT: a piped attach client fed from the fifo $D/a.in (fd 5);
# sets APID.
attach_bg() {
    rm -f "$D/a.in"
    mkfifo "$D/a.in"
    "$SEDA" attach "$S" <"$D/a.in" >"$1" 2>&1 &
    APID=$!
    PIDS="$PIDS $APID"
    exec 5>"$D/a.in"
}
busy_line="io.open('$D/busy', 'w'):close(); while true do end"

# Ctrl-C (SIGINT) in attach while its command runs: that command stops
# with "interrupted!", the session goes on.
rm -f "$D/busy"
attach_bg "$D/a1.out"
echo "$busy_line" >&5
check "endless command started" wait_until "$DEADLINE" [ -e "$D/busy" ]
kill -INT "$APID"
check "SIGINT in attach interrupts the remote command" \
    wait_until "$DEADLINE" grep -q 'interrupted!' "$D/a1.out"
echo 'print("after-" .. "intr")' >&5
check "the session goes on after the interrupt" \
    wait_until "$DEADLINE" grep -q 'after-intr' "$D/a1.out"
check "the attach client is still running" kill -0 "$APID"
exec 5>&-
waitpid_bounded "$APID"
check "attach exits 0 at end of input (got $WRC)" [ "$WRC" = 0 ]

# A client that goes away while its command runs: the command stops and
# the server serves others.
rm -f "$D/busy"
attach_bg "$D/a2.out"
echo "$busy_line" >&5
check "endless command started (2)" wait_until "$DEADLINE" [ -e "$D/busy" ]
kill -9 "$APID"
wait "$APID" 2>/dev/null
exec 5>&-
check "a vanished client's command is interrupted; others are served" \
    wait_until "$DEADLINE" ask_is "$S" alive 'print("alive")'

# SIGTERM to the server while a client's command runs: interrupted, then
# the usual drain and exit 0; the client hears of both.
rm -f "$D/busy"
attach_bg "$D/a3.out"
echo "$busy_line" >&5
check "endless command started (3)" wait_until "$DEADLINE" [ -e "$D/busy" ]
stop_server
check "SIGTERM with a remote command running: exit 0 (got $SRC)" [ "$SRC" = 0 ]
check "the server said it drains" grep -q 'signal received, draining' "$D/c.log"
check "the client got interrupted!" wait_until "$DEADLINE" grep -q 'interrupted!' "$D/a3.out"
echo 'print(1)' >&5
exec 5>&-
waitpid_bounded "$APID"
check "attach exits 1 once the server is gone (got $WRC)" [ "$WRC" = 1 ]
check "attach says the connection closed" grep -q 'attach: connection closed' "$D/a3.out"
finish
