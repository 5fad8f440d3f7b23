#!/bin/sh
# Clients nobody here wrote (SPEC §15): the official Node.js NATS client
# (npm "nats", installed by this test from the npm registry into its
# temporary directory) publishes JSON through JetStream into a seda stage
# with format = "json" and reads the results on a plain subject (a
# Seda-Slip "nats:<subject>" hop), its user header plain; a body that is
# not JSON is dead-lettered bad_message naming the parser's error; the
# client watches the stage on its tap subject (seda-tap.<stream>.<stage>)
# and through a tap stream it makes, seeing every message while the seda
# worker does the work.
# Skipped (exit 0, saying so) only when npm is missing.
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "SKIP test_node: npm (or node) is not installed; install nodejs and npm to run it"
    exit 0
fi
mkdir -p "$D/node"
cp "$REMOTE_DIR/node/client.js" "$D/node/"
check "npm install nats (the official client)" \
    sh -c "cd '$D/node' && npm install --no-audit --no-fund --silent nats@2 >'$D/npm.log' 2>&1"
natsd_start
"$SEDA" --serve "$REMOTE_DIR/lua/json_worker.lua" "$URL" \
    >"$D/w.out" 2>"$D/w.err" &
echo $! >"$D/w.pid"
PIDS="$PIDS $!"
check "the seda worker is ready" wait_until 20 grep -q ready "$D/w.out"
N=20
(cd "$D/node" && timeout 60 node client.js "$URL" $N) >"$D/node.out" 2>"$D/node.err"
check "the Node client got all $N results on the plain subject" \
    grep -q "^got $N sum $((N * (N + 1)))\$" "$D/node.out"
check "each result: the JSON reply, the user header as sent, the handler's header, null kept" \
    sh -c "[ \$(grep -c '^result \\([0-9]*\\) [0-9]* t\\1 yes a null application/json true\$' '$D/node.out') -eq $N ]"
check "a tap subscriber saw every message of the stage, headers included" \
    grep -q "^tap $((N + 1)) $N\$" "$D/node.out"
check "a tap stream (Limits) kept them for a JetStream consumer" \
    grep -q "^tapstream $((N + 1)) $((N + 1))\$" "$D/node.out"
check "while the seda worker did all the work (each handled once)" \
    sh -c "[ \$(grep -c '^handled ' '$D/w.out') -eq $N ]"
check "the body that is not JSON is dead-lettered bad_message, naming why" \
    wait_until 20 grep -q "^dead bad_message JSON: " "$D/w.out"
check "the worker stops cleanly" stop_serve w
[ "$FAILS" = 0 ] || { for f in npm.log node.out node.err w.out w.err; do echo "--- $f"; head -30 "$D/$f"; done; }
finish
