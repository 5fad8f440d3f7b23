#!/bin/sh
# bus:listen keeps a plain `seda-lua script.lua` serving (SPEC.md section
# 13), as --serve does, until SIGTERM: then it stops accepting, answers
# what is in flight and exits 0.  examples/orders/ answers its quick
# start (curl), its form page and a bad order.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

P=$(free_port)
cat >"$D/svc.lua" <<EOF
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "slow", concurrency = 8, handler = function(env)
  seda.sleep(tonumber(env.payload.query.t or "0"))
  env.payload = "done"
end }
bus:listen{ http = $P, routes = { ["GET /s"] = { "slow" } } }
print("script-ended")
EOF
"$SEDA" "$D/svc.lua" >"$D/out" 2>"$D/err" &
SPID=$!
PIDS="$SPID"
up() { curl -s -o /dev/null "http://127.0.0.1:$P/s"; }
check "a plain run with a listener serves" wait_until 10 up
check "... after its script ended" contains "$(cat "$D/out")" "script-ended"
check "... and keeps running" kill -0 "$SPID"

# A request in flight when SIGTERM comes is answered.
curl -s -o "$D/inflight" -w '%{http_code}' "http://127.0.0.1:$P/s?t=0.8" >"$D/code" &
CPID=$!
sleep 0.3
kill -TERM "$SPID"
wait "$CPID"
check "the in-flight request is answered after SIGTERM" [ "$(cat "$D/code")" = 200 ]
check "... with its body" [ "$(cat "$D/inflight")" = done ]
gone() { ! kill -0 "$SPID" 2>/dev/null; }
check "the process exits" wait_until 10 gone
wait "$SPID"; rc=$?
check "... with status 0" [ "$rc" = 0 ]
check "new connections are refused after" eval '! curl -s -m 2 -o /dev/null "http://127.0.0.1:$P/s"'

# While it drains after SIGTERM it accepts no new connection: a request
# held open by a gate (a file the test creates) keeps the drain going.
P=$(free_port)
cat >"$D/gated.lua" <<EOF
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "g", handler = function(env)
  seda.shared:set("held", true)
  while not io.open("$D/gate") do seda.sleep(0.02) end
  env.payload = "through"
