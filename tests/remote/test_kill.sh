#!/bin/sh
# kill -9 one of two consumer processes of the remote stage "work" in the
# middle of the stream: nothing is lost -- what it held unacknowledged is
# redelivered (after ack_wait, 2 s here) to the other, which finishes the
# work -- and JetStream ends with nothing pending or unacknowledged.
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
natsd_start
consumer a "$URL" 0.02 8
consumer b "$URL" 0.002 8
check "both consumers ready" wait_until 20 sh -c \
    "grep -q ready '$D/a.out' && grep -q ready '$D/b.out'"
"$SEDA" "$REMOTE_DIR/lua/publisher.lua" "$URL" 200 >"$D/pub.out" 2>"$D/pub.err"
check "200 stored" grep -q "^published 200 " "$D/pub.out"
a_busy() { [ "$(lines "$D/a.out" handled)" -ge 5 ]; }
check "a is handling" wait_until 20 a_busy
kill -9 "$(cat "$D/a.pid")"
distinct() {
    cat "$D/a.out" "$D/b.out" | grep '^handled ' | awk '{print $3}' |
        sort -u | wc -l
}
all_done() { [ "$(distinct)" -ge 200 ]; }
check "after kill -9 of a, all 200 handled by a or b (nothing lost)" \
    wait_until 40 all_done
na=$(lines "$D/a.out" handled); nb=$(lines "$D/b.out" handled)
dups=$(( na + nb - $(distinct) ))
echo "     a handled $na before it was killed, b $nb; $dups handled twice"
check "only what a held unacknowledged was handled twice (<= its capacity + permits)" \
    [ "$dups" -le 10 ]
"$SEDA" "$REMOTE_DIR/lua/check.lua" "$URL" >"$D/check.out" 2>"$D/check.err"
check "JetStream: nothing pending, nothing unacknowledged" \
    grep -q "^js_pending 0 js_ack_pending 0" "$D/check.out"
check "consumer b stops cleanly" stop_serve b
[ "$FAILS" = 0 ] || { for f in a.err b.err pub.err check.err check.out; do
    echo "--- $f"; head -20 "$D/$f"; done; }
finish
