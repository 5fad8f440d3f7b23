# tests/cli/lib.sh -- helpers for the seda-lua program tests (sourced).
#
#   SEDA      the seda-lua binary under test (default build/release/seda-lua;
#             run-tests.sh passes $B/seda-lua)
#   D         a private temporary directory, removed at exit
#
# Every wait is a bounded polling loop with a deadline (a missed deadline
# fails the test); nothing sleeps to synchronise.
set -u
SEDA=${SEDA:-build/release/seda-lua}
case "$SEDA" in /*) ;; *) SEDA="$(pwd)/$SEDA" ;; esac
D=$(mktemp -d "${TMPDIR:-/tmp}/seda-cli.XXXXXX")
export HOME="$D"                 # REPL history goes to $D/.seda_history
NAME=$(basename "$0" .sh)
FAILS=0
FAILED=""                        # what failed, repeated by finish
PASSES=0
PIDS=""
DEADLINE=${CLI_DEADLINE:-30}     # seconds for any one wait

cleanup() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    [ -n "${TMUX_L:-}" ] && tmux -L "$TMUX_L" kill-server 2>/dev/null
    rm -rf "$D"
}
trap cleanup EXIT

ok()   { PASSES=$((PASSES + 1)); echo "ok   $NAME: $*"; }
fail() { FAILS=$((FAILS + 1)); FAILED="$FAILED
  $*"; echo "FAIL $NAME: $*"; }
check() {   # check DESCRIPTION COMMAND...
    d=$1; shift
    if "$@"; then ok "$d"; else fail "$d"; fi
}
contains() { case "$1" in *"$2"*) return 0 ;; *) return 1 ;; esac; }

# Milliseconds since the epoch (GNU date).
now_ms() { date +%s%3N; }

# wait_until SECONDS COMMAND...: poll COMMAND every 50 ms until it
# succeeds; 1 when the deadline passes.
wait_until() {
    limit=$(( $(now_ms) + $1 * 1000 )); shift
    while ! "$@"; do
        [ "$(now_ms)" -ge "$limit" ] && return 1
        sleep 0.05
    done
    return 0
}

# ask SOCK LUA...: run each argument as one line through `seda-lua attach`
# and print the output.
ask() {
    s=$1; shift
    printf '%s\n' "$@" | timeout 20 "$SEDA" attach "$s" 2>&1
}

# ask_is SOCK EXPECTED LUA: true when the one-line output equals EXPECTED.
ask_is() {
    [ "$(ask "$1" "$3")" = "$2" ]
}

sock_up() { [ -S "$1" ] && ask "$1" "print('up')" | grep -q '^up$'; }

# start_server LOG ARGS...: seda-lua ARGS in the background, stdout and
# stderr to LOG; sets SPID.
start_server() {
    log=$1; shift
    "$SEDA" "$@" >"$log" 2>&1 &
    SPID=$!
    PIDS="$PIDS $SPID"
}

# waitpid_bounded PID: wait for PID, a child of this shell (bounded by
# DEADLINE, then SIGKILL); sets WRC to its exit status.
waitpid_bounded() {
    limit=$(( $(now_ms) + DEADLINE * 1000 ))
    while kill -0 "$1" 2>/dev/null; do
        if [ "$(now_ms)" -ge "$limit" ]; then
            kill -9 "$1" 2>/dev/null
            break
        fi
        sleep 0.05
    done
    wait "$1"
    WRC=$?
}

# stop_server: SIGTERM and wait (bounded); sets SRC to its exit status.
stop_server() {
    kill -TERM "$SPID" 2>/dev/null
    waitpid_bounded "$SPID"
    SRC=$WRC
}

finish() {
    echo "$NAME: $PASSES passed, $FAILS failed"
    # Again at the end, where a log cut in the middle still shows it.
    [ "$FAILS" = 0 ] || echo "$NAME failed:$FAILED"
    [ "$FAILS" = 0 ]
    exit $?
}
