#!/bin/sh
# The examples a new user runs first: examples/pipeline.lua (make run)
# reports its deliberate errors once, with one traceback, and counts the
# rest in its summary; examples/service.lua (make serve) keeps running
# under --serve --http, its pipeline fed by a timer, shows on the live
# page and /stats.json, and drains and exits 0 on SIGINT.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

out=$(cd "$ROOT" && "$SEDA" examples/pipeline.lua 2>"$D/err")
rc=$?
err=$(cat "$D/err")
check "examples/pipeline.lua exits 0 ($err)" [ "$rc" = 0 ]
n=$(grep -c 'stack traceback' "$D/err")
check "... with one traceback on stderr, not five ($n)" [ "$n" = 1 ]
check "... and no 'similar errors suppressed' line" \
    eval '! grep -q "similar errors suppressed" "$D/err"'
check "... the garbage counted in the summary ($out)" \
    contains "$out" "unparseable lines: 40, dead-lettered"
check "... every envelope accounted for" \
    contains "$out" "completed 1942, dead-lettered 58, in system 0"

# ---- the service -------------------------------------------------------
(cd "$ROOT" && exec "$SEDA" --serve --http 0 examples/service.lua 1000 \
    >"$D/out" 2>"$D/log") &
pid=$!
PIDS="$PIDS $pid"
url_of() { sed -n 's|.*http: listening on \(http://[^/]*\)/.*|\1|p' "$D/log" | head -1; }
has_url() { [ -n "$(url_of)" ]; }
check "examples/service.lua listens (--http 0)" wait_until "$DEADLINE" has_url
U=$(url_of)
completed() {
    n=$(curl -s "$U/stats.json" | python3 -c '
import json, sys
print(json.load(sys.stdin)["buses"][0]["stats"]["completed"])' 2>/dev/null)
    [ "${n:-0}" -gt "$1" ]
}
check "... its pipeline completes envelopes (/stats.json)" \
    wait_until "$DEADLINE" completed 100
page=$(curl -s "$U/")
check "... the live page is served at /" contains "$page" "<!doctype html>"
check "... and it keeps going (still running)" kill -0 "$pid"
check "... and keeps completing" wait_until "$DEADLINE" completed 1000
kill -INT "$pid"
wait "$pid"
rc=$?
check "... SIGINT drains it and it exits 0 ($(tail -3 "$D/log"))" [ "$rc" = 0 ]
check "... having said what it runs" \
    contains "$(cat "$D/out")" "service: 1000 lines a second"

out=$(cd "$ROOT" && make -n serve 2>&1)
check "make serve runs it with --serve --http 8080 ($out)" \
    contains "$out" "--serve --http 8080 examples/service.lua"
finish
