#!/bin/sh
# JSON numbers between seda and a client nobody here wrote (docs/wire.md):
# a Python client in the raw NATS protocol (no library) publishes
# {"qty":2,"unit":1.5} and {"n": 3} into a seda stage with format = "json"
# through a real nats-server; the handler's qty * unit = 3.0 comes back
# written 3.0 and read by Python's json as a float, the 3 as the integer
# 3 (before, 3.0 was dead-lettered: "JSON cannot tell the float 3 from an
# integer").  Each message's Nats-Msg-Id is its envelope id (it has no
# Seda-Id).
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP test_json_numbers: python3 is not installed"
    exit 0
fi
natsd_start
"$SEDA" --serve "$REMOTE_DIR/lua/json_numbers.lua" "$URL" \
    >"$D/w.out" 2>"$D/w.err" &
echo $! >"$D/w.pid"
PIDS="$PIDS $!"
check "the seda worker is ready" wait_until 20 grep -q ready "$D/w.out"
timeout 60 python3 "$REMOTE_DIR/py/raw_client.py" "$URL" >"$D/py.out" 2>"$D/py.err"
out=$(cat "$D/py.out")
check "the client got both results" contains "$out" "got 2"
check "1.5 * 2 is written 3.0" contains "$out" '"total":3.0'
check "... and Python reads a float" contains "$out" "total=float"
check "the 2 stays an integer" contains "$out" "qty=int"
check "the float 1.5 stays a float" contains "$out" "unit=float"
check "the handler saw qty an integer, unit a float, total a float" \
    contains "$out" '"lua_types":{'
check "... (Lua types)" sh -c "grep -q '\"qty\":\"integer\"' '$D/py.out' && grep -q '\"unit\":\"float\"' '$D/py.out' && grep -q '\"total\":\"float\"' '$D/py.out'"
check '{"n": 3} comes back the integer 3' grep -Eq '"n":3[,}]' "$D/py.out"
check "... read as an int" contains "$out" "n=int"
check "... and the handler saw an integer" contains "$out" '"n":"integer"'
check "a foreign message's Nats-Msg-Id is its id" contains "$out" '"id":"py-order-1"'
check "... each one's" contains "$out" '"id":"py-n-1"'
check "nothing was dead-lettered" sh -c "! grep -q '^dead ' '$D/w.out'"
check "the worker stops cleanly" stop_serve w
[ "$FAILS" = 0 ] || { for f in py.out py.err w.out w.err; do echo "--- $f"; head -30 "$D/$f"; done; }
finish
