#!/bin/sh
# Two seda-lua processes share the remote stage "work": every envelope a
# third process publishes is handled exactly once across them, and both
# take a share of the load; an itinerary parse (local, origin) -> work
# (remote) -> sink (local to the consumer) completes and fires on_complete
# in the process that published it.
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
natsd_start
consumer a "$URL" 0.002 8
consumer b "$URL" 0.002 8
check "both consumers ready" wait_until 20 sh -c \
    "grep -q ready '$D/a.out' && grep -q ready '$D/b.out'"

"$SEDA" "$REMOTE_DIR/lua/publisher.lua" "$URL" 400 >"$D/pub.out" 2>"$D/pub.err"
check "the publisher's 400 are stored by JetStream" \
    grep -q "^published 400 handed_off 400 in_system 0" "$D/pub.out"
handled_all() { [ $(( $(lines "$D/a.out" handled) + $(lines "$D/b.out" handled) )) -ge "$1" ]; }
check "all 400 handled" wait_until 30 handled_all 400
cat "$D/a.out" "$D/b.out" | grep '^handled ' | awk '{print $3}' | sort >"$D/ids"
check "each exactly once (400 lines, 400 distinct payloads)" \
    sh -c "[ \$(wc -l <'$D/ids') -eq 400 ] && [ \$(uniq <'$D/ids' | wc -l) -eq 400 ]"
na=$(lines "$D/a.out" handled); nb=$(lines "$D/b.out" handled)
echo "     split: a handled $na, b handled $nb"
check "the load is split (each handled at least 40 of 400)" \
    sh -c "[ $na -ge 40 ] && [ $nb -ge 40 ]"

"$SEDA" "$REMOTE_DIR/lua/origin.lua" "$URL" 20 >"$D/origin.out" 2>"$D/origin.err"
check "20 on_complete callbacks fired at the origin" \
    sh -c "[ \$(grep -c '^complete ' '$D/origin.out') -eq 20 ]"
check "with the final stage and payload (local -> remote -> local)" \
    sh -c "[ \$(grep -c '^complete [0-9]* sink o[0-9]*+parse+work+sink\$' '$D/origin.out') -eq 20 ]"
check "the origin's books balance (every itinerary handed off, none in system)" \
    grep -q "^books 20 0 0 0 20 0" "$D/origin.out"
check "consumer a stops cleanly" stop_serve a
check "consumer b stops cleanly" stop_serve b
[ "$FAILS" = 0 ] || { for f in a.err b.err pub.err origin.err origin.out; do echo "--- $f"; head -30 "$D/$f"; done; }
finish
