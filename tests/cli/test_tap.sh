#!/bin/sh
# seda-lua --http's /tap?stage=NAME (Server-Sent Events): a tap sees the
# envelopes entering a stage with the fields of the REPL's tap() entries,
# a second tap at the same time sees them too, NAME#N names another bus's
# stage; 400 without a stage, 404 for an unknown one, 503 past the limit
# of open taps (and a tap opens again once they closed); a stream outlives
# the whole-request deadline (HTTP_TIMEOUT, 10 s); a client that does not
# read loses copies (an "event: missed" with the count) while /stats.json
# and the stage go on; the bus's shutdown ends a stream ("event: end");
# SIGTERM with taps attached stops the process cleanly (exit 0) and ends
# the streams (curl exits 0).
#
# Installs what it needs through scripts/deps.sh: curl, python3.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

if ! sh "$ROOT/scripts/deps.sh" curl python3 >"$D/deps.log" 2>&1; then
    cat "$D/deps.log"
    fail "scripts/deps.sh could not install curl python3"
    finish
fi

# Bus "orders": "enrich" fed by a timer (a table payload and a header),
# "quiet" fed only by hand, "hot" by burst(n) (a feed loop of n envelopes
# of 300 bytes).  Bus "other": its own "enrich", fed by the same timer.
cat >"$D/tap.lua" <<'EOF'
local seda = require "seda"
bus = seda.bus{ workers = 2, name = "orders" }
bus:stage{ name = "enrich", handler = function(env) end }
bus:stage{ name = "quiet", handler = function(env) end }
bus:stage{ name = "hot", handler = function(env) end }
other = seda.bus{ workers = 1, name = "other" }
other:stage{ name = "enrich", handler = function(env) end }
local n = 0
ticker = seda.every(0.05, function()
  n = n + 1
  bus:publish("enrich", { n = n, kind = "order" }, { headers = { src = "t" } })
  if other then other:publish("enrich", "other " .. n) end
end)
function burst(total)
  local k = 0
  local function feed()
    k = k + 1
    if k <= total then
      bus:publish("hot", string.rep("x", 300) .. k, { on_complete = feed })
    end
  end
  for i = 1, 50 do feed() end
end
EOF

S="$D/ctl.sock"
start_server "$D/log" --serve --control "$S" --http 127.0.0.1:0 "$D/tap.lua"
url_of() { sed -n 's|.*http: listening on \(http://[^/]*\)/.*|\1|p' "$1" | head -1; }
has_url() { [ -n "$(url_of "$1")" ]; }
check "the server says where it listens" wait_until "$DEADLINE" has_url "$D/log"
URL=$(url_of "$D/log")
check "control socket up" wait_until "$DEADLINE" sock_up "$S"

C() { curl -sS --max-time "$DEADLINE" "$@"; }
# data_lines FILE N: FILE has at least N "data: {" lines.
data_lines() { [ "$(grep -c '^data: {' "$1" 2>/dev/null)" -ge "$2" ]; }
# tap NAME STAGE: a background curl -N on /tap?stage=STAGE into $D/NAME
# (headers in $D/NAME.h); its pid in $D/NAME.pid.
tap() {
    curl -sSN --max-time 60 -D "$D/$1.h" "$URL/tap?stage=$2" >"$D/$1" 2>"$D/$1.err" &
    echo $! >"$D/$1.pid"
    PIDS="$PIDS $!"
}
untap() { kill "$(cat "$D/$1.pid")" 2>/dev/null; wait "$(cat "$D/$1.pid")" 2>/dev/null; }

check "--help names /tap" contains "$("$SEDA" --help)" "/tap?stage=NAME"

# ---- two taps at once ------------------------------------------------------
tap a enrich
tap b enrich
check "a tap sees envelopes entering the stage" wait_until "$DEADLINE" data_lines "$D/a" 5
check "a second tap at the same time sees them too" wait_until "$DEADLINE" data_lines "$D/b" 5
check "the stream is text/event-stream" grep -qi '^content-type: text/event-stream' "$D/a.h"
check "... answered 200" grep -q '^HTTP/1.1 200' "$D/a.h"
python3 - "$D/a" "$D/b" >"$D/fields.out" 2>&1 <<'EOF'
import json, sys
def events(path):
    return [json.loads(l[6:]) for l in open(path) if l.startswith("data: {")]
a, b = events(sys.argv[1]), events(sys.argv[2])
e = a[0]
for k in ("id", "at", "attempts", "payload_size", "headers", "payload", "stage"):
    assert k in e, "no %s in %r" % (k, e)
assert e["stage"] == "enrich", e
assert e["headers"] == {"src": "t"}, e
assert e["payload"]["kind"] == "order" and isinstance(e["payload"]["n"], int), e
assert e["attempts"] == 1 and e["payload_size"] > 0, e
ns = [x["payload"]["n"] for x in a]
assert ns == sorted(ns) and len(set(ns)) == len(ns), ns
common = set(ns) & set(x["payload"]["n"] for x in b)
assert common, "the two taps saw no envelope in common"
print("ok")
EOF
rc=$?
[ "$rc" = 0 ] || cat "$D/fields.out"
check "the events carry tap()'s fields (id, at, attempts, payload, headers) and the stage" [ "$rc" = 0 ]
untap a
untap b

