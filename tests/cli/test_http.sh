#!/bin/sh
# seda-lua --http: the address rules; /metrics (promtool check metrics,
# HELP/TYPE, summaries with _sum and _count); /stats.json parsed and
# checked against bus:stats() (through the control socket); 404, 405 (with
# Allow), 400; keep-alive; 200 idle connections held while the page still
# answers, the connection limit and the idle timeout; the status page in a
# real browser (headless Chromium: the rendered DOM has every stage's row
# in declaration order with a non-zero rate, and a screenshot is taken;
# HTTP_SCREENSHOT=FILE keeps a copy); -i serves too; SIGTERM stops it.
#
# Installs what it needs through scripts/deps.sh: curl, python3 (raw
# sockets, JSON), promtool (Debian `prometheus`), chromium.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

if ! sh "$ROOT/scripts/deps.sh" curl python3 prometheus chromium >"$D/deps.log" 2>&1; then
    cat "$D/deps.log"
    fail "scripts/deps.sh could not install curl python3 prometheus chromium"
    finish
fi

# ---- the address rules -------------------------------------------------
echo 'print("the-script-ran")' >"$D/noop.lua"
out=$("$SEDA" --http 8080 "$D/noop.lua" 2>&1); rc=$?
check "--http without --serve or -i is refused: a usage error, 2" [ "$rc" = 2 ]
check "... naming the rule" contains "$out" "--http needs --serve or -i"
check "... before the script runs" eval '! contains "$out" the-script-ran'
out=$("$SEDA" --serve --http example.com:80 "$D/noop.lua" 2>&1); rc=$?
check "a host name is refused" [ "$rc" = 1 ]
check "... saying what to give" contains "$out" "'example.com' is not a numeric IPv4 or IPv6 address"
out=$("$SEDA" --serve --http 127.0.0.1:99999 "$D/noop.lua" 2>&1); rc=$?
check "a port out of range is refused" [ "$rc" = 1 ]
check "... naming the range" contains "$out" "the port must be a number from 0 to 65535"
out=$("$SEDA" --serve --http 127.0.0.1:8x "$D/noop.lua" 2>&1)
check "a port that is no number is refused" contains "$out" "the port must be a number"
out=$("$SEDA" --serve --http '[::1' "$D/noop.lua" 2>&1)
check "an unclosed [ is refused" contains "$out" "expected [IPV6]:PORT"
out=$("$SEDA" --serve --http 2>&1)
check "--http needs an argument" contains "$out" "'--http' needs an argument"
check "--help shows --http" contains "$("$SEDA" --help)" "--http [ADDR:]PORT"

# ---- the pipeline under load ----------------------------------------------
# Bus 1: a feed loop driven by on_complete (50 in flight) through three
# stages declared in an order that is not alphabetical; every 40th
# envelope fails its first attempt in "alpha" (an error with a traceback,
# then a successful retry).  Bus 2: quiet, its counters fixed, for an exact
# comparison of /stats.json with bus:stats().
cat >"$D/p.lua" <<'EOF'
local seda = require "seda"
local bus = seda.bus{ workers = 2, data_dir = os.getenv("P_DATA") }
bus:stage{ name = "zulu", handler = function(env)
  local x = 0
  for i = 1, 500 do x = x + i end
end }
bus:stage{ name = "alpha", concurrency = 2, max_attempts = 2, handler = function(env)
  if env.payload % 40 == 0 and env.attempts == 1 then
    error("bad payload " .. env.payload % 3)
  end
end }
bus:stage{ name = "mike", handler = function(env) end }
local n = 0
local function feed()
  n = n + 1
  bus:publish("zulu", n, { slip = { "alpha", "mike" }, on_complete = feed })
end
for i = 1, 50 do feed() end
quiet = seda.bus{ workers = 1 }
quiet:stage{ name = "q2", handler = function(env) if env.payload == 3 then error("q2 says no") end end }
quiet:stage{ name = "q1", handler = function(env) return env.payload ~= 5 end }
for i = 1, 7 do quiet:publish("q1", i, { slip = { "q2" } }) end
quiet:wait(10)
EOF

