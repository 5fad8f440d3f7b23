#!/bin/sh
# The interactive REPL on a terminal (tmux): `seda-lua -i script` and
# `seda-lua attach PATH` -- stats(), tune(), workers(), top(), Tab
# completion of globals, fields and stage names, on_complete callbacks
# running while the prompt waits, history in ~/.seda_history.
. "$(dirname "$0")/lib.sh"

if ! command -v tmux >/dev/null 2>&1; then
    echo "skip $NAME: tmux not installed"
    exit 0
fi
TMUX_L="seda-test-$$"
VERSION=$("$SEDA" -v | awk '{ print $2 }')
T() { tmux -L "$TMUX_L" "$@"; }
screen() { T capture-pane -p -J -S -200 -t "$1" 2>/dev/null; }
shows() { screen "$1" | grep -qF -- "$2"; }
# type SESSION TEXT: type literally, then Enter.
type_line() { T send-keys -t "$1" -l -- "$2"; T send-keys -t "$1" Enter; }
gone() { ! T has-session -t "$1" 2>/dev/null; }
# cleared SESSION: the last line shown is an empty "> " prompt: a Ctrl-C
# at the prompt was taken (what is typed before that would be part of the
# line it clears).
cleared() {
    [ "$(T capture-pane -p -J -t "$1" | sed 's/ *$//' | grep -v '^$' |
         tail -n 1)" = ">" ]
}

printf '%s\n' \
    'local seda = require "seda"' \
    'B = seda.bus{ workers = 2 }' \
    'B:stage{ name = "parse", handler = function(env) end }' \
    'B:stage{ name = "sink", handler = function(env) end }' \
    'CB = 0' \
    'for i = 1, 25 do B:publish("parse", i, { slip = { "sink" },' \
    '  on_complete = function() CB = CB + 1 end }) end' >"$D/p.lua"

run_session() {   # run_session NAME COMMAND...
    s=$1; shift
    T new-session -d -s "$s" -x 160 -y 50 \
        "env HOME='$D' TERM=xterm $*; echo '[exited]'; sleep 30"
}

