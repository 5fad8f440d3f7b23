#!/bin/sh
# examples/remote/run.sh -- two worker processes share the remote stage
# "enrich"; a producer process publishes orders and gets each one's
# on_complete back.  Starts a private nats-server (JetStream on,
# 127.0.0.1 only, a temporary store) and stops everything at the end.
# make run-remote runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
SEDA=${SEDA:-$here/../../build/release/seda-lua}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/seda-remote.XXXXXX")
pids=""
finish() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    sh "$here/../../tests/remote/natsd.sh" stop "$tmp/nats" || true
    rm -rf "$tmp"
}
trap finish EXIT
trap 'exit 1' INT TERM

URL=$(sh "$here/../../tests/remote/natsd.sh" start "$tmp/nats")
echo "nats-server with JetStream at $URL"
for w in w1 w2; do
    "$SEDA" --serve "$here/worker.lua" "$URL" "$w" >"$tmp/$w.log" 2>&1 &
    pids="$pids $!"
done
i=0
until grep -q consuming "$tmp/w1.log" 2>/dev/null &&
      grep -q consuming "$tmp/w2.log" 2>/dev/null; do
    i=$((i + 1))
    [ $i -gt 200 ] && { cat "$tmp"/w*.log; echo "workers did not start"; exit 1; }
    sleep 0.05
done
"$SEDA" "$here/producer.lua" "$URL" 20