S="$D/ctl.sock"
export P_DATA="$D/pdata"                # bus 1 has a journal (its metrics)
start_server "$D/log" --serve --control "$S" --http 127.0.0.1:0 "$D/p.lua"
url_of() { sed -n 's|.*http: listening on \(http://[^/]*\)/.*|\1|p' "$1" | head -1; }
has_url() { [ -n "$(url_of "$1")" ]; }
check "the server says where it listens" wait_until "$DEADLINE" has_url "$D/log"
URL=$(url_of "$D/log")
PORT=${URL##*:}
check "port 0 picked a loopback port ($URL)" contains "$URL" "http://127.0.0.1:"
check "control socket up" wait_until "$DEADLINE" sock_up "$S"

out=$("$SEDA" --serve --http "127.0.0.1:$PORT" "$D/noop.lua" 2>&1); rc=$?
check "a port in use is refused" [ "$rc" = 1 ]
check "... with the reason" contains "$out" "cannot listen: Address already in use"

# curl: -s quiet, -S errors, bounded by DEADLINE.
C() { curl -sS --max-time "$DEADLINE" "$@"; }

# ---- / ------------------------------------------------------------------
C -D "$D/h" -o "$D/page.html" "$URL/"
check "/ answers 200" grep -q '^HTTP/1.1 200' "$D/h"
check "/ is HTML" grep -qi '^content-type: text/html; charset=utf-8' "$D/h"
check "/ is the status page" grep -q '<title>seda-lua status</title>' "$D/page.html"
# Nothing is loaded from elsewhere; the only URL in it is the SVG
# namespace, an identifier no one fetches.
self_contained() {
    grep -Eiq '(src|href|action) *= *"?(https?:)?//|@import|url\(|<link|<script [^>]*src' "$1" &&
        return 1
    [ "$(grep -Eo "https?://[^\"' )]*" "$1" | sort -u)" = "http://www.w3.org/2000/svg" ]
}
check "/ is self-contained: no CDN, nothing fetched from elsewhere" self_contained "$D/page.html"
check "/ fetches /stats.json every second" grep -q "getJSON('/stats.json')" "$D/page.html"
check "... and /history.json" grep -q "getJSON('/history.json'" "$D/page.html"
C -I -o "$D/head" "$URL/"
check "HEAD / answers 200 with the length and no body" eval \
    "grep -q '^HTTP/1.1 200' '$D/head' && grep -qi '^content-length: [1-9]' '$D/head'"

# ---- /metrics -------------------------------------------------------------
C -D "$D/mh" -o "$D/metrics" "$URL/metrics"
check "/metrics answers 200" grep -q '^HTTP/1.1 200' "$D/mh"
check "/metrics has the exposition content type" \
    grep -qi '^content-type: text/plain; version=0.0.4' "$D/mh"
if promtool check metrics <"$D/metrics" >"$D/promtool.out" 2>&1; then
    ok "promtool check metrics accepts /metrics"
else
    cat "$D/promtool.out"
    fail "promtool check metrics rejects /metrics"
fi
# Every family has HELP and TYPE; every histogram has _sum and _count for
# each stage it has buckets for, and a +Inf bucket equal to _count.
python3 - "$D/metrics" >"$D/families.out" 2>&1 <<'EOF'
import re, sys
help_, type_, samples = {}, {}, []
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("# HELP "):
        n, t = line[7:].split(" ", 1); help_[n] = t
    elif line.startswith("# TYPE "):
        n, t = line[7:].split(" ", 1); type_[n] = t
    elif line:
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$', line)
        if not m: print("malformed sample:", line); sys.exit(1)
        samples.append((m.group(1), m.group(2) or "", m.group(3)))
bad = 0
for name, labels, v in samples:
    fam = name
    base = re.sub(r'_(sum|count|bucket)$', '', name)
    if type_.get(base) == "histogram":
        fam = base
    if fam not in help_ or fam not in type_:
        print("no HELP/TYPE for", name); bad = 1
for fam, t in type_.items():
    if t != "histogram": continue
    stages = {re.search(r'bus="([^"]*)",stage="([^"]*)"', l).groups() for n, l, v in samples if n == fam + "_bucket"}
    for b, s in stages:
        sel = 'bus="%s",stage="%s"' % (b, s)
        for suf in ("_sum", "_count"):
            if not any(n == fam + suf and sel in l for n, l, v in samples):
                print("histogram", fam, "has no", suf, "for", s); bad = 1
        inf = [v for n, l, v in samples if n == fam + "_bucket" and sel in l and 'le="+Inf"' in l]
        cnt = [v for n, l, v in samples if n == fam + "_count" and sel in l]
        if inf != cnt: print("histogram", fam, s, "+Inf", inf, "!= count", cnt); bad = 1
    if not stages: print("histogram", fam, "has no samples"); bad = 1
sys.exit(bad)
EOF
rc=$?
[ "$rc" = 0 ] || cat "$D/families.out"
check "every family has HELP and TYPE; histograms have _sum, _count and +Inf" [ "$rc" = 0 ]
check "sojourn's HELP says admission -> handler start" \
    grep -q '^# HELP seda_stage_sojourn_seconds Time from admission to the stage to the start of its handler' "$D/metrics"
check "in_flight's HELP says envelopes being handled" \
    grep -q '^# HELP seda_stage_in_flight Envelopes being handled' "$D/metrics"
check "the histogram count is the sample count" \
    grep -q '^seda_stage_service_seconds_count{bus="bus2",stage="q1"} 7$' "$D/metrics"
check "the journal's group commits are metrics" eval \
    "grep -q '^seda_bus_journal_group_mean{bus=\"bus1\"} [0-9]' '$D/metrics' &&
     grep -q '^# TYPE seda_bus_journal_fsyncs_total counter$' '$D/metrics' &&
     grep -q '^seda_bus_journal_commits_total{bus=\"bus1\"} [0-9]' '$D/metrics' &&
     ! grep -q '^seda_bus_journal_commits_total{bus=\"bus2\"}' '$D/metrics'"
check "admission figures are metrics (shed, refused, delayed)" eval \
    "grep -q '^seda_stage_shed_total{bus=\"bus1\",stage=\"zulu\"} 0$' '$D/metrics' &&
     grep -q '^# TYPE seda_stage_refused_total counter$' '$D/metrics' &&
     grep -q '^# TYPE seda_stage_delayed gauge$' '$D/metrics'"
check "the last error's time is a metric" \
    grep -q '^seda_stage_last_error_timestamp_seconds{bus="bus1",stage="alpha"} [0-9]*\.[0-9]*$' "$D/metrics"

# ---- /stats.json ----------------------------------------------------------
C -D "$D/jh" -o "$D/stats.json" "$URL/stats.json"
check "/stats.json answers 200" grep -q '^HTTP/1.1 200' "$D/jh"
check "/stats.json is JSON" grep -qi '^content-type: application/json' "$D/jh"
# What the server itself says bus:stats() is, for the quiet bus (its
# counters no longer move), as sorted "key=value" lines of integers and
# strings and "key~float" for floats (their values move: rates decay); the
# same lines from the JSON must match (a float stays a float: 0.0).  The busy bus: the
# same stages and keys, its declaration order, and its errors.
ask "$S" 'for i, b in ipairs(seda.buses()) do if b == quiet then print("index=" .. i) local st = b:stats() local t = {} for k, v in pairs(st) do if math.type(v) == "integer" or type(v) == "string" or type(v) == "boolean" then t[#t+1] = k .. "=" .. tostring(v) end end for name, s in pairs(st.stages) do for k, v in pairs(s) do if math.type(v) == "integer" or type(v) == "string" then t[#t+1] = name .. "." .. k .. "=" .. tostring(v) elseif math.type(v) == "float" then t[#t+1] = name .. "." .. k .. "~float" end end end table.sort(t) print(table.concat(t, "\n")) end end' >"$D/expect.txt"
python3 - "$D/stats.json" "$D/expect.txt" >"$D/json.out" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
exp = open(sys.argv[2]).read().split("\n")
idx = int(exp[0].split("=")[1]); exp = [l for l in exp[1:] if l]
bad = 0
def err(*a):
    global bad; print(*a); bad = 1
assert d["version"] and d["time"] > 1e9 and d["now"] > 0
quiet = [b for b in d["buses"] if b["index"] == idx]
if len(quiet) != 1: err("no bus with index", idx)
else:
    q = quiet[0]; st = q["stats"]; got = []
    for k, v in st.items():
        if isinstance(v, bool): got.append("%s=%s" % (k, str(v).lower()))
        elif isinstance(v, int) or isinstance(v, str): got.append("%s=%s" % (k, v))
    for name, s in st["stages"].items():
        for k, v in s.items():
            if isinstance(v, bool): continue
            if isinstance(v, int) or isinstance(v, str): got.append("%s.%s=%s" % (name, k, v))
            elif isinstance(v, float): got.append("%s.%s~float" % (name, k))
    got.sort()
    if got != exp:
        err("quiet bus differs:\n json: %s\n stats: %s" % (got, exp))
    if q["order"] != ["q2", "q1"]: err("quiet order", q["order"])
    if [e["stage"] for e in q["errors"]] != ["q2"]: err("quiet errors", q["errors"])
    elif "q2 says no" not in q["errors"][0]["message"] or q["errors"][0]["repeats"] != 1:
        err("quiet error entry", q["errors"][0])
busy = [b for b in d["buses"] if b["index"] != idx]
if len(busy) != 1: err("expected one busy bus, got", len(busy))
else:
    b = busy[0]
    if b["order"] != ["zulu", "alpha", "mike"]: err("declaration order", b["order"])
    if sorted(b["stats"]["stages"]) != sorted(b["order"]): err("stages", list(b["stats"]["stages"]))
    for k in ("workers", "workers_loaned", "max_loans", "loans", "accepted", "completed", "in_system"):
        if not isinstance(b["stats"].get(k), int): err("bus field", k, b["stats"].get(k))
    for name, s in b["stats"]["stages"].items():
        for k in ("depth", "capacity", "in_flight", "delivered", "dead_lettered", "sojourn_count", "sojourn_sum", "rate"):
            if k not in s: err("stage", name, "lacks", k)
    if b["stats"]["stages"]["zulu"]["delivered"] <= 0: err("zulu delivered nothing")
    errs = b["errors"]
    if not errs or any(e["stage"] != "alpha" for e in errs): err("busy errors", errs[:2])
    elif not all("bad payload" in e["message"] and "stack traceback" in e["message"] for e in errs):
        err("error messages", errs[0]["message"])
    elif sorted(errs, key=lambda e: -e["time"]) != errs: err("errors not newest first")
sys.exit(bad)
EOF
rc=$?
[ "$rc" = 0 ] || { cat "$D/json.out"; head -c 600 "$D/expect.txt"; }
check "/stats.json matches bus:stats(), orders, errors" [ "$rc" = 0 ]

# What the page shows besides: each figure's window, dead letters by
# reason, delayed retries, suspended calls, each worker's Lua memory, and
# the errors grouped by site (file:line), counted and capped.
SITE="p.lua:$(grep -n 'error("bad payload' "$D/p.lua" | cut -d: -f1)"
python3 - "$D/stats.json" "$SITE" >"$D/page_fields.out" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); site = sys.argv[2]; bad = 0
def err(*a):
    global bad; print(*a); bad = 1
for b in d["buses"]:
    st = b["stats"]
    if not isinstance(st.get("suspended"), int): err("bus suspended", st.get("suspended"))
    wm = st.get("worker_memory")
    if not isinstance(wm, list) or not wm or not all(isinstance(v, int) and v > 0 for v in wm):
        err("worker_memory", wm)
    for name, s in st["stages"].items():
        if s.get("window") != 10.0: err(name, "window", s.get("window"))
        for k in ("delayed", "suspended", "window_count"):
            if not isinstance(s.get(k), int): err(name, k, s.get(k))
        if not isinstance(s.get("dead_by_reason"), dict): err(name, "dead_by_reason", s.get("dead_by_reason"))
        elif sum(s["dead_by_reason"].values()) != s["dead_lettered"]:
            err(name, "dead_by_reason", s["dead_by_reason"], "!= dead_lettered", s["dead_lettered"])
    if not isinstance(b.get("error_sites"), list) or not isinstance(b.get("error_sites_more"), int):
        err("no error_sites / error_sites_more", list(b))
busy = [b for b in d["buses"] if "alpha" in b["stats"]["stages"]][0]
quiet = [b for b in d["buses"] if "q1" in b["stats"]["stages"]][0]
if sum(sum(s["dead_by_reason"].values()) for s in quiet["stats"]["stages"].values()) < 1:
    err("the quiet bus has no dead letters by reason")
sites = busy["error_sites"]
if len(sites) != 1: err("alpha's errors are one site, got", sites)
else:
    g = sites[0]
    if g["stage"] != "alpha" or not g["site"].endswith(site): err("site", g, "expected", site)
    kept = [e for e in busy["errors"] if e["stage"] == "alpha"]
    if g["distinct"] != len(kept) or g["distinct"] < 2: err("distinct", g["distinct"], len(kept))
    if g["count"] != sum(e["repeats"] for e in kept): err("count", g["count"])
    if "\n" in g["message"] or "bad payload" not in g["message"]: err("message", g["message"])
    if not g["first"] <= g["last"]: err("first/last", g)
if busy["error_sites_more"] != 0: err("error_sites_more", busy["error_sites_more"])
q = quiet["error_sites"]
if len(q) != 1 or q[0]["stage"] != "q2" or q[0]["count"] != 1 or "q2 says no" not in q[0]["message"]:
    err("quiet sites", q)
sys.exit(bad)
EOF
rc=$?
[ "$rc" = 0 ] || cat "$D/page_fields.out"
check "/stats.json has the page's fields: windows, dead letters by reason, delayed, suspended, worker memory, error sites" [ "$rc" = 0 ]

# ---- bad requests -----------------------------------------------------------
code() { C -o /dev/null -w '%{http_code}' "$@"; }
check "an unknown path is 404" [ "$(code "$URL/nope")" = 404 ]
check "... naming the endpoints" contains "$(C "$URL/nope")" "endpoints: / (status page), /metrics, /stats.json"
check "/metrics/ is not /metrics (404)" [ "$(code "$URL/metrics/")" = 404 ]
for m in POST PUT DELETE OPTIONS PATCH; do
    C -X "$m" -D "$D/h405" -o "$D/b405" -d 'x=1' "$URL/metrics"
    check "$m is 405 with Allow: GET, HEAD" eval \
        "grep -q '^HTTP/1.1 405' '$D/h405' && grep -qi '^allow: GET, HEAD' '$D/h405'"
done
check "... and says why" contains "$(cat "$D/b405")" "answers GET and HEAD only"
# Raw requests (python3): malformed ones get 400; the connection stays
# usable for a second request when the first is good (keep-alive).
python3 - "$PORT" >"$D/raw.out" 2>&1 <<'EOF'
import socket, sys
port = int(sys.argv[1]); bad = 0
def status(req):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(req); d = b""
    while b"\r\n" not in d:
        c = s.recv(4096)
        if not c: break
        d += c
    s.close()
    return d.split(b"\r\n")[0].decode()
for req, want in [
    (b"GET / HTTP/1.1\r\nHost: localhost\r\nno colon here\r\n\r\n", "400"),
    (b"GET /metrics HTTP/1.1\r\n\r\n", "400"),                 # no Host
    (b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello", "400"),
    (b"GET /metrics HTTP/1.0\r\n\r\n", "200"),
    (b"BREW /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n", "405"),
]:
    got = status(req)
    if want not in got.split(" ")[1:2]:
        print("request", req, "->", got, "wanted", want); bad = 1
# keep-alive: two requests, one connection
s = socket.create_connection(("127.0.0.1", port), timeout=20)
f = s.makefile("rb")
for path in (b"/stats.json", b"/metrics"):
    s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
    line = f.readline()
    n = 0
    while True:
        h = f.readline()
        if h in (b"\r\n", b""): break
        if h.lower().startswith(b"content-length:"): n = int(h.split(b":")[1])
    body = f.read(n)
    if b"200" not in line or len(body) != n or n == 0:
        print("keep-alive request", path, line, n); bad = 1
sys.exit(bad)
EOF
rc=$?
[ "$rc" = 0 ] || cat "$D/raw.out"
check "malformed requests 400, BREW 405, HTTP/1.0 200, keep-alive" [ "$rc" = 0 ]

# ---- bounded connections -----------------------------------------------------
# 200 idle connections (half mid-request) are held while / and /stats.json
# still answer; past the limit (512) a new connection waits unanswered
# until others close; an idle connection is closed after the timeout
# (10 s), not before 5.
python3 - "$PORT" "$URL" >"$D/conn.out" 2>&1 <<'EOF'
import select, socket, subprocess, sys, time
port, url = int(sys.argv[1]), sys.argv[2]; bad = 0
def fail(*a):
    global bad; print(*a); bad = 1
def opened(n, partial):
    out = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        if partial and i % 2: s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n")
        out.append(s)
    return out
def closed(s):            # EOF (or reset) already there, without waiting
    r, _, _ = select.select([s], [], [], 0)
    if not r: return False
    try: return s.recv(1, socket.MSG_PEEK) == b""
    except OSError: return True
idle = opened(200, True)
for path in ("/", "/stats.json"):
    t0 = time.monotonic()
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                        "--max-time", "20", url + path], capture_output=True, text=True)
    if r.stdout != "200": fail(path, "with 200 idle connections:", r.stdout, r.stderr)
    print(path, "answered in %.3fs with 200 idle connections" % (time.monotonic() - t0))