exercise() {   # exercise SESSION LABEL
    s=$1; l=$2
    check "$l: prompt" wait_until "$DEADLINE" shows "$s" "> "
    check "$l: a banner with the version" shows "$s" "seda-lua $VERSION"
    check "$l: ... the bus and its stages in pipeline order" \
        shows "$s" "bus1: 2 workers, 2 stages: parse sink"
    check "$l: ... and where help is" shows "$s" "help() lists the commands"
    type_line "$s" 'stats()'
    check "$l: stats() prints the table" wait_until "$DEADLINE" shows "$s" "depth/cap"
    check "$l: stats() lists every stage" wait_until "$DEADLINE" sh -c \
        "tmux -L '$TMUX_L' capture-pane -p -J -S -200 -t '$s' | grep -q '^  parse ' &&
         tmux -L '$TMUX_L' capture-pane -p -J -S -200 -t '$s' | grep -q '^  sink '"
    type_line "$s" "tune('parse', {concurrency = 3, capacity = 64})"
    check "$l: tune reports the new settings" \
        wait_until "$DEADLINE" shows "$s" "parse: concurrency=3 capacity=64"
    type_line "$s" "print('conc=' .. B:stats('parse').concurrency)"
    check "$l: tune changed the running stage" wait_until "$DEADLINE" shows "$s" "conc=3"
    type_line "$s" "B:stats('sink')"
    check "$l: a result table is pretty-printed" \
        wait_until "$DEADLINE" shows "$s" '  name = "sink",'
    type_line "$s" 'workers(3)'
    check "$l: workers(n) resizes the pool" wait_until "$DEADLINE" shows "$s" "bus1: 3 workers"
    type_line "$s" 'workers()'
    check "$l: workers() answers" wait_until "$DEADLINE" sh -c \
        "[ \$(tmux -L '$TMUX_L' capture-pane -p -J -S -200 -t '$s' | grep -c '^bus1: 3 workers') -ge 2 ]"
    check "$l: ... once (no second line with the number)" sh -c \
        "! tmux -L '$TMUX_L' capture-pane -p -J -S -200 -t '$s' | grep -qx '3'"
    type_line "$s" "print('pool=' .. B:stats().workers)"
    check "$l: the bus reports 3 workers" wait_until "$DEADLINE" shows "$s" "pool=3"
    # Tab completion: a global, a method after ':', a stage name in a string.
    T send-keys -t "$s" -l -- "prin"
    T send-keys -t "$s" Tab
    T send-keys -t "$s" -l -- "('G' .. 'T')"
    T send-keys -t "$s" Enter
    check "$l: Tab completes a global" wait_until "$DEADLINE" shows "$s" "GT"
    T send-keys -t "$s" -l -- "print(B:stats('sin"   # completes with the closing quote
    T send-keys -t "$s" Tab
    T send-keys -t "$s" -l -- ").name .. '-name')"
    T send-keys -t "$s" Enter
    check "$l: Tab completes a stage name in a string" \
        wait_until "$DEADLINE" shows "$s" "sink-name"
    T send-keys -t "$s" -l -- "print(B:handler_fi"
    T send-keys -t "$s" Tab
    T send-keys -t "$s" -l -- "() ~= nil and 'method-ok')"
    T send-keys -t "$s" Enter
    check "$l: Tab completes a method after ':'" \
        wait_until "$DEADLINE" shows "$s" "method-ok"
    type_line "$s" 'top(0.2)'
    check "$l: top() draws" wait_until "$DEADLINE" shows "$s" "press a key to stop"
    check "$l: top shows sojourn and service p99" wait_until "$DEADLINE" shows "$s" "sojourn99  service99"
    check "$l: top shows the bus's completed/s" wait_until "$DEADLINE" shows "$s" "completed/s"
    check "$l: top shows each worker state's memory" wait_until "$DEADLINE" shows "$s" "memory: w0 "
    T send-keys -t "$s" q
    type_line "$s" "print('after' .. 'top')"
    check "$l: a key ends top()" wait_until "$DEADLINE" shows "$s" "aftertop"
}

# ---- seda-lua -i ----
run_session repl "'$SEDA' -i '$D/p.lua'"
exercise repl "-i"
type_line repl "print('cb=' .. CB)"
check "-i: on_complete callbacks ran while the prompt waited" \
    wait_until "$DEADLINE" shows repl "cb=25"
type_line repl 'for i = 1, 2 do'
type_line repl "print('loop=' .. i)"
type_line repl 'end'
check "-i: a multi-line chunk" wait_until "$DEADLINE" shows repl "loop=2"
T send-keys -t repl -l -- "print('zz' .. 'local')"
T send-keys -t repl C-c
check "-i: Ctrl-C at the prompt: a fresh prompt" wait_until "$DEADLINE" cleared repl
type_line repl "print('after' .. 'ctrlc')"
check "-i: Ctrl-C at the prompt clears the line" \
    wait_until "$DEADLINE" shows repl "afterctrlc"
check "-i: ... and the cleared line did not run" sh -c \
    "! tmux -L '$TMUX_L' capture-pane -p -J -S -200 -t repl | grep -q zzlocal"
T send-keys -t repl C-d
check "-i: Ctrl-D leaves the REPL and the program exits" \
    wait_until "$DEADLINE" shows repl "[exited]"
check "-i: history saved to ~/.seda_history" grep -q "^stats()" "$D/.seda_history"

# ---- seda-lua attach ----
S="$D/ctl.sock"
start_server "$D/log" --serve --control "$S" "$D/p.lua"
check "server answers" wait_until "$DEADLINE" sock_up "$S"
run_session att "'$SEDA' attach '$S'"
exercise att "attach"
type_line att "x_local = 1; print('cb=' .. CB)"
check "attach: script globals visible" wait_until "$DEADLINE" shows att "cb=25"
# Ctrl-C while a command runs stops it on the server (like the local
# REPL); at the prompt it clears the line and the client stays.
type_line att "io.open('$D/busy', 'w'):close(); while true do end"
check "attach: endless command started" wait_until "$DEADLINE" [ -e "$D/busy" ]
T send-keys -t att C-c
check "attach: Ctrl-C interrupts the remote command" \
    wait_until "$DEADLINE" shows att "interrupted!"
