#!/bin/sh
# SIGTERM to a consumer whose NATS server is gone: what it still holds
# (messages taken in, completions owed to the origin) can only complete
# through that server, and JetStream redelivers what it handed out, so the
# drain ends at once, saying why, instead of waiting out --drain (30 s).
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
natsd_start
consumer a "$URL" 0.3 8
check "consumer ready" wait_until 20 grep -q ready "$D/a.out"
# Itineraries parse (here) -> work (the consumer) -> sink (the consumer):
# each completion goes back to the origin through the server.
"$SEDA" "$REMOTE_DIR/lua/origin.lua" "$URL" 100 >"$D/o.out" 2>"$D/o.err" &
PIDS="$PIDS $!"
check "the consumer handles work" wait_until 20 grep -q handled "$D/a.out"
natsd_kill
p=$(cat "$D/a.pid")
t0=$(now_ms)
kill -TERM "$p"
gone() { ! kill -0 "$p" 2>/dev/null; }
check "SIGTERM ends it well within --drain (30 s)" wait_until 15 gone
t1=$(now_ms)
wait "$p"; rc=$?
echo "     exited after $((t1 - t0)) ms"
check "... with status 0" [ "$rc" = 0 ]
check "... saying why" grep -q "the NATS server is unreachable" "$D/a.err"
[ "$FAILS" = 0 ] || { for f in a.err o.err; do echo "--- $f"; head -20 "$D/$f"; done; }
finish