n_closed = sum(closed(s) for s in idle)
if n_closed: fail(n_closed, "of the 200 idle connections were closed")
# Past the limit (512): 320 more, then a request on one more connection
# gets no answer while they are all held (the server accepts no more; it
# waits in the listen backlog) ...
more = opened(320, False)
probe = socket.create_connection(("127.0.0.1", port), timeout=1)
probe.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
try:
    early = probe.recv(12)
except socket.timeout:
    early = None
if early is not None: fail("answered past the connection limit:", early)
# ... and is answered once they are closed.
for s in idle + more: s.close()
probe.settimeout(20)
try:
    late = probe.recv(12)
except OSError as e:
    late = repr(e).encode()
print("past the limit, answered once the others closed:", late)
if not late.startswith(b"HTTP/1.1 200"): fail("the waiting request got", late)
probe.close()
# The idle timeout: a silent connection is closed by the server.
s = socket.create_connection(("127.0.0.1", port), timeout=40)
t0 = time.monotonic()
try: d = s.recv(1)
except OSError: d = b""
el = time.monotonic() - t0
print("idle connection closed after %.1fs" % el)
if d != b"": fail("an idle connection got data", d)
if el < 5: fail("closed too early: %.1fs" % el)
sys.exit(bad)
EOF
rc=$?
cat "$D/conn.out" | sed 's/^/    /'
check "200 idle connections held, limit and idle timeout enforced" [ "$rc" = 0 ]