end }
bus:stage{ name = "q", handler = function(env)
  env.payload = seda.shared:get("held") and "held" or "quick"
end }
bus:listen{ http = $P, routes = { ["GET /g"] = { "g" }, ["GET /q"] = { "q" } } }
EOF
"$SEDA" "$D/gated.lua" >"$D/gout" 2>"$D/gerr" &
GPID=$!
PIDS="$PIDS $GPID"
gup() { curl -s -o /dev/null "http://127.0.0.1:$P/q"; }
check "gated: serving" wait_until 10 gup
curl -s -o "$D/gbody" -w '%{http_code}' "http://127.0.0.1:$P/g" >"$D/gcode" &
GCPID=$!
gheld() { [ "$(curl -s "http://127.0.0.1:$P/q")" = held ]; }
check "gated: the request is in flight" wait_until 10 gheld
kill -TERM "$GPID"
draining() { grep -q "draining" "$D/gerr"; }
check "gated: SIGTERM starts the drain" wait_until 10 draining
curl -s -m 2 -o /dev/null "http://127.0.0.1:$P/q"; rc=$?
check "gated: a new connection is refused while it drains (curl exit $rc)" [ "$rc" = 7 ]
check "gated: ... while it still runs" kill -0 "$GPID"
: >"$D/gate"
wait "$GCPID"
check "gated: the held request is answered" [ "$(cat "$D/gcode") $(cat "$D/gbody")" = "200 through" ]
ggone() { ! kill -0 "$GPID" 2>/dev/null; }
check "gated: then it exits" wait_until 10 ggone
wait "$GPID"; rc=$?
check "gated: ... with status 0" [ "$rc" = 0 ]

# ---- the listener in --http's /stats.json and /metrics (the observer
# thread reads bus:stats() while requests are served) ----
P=$(free_port); H=$(free_port)
cat >"$D/obs.lua" <<EOF
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "a", handler = function(env)
  env.payload = { listeners = (function()
    local n = 0
    for _ in pairs(seda.stats().listeners) do n = n + 1 end
    return n
  end)() }
end }
bus:listen{ http = $P, routes = { ["GET /a"] = { "a" } } }
EOF
"$SEDA" --serve --http "127.0.0.1:$H" "$D/obs.lua" >"$D/obs.out" 2>"$D/obs.err" &
HPID=$!
PIDS="$PIDS $HPID"
hup() { curl -s -o /dev/null "http://127.0.0.1:$P/a"; }
check "a listener beside --http" wait_until 10 hup
out=$(curl -s "http://127.0.0.1:$P/a")
check "seda.stats() in a handler lists the listener" [ "$out" = '{"listeners":1}' ]
i=0; while [ $i -lt 50 ]; do curl -s -o /dev/null "http://127.0.0.1:$P/a" & i=$((i + 1)); done
metrics=$(curl -s "http://127.0.0.1:$H/metrics")
wait_bg() { for j in $(jobs -p); do [ "$j" = "$HPID" ] || wait "$j"; done; }
wait_bg
json=$(curl -s "http://127.0.0.1:$H/stats.json")
check "/stats.json has the listener" contains "$json" "\"127.0.0.1:$P\""
check "/metrics has its requests" contains "$(curl -s "http://127.0.0.1:$H/metrics")" "seda_http_requests_total{"
check "/metrics has responses by class" contains "$metrics" 'class="2xx"'
kill -TERM "$HPID"
hgone() { ! kill -0 "$HPID" 2>/dev/null; }
check "it stops on SIGTERM" wait_until 10 hgone

# A request that meets a stage that does not exist (forwarded there) is
# answered 500 naming it, and logged at most once every 10 s.
P=$(free_port)
cat >"$D/missing.lua" <<EOF
local seda = require "seda"
local bus = seda.bus{ workers = 2 }
bus:stage{ name = "route", handler = function(env) return env:forward("audit") end }
bus:listen{ http = $P, routes = { ["POST /orders"] = { "route" } } }
EOF
"$SEDA" "$D/missing.lua" >"$D/mout" 2>"$D/merr" &
MPID=$!
PIDS="$PIDS $MPID"
mup() { curl -s -o /dev/null -d x "http://127.0.0.1:$P/orders"; }
check "missing: the service comes up" wait_until 10 mup
out=$(curl -s -i -d x "http://127.0.0.1:$P/orders")
check "missing: 500" contains "$out" "500"
check "missing: names the missing stage" contains "$out" "stage audit does not exist; forwarded there by stage route"
check "missing: no Retry-After (retrying cannot help)" eval '! printf "%s" "$out" | grep -qi "retry-after"'
for i in 1 2 3 4 5; do curl -s -o /dev/null -d x "http://127.0.0.1:$P/orders"; done
kill -TERM "$MPID"
mgone() { ! kill -0 "$MPID" 2>/dev/null; }
check "missing: SIGTERM stops it" wait_until 10 mgone
check "missing: logged, naming route and stage" contains "$(cat "$D/merr")" "listen: POST /orders: answered 500 no_such_stage (stage audit does not exist; forwarded there by stage route)"
# (Seven requests within seconds: one line, two if 10 s passed between
# them on a loaded machine.)
check "missing: rate-limited: one line for seven requests" [ "$(grep -c 'no_such_stage' "$D/merr")" -le 2 ]
# And listen raises at once for a route naming a stage that does not exist.
cat >"$D/typo.lua" <<EOF
local seda = require "seda"
local bus = seda.bus{ workers = 1 }
bus:stage{ name = "orders", handler = function() end }
bus:listen{ http = 0, routes = { ["POST /orders"] = { "odrers" } } }
EOF
"$SEDA" "$D/typo.lua" >"$D/tout" 2>&1; rc=$?
check "typo: exits 1" [ "$rc" = 1 ]
check "typo: names route and stage" contains "$(cat "$D/tout")" "listen: route 'POST /orders': stage 'odrers' does not exist"

# ---- examples/orders ----
P=$(free_port)
"$SEDA" "$ROOT/examples/orders/service.lua" "$P" >"$D/oout" 2>"$D/oerr" &
OPID=$!
PIDS="$PIDS $OPID"
health() { curl -s "http://127.0.0.1:$P/health" | grep -q '"ok":true'; }
check "orders: the service comes up" wait_until 10 health
out=$(curl -s -i -d 'sku=book&qty=2' "http://127.0.0.1:$P/orders")
check "orders: POST /orders is 201" contains "$out" "201 Created"
check "orders: priced by the upstream" contains "$out" '"unit":19.37'
check "orders: with a total" contains "$out" '"total":38.74'
out=$(curl -s "http://127.0.0.1:$P/")
check "orders: the form page" contains "$out" '<form action="/orders"'
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P/orders?qty=0")
check "orders: a bad order is 400" [ "$code" = 400 ]
kill -INT "$OPID"
ogone() { ! kill -0 "$OPID" 2>/dev/null; }
check "orders: SIGINT stops it" wait_until 10 ogone
finish
