#!/bin/sh
# Trust and bounds around the control socket and --metrics:
#   --metrics never follows a symlink planted next to its file;
#   attach refuses a server run by another user (SO_PEERCRED);
#   a client that never reads its output cannot grow the server without
#   bound, and other clients are served meanwhile;
#   the 65th client is refused with a message and a non-zero exit;
#   idle clients are closed after --idle-timeout.
# socat plays the clients that send and never read, or sit idle
# (scripts/deps.sh installs it).
. "$(dirname "$0")/lib.sh"

if ! command -v socat >/dev/null 2>&1; then
    echo "skip $NAME: socat not installed (sh scripts/deps.sh installs it)"
    exit 0
fi

printf '%s\n' \
    'local seda = require "seda"' \
    'B = seda.bus{ workers = 1 }' \
    'B:stage{ name = "s", handler = function(env) end }' >"$D/p.lua"

rss_mb() { awk '/^VmRSS:/ { print int($2 / 1024) }' "/proc/$1/status"; }

# ---- --metrics and a planted symlink ----
M="$D/metrics.prom"
printf 'victim\n' >"$D/victim"
ln -s "$D/victim" "$M.tmp"
S="$D/ctl.sock"
start_server "$D/log" --serve --control "$S" --metrics "$M" "$D/p.lua"
check "server answers" wait_until "$DEADLINE" sock_up "$S"
check "--metrics file written" wait_until "$DEADLINE" grep -q seda_buses "$M"
check "the file the planted symlink points at is untouched" \
    [ "$(cat "$D/victim")" = victim ]
check "the planted symlink itself is left alone" [ -L "$M.tmp" ]
check "the metrics file is a regular file" [ -f "$M" ] && [ ! -L "$M" ]
left=$(ls "$D" | grep -c 'metrics.prom.tmp.' || true)
check "no temporary file left behind ($left)" [ "$left" = 0 ]

# ---- a client that never reads ----
base=$(rss_mb "$SPID")
i=0
: >"$D/big"
while [ $i -lt 40 ]; do
    echo 'seda.shared:incr("big"); print(("x"):rep(4e6))' >>"$D/big"
    i=$((i + 1))
done
# Sends 40 commands of 4 MB output each, reads nothing, stays.
socat -u SYSTEM:"cat '$D/big'; exec sleep 60" UNIX-CONNECT:"$S" &
NPID=$!
PIDS="$PIDS $NPID"
started() { [ "$(ask "$S" 'print(seda.shared:get("big"))')" != nil ]; }
check "the silent client's first command ran" \
    wait_until "$DEADLINE" started
check "another client is served meanwhile" ask_is "$S" other 'print("other")'
ran=$(ask "$S" 'print(seda.shared:get("big"))')
check "the silent client's lines wait for it to read (ran $ran of 40)" \
    [ "$ran" -le 3 ]
grown=$(( $(rss_mb "$SPID") - base ))
# 40 commands ran would hold 160 MB of output; one holds ~4 MB plus the
# Lua string it was made from.  Sanitizers add shadow memory for both.
limit=40
case "${V:-release}" in asan) limit=80 ;; tsan) limit=150 ;; esac
check "the server did not grow by its output (grew $grown MB, limit $limit)" \
    [ "$grown" -lt "$limit" ]
kill "$NPID" 2>/dev/null
wait "$NPID" 2>/dev/null
check "the server goes on after it left" \
    wait_until "$DEADLINE" ask_is "$S" alive 'print("alive")'

# ---- 64 clients, the 65th refused ----
mkfifo "$D/idle"
exec 3<>"$D/idle"               # keeps the clients' input open, unread
i=0
CL=""
while [ $i -lt 64 ]; do
    socat STDIO UNIX-CONNECT:"$S" <"$D/idle" >/dev/null 2>&1 &
    CL="$CL $!"
    i=$((i + 1))
done
PIDS="$PIDS $CL"
full() {
    out=$(echo 'print("in")' | timeout 20 "$SEDA" attach "$S" 2>&1)
    [ $? != 0 ] && contains "$out" "too many control clients"
}
check "the 65th client is refused" wait_until "$DEADLINE" full
out=$(echo 'print("in")' | timeout 20 "$SEDA" attach "$S" 2>"$D/err65")
rc=$?
err=$(cat "$D/err65")
check "piped attach exits 1 when refused (rc $rc)" [ "$rc" = 1 ]
check "... and prints the server's refusal ($err)" \
    contains "$err" "too many control clients (64 connected"
check "... and ran nothing ($out)" [ -z "$out" ]
for p in $CL; do kill "$p" 2>/dev/null; waitpid_bounded "$p"; done
check "a slot is free again once a client leaves" \
    wait_until "$DEADLINE" ask_is "$S" in 'print("in")'
stop_server
check "server exits 0 (got $SRC)" [ "$SRC" = 0 ]

# ---- idle clients are closed after --idle-timeout ----
start_server "$D/log3" --serve --control "$S" --idle-timeout 0.5 "$D/p.lua"
check "server with --idle-timeout answers" wait_until "$DEADLINE" [ -S "$S" ]
socat STDIO UNIX-CONNECT:"$S" <"$D/idle" >"$D/idle.out" 2>&1 &
IPID=$!
PIDS="$PIDS $IPID"
gone_pid() { ! kill -0 "$1" 2>/dev/null; }
check "an idle client is closed by the server" wait_until "$DEADLINE" gone_pid "$IPID"
wait "$IPID" 2>/dev/null
check "... and told why ($(tail -1 "$D/idle.out"))" \
    grep -q "closing this control connection: idle for 0.5s" "$D/idle.out"
exec 3>&-
stop_server
check "server exits 0 (got $SRC)" [ "$SRC" = 0 ]
out=$("$SEDA" --help)
check "--help documents --idle-timeout" contains "$out" "--idle-timeout SECS"
out=$(timeout 20 "$SEDA" --serve --idle-timeout soon "$D/p.lua" 2>&1)
rc=$?
check "a bad --idle-timeout is refused (rc $rc)" [ "$rc" != 0 ]
check "... naming the flag ($out)" contains "$out" "--idle-timeout"

# ---- attach checks who runs the server ----
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1 &&
   getent passwd nobody >/dev/null 2>&1; then
    NB=$(id -u nobody)
    chmod 755 "$D"
    mkdir "$D/shared"
    chmod 1777 "$D/shared"
    cp "$D/p.lua" "$D/shared/p.lua"
    chmod 644 "$D/shared/p.lua"
    X="$D/shared/ctl.sock"
    setpriv --reuid="$NB" --regid="$(id -g nobody)" --clear-groups \
        "$SEDA" --serve --control "$X" "$D/shared/p.lua" >"$D/nlog" 2>&1 &
    XPID=$!
    PIDS="$PIDS $XPID"
    check "a server run by nobody listens" wait_until "$DEADLINE" [ -S "$X" ]
    out=$(echo "io.open('$D/shared/typed', 'w'):close()" |
          timeout 20 "$SEDA" attach "$X" 2>&1)
    rc=$?
    check "attach refuses a server of another user (rc $rc)" [ "$rc" = 1 ]
    check "... saying whose it is ($out)" contains "$out" "runs as uid $NB"
    check "... and sent it nothing" [ ! -e "$D/shared/typed" ]
    kill -TERM "$XPID"
    waitpid_bounded "$XPID"
else
    echo "skip $NAME: the SO_PEERCRED check needs root, setpriv and user nobody"
fi
finish