# ---- Host: DNS rebinding ---------------------------------------------------------
hcode() { curl -s -o /dev/null -w '%{http_code}' -H "Host: $1" "$URL/metrics"; }
check "Host: a foreign name is refused 403" [ "$(hcode "evil.example:$PORT")" = 403 ]
check "... saying why" contains "$(curl -s -H 'Host: evil.example' "$URL/stats.json")" "is not this endpoint's"
check "Host: localhost:PORT answers" [ "$(hcode "localhost:$PORT")" = 200 ]
check "Host: an IPv4 address answers" [ "$(hcode "127.0.0.1:$PORT")" = 200 ]
check "Host: an IPv6 address answers" [ "$(hcode "[::1]:$PORT")" = 200 ]

# ---- /dlq.json: the kept dead letters of a live bus -------------------------------
curl -s "$URL/dlq.json" >"$D/dlq.json"
python3 - "$D/dlq.json" >"$D/dlq.out" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); bad = 0
letters = [x for b in d["buses"] for x in b["dead_letters"]]
q2 = [x for x in letters if x["stage"] == "q2"]
print(len(letters), "dead letters;", [(x["stage"], x["reason"], x.get("error")) for x in letters][:4])
if not q2: bad = 1; print("no dead letter of q2")
for x in q2:
    h = x["headers"]
    if x["payload"] != 3 or "q2 says no" not in h.get("x-dead-error", "") or h.get("x-dead-from") != "q2" or not h.get("x-dead-at") or not h.get("x-dead-attempts"):
        bad = 1; print("q2's dead letter lacks what it died of:", x)
