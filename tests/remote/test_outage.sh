#!/bin/sh
# The server stopped and restarted under a publishing process: publishes
# into the remote stage refuse with "unavailable" (at once, not after the
# publish timeout) while it is down, and succeed again once the client
# reconnected by itself; everything accepted reaches the consumer, which
# resumes on its own too.
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
natsd_start
consumer a "$URL" 0 64
check "consumer ready" wait_until 20 grep -q ready "$D/a.out"
"$SEDA" "$REMOTE_DIR/lua/outage.lua" "$URL" >"$D/pub.out" 2>"$D/pub.err" &
P=$!
PIDS="$PIDS $P"
flowing() { [ "$(lines "$D/pub.out" accepted)" -ge 20 ]; }
check "publishing" wait_until 20 flowing
natsd_stop
check "refused with 'unavailable' while the server is down" \
    wait_until 20 grep -q "^refused unavailable" "$D/pub.out"
natsd_restart
check "publishing resumes and the publisher finishes" \
    wait_until 60 sh -c "! kill -0 $P 2>/dev/null"
wait "$P"
check "the publisher exits 0" [ $? -eq 0 ]
acc=$(lines "$D/pub.out" accepted)
got() { grep '^handled ' "$D/a.out" | awk '{print $3}' | sort -u | wc -l; }
arrived() { [ "$(got)" -ge "$acc" ]; }
check "all $acc accepted publishes reach the consumer" wait_until 30 arrived
grep '^accepted ' "$D/pub.out" | awk '{print $2}' | sort >"$D/acc"
grep '^handled ' "$D/a.out" | awk '{print $3}' | sed 's/+work$//' |
    sort -u >"$D/got"
check "exactly the accepted ones" cmp -s "$D/acc" "$D/got"
echo "     $(tail -1 "$D/pub.out"); the consumer handled $(lines "$D/a.out" handled)"
check "consumer a stops cleanly" stop_serve a
[ "$FAILS" = 0 ] || { for f in a.err pub.err; do echo "--- $f"; head -20 "$D/$f"; done; }
finish
