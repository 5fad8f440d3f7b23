#!/bin/sh
# The status page's charts in a real browser (headless Chromium), against a
# bus under a scripted load shape: steady, a 3 s spike that makes the slow
# stage shed (its door refusals at the entrance), calm.  Checks: a chart for
# the bus and for every stage and listener of /history.json; every point a
# chart drew (its data-t and data-v) is /history.json's value at that
# time; the shedding band and the offered load's peak fall in the spike;
# no shedding before it; the page does not scroll sideways at 1 280 px
# (nor at 800 px) and every table's header cells align as their columns;
# a stage's larger charts open from the address (#open=bus/stage); top()
# draws a sparkline per stage from the same history.  The screenshot is
# kept as build/<variant>/test-artifacts/page.png.
#
# Chromium (Debian's `chromium`) is installed through scripts/deps.sh
# when it can be; without it the browser's checks are skipped, saying
# so, and /history.json's and top()'s still run.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ART="$(dirname "$SEDA")/test-artifacts"

sh "$ROOT/scripts/deps.sh" chromium curl python3 >"$D/deps.log" 2>&1
CHROME=yes
command -v chromium >/dev/null 2>&1 || CHROME=""

cat >"$D/p.lua" <<'EOF'
local seda = require "seda"
local bus = seda.bus{ workers = 2, name = "shop" }
bus:stage{ name = "parse", handler = function(env) end }
-- About 100 a second at most (one at a time, 10 ms each): 20/s is
-- steady, 400/s a spike it must shed.
bus:stage{ name = "work", concurrency = 1, capacity = 200,
           shed = { target = 0.05 },
           handler = function(env) seda.sleep(0.01) end }
bus:stage{ name = "store", max_attempts = 1, handler = function(env)
  if type(env.payload) == "number" and env.payload % 25 == 0 then
    error("store refused " .. env.payload)
  end
end }
-- a long name: its column wraps, the tables still fit 1 280 px
bus:stage{ name = "audit_trail_kept_for_the_regulator_for_seven_years_and_a_day",
           handler = function(env) end }
L = bus:listen{ http = "127.0.0.1:0",
                routes = { ["POST /orders"] = { "parse", "work", "store" } } }
print("listener port " .. L:port())
io.stdout:flush()
PHASE = "idle"
local per_tick = { idle = 0, steady = 1, spike = 20, calm = 1 }
local n = 0
FEED = seda.every(0.05, function()
  for _ = 1, per_tick[PHASE] do
    n = n + 1
    bus:publish("parse", n, { slip = { "work", "store",
      "audit_trail_kept_for_the_regulator_for_seven_years_and_a_day" } })
  end
end)
EOF

S="$D/ctl.sock"
start_server "$D/log" --serve --control "$S" --http 127.0.0.1:0 "$D/p.lua"
url_of() { sed -n 's|.*http: listening on \(http://[^/]*\)/.*|\1|p' "$1" | head -1; }
has_url() { [ -n "$(url_of "$1")" ]; }
check "the server says where it listens" wait_until "$DEADLINE" has_url "$D/log"
URL=$(url_of "$D/log")
check "control socket up" wait_until "$DEADLINE" sock_up "$S"
has_port() { grep -q '^listener port [0-9]' "$D/log"; }
check "the listener is up" wait_until "$DEADLINE" has_port
LPORT=$(sed -n 's/^listener port \([0-9]*\)$/\1/p' "$D/log" | head -1)
samples() {
    curl -s --max-time 5 "$URL/history.json" | python3 -c \
        'import json,sys; sys.exit(0 if len(json.load(sys.stdin)["t"]) >= 2 else 1)'
}
check "/history.json has samples" wait_until "$DEADLINE" samples
if [ "$FAILS" != 0 ]; then
    echo "    the server's log:"; tail -30 "$D/log" | sed 's/^/    /'
    finish
fi

# Requests to the listener all along (5 a second), until told to stop.
python3 - "$LPORT" "$D/stop" >"$D/client.log" 2>&1 <<'EOF' &
import os, sys, time, urllib.request
port, stop = sys.argv[1], sys.argv[2]
while not os.path.exists(stop):
    t = time.monotonic()
    try:
        urllib.request.urlopen(urllib.request.Request(
            "http://127.0.0.1:%s/orders" % port, data=b"order", method="POST"), timeout=5).read()
    except Exception as e:
        pass                      # a 503 while shedding
    time.sleep(max(0, 0.2 - (time.monotonic() - t)))
EOF
CLIENT=$!
PIDS="$PIDS $CLIENT"

