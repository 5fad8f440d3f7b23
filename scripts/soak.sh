#!/bin/sh
# scripts/soak.sh -- `make soak`: run the mixed pipeline of
# scripts/soak/pipeline.lua under `seda-lua --serve --control SOCK` for
# SOAK_SECONDS (default 600), driven by an attached control client
# (`seda-lua attach SOCK`) that sends soak.tick() about every 100 ms,
# prints a progress line (soak.line()) every 5 s and reads stats() every
# 10 s; at the end soak.finish() gives the verdict (a loss, a stall over
# 1 s, RSS growth over 10 % after warm-up, or any check that failed).
#
#   make soak [V=release|asan|tsan] [SOAK_SECONDS=600]
#
# Exit status 0 on SOAK PASS; 1 on SOAK FAIL, a sanitizer report, or a
# server that did not exit cleanly.  Memory growth is judged in the
# release build only (see SOAK_RSS_CHECK below).  The scratch directory (server
# stderr, client output) is kept on failure and named.
set -u
V=${V:-release}
B=${B:-build/$V}
SEDA=${SEDA:-$B/seda-lua}
SOAK_SECONDS=${SOAK_SECONDS:-600}
D=$(mktemp -d "${TMPDIR:-/tmp}/seda-soak.XXXXXX")
# The sanitizers' runtimes grow by design (ASan keeps freed memory in
# quarantine, up to 256 MiB; TSan keeps shadow memory and the history of
# every thread the pool starts and ends, and loan threads come and go):
# the memory verdict is the release build's.  The RSS figures are printed
# all the same.
SOAK_RSS_CHECK=1
case "$V" in asan|tsan) SOAK_RSS_CHECK=0 ;; esac
export SOAK_DIR="$D" SOAK_SECONDS SOAK_RSS_CHECK
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
SPID= CPID=
fail() {
    echo "soak: FAIL: $*"
    echo "soak: kept $D (server.err, client.out)"
    [ -n "$SPID" ] && kill -9 "$SPID" 2>/dev/null
    [ -n "$CPID" ] && kill -9 "$CPID" 2>/dev/null
    exit 1
}

echo "soak: $SEDA, ${SOAK_SECONDS}s, scratch $D"
"$SEDA" --serve --control "$D/ctl" --drain 60 scripts/soak/pipeline.lua \
    >"$D/server.out" 2>"$D/server.err" &
SPID=$!
n=0
while [ ! -S "$D/ctl" ]; do
    n=$((n + 1))
    [ "$n" -gt 600 ] && fail "the server did not open its control socket in 60 s"
    kill -0 "$SPID" 2>/dev/null || fail "the server exited at startup: $(cat "$D/server.err")"
    sleep 0.1
done

trap '' PIPE                    # a dead client is reported, not fatal
mkfifo "$D/in"
"$SEDA" attach "$D/ctl" <"$D/in" >"$D/client.out" 2>&1 &
CPID=$!
exec 3>"$D/in"
end=$(( $(date +%s) + SOAK_SECONDS ))
n=0
said=
while [ "$(date +%s)" -lt "$end" ]; do
    echo 'soak.tick()' >&3 || fail "the control client went away"
    n=$((n + 1))
    if [ $((n % 50)) = 0 ]; then
        echo 'print(soak.line())' >&3
        last=$(grep '^t=' "$D/client.out" | tail -n 1)
        [ "$last" != "$said" ] && echo "$last" && said=$last
    fi
    [ $((n % 100)) = 0 ] && echo 'print(stats())' >&3
    kill -0 "$SPID" 2>/dev/null || fail "the server died: $(tail -20 "$D/server.err")"
    sleep 0.1
done
echo 'print(soak.finish())' >&3
exec 3>&-
wait "$CPID"
CPID=
kill -TERM "$SPID"
wait "$SPID"
rc=$?
SPID=

verdict=$(grep -A100 '^SOAK ' "$D/client.out")
echo "$verdict"
grep -q '^  stage ' "$D/client.out" || fail "the client never read stats()"
if grep -q 'Sanitizer\|runtime error' "$D/server.err"; then
    grep -m5 -A5 'Sanitizer\|runtime error' "$D/server.err"
    fail "sanitizer report (server.err)"
fi
[ "$rc" = 0 ] || fail "the server exited $rc after SIGTERM"
case "$verdict" in
    "SOAK PASS"*) echo "soak: pass"; rm -rf "$D"; exit 0 ;;
    *) fail "see the verdict above" ;;
esac
