#!/bin/sh
# A private nats-server for tests and examples: JetStream on, listening on
# 127.0.0.1 only, on a free port; its port, pid, log and store (-sd) kept
# in a directory, so a restart reuses the same port and JetStream state.
#
#   natsd.sh start DIR [PORT]   start (a free port unless PORT, or the
#                               port DIR used before); prints the url
#   natsd.sh stop DIR           SIGTERM and wait (SIGKILL after 5 s)
#   natsd.sh kill DIR           SIGKILL and wait
#   natsd.sh url DIR            the url
#
# $NATSD_CONF, when set, is a server configuration file read first (TLS,
# authorization); the flags above override its listen address, port and
# store.  The program is $NATS_SERVER, else nats-server on the PATH, else
# /usr/sbin/nats-server (where Debian installs it).  The server is ready
# when its log says so; a fresh port that turns out to be taken is
# replaced by another.  Every wait is bounded.  Needs only sh, od and
# grep.
set -eu
cmd=${1:?usage: natsd.sh start|stop|kill|url DIR [PORT]}
dir=${2:?usage: natsd.sh start|stop|kill|url DIR [PORT]}
mkdir -p "$dir"

prog=${NATS_SERVER:-}
if [ -z "$prog" ]; then
    if command -v nats-server >/dev/null 2>&1; then prog=nats-server
    else prog=/usr/sbin/nats-server; fi
fi

random_port() {   # a port in 20000..59999 (if taken, the start retries)
    echo $(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 40000 ))
}

stop_with() {   # stop_with SIGNAL
    [ -f "$dir/pid" ] || return 0
    pid=$(cat "$dir/pid")
    kill "-$1" "$pid" 2>/dev/null || true
    i=0
    while kill -0 "$pid" 2>/dev/null; do
        i=$((i + 1))
        [ $i -eq 100 ] && kill -9 "$pid" 2>/dev/null
        [ $i -gt 200 ] && { echo "natsd.sh: $pid does not exit" >&2; return 1; }
        sleep 0.05
    done
    rm -f "$dir/pid"
}

# ready PID: its log says it serves (the log is appended to across
# restarts: lines start with "[pid]").
ready() { grep -q "^\[$1\] .*Server is ready" "$dir/log" 2>/dev/null; }

case "$cmd" in
start)
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        echo "natsd.sh: already running in $dir" >&2; exit 1
    fi
    port=${3:-}
    [ -n "$port" ] || { [ -f "$dir/port" ] && port=$(cat "$dir/port"); } || true
    fresh=no
    [ -n "$port" ] || { port=$(random_port); fresh=yes; }
    tries=0
    while :; do
        echo "$port" >"$dir/port"
        "$prog" ${NATSD_CONF:+-c} ${NATSD_CONF:+"$NATSD_CONF"} \
            -js -a 127.0.0.1 -p "$port" -sd "$dir/js" -l "$dir/log" \
            </dev/null >/dev/null 2>&1 &
        pid=$!
        echo "$pid" >"$dir/pid"
        i=0
        while ! ready "$pid" && kill -0 "$pid" 2>/dev/null && [ $i -lt 200 ]; do
            i=$((i + 1))
            sleep 0.05
        done
        ready "$pid" && break
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        rm -f "$dir/pid"
        tries=$((tries + 1))
        # A fresh port taken by another program: another one.
        if [ "$fresh" = no ] || [ $tries -ge 5 ]; then
            echo "natsd.sh: $prog did not start on port $port:" >&2
            tail -5 "$dir/log" >&2 2>/dev/null
            exit 1
        fi
        port=$(random_port)
    done
    echo "nats://127.0.0.1:$port" ;;
stop) stop_with TERM ;;
kill) stop_with KILL ;;
url)  echo "nats://127.0.0.1:$(cat "$dir/port")" ;;
*)    echo "usage: natsd.sh start|stop|kill|url DIR [PORT]" >&2; exit 2 ;;
esac
