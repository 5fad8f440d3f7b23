#!/bin/sh
# bench/page_cost.sh [ROUNDS]: what the live status page costs the hot
# path, indicative (not part of make bench): seda-lua --serve runs a count
# load (one producer publishing batches of 256 into a stage of capacity
# 1024, policy block, whose Lua handler only reads env.payload: bench's
# `count, lua` row) and a cap1 load (the same with concurrency 1 and
# batches of 1), ROUNDS (default 5) times each way, interleaved: A without
# --http, B with --http and a client doing what the open page does every
# second (GET /stats.json and /history.json?since=, after one full
# /history.json), so that B pays for the observer thread, its history
# samples and the page's answers.  Prints each trial and the median ratio
# B/A per load.  On a shared machine those ratios are mostly noise; so it
# also prints the server's own CPU (utime + stime from /proc, over
# CPU_SECONDS, default 20) serving examples/service.lua at 1 line a second
# with --http, without and with the page client: what the history and
# the page's answers cost, independent of the machine's other load.
# Needs curl and python3.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SEDA=${SEDA:-$ROOT/build/release/seda-lua}
ROUNDS=${1:-5}
CPU_SECONDS=${CPU_SECONDS:-20}
T=$(mktemp -d "${TMPDIR:-/tmp}/seda-pagecost.XXXXXX")
trap 'rm -rf "$T"' EXIT
cat >"$T/load.lua" <<'LUA'
local seda = require "seda"
local kind = os.getenv("LOAD") or "count"
local N = tonumber(os.getenv("LOAD_N")) or (kind == "count" and 3000000 or 600000)
local bus = seda.bus{ workers = 1, name = "bench" }
bus:stage{ name = "s", capacity = 1024, policy = "block",
           concurrency = 1, handler = function(env) local _ = env.payload end }
local batch = {}
for i = 1, (kind == "count" and 256 or 1) do batch[i] = i end
-- 2.5 s in: the observer is up and the page client has fetched.
seda.timer(2.5, function()
  local t0, n = seda.now(), 0
  while n < N do n = n + bus:publish_many("s", batch) end
  bus:wait(120)
  io.stdout:write(("rate %.0f\n"):format(n / (seda.now() - t0)))
  io.stdout:flush()
  os.exit(0)
end)
LUA
page_client() {   # URL: what the page fetches, every second, until killed
    python3 - "$1" <<'PY' &
import json, sys, time, urllib.request
url = sys.argv[1]; last = None
while True:
    t = time.monotonic()
    try:
        urllib.request.urlopen(url + "/stats.json", timeout=5).read()
        h = json.load(urllib.request.urlopen(url + "/history.json" + ("?since=%r" % last if last else ""), timeout=5))
        if h["t"]: last = h["t"][-1]
    except Exception:
        pass
    time.sleep(max(0, 1 - (time.monotonic() - t)))
PY
    CLIENT=$!
}
trial() {   # LOAD A|B -> prints the rate
    if [ "$2" = A ]; then
        LOAD=$1 "$SEDA" --serve "$T/load.lua" 2>"$T/err" | sed -n 's/^rate //p'
    else
        LOAD=$1 "$SEDA" --serve --http 127.0.0.1:0 "$T/load.lua" 2>"$T/err" >"$T/out" &
        S=$!
        url=""
        while [ -z "$url" ]; do
            sleep 0.05
            url=$(sed -n 's|.*listening on \(http://[^/]*\)/.*|\1|p' "$T/err")
        done
        page_client "$url"
        wait "$S" || true
        kill "$CLIENT" 2>/dev/null; wait "$CLIENT" 2>/dev/null || true
        sed -n 's/^rate //p' "$T/out"
    fi
}
for load in count cap1; do
    : >"$T/$load.A"; : >"$T/$load.B"
    for r in $(seq "$ROUNDS"); do
        for w in A B; do
            v=$(trial "$load" "$w")
            echo "$load $w round $r: $v/s" >&2
            echo "$v" >>"$T/$load.$w"
        done
    done
    python3 - "$load" "$T/$load.A" "$T/$load.B" <<'PY'
import statistics, sys
a = [float(x) for x in open(sys.argv[2]) if x.strip()]
b = [float(x) for x in open(sys.argv[3]) if x.strip()]
ma, mb = statistics.median(a), statistics.median(b)
print("%s: median A (no page) %.0f/s, B (page open) %.0f/s, B/A %.3f" % (sys.argv[1], ma, mb, mb / ma))
PY
done
cpu_ms() {   # yes|no: the server's CPU ms a second, page client or not
    "$SEDA" --serve --http 127.0.0.1:0 "$ROOT/examples/service.lua" 1 \
        >/dev/null 2>"$T/cerr" &
    S=$!
    url=""
    while [ -z "$url" ]; do
        sleep 0.05
        url=$(sed -n 's|.*listening on \(http://[^/]*\)/.*|\1|p' "$T/cerr")
    done
    [ "$1" = yes ] && page_client "$url"
    sleep 3
    t0=$(awk '{ print $14 + $15 }' "/proc/$S/stat")
    sleep "$CPU_SECONDS"
    t1=$(awk '{ print $14 + $15 }' "/proc/$S/stat")
    [ "$1" = yes ] && { kill "$CLIENT"; wait "$CLIENT" 2>/dev/null || true; }
    kill -TERM "$S"; wait "$S" 2>/dev/null || true
    echo $(( (t1 - t0) * 1000 / $(getconf CLK_TCK) / CPU_SECONDS ))
}
echo "server CPU, examples/service.lua at 1 line/s with --http: page closed $(cpu_ms no) ms/s, page open $(cpu_ms yes) ms/s"