T send-keys -t att -l -- "print('zz' .. 'remote')"
T send-keys -t att C-c
check "attach: Ctrl-C at the prompt: a fresh prompt" wait_until "$DEADLINE" cleared att
type_line att 'for i = 1, 2 do'
check "attach: a chunk continued" wait_until "$DEADLINE" shows att ">> "
T send-keys -t att C-c
check "attach: ... and Ctrl-C there: a fresh prompt" wait_until "$DEADLINE" cleared att
type_line att "print('after' .. 'ctrlc')"
check "attach: Ctrl-C at the prompt keeps the client" \
    wait_until "$DEADLINE" shows att "afterctrlc"
check "attach: ... and the cleared lines did not run" sh -c \
    "! tmux -L '$TMUX_L' capture-pane -p -J -S -200 -t att | grep -q zzremote"
T send-keys -t att C-d
check "attach: Ctrl-D ends the client" wait_until "$DEADLINE" shows att "[exited]"
check "attach: the server keeps running" ask_is "$S" "nil	3" 'print(x_local, B:stats().workers)'
# The 65th client on a terminal: the server's refusal, exit status 1.
if command -v socat >/dev/null 2>&1; then
    mkfifo "$D/idle"
    exec 3<>"$D/idle"
    CL=""
    # idle_clients: 64 idle clients running.  One the server refused (the
    # probe below held a slot when it connected) has exited: it is
    # started again, so the probe is refused once all 64 are in.
    idle_clients() {
        live=""
        for p in $CL; do
            if kill -0 "$p" 2>/dev/null; then live="$live $p"; fi
        done
        CL=$live
        n=$(echo $CL | wc -w)
        while [ "$n" -lt 64 ]; do
            socat STDIO UNIX-CONNECT:"$S" <"$D/idle" >/dev/null 2>&1 &
            CL="$CL $!"
            PIDS="$PIDS $!"
            n=$((n + 1))
        done
    }
    full() {
        idle_clients
        ! echo 'print(1)' | timeout 20 "$SEDA" attach "$S" >/dev/null 2>&1
    }
    check "64 clients connected" wait_until "$DEADLINE" full
    T new-session -d -s att65 -x 160 -y 50 \
        "env HOME='$D' TERM=xterm '$SEDA' attach '$S'; echo \"[rc=\$?]\"; sleep 30"
    check "attach on a terminal shows the refusal" \
        wait_until "$DEADLINE" shows att65 "too many control clients"
    check "... and exits 1" wait_until "$DEADLINE" shows att65 "[rc=1]"
    check "... without a prompt" sh -c \
        "! tmux -L '$TMUX_L' capture-pane -p -J -t att65 | grep -q '^> '"
    for p in $CL; do kill "$p" 2>/dev/null; waitpid_bounded "$p"; done
    exec 3>&-
fi
# The server going away shows at the prompt at once; exit status 1.
T new-session -d -s att2 -x 160 -y 50 \
    "env HOME='$D' TERM=xterm '$SEDA' attach '$S'; echo \"[rc=\$?]\"; sleep 30"
check "attach 2: prompt" wait_until "$DEADLINE" shows att2 "> "
stop_server
check "server exits 0 on SIGTERM (got $SRC)" [ "$SRC" = 0 ]
check "attach: says the connection closed" \
    wait_until "$DEADLINE" shows att2 "attach: connection closed"
check "attach: exits 1 when the server went away" \
    wait_until "$DEADLINE" shows att2 "[rc=1]"
if [ "$FAILS" != 0 ]; then
    echo "--- last screen of the -i session:"; screen repl | tail -25
    echo "--- last screen of the attach session:"; screen att | tail -25
    echo "--- last screen of the second attach session:"; screen att2 | tail -10
fi
finish
