#!/bin/sh
# Terminal escapes in the text views: an envelope id, a header, a payload
# and a handler's error carrying ESC ] 0 ; ... BEL (retitles the window),
# ESC [ 2 J (clears the screen), a CR and a C1 CSI (U+009B) reach the
# operator escaped (\xNN) through every view: `dlq --control SOCK list`,
# `dlq DATA_DIR list`, the REPL's dlq(), errors(), tap() and stats().
. "$(dirname "$0")/lib.sh"

# hostile_in FILE: true when FILE holds ESC, BEL, CR or a UTF-8 C1 CSI.
hostile_in() {
    LC_ALL=C grep -q "$(printf '[\033\007\r]')" "$1" ||
        LC_ALL=C grep -q "$(printf '\302\233')" "$1"
}

# A stopped bus's journal: a durable stage dead-letters an envelope whose
# id, payload and error carry escapes.
printf '%s\n' \
    'local seda = require "seda"' \
    'local bad = "\27]0;pwned\7\27[2J\r\194\155"' \
    "local b = seda.bus{ data_dir = '$D/data' }" \
    'b:stage{ name = "dlq", durable = true }' \
    'b:stage{ name = "s", durable = true, max_attempts = 1, dead_letter = "dlq",' \
    '  handler = function(env)' \
    '    error("failed \27]0;pwned\7\27[2J\r\194\155", 0)' \
    '  end }' \
    'b:publish("s", "payload " .. bad, { id = "id" .. bad })' \
    'b:wait(10)' \
    'b:shutdown(10)' >"$D/journal.lua"
timeout 60 "$SEDA" "$D/journal.lua" >"$D/journal.log" 2>&1
RC=$?
check "the journal script ran (rc $RC)" [ "$RC" = 0 ]
timeout 20 "$SEDA" dlq "$D/data" list >"$D/list.out" 2>&1
check "dlq DATA_DIR list exits 0" [ $? = 0 ]
check "... lists the dead letter" grep -q 'id\\x1b]0;pwned\\x07' "$D/list.out"
check "... no raw escape on the terminal" eval "! hostile_in '$D/list.out'"

# A live process: the same through the control socket.
printf '%s\n' \
    'local seda = require "seda"' \
    'BAD = "\27]0;pwned\7\27[2J\r\194\155"' \
    'B = seda.bus{ workers = 2, name = "orders" }' \
    'B:stage{ name = "parse", max_attempts = 1, handler = function(env)' \
    '  error("parse failed \27]0;pwned\7\27[2J\r\194\155", 0)' \
    'end }' \
    'B:stage{ name = "idle", handler = function(env) end }' \
    'B:publish("parse", "body " .. BAD, { headers = { h = BAD } })' \
    'B:publish("parse", { text = BAD, more = string.rep("x", 300) })' >"$D/p.lua"
S="$D/ctl.sock"
start_server "$D/log" --serve --control "$S" "$D/p.lua"
check "server answers" wait_until "$DEADLINE" sock_up "$S"
two_dead() {
    timeout 20 "$SEDA" dlq --control "$S" list >"$D/live.out" 2>&1 &&
        [ "$(grep -c '^orders	parse	' "$D/live.out")" = 2 ]
}
check "dlq --control SOCK list shows both" wait_until "$DEADLINE" two_dead
check "... the error, escaped" grep -q 'parse failed \\x1b]0;pwned\\x07\\x1b\[2J' "$D/live.out"
check "... no raw escape on the terminal" eval "! hostile_in '$D/live.out'"

ask "$S" 'dlq()' >"$D/repl_dlq.out"
check "REPL dlq() shows them" grep -q 'parse failed' "$D/repl_dlq.out"
check "... the cut table's preview readable" grep -q '{' "$D/repl_dlq.out"
check "... no raw escape" eval "! hostile_in '$D/repl_dlq.out'"
ask "$S" 'errors()' >"$D/repl_err.out"
check "REPL errors() shows the error" grep -q 'parse failed' "$D/repl_err.out"
check "... no raw escape" eval "! hostile_in '$D/repl_err.out'"
ask "$S" 'seda.timer(0.2, function() B:publish("idle", "t " .. BAD, { id = nil, headers = { h = BAD } }) end) tap("idle", 1, 10)' >"$D/repl_tap.out"
check "REPL tap() shows the envelope" grep -q 'idle ' "$D/repl_tap.out"
check "... no raw escape" eval "! hostile_in '$D/repl_tap.out'"
ask "$S" 'print(stats())' >"$D/repl_stats.out"
check "REPL stats() shows the stages" grep -q 'parse' "$D/repl_stats.out"
check "... no raw escape" eval "! hostile_in '$D/repl_stats.out'"

stop_server
check "exits 0 on SIGTERM (got $SRC)" [ "$SRC" = 0 ]
finish