# The load shape: the durations are the shape, not a synchronisation.
wall() { date +%s.%N; }
phase() { ask "$S" "_G.PHASE = '$1'" >/dev/null; }
T_STEADY=$(wall); phase steady
sleep 5
T_SPIKE0=$(wall); phase spike; T_SPIKE1=$(wall)
sleep 3
T_CALM0=$(wall); phase calm; T_CALM1=$(wall)
sleep 5
touch "$D/stop"

# ---- what /history.json kept of the load --------------------------------
curl -s --max-time 10 "$URL/history.json" >"$D/h1.json"
python3 - "$D/h1.json" "$T_STEADY" "$T_SPIKE0" "$T_SPIKE1" "$T_CALM0" \
    "$T_CALM1" >"$D/h1.out" 2>&1 <<'EOF'
import json, sys
h = json.load(open(sys.argv[1]))
t_steady, s0, s1, c0, c1 = map(float, sys.argv[2:7])
bad = 0
def fail(*a):
    global bad; print("FAIL:", *a); bad = 1
bus = [b for b in h["buses"] if b["name"] == "shop"]
if len(bus) != 1: print("FAIL: no bus shop:", [b["name"] for b in h["buses"]]); sys.exit(1)
bus = bus[0]
st = {s["name"]: s for s in bus["stages"]}
LONG = "audit_trail_kept_for_the_regulator_for_seven_years_and_a_day"
if [s["name"] for s in bus["stages"]] != ["parse", "work", "store", LONG]:
    fail("stages not in declaration order:", [s["name"] for s in bus["stages"]])
if len(bus["listeners"]) != 1: fail("listeners", [l["address"] for l in bus["listeners"]])
n = len(h["t"])
for s in bus["stages"]:
    for k in ("delivered", "nacked", "dead_lettered", "shed", "door_refused", "completed",
              "depth", "in_flight", "suspended", "shedding", "sojourn_p99", "service_p99"):
        if len(s.get(k, [])) != n: fail(s["name"], k, "has", len(s.get(k, [])), "values for", n, "times")
if sorted(h["t"]) != h["t"] or any(b - a < 0.5 for a, b in zip(h["t"], h["t"][1:])):
    fail("the samples are not about a second apart:", h["t"][:5])
# the offered load at the entrance (parse's deliveries and its door
# refusals) peaks in the spike, its mean there well above the steady one
ps, wk = st["parse"], st["work"]
offered = {t: (ps["delivered"][i] or 0) + (ps["shed"][i] or 0)
           for i, t in enumerate(h["t"]) if ps["delivered"][i] is not None}
spike = [v for t, v in offered.items() if s1 + 0.1 <= t <= c0]
steady = [v for t, v in offered.items() if t_steady + 1.2 <= t <= s0]
peak_t = max(offered, key=lambda t: offered[t])
print("offered/s: steady mean %.1f, spike mean %.1f, peak %.1f at spike%+.1fs" % (
    sum(steady) / max(1, len(steady)), sum(spike) / max(1, len(spike)),
    offered[peak_t], peak_t - s0))
if not (s0 <= peak_t <= c1 + 1.5): fail("the offered load peaks outside the spike", peak_t - s0)
if not spike or not steady: fail("no samples in the spike or the steady phase")
elif sum(spike) / len(spike) < 3 * sum(steady) / len(steady):
    fail("the spike is not 3x the steady load")
# work sheds in the spike and not before; parse counts the door
# refusals (its shed) but is never marked shedding: they were work's
shed_t = [t for i, t in enumerate(h["t"]) if (wk["shedding"][i] or 0) > 0]
print("work shedding at (s from the spike's start):", [round(t - s0, 1) for t in shed_t])
if not any(s0 <= t <= c1 + 1.5 for t in shed_t): fail("work did not shed in the spike")
if any(t < s0 for t in shed_t): fail("work shed before the spike")
if not any((v or 0) > 0 for v in wk["door_refused"]): fail("no door refusal for work")
if not any((v or 0) > 0 for v in ps["shed"]): fail("parse counted no refusal at its door")
if any((v or 0) > 0 for v in ps["shedding"]): fail("parse marked shedding: the refusals were work's")
p99 = [v for v in wk["sojourn_p99"] if v is not None]
if not p99 or max(p99) < 0.05: fail("work's sojourn p99 never passed its 0.05 s target:", max(p99 or [0]))
if not any((v or 0) > 0 for v in bus["listeners"][0]["requests"]): fail("the listener's requests/s is never > 0")
sys.exit(bad)
EOF
rc=$?
sed 's/^/    /' "$D/h1.out"
check "/history.json: a value per second in every series, the spike and work's shedding where the load put them, none before, parse not marked" [ "$rc" = 0 ]

