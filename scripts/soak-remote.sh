#!/bin/sh
# The remote soak (make soak-remote, not part of make test): one
# nats-server, two consumer processes of the remote stage "cwork" and an
# origin publishing with on_complete for SOAK_SECONDS (600).  Every
# minute one consumer (in turn) is killed with kill -9 and started again,
# and the server is stopped and started again.  At the end: every
# accepted envelope's on_complete fired, none was dead-lettered or
# dropped, and the origin's books balance (accepted == completed +
# dead_lettered + dropped + handed_off + in_system).  Duplicates (handled
# more than once: a consumer killed holding them) are counted.
set -u
B=${B:-build/release}
SOAK_SECONDS=${SOAK_SECONDS:-600}
SEDA="$(pwd)/$B/seda-lua"
R="$(pwd)/tests/remote"
D=$(mktemp -d "${TMPDIR:-/tmp}/seda-soak-remote.XXXXXX")
PIDS=""
trap 'for p in $PIDS; do kill -9 "$p" 2>/dev/null; done; sh "$R/natsd.sh" stop "$D/nats" >/dev/null 2>&1; rm -rf "$D"' EXIT
URL=$(sh "$R/natsd.sh" start "$D/nats") || { echo "soak-remote: nats-server did not start"; exit 1; }
start_consumer() {   # start_consumer NAME
    "$SEDA" --serve "$R/lua/cluster_consumer.lua" "$URL" SOAK 1 \
        >>"$D/$1.out" 2>>"$D/$1.err" &
    echo $! >"$D/$1.pid"
    PIDS="$PIDS $!"
}
start_consumer a
start_consumer b
sleep 2
"$SEDA" "$R/lua/soak_origin.lua" "$URL" SOAK "$SOAK_SECONDS" \
    >"$D/origin.out" 2>"$D/origin.err" &
O=$!
PIDS="$PIDS $O"
t=0
turn=a
while kill -0 "$O" 2>/dev/null && [ "$t" -lt "$SOAK_SECONDS" ]; do
    sleep 60
    t=$((t + 60))
    [ "$t" -ge "$SOAK_SECONDS" ] && break
    kill -9 "$(cat "$D/$turn.pid")" 2>/dev/null
    start_consumer "$turn"
    [ "$turn" = a ] && turn=b || turn=a
    sh "$R/natsd.sh" stop "$D/nats"
    sleep 2
    sh "$R/natsd.sh" start "$D/nats" >/dev/null || { echo "soak-remote: restart failed"; exit 1; }
    echo "soak-remote: ${t}s: killed and restarted a consumer, restarted the server; $(tail -1 "$D/origin.out")"
done
wait "$O"
set -- $(grep '^origin ' "$D/origin.out")
acc=${2:-0}; comp=${3:-0}; dead=${4:-1}; drop=${5:-1}
set -- $(grep '^books ' "$D/origin.out")
books_ok=no
[ "${2:-0}" -eq $(( ${3:-0} + ${4:-0} + ${5:-0} + ${6:-0} + ${7:-1} )) ] && books_ok=yes
total=$(cat "$D"/a.out "$D"/b.out | grep -c '^handled ')
distinct=$(cat "$D"/a.out "$D"/b.out | grep '^handled ' | awk '{print $2}' | sort -u | wc -l)
echo "soak-remote: accepted $acc, on_complete $comp, dead $dead, dropped $drop," \
     "handled $distinct distinct ($((total - distinct)) duplicates), books balance: $books_ok"
[ "$acc" -gt 0 ] && [ "$comp" -eq "$acc" ] && [ "$dead" -eq 0 ] &&
    [ "$drop" -eq 0 ] && [ "$books_ok" = yes ] && [ "$distinct" -ge "$acc" ] ||
    { echo "soak-remote: FAILED"; tail -20 "$D"/*.err; exit 1; }
echo "soak-remote: ok"
