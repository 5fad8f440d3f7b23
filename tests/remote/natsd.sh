#!/bin/sh
# A private nats-server for tests and examples: JetStream on, listening on
# 127.0.0.1 only, on a free port; its port, pid, log and store (-sd) kept
# in a directory, so a restart reuses the same port and JetStream state.
#
#   natsd.sh start DIR [PORT]   start (a free port unless PORT, or the
#                               port DIR used before); prints the url
#   natsd.sh stop DIR           SIGTERM and wait (SIGKILL after 10 s)
#   natsd.sh kill DIR           SIGKILL and wait
#   natsd.sh url DIR            the url
#
# The program is $NATS_SERVER, else nats-server on the PATH, else
# /usr/sbin/nats-server (where Debian installs it).  Every wait is bounded.
set -eu
cmd=${1:?usage: natsd.sh start|stop|kill|url DIR [PORT]}
dir=${2:?usage: natsd.sh start|stop|kill|url DIR [PORT]}
mkdir -p "$dir"

prog=${NATS_SERVER:-}
if [ -z "$prog" ]; then
    if command -v nats-server >/dev/null 2>&1; then prog=nats-server
    else prog=/usr/sbin/nats-server; fi
fi

free_port() {   # a port in 20000..59999 nobody listens on
    while :; do
        p=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom) % 40000 ))
        ss -ltn "sport = :$p" 2>/dev/null | grep -q LISTEN || { echo "$p"; return; }
    done
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

case "$cmd" in
start)
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        echo "natsd.sh: already running in $dir" >&2; exit 1
    fi
    port=${3:-}
    [ -n "$port" ] || { [ -f "$dir/port" ] && port=$(cat "$dir/port"); } || true
    fresh=no
    [ -n "$port" ] || { port=$(free_port); fresh=yes; }
    tries=0
    while :; do
        echo "$port" >"$dir/port"
        "$prog" -js -a 127.0.0.1 -p "$port" -sd "$dir/js" -l "$dir/log" \
            </dev/null >/dev/null 2>&1 &
        echo $! >"$dir/pid"
        i=0
        until ss -ltn "sport = :$port" 2>/dev/null | grep -q LISTEN; do
            i=$((i + 1))
            if [ $i -gt 200 ] || ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
                break
            fi
            sleep 0.05
        done
        ss -ltn "sport = :$port" 2>/dev/null | grep -q LISTEN && break
        kill -9 "$(cat "$dir/pid")" 2>/dev/null || true
        rm -f "$dir/pid"
        tries=$((tries + 1))
        # A fresh port taken meanwhile by another program: another one.
        if [ "$fresh" = no ] || [ $tries -ge 3 ]; then
            echo "natsd.sh: $prog did not start on port $port:" >&2
            tail -5 "$dir/log" >&2 2>/dev/null
            exit 1
        fi
        port=$(free_port)
    done
    echo "nats://127.0.0.1:$port" ;;
stop) stop_with TERM ;;
kill) stop_with KILL ;;
url)  echo "nats://127.0.0.1:$(cat "$dir/port")" ;;
*)    echo "usage: natsd.sh start|stop|kill|url DIR [PORT]" >&2; exit 2 ;;
esac