# ---- the page at 1 280 px, a stage's larger charts opened ----------------
if [ -z "$CHROME" ]; then
    echo "SKIP $NAME: the page in a browser: chromium is not installed and scripts/deps.sh could not install it:"
    tail -3 "$D/deps.log" | sed 's/^/    /'
else
mkdir -p "$ART"
CHROME_FLAGS="--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync"
timeout 120 chromium $CHROME_FLAGS --user-data-dir="$D/chrome1" \
    --window-size=1280,900 --virtual-time-budget=3000 \
    --dump-dom "$URL/#open=shop/work" >"$D/dom.html" 2>"$D/chrome1.log"
rc=$?
[ "$rc" = 0 ] || tail -5 "$D/chrome1.log"
check "chromium rendered the page at 1280 px (exit $rc)" [ "$rc" = 0 ]
curl -s --max-time 10 "$URL/history.json" >"$D/history.json"
timeout 120 chromium $CHROME_FLAGS --user-data-dir="$D/chrome2" \
    --window-size=800,900 --virtual-time-budget=3000 \
    --dump-dom "$URL/" >"$D/dom800.html" 2>"$D/chrome2.log"

python3 - "$D/dom.html" "$D/history.json" "$D/dom800.html" "$T_STEADY" \
    "$T_SPIKE0" "$T_SPIKE1" "$T_CALM0" "$T_CALM1" >"$D/check.out" 2>&1 <<'EOF'
import json, math, sys
from html.parser import HTMLParser
dom_f, hist_f, dom800_f = sys.argv[1:4]
t_steady, s0, s1, c0, c1 = map(float, sys.argv[4:9])
bad = 0
def fail(*a):
    global bad; print("FAIL:", *a); bad = 1

class Page(HTMLParser):
    def __init__(self):
        super().__init__(); self.charts = {}; self.cur = None; self.root = {}
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html": self.root = a
        if tag == "svg" and "data-chart" in a:
            self.cur = {"t": [float(x) for x in a["data-t"].split(",") if x],
                        "series": {}, "bands": []}
            self.charts[a["data-chart"]] = self.cur
        elif tag == "g" and self.cur is not None and "data-name" in a:
            self.cur["series"][a["data-name"]] = [None if x == "null" else float(x)
                                                  for x in a["data-v"].split(",") if x]
        elif tag == "rect" and self.cur is not None and "band" in a.get("class", ""):
            self.cur["bands"].append((float(a["data-from"]), float(a["data-to"])))
    def handle_endtag(self, tag):
        if tag == "svg": self.cur = None

p = Page(); p.feed(open(dom_f).read())
h = json.load(open(hist_f))
charts = p.charts
print("charts:", sorted(charts))
bus = [b for b in h["buses"] if b["name"] == "shop"]
if len(bus) != 1: fail("no bus shop in /history.json"); sys.exit(1)
bus = bus[0]
stages = [s["name"] for s in bus["stages"]]
listeners = [l["address"] for l in bus["listeners"]]
if stages[:3] != ["parse", "work", "store"] or len(stages) != 4: fail("history's stages", stages)
if len(listeners) != 1: fail("history's listeners", listeners)

# every chart there, with the history's values at every time it drew
def key_of(name):
    return {"door refused": "door_refused", "in flight": "in_flight",
            "sojourn p99": "sojourn_p99", "service p99": "service_p99",
            "dead-lettered": "dead_lettered"}.get(name, name)
want = {"bus:shop": bus}
for s in bus["stages"]:
    for k in ("rate", "p99", "depth"): want["%s:shop/%s" % (k, s["name"])] = s
for l in bus["listeners"]:
    for k in ("listener", "listener-p99"): want["%s:shop/%s" % (k, l["address"])] = l
wk = [s for s in bus["stages"] if s["name"] == "work"][0]
want["big-rate:shop/work"] = wk
want["big-p99:shop/work"] = wk
index = {t: i for i, t in enumerate(h["t"])}
checked = 0
for key, src in want.items():
    c = charts.get(key)
    if c is None: fail("no chart", key); continue
    if len(c["t"]) < 10: fail(key, "drew", len(c["t"]), "points"); continue
    for name, vs in c["series"].items():
        series = src.get(key_of(name))
        if series is None: fail(key, "series", name, "is not in /history.json"); continue
        if len(vs) != len(c["t"]): fail(key, name, "values and times differ in number")
        for t, v in zip(c["t"], vs):
            i = index.get(t)
            if i is None: fail(key, name, "drew t =", t, "which /history.json lacks"); break
            w = series[i]
            if (v is None) != (w is None) or (v is not None and not math.isclose(v, w, rel_tol=1e-9)):
                fail(key, name, "at", t, "drew", v, "history has", w); break
            checked += 1