sys.exit(bad)
EOF
rc=$?
sed 's/^/    /' "$D/dlq.out"
check "/dlq.json lists the live bus's dead letters with the error, attempts, time and stage" [ "$rc" = 0 ]

# ---- a busy main state does not hold a scrape ---------------------------------------
# A command that keeps the main state busy for 6 s, through the control
# socket; /metrics and /stats.json answer meanwhile (from the observer).
ask "$S" 'local t = os.clock() while os.clock() - t < 6 do end' >/dev/null 2>&1 &
BUSY=$!
sleep 1
t0=$(date +%s%N)
mcode=$(curl -s -o "$D/busy.prom" -w '%{http_code}' --max-time 5 "$URL/metrics")
t1=$(date +%s%N)
scode=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/stats.json")
echo "    /metrics answered $mcode in $(( (t1 - t0) / 1000000 )) ms while the main state was busy"
check "/metrics answers while the main state runs a long command" [ "$mcode" = 200 ]
check "... with the stages' figures" grep -q 'seda_stage_delivered_total{bus="bus1",stage="zulu"}' "$D/busy.prom"
check "... and seda.shared's bound and evictions" sh -c "grep -q '^seda_shared_capacity_bytes ' '$D/busy.prom' && grep -q '^seda_shared_evicted_total ' '$D/busy.prom'"
check "/stats.json answers too" [ "$scode" = 200 ]
wait "$BUSY"

