#!/bin/sh
# A real Prometheus scrapes seda-lua --serve --http (every second) while
# a stage's handler time goes through a spike and back: the windowed p99
# that Prometheus computes from the service-time histogram,
#   histogram_quantile(0.99, rate(seda_stage_service_seconds_bucket[5s])),
# is below 0.05 s while calm, reaches 0.1 s or more in the spike (handlers
# of ~200 ms) and falls below 0.05 s again some seconds after calm returns
# (the histograms are cumulative; only rate() over a window forgets the
# spike).  Also: `promtool check metrics` accepts a scrape, and the
# dead-letter counter's reason label can be queried (`sum by (reason)`):
# handler errors with max_attempts = 1 show as reason="max_attempts".
#
# The phases are switched through the control socket; every wait is a
# deadline polled (wait_until); nothing asserts on speed.
#
# Installs what it needs through scripts/deps.sh: curl, python3 and
# prometheus (Debian's: /usr/bin/prometheus and promtool).
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

if ! sh "$ROOT/scripts/deps.sh" curl python3 prometheus >"$D/deps.log" 2>&1; then
    cat "$D/deps.log"
    fail "scripts/deps.sh could not install curl python3 prometheus"
    finish
fi

# ---- the program ------------------------------------------------------------
# A timer on the main state publishes 50 payloads a second to "work"; the
# global `spike` (set through the control socket: _G.spike, as each
# attach client has globals of its own) decides their handler
# time: seda.sleep(0.2) in the spike, seda.sleep(0.001) when calm (a
# suspended call counts in the service time from its start to its end,
# and holds no worker; concurrency 64 keeps the queue empty at 10 in
# flight).  Every 10th payload fails (max_attempts = 1: dead-lettered).
cat >"$D/demo.lua" <<'EOF'
local seda = require "seda"
local bus = seda.bus{ name = "demo", workers = 2 }
bus:stage{ name = "work", concurrency = 64, max_attempts = 1,
  handler = function(env)
    local p = env.payload
    if p.fail then error("payload " .. p.n .. " fails on purpose") end
    seda.sleep(p.slow and 0.2 or 0.001)
  end }
spike = false
local n = 0
seda.every(0.02, function()
  n = n + 1
  bus:publish("work", { n = n, slow = spike, fail = n % 10 == 0 })
end)
EOF

S="$D/ctl.sock"
start_server "$D/log" --serve --http 127.0.0.1:0 --control "$S" "$D/demo.lua"
url_of() { sed -n 's|.*http: listening on \(http://[^/]*\)/.*|\1|p' "$1" | head -1; }
has_url() { [ -n "$(url_of "$1")" ]; }
if ! wait_until "$DEADLINE" has_url "$D/log"; then
    cat "$D/log"
    fail "seda-lua says where it listens"
    finish
fi
URL=$(url_of "$D/log")
ADDR=${URL#http://}
ok "seda-lua serves /metrics at $URL"
check "control socket up" wait_until "$DEADLINE" sock_up "$S"

# ---- promtool on a scrape -----------------------------------------------------
has_family() { curl -s --max-time 5 "$URL/metrics" >"$D/metrics" &&
               grep -q '^seda_stage_service_seconds_bucket{bus="demo",stage="work"' "$D/metrics"; }
check "/metrics has the demo bus's service histogram" wait_until "$DEADLINE" has_family
if promtool check metrics <"$D/metrics" >"$D/promtool.out" 2>&1; then
    ok "promtool check metrics accepts the scrape"
else
    sed 's/^/    /' "$D/promtool.out"
    fail "promtool check metrics rejects the scrape"
fi

# ---- Prometheus -------------------------------------------------------------
PPORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
P="http://127.0.0.1:$PPORT"
cat >"$D/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: seda
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: ["$ADDR"]
EOF
prometheus --config.file="$D/prometheus.yml" --storage.tsdb.path="$D/tsdb" \
    --web.listen-address="127.0.0.1:$PPORT" --log.level=warn \
    >"$D/prom.log" 2>&1 &
PPID_=$!
PIDS="$PIDS $PPID_"

ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$P/-/ready")" = 200 ]; }
if ! wait_until "$DEADLINE" ready; then
    tail -20 "$D/prom.log"
    fail "prometheus is ready on $P"
    finish
fi
ok "prometheus is ready on $P"

