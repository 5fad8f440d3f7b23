#!/bin/sh
# Remote stages under network partitions.  Seven hosts, each a Linux
# network namespace this test makes (a veth pair to a bridge in an eighth,
# addresses 10.77.0.0/24 only inside them, all removed by a trap): a
# 3-server JetStream cluster (n1..n3, one server each), an origin (o)
# publishing N envelopes at RATE a second with on_complete into a stage
# whose stream has replicas = 3, and two consumers (c1, c2).  Faults are
# iptables rules inside the namespaces (DROP at both ends; loss with the
# statistic match: this kernel has no sch_netem), so traffic goes only to
# addresses of namespaces it made.
#
#   test_partition.sh [SCENARIO...]   (default: flapshort, as `make
#   test` runs it; `make test-partition` runs the six below it)
#     consumer   c1 cut from every server for 20 s, then healed
#     origin     o cut from every server for 20 s, mid-publish
#     own        o cut from the server it is connected to only, for 60 s
#     minority   the stream's leader cut from the other servers for 30 s
#     loss       20 % loss on every link while it runs
#     flap       o's link to its server cut 2 s, healed 2 s, for 20 s
#     flapshort  the same for 8 s, N = 2400 (what `make test` runs)
#
# (Processes are started with `ip netns exec` itself in the background,
# never a shell function: $! must be the process, which the checks ask
# the servers about and stop.)
# Each prints a row: accepted, handled (distinct), handled twice,
# on_complete, dead-lettered, lost (accepted and neither handled nor
# dead-lettered), the longest stall (seconds without an on_complete while
# some were awaited), reconnects of the origin; and checks 0 lost, an
# on_complete for every accepted envelope, none dropped, and no stall
# longer than the fault plus ack_wait (3 s) plus 10 s (plus the bound of
# 11 s for a silent server to be left, where the fault makes one).
# Duplicates are counted, not failed: docs/remote.md says when they
# happen (acks lost with a partition).
# Needs root, ip (iproute2), iptables, curl and nats-server; skipped
# (exit 0, saying so) without them.  N and RATE: PARTITION_N (4000) and
# PARTITION_RATE (200).
. "$(dirname "$0")/../cli/lib.sh"
. "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ]; then
    echo "SKIP test_partition: needs root (network namespaces and iptables)"
    exit 0
fi
for t in ip iptables curl; do
    command -v $t >/dev/null 2>&1 ||
        { echo "SKIP test_partition: $t is not installed"; exit 0; }
done
NATS_PROG=${NATS_SERVER:-}
[ -n "$NATS_PROG" ] || NATS_PROG=$(command -v nats-server || echo /usr/sbin/nats-server)
P="sp$$"                               # namespace names are global: ours
HOSTS="n1 n2 n3 o c1 c2"
if ! ip netns add "${P}sw" 2>"$D/netns.err"; then
    echo "SKIP test_partition: cannot make a network namespace: $(cat "$D/netns.err")"
    exit 0
fi
netns_cleanup() {
    for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
    for h in $HOSTS sw; do ip netns del "$P$h" 2>/dev/null; done
    cleanup
}
trap netns_cleanup EXIT
trap 'exit 1' INT TERM

addr() { case $1 in n1) echo 10.77.0.1;; n2) echo 10.77.0.2;; n3) echo 10.77.0.3;;
                    o) echo 10.77.0.10;; c1) echo 10.77.0.11;; c2) echo 10.77.0.12;; esac; }
in_ns() { h=$1; shift; ip netns exec "$P$h" "$@"; }

ip -n "${P}sw" link add br0 type bridge
ip -n "${P}sw" link set br0 up
k=0
for h in $HOSTS; do
    k=$((k + 1))
    ip netns add "$P$h"
    ip -n "${P}sw" link add "e$k" type veth peer name eth0 netns "$P$h"
    ip -n "${P}sw" link set "e$k" master br0 up
    ip -n "$P$h" addr add "$(addr $h)/24" dev eth0
    ip -n "$P$h" link set eth0 up
    ip -n "$P$h" link set lo up
done