# ---- slowloris: a whole-request deadline ----------------------------------------------
# 300 connections each sending a header line every second never finish a
# request: they take no answer from the others and are cut HTTP_TIMEOUT
# (10 s) after they opened, though their bytes keep coming.
python3 - "$PORT" "$URL" >"$D/slow.out" 2>&1 <<'EOF'
import socket, subprocess, sys, time
port, url = int(sys.argv[1]), sys.argv[2]; bad = 0
conns = []
for i in range(300):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
    conns.append(s)
t_open = time.monotonic()
r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{time_total}",
                    "--max-time", "5", url + "/metrics"], capture_output=True, text=True)
print("a scrape among 300 slow clients:", r.stdout)
if not r.stdout.startswith("200"): bad = 1
alive = list(conns); i = 0
while alive and time.monotonic() - t_open < 20:
    time.sleep(1); i += 1
    for s in list(alive):
        try:
            s.sendall(b"X-Drip-%d: y\r\n" % i)
        except OSError:
            alive.remove(s)
if alive: bad = 1; print(len(alive), "slow clients still connected after 20 s")
el = time.monotonic() - t_open
print("all 300 cut after %.1fs" % el)
if el < 8: bad = 1; print("cut before the deadline")
sys.exit(bad)
EOF
rc=$?
sed 's/^/    /' "$D/slow.out"
check "slow clients are cut at the whole-request deadline and hold no scrape" [ "$rc" = 0 ]