tap c "enrich%232"
check "NAME#2 taps the second bus's stage of that name" wait_until "$DEADLINE" data_lines "$D/c" 2
check "... and sees that bus's envelopes" grep -q '^data: {.*"payload":"other [0-9]*"' "$D/c"
untap c

# ---- refusals --------------------------------------------------------------
C -D "$D/h404" -o "$D/b404" "$URL/tap?stage=nosuch"
check "an unknown stage answers 404" grep -q '^HTTP/1.1 404' "$D/h404"
check "... saying which stage" grep -q "no live bus has a stage 'nosuch'" "$D/b404"
C -D "$D/h400" -o "$D/b400" "$URL/tap"
check "no stage answers 400" grep -q '^HTTP/1.1 400' "$D/h400"
check "... saying what to give" grep -q 'needs ?stage=NAME' "$D/b400"
i=1
while [ $i -le 16 ]; do tap "l$i" quiet; i=$((i + 1)); done
opened() { [ "$(cat "$D"/l*.h 2>/dev/null | grep -c '^HTTP/1.1 200')" -ge 16 ]; }
check "16 taps open at once" wait_until "$DEADLINE" opened
C -D "$D/h503" -o "$D/b503" "$URL/tap?stage=quiet"
check "the 17th answers 503" grep -q '^HTTP/1.1 503' "$D/h503"
check "... naming the limit" grep -q '16 taps are open already' "$D/b503"
i=1
while [ $i -le 16 ]; do untap "l$i"; i=$((i + 1)); done
reopens() {
    curl -sS --max-time 2 -D "$D/hre" -o /dev/null "$URL/tap?stage=quiet" 2>/dev/null
    grep -q '^HTTP/1.1 200' "$D/hre"
}
check "a tap opens again once the clients left" wait_until "$DEADLINE" reopens

# ---- a stream outlives the whole-request deadline ---------------------------
tap q quiet
check "a tap on a quiet stage is open" wait_until "$DEADLINE" grep -q '^: tap of quiet' "$D/q"
sleep 11                                 # past HTTP_TIMEOUT (10 s)
ask "$S" 'bus:publish("quiet", "late")' >/dev/null
check "after 11 s it still streams (no whole-request deadline)" \
    wait_until "$DEADLINE" grep -q '"payload":"late"' "$D/q"
check "... with keepalive comments while quiet" grep -q '^: keepalive' "$D/q"
untap q

# ---- a client that does not read ------------------------------------------
python3 - "$URL" "$D/go" >"$D/slow.out" 2>&1 <<'EOF' &
import socket, sys, time
host, port = sys.argv[1][7:].split(":")
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect((host, int(port)))
s.sendall(b"GET /tap?stage=hot HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
s.settimeout(30)
head = b""
while b": tap of hot" not in head:       # the tap is open once this came
    d = s.recv(1)
    if not d: break
    head += d
print("connected", flush=True)
# Not reading until the test says so (the file sys.argv[2] exists).
import os
t = time.time() + 120
while not os.path.exists(sys.argv[2]) and time.time() < t:
    time.sleep(0.05)
s.settimeout(3)
data = b""
try:
    while True:
        d = s.recv(65536)
        if not d: break
        data += d
except socket.timeout:
    pass
print("missed" if b"event: missed" in data else "none missed", flush=True)
EOF
SLOW=$!
PIDS="$PIDS $SLOW"
check "a tap client that does not read is connected" wait_until "$DEADLINE" grep -q connected "$D/slow.out"
ask "$S" 'burst(30000)' >/dev/null
hot_done() { ask_is "$S" true 'print(bus:stats("hot").completed >= 30000)'; }
check "30 000 envelopes go through the stage meanwhile" wait_until "$DEADLINE" hot_done
# The client still does not read: a server that waited on it would not
# answer (curl gives up after DEADLINE).
check "/stats.json answers while the client does not read" C -o /dev/null "$URL/stats.json"
touch "$D/go"
wait "$SLOW"
check "the slow client is told what it missed (event: missed)" grep -q '^missed$' "$D/slow.out"

# ---- the bus's shutdown ends a stream --------------------------------------
tap o "enrich%232"
check "a tap on the other bus" wait_until "$DEADLINE" data_lines "$D/o" 1
ask "$S" 'other:shutdown(); other = nil' >/dev/null
ended() { grep -q '"reason":"the bus stopped"' "$D/o"; }
check "the bus's shutdown ends its stream (event: end)" wait_until "$DEADLINE" ended
wait "$(cat "$D/o.pid")"
check "... and the connection (curl exits 0)" [ $? = 0 ]

# ---- SIGTERM with taps attached -------------------------------------------
tap z1 enrich
tap z2 enrich
check "two taps attached" wait_until "$DEADLINE" eval 'data_lines "$D/z1" 1 && data_lines "$D/z2" 1'
stop_server
check "SIGTERM with taps attached: exit 0" [ "$SRC" = 0 ]
wait "$(cat "$D/z1.pid")"
check "... the streams end (curl exits 0)" [ $? = 0 ]
check "... with an end event" grep -q '"reason":"the server stops"' "$D/z1"
check "nothing unexpected on the server's log" eval \
    "! grep -v -e 'http: listening on' -e 'signal received, draining' '$D/log'"

finish
