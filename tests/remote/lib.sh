# tests/remote/lib.sh -- helpers for the multi-process remote stage tests
# (sourced after tests/cli/lib.sh, whose SEDA, D, ok/fail/check,
# wait_until and cleanup they use).
#
#   natsd_start         a private nats-server in $D/nats (loopback, free
#                       port); sets URL
#   natsd_stop / natsd_kill / natsd_restart
#   consumer NAME ARGS  run tests/remote/lua/consumer.lua with --serve in
#                       the background, output in $D/NAME.out / .err,
#                       its pid in $D/NAME.pid (and in PIDS for cleanup)
#   lines FILE WORD     how many lines of FILE start with WORD
REMOTE_DIR=$(cd "$(dirname "$0")" && pwd)
NATSD="sh $REMOTE_DIR/natsd.sh"

natsd_start() {
    URL=$($NATSD start "$D/nats") || { echo "FAIL $NAME: nats-server"; exit 1; }
    PIDS="$PIDS $(cat "$D/nats/pid")"
}
natsd_stop() { $NATSD stop "$D/nats"; }
natsd_kill() { $NATSD kill "$D/nats"; }
natsd_restart() {
    $NATSD start "$D/nats" >/dev/null || { echo "FAIL $NAME: restart"; exit 1; }
    PIDS="$PIDS $(cat "$D/nats/pid")"
}

consumer() {
    n=$1; shift
    "$SEDA" --serve "$REMOTE_DIR/lua/consumer.lua" "$@" \
        >"$D/$n.out" 2>"$D/$n.err" &
    echo $! >"$D/$n.pid"
    PIDS="$PIDS $!"
}

lines() { grep -c "^$2 " "$1" 2>/dev/null || true; }

# stop_serve NAME: SIGTERM a --serve process and wait for it (bounded);
# true when it exited 0.
stop_serve() {
    p=$(cat "$D/$1.pid")
    kill -TERM "$p" 2>/dev/null
    wait_until 30 sh -c "! kill -0 $p 2>/dev/null" || return 1
    wait "$p"
}