# ---- the page in a real browser -----------------------------------------------
# Chromium renders / under load; its virtual-time budget lets the page's
# timers run (each fetch of /stats.json completes first), so the DOM shows
# several refreshes.  The rows carry data-stage and data-rate.
CHROME_FLAGS="--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync"
timeout 120 chromium $CHROME_FLAGS --user-data-dir="$D/chrome1" \
    --virtual-time-budget=4000 --dump-dom "$URL/" >"$D/dom.html" 2>"$D/chrome1.log"
rc=$?
[ "$rc" = 0 ] || tail -5 "$D/chrome1.log"
check "chromium rendered the page (exit $rc)" [ "$rc" = 0 ]
python3 - "$D/dom.html" >"$D/dom.out" 2>&1 <<'EOF'
import re, sys
dom = open(sys.argv[1]).read(); bad = 0
def fail(*a):
    global bad; print(*a); bad = 1
if 'id="status" class="live"' not in dom: fail("status is not live")
rows = re.findall(r'<tr data-stage="([^"]*)" data-rate="([^"]*)"', dom)
print("rows:", rows)
names = [n for n, r in rows]
if names != ["zulu", "alpha", "mike", "q2", "q1"]:
    fail("rows not in declaration order, per bus:", names)
rates = dict(rows)
for n in ("zulu", "alpha", "mike"):
    if not float(rates.get(n, 0)) > 0: fail("stage", n, "rate not > 0:", rates.get(n))
for col in ('class="queue"', 'class="inflight"', 'class="sojourn-p99"', 'class="dead', 'class="shed', 'data-chart="rate:bus1/zulu"', 'data-chart="p99:bus1/alpha"', 'data-chart="depth:bus2/q1"'):
    if col not in dom: fail("no", col)
for word in ("loaned", "loans", "dead-lettered", "recent errors", "suspended calls",
             "delayed retries", "worker Lua memory", "dead letters by reason",
             "errors by site", "sojourn p99 (last 10 s)", "service p99 (last 10 s)",
             "rate/s (last 1 s)", "p99: the last 10 s"):
    if word not in dom: fail("no", word)
if not re.search(r'<li data-stage="alpha">.*?bad payload', dom): fail("alpha's error not listed")
if not re.search(r'<li data-stage="q2">.*?q2 says no', dom): fail("q2's error not listed")
if not re.search(r'<tr data-stage="alpha" data-site="[^"]*p\.lua:\d+">', dom): fail("alpha's error site not listed")
if not re.search(r'<td data-reason="max_attempts"[^>]*>[1-9]', dom): fail("no dead letters by reason")
if not re.search(r'<span data-worker="0">worker 0 <b>[0-9.]+ KiB', dom): fail("no worker memory")
sys.exit(bad)
EOF
rc=$?
cat "$D/dom.out" | sed 's/^/    /'
check "the rendered page has every stage's row in order with a non-zero rate, loans, dead letters (by reason), errors (by site), worker memory, each figure's window" [ "$rc" = 0 ]
# (a longer budget: the sparklines have some history)
timeout 120 chromium $CHROME_FLAGS --user-data-dir="$D/chrome2" \
    --virtual-time-budget=20000 --window-size=1280,900 \
    --screenshot="$D/page.png" "$URL/" >"$D/chrome2.log" 2>&1
check "a screenshot of the page was taken" eval \
    "[ -s '$D/page.png' ] && [ \"\$(head -c 8 '$D/page.png' | od -An -c | tr -d ' ')\" = '211PNG\\r\\n032\\n' ]"
[ -n "${HTTP_SCREENSHOT:-}" ] && cp "$D/page.png" "$HTTP_SCREENSHOT"

# ---- the REPL helper and the status line, through the control socket ---------
out=$(ask "$S" "errors('alpha')")
check "errors(stage) prints the stage's errors" contains "$out" "bad payload"
check "... with their tracebacks" contains "$out" "stack traceback"
check "errors('nope') names the stage" contains "$(ask "$S" "errors('nope')")" "errors: no such stage 'nope'"
check "errors(1) is refused" contains "$(ask "$S" "errors(1)")" "errors: stage name must be a string"
check "stats() shows each stage's last error" contains "$(ask "$S" "stats()")" "last error: alpha"
check "help() lists errors()" contains "$(ask "$S" "help()")" "errors([stage])"

# ---- SIGTERM stops the server and the endpoint ------------------------------
stop_server
check "SIGTERM: exit 0" [ "$SRC" = 0 ]
check "the endpoint is gone" [ "$(code "$URL/" 2>/dev/null)" = 000 ]

