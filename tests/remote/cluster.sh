#!/bin/sh
# A 3-server nats-server cluster for tests: JetStream on each, on
# 127.0.0.1 only, free ports, each server's store, log, pid and ports in
# DIR/nI (I = 1..3), so a server killed can be started again as itself.
#
#   cluster.sh start DIR        start all three; prints their urls, comma-
#                               separated; waits (bounded) until JetStream
#                               has a meta leader
#   cluster.sh up DIR I         start server I again (same ports, store)
#   cluster.sh kill DIR I       SIGKILL server I and wait for it
#   cluster.sh stop DIR         SIGTERM all of them
#   cluster.sh leader DIR STREAM   the number I of the server that leads
#                               STREAM now (from the monitoring port)
#
# The program is $NATS_SERVER, else nats-server on the PATH, else
# /usr/sbin/nats-server.  Needs sh, od, grep, sed and curl.
set -eu
cmd=${1:?usage: cluster.sh start|up|kill|stop|leader DIR ...}
dir=${2:?usage: cluster.sh start|up|kill|stop|leader DIR ...}
prog=${NATS_SERVER:-}
if [ -z "$prog" ]; then
    if command -v nats-server >/dev/null 2>&1; then prog=nats-server
    else prog=/usr/sbin/nats-server; fi
fi

free_port() {   # a port in 20000..31999: below Linux's ephemeral range,
                # so no outgoing connection (routes, clients) takes it
    p=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 12000 ))
    while grep -qx "$p" "$dir"/n*/*port 2>/dev/null; do p=$((p + 1)); done
    echo "$p"
}

up() {   # up I
    n=$1; d="$dir/n$n"
    routes=""
    for j in 1 2 3; do
        [ "$j" = "$n" ] && continue
        routes="${routes:+$routes,}nats://127.0.0.1:$(cat "$dir/n$j/cport")"
    done
    "$prog" -js -sd "$d/js" -n "n$n" -a 127.0.0.1 -p "$(cat "$d/port")" \
        -m "$(cat "$d/mport")" --cluster_name seda \
        -cluster "nats://127.0.0.1:$(cat "$d/cport")" -routes "$routes" \
        -l "$d/log" </dev/null >/dev/null 2>&1 &
    echo $! >"$d/pid"
    i=0
    until grep -q "^\[$!\] .*Server is ready" "$d/log" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt 400 ] && { echo "cluster.sh: n$n did not start:" >&2
                            tail -3 "$d/log" >&2; exit 1; }
        sleep 0.05
    done
}

down() {   # down I SIGNAL
    d="$dir/n$1"
    [ -f "$d/pid" ] || return 0
    pid=$(cat "$d/pid")
    kill "-$2" "$pid" 2>/dev/null || true
    i=0
    while kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1))
        [ $i -eq 100 ] && kill -9 "$pid" 2>/dev/null
        [ $i -gt 200 ] && { echo "cluster.sh: $pid does not exit" >&2; return 1; }
        sleep 0.05
    done
    rm -f "$d/pid"
}

jsz() { curl -s "http://127.0.0.1:$(cat "$dir/n$1/mport")/jsz?streams=true&consumers=true" 2>/dev/null || true; }

case "$cmd" in
start)
    for n in 1 2 3; do
        mkdir -p "$dir/n$n"
        free_port >"$dir/n$n/port"
        free_port >"$dir/n$n/cport"
        free_port >"$dir/n$n/mport"
    done
    for n in 1 2 3; do up "$n"; done
    # JetStream is usable once the servers elected a meta leader.
    i=0
    until jsz 1 | grep -q '"leader"'; do
        i=$((i + 1))
        [ $i -gt 400 ] && { echo "cluster.sh: no meta leader" >&2; exit 1; }
        sleep 0.05
    done
    urls=""
    for n in 1 2 3; do
        urls="${urls:+$urls,}nats://127.0.0.1:$(cat "$dir/n$n/port")"
    done
    echo "$urls"
    ;;
up) up "${3:?server number}" ;;
kill) down "${3:?server number}" 9 ;;
stop) for n in 1 2 3; do down "$n" TERM; done ;;
leader)
    stream=${3:?stream}
    for n in 1 2 3; do
        [ -f "$dir/n$n/pid" ] || continue
        # The stream's entry names its cluster's leader ("n2").
        l=$(jsz "$n" | tr -d ' \n' |
            sed -n "s/.*\"name\":\"$stream\",\"cluster\":{[^}]*\"leader\":\"n\([123]\)\".*/\1/p")
        [ -n "$l" ] && { echo "$l"; exit 0; }
    done
    exit 1
    ;;
*) echo "cluster.sh: unknown command $cmd" >&2; exit 2 ;;
esac