print("points checked against /history.json:", checked)

# the shedding bands drawn where the history has them, none on parse
wk = [s for s in bus["stages"] if s["name"] == "work"][0]
hist_shed = [t for i, t in enumerate(h["t"]) if (wk["shedding"][i] or 0) > 0]
wc = charts.get("rate:shop/work", {"bands": [], "t": [0]})
bands = wc["bands"]
print("work's shedding bands (s from the spike's start):", [(round(a - s0, 1), round(b - s0, 1)) for a, b in bands])
if not bands: fail("no shedding band on work's chart")
for t in hist_shed:
    if wc["t"] and wc["t"][0] <= t <= wc["t"][-1] and not any(a <= t <= b for a, b in bands):
        fail("work shed at", t, "and no band covers it")
for a, b in bands:
    if a < s0: fail("a band before the spike", a - s0)
if not charts.get("big-rate:shop/work", {"bands": []})["bands"]: fail("the larger chart has no band")
if charts.get("rate:shop/parse", {"bands": [1]})["bands"]: fail("parse has a shedding band")

# the layout: no sideways scroll at 1280 (nor at 800), headers aligned
sw = int(p.root.get("data-scroll-width", "99999"))
print("scroll width at 1280:", sw, "misaligned:", repr(p.root.get("data-misaligned")))
if sw > 1280: fail("the page scrolls sideways at 1280 px:", sw)
if p.root.get("data-misaligned", "x") != "": fail("headers misaligned:", p.root.get("data-misaligned"))
print("tables wider than their box at 1280:", repr(p.root.get("data-overflowing")))
if p.root.get("data-overflowing", "x") != "": fail("a table scrolls sideways in its box at 1280 px:", p.root.get("data-overflowing"))
p8 = Page(); p8.feed(open(dom800_f).read())
sw8 = int(p8.root.get("data-scroll-width", "99999"))
print("scroll width at 800:", sw8)
if sw8 > 800: fail("the page scrolls sideways at 800 px:", sw8)
if "work" not in [k.split("/")[-1] for k in p8.charts]: fail("no charts at 800 px")
dom = open(dom_f).read()
for t in ("dead-reasons", "error-sites"):
    if 'class="%s"' % t not in dom: fail("no table", t, "(the load was to make some)")
sys.exit(bad)
EOF
rc=$?
sed 's/^/    /' "$D/check.out"
check "the page draws every stage and listener, the history's values, the shedding band where the history has it, no sideways scroll, headers aligned" [ "$rc" = 0 ]

timeout 120 chromium $CHROME_FLAGS --user-data-dir="$D/chrome3" \
    --window-size=1280,1500 --virtual-time-budget=3000 \
    --screenshot="$ART/page.png" "$URL/#open=shop/work" >"$D/chrome3.log" 2>&1
check "a screenshot of the page was kept ($ART/page.png)" eval \
    "[ -s '$ART/page.png' ] && [ \"\$(head -c 4 '$ART/page.png' | od -An -c | tr -d ' ')\" = '211PNG' ]"
fi

# ---- top(): a sparkline per stage, from the same history -----------------
out=$(ask "$S" 'top()')
check "top() draws the last minute per stage" contains "$out" "shop: delivered/s, the last 60 s"
spark() { printf '%s\n' "$out" | grep -E "^  $1 +[ ▁▂▃▄▅▆▇█]+  peak [0-9]"; }
check "... a sparkline of work" spark work
check "... which says it shed" eval "spark work | grep -q 'shedding [1-9][0-9]* s'"
check "... and of parse" spark parse

# ---- /history.json's own checks ------------------------------------------
check "/history.json?since=x is refused, naming the parameter" \
    contains "$(curl -s "$URL/history.json?since=x")" "since=x: expected a wall-clock time"
last=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["t"][-1])' "$D/history.json")
newer() {
    curl -s "$URL/history.json?since=$last" | python3 -c \
        'import json,sys; t=json.load(sys.stdin)["t"]; sys.exit(0 if t and min(t) > float(sys.argv[1]) else 1)' "$last"
}
check "/history.json?since=T has only the samples after T" wait_until "$DEADLINE" newer

stop_server
check "server exits 0 (got $SRC)" [ "$SRC" = 0 ]
[ "$SRC" = 0 ] || { echo "    the server's log:"; grep -v 'handler error' "$D/log" | tail -40 | sed 's/^/    /'; }
finish