# ---- a listener's requests in /metrics ------------------------------------
# seda_http_request_seconds is a histogram (buckets, _sum, _count: it used
# to be two gauges, p50 and p99, that nothing can aggregate), and
# seda_http_responses_total's classes partition the answers: a 503 is
# counted once (it used to be in 5xx too).
cat >"$D/l.lua" <<'EOF'
local seda = require "seda"
local bus = seda.bus{ workers = 1, name = "web" }
bus:stage{ name = "w", handler = function(env)
  local p = env.payload.path
  if p == "/busy" then return env:respond(503, "busy") end
  if p == "/err" then return env:respond(500, "err") end
  if p == "/moved" then return env:respond(301, "", { Location = "/ok" }) end
  if p == "/slow" then seda.sleep(0.3) end
  env:respond(200, "ok")
end }
local l = bus:listen{ http = 0, routes = { ["GET /ok"] = { "w" },
  ["GET /busy"] = { "w" }, ["GET /err"] = { "w" }, ["GET /moved"] = { "w" },
  ["GET /slow"] = { "w" } } }
io.stderr:write("LISTENER " .. tostring(l) .. "\n")
EOF
start_server "$D/llog" --serve --http 127.0.0.1:0 "$D/l.lua"
check "the listener and --http are up" wait_until "$DEADLINE" has_url "$D/llog"
LURL=$(url_of "$D/llog")
LADDR=$(sed -n 's/^LISTENER seda.listener (\(.*\))$/\1/p' "$D/llog")
for p in ok ok ok busy err moved slow nope; do
    C -o /dev/null "http://$LADDR/$p"
done
C -o "$D/lmetrics" "$LURL/metrics"
if promtool check metrics <"$D/lmetrics" >"$D/lpromtool.out" 2>&1; then
    ok "promtool check metrics accepts /metrics with a listener"
else
    cat "$D/lpromtool.out"
    fail "promtool check metrics rejects /metrics with a listener"
fi
python3 - "$D/lmetrics" "$LADDR" >"$D/lhist.out" 2>&1 <<'EOF'
import re, sys
text = open(sys.argv[1]).read(); addr = sys.argv[2]; bad = 0
def err(*a):
    global bad; print(*a); bad = 1
sel = 'bus="web",listener="%s"' % addr
def val(name, extra=""):
    m = re.search(r'^%s\{%s%s\} (\S+)$' % (re.escape(name), re.escape(sel), re.escape(extra)), text, re.M)
    return float(m.group(1)) if m else None
if "# TYPE seda_http_request_seconds histogram" not in text: err("no histogram TYPE")
buckets = re.findall(r'^seda_http_request_seconds_bucket\{%s,le="([^"]*)"\} (\S+)$' % re.escape(sel), text, re.M)
les = [b[0] for b in buckets]
if not les or les[-1] != "+Inf": err("buckets", les)
cums = [float(b[1]) for b in buckets]
if cums != sorted(cums): err("buckets not cumulative", buckets)
count, total = val("seda_http_request_seconds_count"), val("seda_http_request_seconds_sum")
if count != 8: err("_count", count, "want 8 answers")
if not cums or cums[-1] != count: err("+Inf", cums[-1:], "!= count", count)
if total is None or total < 0.3: err("_sum", total, "want >= 0.3 (the slow request)")
under = dict(zip(les, cums))
if under.get("0.25", 99) > 7: err("le=0.25 counts the 0.3 s request", under)
cls = {c: val("seda_http_responses_total", ',class="%s"' % c) for c in ("1xx", "2xx", "3xx", "4xx", "503", "5xx")}
want = {"1xx": 0, "2xx": 4, "3xx": 1, "4xx": 1, "503": 1, "5xx": 1}
if cls != want: err("classes", cls, "want", want)
if sum(cls.values()) != count: err("classes sum", sum(cls.values()), "!= answers", count)
for q in ("p50", "p99"):
    if val("seda_http_request_%s_seconds" % q) is None: err("gauge", q, "gone")
sys.exit(bad)
EOF
rc=$?
[ "$rc" = 0 ] || { cat "$D/lhist.out"; grep seda_http "$D/lmetrics"; }
check "seda_http_request_seconds is a histogram; the response classes partition the answers" [ "$rc" = 0 ]
stop_server
check "... it stops on SIGTERM ($SRC)" [ "$SRC" = 0 ]

# ---- -i serves too (the REPL on a pipe held open) ------------------------------
mkfifo "$D/in"
"$SEDA" -i --http 127.0.0.1:0 "$D/noop.lua" <"$D/in" >"$D/ilog" 2>&1 &
IPID=$!
PIDS="$PIDS $IPID"
exec 7>"$D/in"
check "-i: listening" wait_until "$DEADLINE" has_url "$D/ilog"
IURL=$(url_of "$D/ilog")
check "-i: /stats.json answers while the REPL waits" [ "$(code "$IURL/stats.json")" = 200 ]
exec 7>&-
waitpid_bounded "$IPID"
check "-i: the end of input ends it (exit 0)" [ "$WRC" = 0 ]
finish
