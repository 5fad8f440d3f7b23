#!/bin/sh
# NATS requests answered as NATS services answer them (the micro
# protocol), checked with the official Node.js client (npm "nats",
# installed by this test into its temporary directory): two seda-lua
# processes serve "orders" 1.2.0 in the queue group "q"
# (tests/remote/lua/micro_service.lua); nc.request is answered with the
# itinerary's payload; a dead letter is error 500, a refusal at the door
# 503, a request past the listener's timeout 504 (Nats-Service-Error-Code
# with Nats-Service-Error); the ServiceClient's ping, info and stats list
# both instances, their endpoints and counts; 1000 requests at once are
# shared by the two processes, each answered exactly once.
# Skipped (exit 0, saying so) when npm or node is missing, or when the
# npm registry cannot be reached.
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "SKIP test_micro: npm (or node) is not installed; install nodejs and npm to run it"
    exit 0
fi
mkdir -p "$D/node"
cp "$REMOTE_DIR/node/micro.js" "$D/node/"
if ! (cd "$D/node" && timeout 180 npm install --no-audit --no-fund --silent nats@2 >"$D/npm.log" 2>&1); then
    echo "SKIP test_micro: npm install nats failed (registry unreachable?):"
    tail -3 "$D/npm.log"
    exit 0
fi
natsd_start
for t in a b; do
    TAG=$t "$SEDA" --serve "$REMOTE_DIR/lua/micro_service.lua" "$URL" \
        >"$D/$t.out" 2>"$D/$t.err" &
    echo $! >"$D/$t.pid"
    PIDS="$PIDS $!"
done
check "both services are ready" wait_until 20 sh -c "grep -q ready '$D/a.out' && grep -q ready '$D/b.out'"
N=1000
(cd "$D/node" && timeout 120 node micro.js "$URL" $N) >"$D/node.out" 2>"$D/node.err"
check "nc.request is answered with the itinerary's payload (JSON in, JSON out, headers seen)" \
    grep -qx "price 21 orders.price t1 application/json" "$D/node.out"
check "a body without Content-Type arrives as a string" \
    grep -qx "echo hello there" "$D/node.out"
check "a dead letter is answered 500 with its reason" \
    grep -qx "error fail 500 max_attempts (stage boom)" "$D/node.out"
check "a refusal at the door is answered 503 with the rule's reason" \
    grep -qx "error refuse 503 closed_for_lunch" "$D/node.out"
check "a request past the listener's timeout is answered 504" \
    grep -qx "error slow 504 timeout" "$D/node.out"
check "\$SRV.PING: both instances, by name and version" \
    sh -c "[ \$(grep -c '^ping orders 1.2.0 [A-Z0-9]\\{22\\}\$' '$D/node.out') -eq 2 ]"
check "\$SRV.INFO: the endpoints, subjects and queue group" \
    sh -c "[ \$(grep -cx 'info io.nats.micro.v1.info_response prices_orders echo=orders.echo@q,fail=orders.fail@q,price=orders.price@q,refuse=orders.refuse@q,slow=orders.slow@q' '$D/node.out') -eq 2 ]"
check "the two processes shared the $N requests, each answered once and correctly" \
    sh -c "grep '^shared ' '$D/node.out' | awk '{ exit !(\$2 == $N && \$3 > 0 && \$4 > 0 && \$3 + \$4 == $N && \$5 == 0) }'"
check "every price request (and the one without a reply subject) handled once" \
    sh -c "[ \$(cat '$D/a.out' '$D/b.out' | grep -c '^handled ') -eq $((N + 2)) ]"
check "\$SRV.STATS: requests, errors, processing time and last error per endpoint" \
    grep -qx "stats 2 echo:1:0:true:,fail:1:1:true:500,price:$((N + 2)):0:true:,refuse:1:1:true:503,slow:1:1:true:504" "$D/node.out"
check "service a stops cleanly" stop_serve a
check "service b stops cleanly" stop_serve b
[ "$FAILS" = 0 ] || { for f in npm.log node.out node.err a.out a.err b.out b.err; do echo "--- $f"; head -30 "$D/$f"; done; }
finish
