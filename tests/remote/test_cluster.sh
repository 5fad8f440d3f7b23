#!/bin/sh
# A server may die: a 3-server nats-server cluster (JetStream on each), a
# remote stage whose stream has replicas = 3, one origin publishing N
# envelopes with on_complete (urls = all three) and two consumer
# processes.  Mid-run the stream's leader is killed (kill -9) and started
# again; then, on a second stream, a server that does not lead it.  Each
# time: every accepted envelope is handled, on_complete fires for each,
# none is dead-lettered or dropped; duplicates (handled more than once:
# acks lost with the server) are counted and reported.
# N is CLUSTER_N (default 2000; the issue's figure is 20000).
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
N=${CLUSTER_N:-2000}
CL="sh $REMOTE_DIR/cluster.sh"
URLS=$($CL start "$D/cl" 2>"$D/cluster.err") ||
    { echo "FAIL $NAME: cluster: $(cat "$D/cluster.err")"; exit 1; }
PIDS="$PIDS $(cat "$D"/cl/n*/pid)"
trap '$CL stop "$D/cl" >/dev/null 2>&1; cleanup' EXIT

run() {   # run STREAM WHICH(leader|follower)
    s=$1; which=$2
    # One at a time: the first creates the stream (a replicated stream
    # takes a moment), the second finds it.
    for c in a b; do
        STATS_FILE="$D/$s.$c.stats" \
        "$SEDA" --serve "$REMOTE_DIR/lua/cluster_consumer.lua" "$URLS" "$s" \
            >"$D/$s.$c.out" 2>"$D/$s.$c.err" &
        echo $! >"$D/$s.$c.pid"
        PIDS="$PIDS $!"
        check "$s: consumer $c ready" wait_until 30 grep -q ready "$D/$s.$c.out"
    done
    "$SEDA" "$REMOTE_DIR/lua/cluster_origin.lua" "$URLS" "$s" "$N" \
        >"$D/$s.origin.out" 2>"$D/$s.origin.err" &
    o=$!
    PIDS="$PIDS $o"
    third() { [ "$(cat "$D/$s".?.out | grep -c '^handled ')" -ge $((N / 3)) ]; }
    check "$s: a third handled" wait_until 60 third
    leader=$($CL leader "$D/cl" "$s") || leader=1
    if [ "$which" = leader ]; then victim=$leader
    else victim=$(( leader % 3 + 1 )); fi
    $CL kill "$D/cl" "$victim"
    echo "     $s: killed n$victim (the stream's leader is n$leader)"
    sleep 2
    $CL up "$D/cl" "$victim"
    PIDS="$PIDS $(cat "$D/cl/n$victim/pid")"
    check "$s: the origin finishes" wait_until 150 sh -c "! kill -0 $o 2>/dev/null"
    wait "$o"
    set -- $(grep '^origin ' "$D/$s.origin.out")
    acc=${2:-0}; comp=${3:-0}; dead=${4:-1}; drop=${5:-1}; ref=${6:-0}
    distinct=$(cat "$D/$s".?.out | grep '^handled ' | awk '{print $2}' | sort -u | wc -l)
    total=$(cat "$D/$s".?.out | grep -c '^handled ')
    echo "     $s: accepted $acc (refused and retried $ref), handled $distinct" \
         "distinct, $((total - distinct)) duplicates; on_complete $comp;" \
         "$(grep '^remote ' "$D/$s.origin.out")"
    check "$s: all $N accepted" [ "$acc" -eq "$N" ]
    check "$s: every accepted envelope handled" [ "$distinct" -eq "$acc" ]
    check "$s: on_complete fired for each" [ "$comp" -eq "$acc" ]
    check "$s: none dead-lettered or dropped" [ "$dead" -eq 0 -a "$drop" -eq 0 ]
    # A dead letter in a consumer ends its itinerary there: the origin's
    # own counters do not show it (its on_complete just does not fire).
    cdead=$(cat "$D/$s".?.stats 2>/dev/null | awk '{n += $2} END {print n + 0}')
    check "$s: no consumer dead-lettered one ($cdead)" \
        [ -s "$D/$s.a.stats" -a -s "$D/$s.b.stats" -a "$cdead" -eq 0 ]
    for c in a b; do
        check "$s: consumer $c stops cleanly" stop_serve "$s.$c"
    done
}

run CL1 leader
run CL2 follower
[ "$FAILS" = 0 ] || {
    for f in "$D"/*.err "$D"/*.stats; do echo "--- $f"; head -20 "$f"; done
    grep -h '^completions\|^missing' "$D"/*.origin.out
}
finish