# ---- the cluster ----
URLS="nats://10.77.0.1:4222,nats://10.77.0.2:4222,nats://10.77.0.3:4222"
for i in 1 2 3; do
    routes=""
    for j in 1 2 3; do
        [ $j = $i ] || routes="${routes:+$routes,}nats://10.77.0.$j:6222"
    done
    mkdir -p "$D/n$i"
    ip netns exec "${P}n$i" "$NATS_PROG" -js -sd "$D/n$i/js" -n "n$i" -a "10.77.0.$i" -p 4222 \
        -m 8222 --cluster_name seda -cluster "nats://10.77.0.$i:6222" \
        -routes "$routes" -l "$D/n$i/log" </dev/null >/dev/null 2>&1 &
    PIDS="$PIDS $!"
done
jsz() { in_ns n$1 curl -s -m 2 "http://10.77.0.$1:8222/jsz?streams=true" 2>/dev/null; }
check "the cluster elects a JetStream meta leader" wait_until 30 sh -c \
    "ip netns exec ${P}n1 curl -s -m 2 http://10.77.0.1:8222/jsz | grep -q '\"leader\"'"

# ---- faults ----
cut() {   # cut HOST PEER...: DROP both ways, at both ends
    for peer in "$@"; do
        [ "$peer" = "$1" ] && continue
        in_ns "$1" iptables -A INPUT -s "$(addr $peer)" -j DROP
        in_ns "$1" iptables -A OUTPUT -d "$(addr $peer)" -j DROP
        in_ns "$peer" iptables -A INPUT -s "$(addr $1)" -j DROP
        in_ns "$peer" iptables -A OUTPUT -d "$(addr $1)" -j DROP
    done
}
heal() { for h in $HOSTS; do in_ns $h iptables -F; done; }
loss() {  # loss PROBABILITY: on every host, both ways
    for h in $HOSTS; do
        in_ns $h iptables -A INPUT -m statistic --mode random --probability "$1" -j DROP
        in_ns $h iptables -A OUTPUT -m statistic --mode random --probability "$1" -j DROP
    done
}
leader() {   # the server leading stream $1 (n1..n3), from the monitoring port
    for i in 1 2 3; do
        l=$(jsz $i | tr -d ' \n' |
            sed -n "s/.*\"name\":\"$1\"[^{]*\"cluster\":{[^}]*\"leader\":\"\(n[123]\)\".*/\1/p")
        [ -n "$l" ] && { echo "$l"; return 0; }
    done
    return 1
}
server_of() {   # the server process $1 is connected to
    for i in 1 2 3; do
        in_ns n$i curl -s -m 2 "http://10.77.0.$i:8222/connz?limit=1024" 2>/dev/null |
            grep -q "\"seda-lua pid $1\"" && { echo n$i; return 0; }
    done
    return 1
}