# query PROMQL: the instant query's result as "labels value" lines
# (labels as k=v,k=v; the value as Prometheus gives it), in $D/q.out.
query() {
    curl -s --max-time 5 -G "$P/api/v1/query" --data-urlencode "query=$1" >"$D/q.json" || return 1
    python3 - "$D/q.json" >"$D/q.out" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
if d.get("status") != "success": sys.exit(1)
for r in d["data"]["result"]:
    m = ",".join("%s=%s" % kv for kv in sorted(r["metric"].items()))
    print(m, r["value"][1])
EOF
}
# the scrape target is up
target_up() { query 'up{job="seda"}' && grep -q ' 1$' "$D/q.out"; }
check "prometheus scrapes seda-lua (up == 1)" wait_until "$DEADLINE" target_up

P99='histogram_quantile(0.99, rate(seda_stage_service_seconds_bucket{bus="demo",stage="work"}[5s]))'
# p99_is OP LIMIT: the p99 is a number and OP (lt, ge) LIMIT; sets P99V.
p99_is() {
    query "$P99" || return 1
    P99V=$(awk 'NR == 1 { print $NF }' "$D/q.out")
    [ -n "$P99V" ] && python3 -c "import math, sys; v = float(sys.argv[1]); sys.exit(0 if not math.isnan(v) and (v < $2 if sys.argv[2] == 'lt' else v >= $2) else 1)" "$P99V" "$1"
}

# ---- calm, spike, calm ------------------------------------------------------------
if wait_until "$DEADLINE" p99_is lt 0.05; then
    ok "calm: the windowed p99 is below 0.05 s ($P99V s)"
else
    fail "calm: the windowed p99 is below 0.05 s (last: ${P99V:-none}; $(cat "$D/q.out"))"
fi
T0=$(now_ms)
check "spike on (through the control socket)" ask_is "$S" true '_G.spike = true print(_G.spike)'
if wait_until "$DEADLINE" p99_is ge 0.1; then
    SPIKE=$P99V
    ok "spike: the windowed p99 reaches 0.1 s ($SPIKE s, $(( $(now_ms) - T0 )) ms after the switch)"
else
    fail "spike: the windowed p99 reaches 0.1 s (last: ${P99V:-none})"
fi
T1=$(now_ms)
check "spike off" ask_is "$S" false '_G.spike = false print(_G.spike)'
if wait_until "$DEADLINE" p99_is lt 0.05; then
    CALM=$P99V
    ok "calm again: the windowed p99 falls below 0.05 s ($CALM s, $(( $(now_ms) - T1 )) ms after the switch)"
else
    fail "calm again: the windowed p99 falls below 0.05 s (last: ${P99V:-none})"
fi
# The cumulative histogram still holds the spike: samples above 0.1 s
# since the stage was declared.
query 'seda_stage_service_seconds_count{bus="demo",stage="work"} - ignoring(le) seda_stage_service_seconds_bucket{bus="demo",stage="work",le="0.1"}'
check "the cumulative histogram still holds the spike ($(awk 'NR == 1 { print $NF }' "$D/q.out") samples above 0.1 s)" \
    awk 'NR == 1 && $NF > 0 { f = 1 } END { exit !f }' "$D/q.out"

# ---- dead letters by reason ----------------------------------------------------------
dead_by_reason() {
    query 'sum by (reason) (seda_stage_dead_lettered_total{bus="demo",stage="work"})' &&
        awk '$1 == "reason=max_attempts" && $2 > 0 { f = 1 } END { exit !f }' "$D/q.out"
}
if wait_until "$DEADLINE" dead_by_reason; then
    ok "sum by (reason): reason=\"max_attempts\" counts the failed payloads ($(grep max_attempts "$D/q.out"))"
else
    fail "sum by (reason): no reason=\"max_attempts\" > 0 ($(tr "\n" " " <"$D/q.out"))"
fi
other_zero() { awk '$1 != "reason=max_attempts" && $2 != 0 { f = 1 } END { exit f }' "$D/q.out"; }
check "... and the other reasons are 0" other_zero
query 'rate(seda_stage_dead_lettered_total{bus="demo",stage="work",reason="max_attempts"}[5s])'
check "... and rate() of it is positive ($(awk '{ print $NF }' "$D/q.out")/s)" \
    awk 'NR == 1 && $NF > 0 { f = 1 } END { exit !f }' "$D/q.out"

echo "    spike p99 ${SPIKE:-none} s, calm p99 ${CALM:-none} s"

# ---- the end --------------------------------------------------------------------
kill -TERM "$PPID_" 2>/dev/null
waitpid_bounded "$PPID_"
check "prometheus stops on SIGTERM" [ "$WRC" = 0 ]
stop_server
check "seda-lua: SIGTERM, exit 0" [ "$SRC" = 0 ]
finish
