#!/bin/sh
# scripts/page-shot.sh [OUT.png]: the README's picture of the status page
# (docs/page.png by default): `make serve`'s program (examples/service.lua)
# on a private port for PAGE_SECONDS (default 90) seconds, so that the
# charts have some history, then headless Chromium's screenshot of / at
# 1 280 px with the stage `enrich` opened into its larger charts.
# Installs chromium through scripts/deps.sh when it is missing.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SEDA=${SEDA:-$ROOT/build/release/seda-lua}
OUT=${1:-$ROOT/docs/page.png}
SECS=${PAGE_SECONDS:-90}
[ -x "$SEDA" ] || { echo "page-shot: no $SEDA (run make first)" >&2; exit 1; }
sh "$ROOT/scripts/deps.sh" chromium >&2 ||
    { echo "page-shot: chromium could not be installed" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/seda-shot.XXXXXX")
PID=""
cleanup() { [ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
cd "$ROOT"
"$SEDA" --serve --http 127.0.0.1:0 examples/service.lua >"$T/log" 2>&1 &
PID=$!
URL=""
for _ in $(seq 100); do
    URL=$(sed -n 's|.*http: listening on \(http://[^/]*\)/.*|\1|p' "$T/log" | head -1)
    [ -n "$URL" ] && break
    sleep 0.1
done
[ -n "$URL" ] || { cat "$T/log" >&2; echo "page-shot: the server did not start" >&2; exit 1; }
echo "page-shot: $URL, $SECS s of traffic before the picture" >&2
sleep "$SECS"
timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$T/chrome" --hide-scrollbars --window-size=1280,1450 \
    --virtual-time-budget=3000 --screenshot="$OUT" "$URL/#open=bus1/enrich" \
    >"$T/chrome.log" 2>&1 || { tail -5 "$T/chrome.log" >&2; exit 1; }
echo "page-shot: wrote $OUT" >&2