# ---- a run ----
N=${PARTITION_N:-4000}
RATE=${PARTITION_RATE:-200}
ROWS=""
run() {   # run NAME FAULT-DURATION (the fault is in fault_NAME)
    s=$1; dur=$2; n=${3:-$N}
    st=P$(echo "$s" | tr a-z A-Z)
    for c in c1 c2; do
        STATS_FILE="$D/$s.$c.stats" ip netns exec "$P$c" "$SEDA" --serve \
            "$REMOTE_DIR/lua/cluster_consumer.lua" "$URLS" "$st" \
            >"$D/$s.$c.out" 2>"$D/$s.$c.err" &
        echo $! >"$D/$s.$c.pid"
        PIDS="$PIDS $!"
        check "$s: consumer $c ready" wait_until 60 grep -q ready "$D/$s.$c.out"
    done
    ip netns exec "${P}o" "$SEDA" "$REMOTE_DIR/lua/partition_origin.lua" "$URLS" "$st" "$n" "$RATE" \
        >"$D/$s.o.out" 2>"$D/$s.o.err" &
    opid=$!
    PIDS="$PIDS $opid"
    wait_until 60 sh -c "grep -q '^published 500' '$D/$s.o.out'" ||
        fail "$s: the origin published 500"
    "fault_$s" "$dur" "$opid"
    heal
    check "$s: the origin finishes" wait_until 300 sh -c "! kill -0 $opid 2>/dev/null"
    wait "$opid"
    set -- $(grep '^origin ' "$D/$s.o.out")
    acc=${2:-0}; comp=${3:-0}; dead=${4:-1}; drop=${5:-1}; stall=${7:-999}
    rec=$(grep '^remote ' "$D/$s.o.out" | awk '{print $5}')
    cat "$D/$s".c?.out | awk '$1 == "handled" {print $3}' >"$D/$s.handled"
    distinct=$(sort -u "$D/$s.handled" | wc -l)
    total=$(wc -l <"$D/$s.handled")
    cdead=$(cat "$D/$s".c?.stats 2>/dev/null | awk '{n += $2} END {print n + 0}')
    lost=$((acc - distinct - cdead))
    [ $lost -lt 0 ] && lost=0
    row=$(printf '| %-10s | %6s | %6s | %5s | %6s | %4s | %4s | %6s | %4s |' \
          "$s" "$acc" "$distinct" "$((total - distinct))" "$comp" \
          "$((dead + cdead))" "$lost" "$stall" "${rec:-?}")
    ROWS="$ROWS
$row"
    echo "     $row"
    bound=$((dur + 3 + 10 + 11))
    check "$s: all $n accepted" [ "$acc" -eq "$n" ]
    check "$s: none lost ($lost)" [ "$lost" -eq 0 ]
    check "$s: on_complete for every accepted envelope ($comp of $acc)" [ "$comp" -eq "$acc" ]
    check "$s: none dead-lettered or dropped" [ "$((dead + cdead))" -eq 0 -a "$drop" -eq 0 ]
    check "$s: the longest stall ($stall s) within the fault plus ack_wait plus 10 s (+11 s to leave a silent server: $bound s)" \
        awk "BEGIN { exit !($stall <= $bound) }"
    check "$s: no stream or consumer declared again (no quorum is not a lost stream)" \
        sh -c "! grep -q 'created again' '$D/$s'.*.err"
    case $s in origin|own)
        check "$s: the origin said it lost its connection and got it back" \
            sh -c "grep -q 'was lost' '$D/$s.o.err' && grep -q 'connected again' '$D/$s.o.err'" ;;
    esac
    for c in c1 c2; do
        check "$s: consumer $c stops cleanly" stop_serve "$s.$c"
    done
}

fault_consumer() { cut c1 n1 n2 n3; sleep "$1"; }
fault_origin() { cut o n1 n2 n3; sleep "$1"; }
fault_own() {
    srv=$(server_of "$2") || { fail "own: which server the origin uses"; return; }
    echo "     own: the origin is connected to $srv; cutting that link only"
    cut o "$srv"
    sleep "$1"
}
fault_minority() {
    l=$(leader "PMINORITY") || { fail "minority: the stream's leader"; return; }
    echo "     minority: the stream's leader is $l; cutting it from the others"
    others=""
    for i in n1 n2 n3; do [ $i = "$l" ] || others="$others $i"; done
    cut "$l" $others
    sleep "$1"
}
fault_loss() { loss 0.2; sleep "$1"; }
flap() {   # flap DURATION ORIGIN-PID
    srv=$(server_of "$2") || { fail "flap: which server the origin uses"; return; }
    echo "     flap: the origin's link to $srv cut 2 s, healed 2 s, for $1 s"
    end=$(( $(date +%s) + $1 ))
    while [ "$(date +%s)" -lt "$end" ]; do
        cut o "$srv"; sleep 2; heal; sleep 2
    done
}
fault_flap() { flap "$@"; }
fault_flapshort() { flap "$@"; }

[ $# -gt 0 ] || set -- flapshort
for sc in "$@"; do
    case $sc in
    consumer|origin) run "$sc" 20 ;;
    own) run own 60 ;;
    minority) run minority 30 ;;
    loss) run loss 30 ;;
    flap) run flap 20 ;;
    flapshort) run flapshort 8 2400 ;;
    *) fail "unknown scenario $sc"; ;;
    esac
done
echo "| scenario   | accepted | handled | twice | on_complete | dead | lost | stall s | reconnects |"
echo "|---|---|---|---|---|---|---|---|---|"
echo "$ROWS" | sed '/^$/d'
[ "$FAILS" = 0 ] || for f in "$D"/*.o.out "$D"/*.o.err "$D"/*.stats; do
    echo "--- $f"; tail -15 "$f"
done
finish
