#!/bin/sh
# seda-lua dlq --control SOCK: the dead letters a live process keeps, read
# through its control socket.  A stage whose handler errors (max_attempts
# 1) and a slip naming a stage that does not exist (no_such_stage): both
# listed with their reason, error and missing stage; list STAGE filters;
# --json parses; a missing socket, a file that is no socket and a socket
# that is not seda-lua's exit 1 naming the path; bad usage exits 2; the
# journal forms (DATA_DIR) are unchanged.
. "$(dirname "$0")/lib.sh"

printf '%s\n' \
    'local seda = require "seda"' \
    'B = seda.bus{ workers = 2, name = "orders" }' \
    'B:stage{ name = "parse", max_attempts = 1, handler = function(env)' \
    '  error("parse-failed-marker: bad input " .. tostring(env.payload.n))' \
    'end }' \
    'B:stage{ name = "enrich", handler = function(env) end }' \
    'B:publish("parse", { n = 7 })' \
    'B:publish("enrich", "typo-payload", { slip = { "enirch" } })' >"$D/p.lua"
S="$D/ctl.sock"
start_server "$D/log" --serve --control "$S" "$D/p.lua"
check "server answers" wait_until "$DEADLINE" sock_up "$S"

# dlq_out ARGS...: seda-lua dlq ARGS, stdout to $D/out, stderr to $D/err;
# sets RC.
dlq_out() {
    timeout 20 "$SEDA" dlq "$@" >"$D/out" 2>"$D/err" </dev/null
    RC=$?
}
both_dead() {
    dlq_out --control "$S" &&
        grep -q 'no_such_stage' "$D/out" && grep -q 'max_attempts' "$D/out"
}
check "both dead letters show up" wait_until "$DEADLINE" both_dead

# The listing: a header line, then one tab-separated line per dead letter.
dlq_out --control "$S"
out=$(cat "$D/out")
check "exits 0 (rc $RC)" [ "$RC" = 0 ]
check "header line ($(head -1 "$D/out"))" \
    [ "$(head -1 "$D/out")" = "$(printf 'BUS\tSTAGE\tID\tREASON\tDETAIL\tATTEMPTS\tDEAD_AT\tERROR\tPAYLOAD')" ]
check "two dead letters ($(wc -l <"$D/out") lines)" [ "$(wc -l <"$D/out")" = 3 ]
row_p=$(grep '^orders	parse	' "$D/out")
row_e=$(grep '^orders	enrich	' "$D/out")
echo "    $row_p"
echo "    $row_e"
field() { printf '%s\n' "$1" | cut -f "$2"; }
check "the handler's: bus, stage, reason max_attempts" \
    [ "$(field "$row_p" 1,2,4)" = "$(printf 'orders\tparse\tmax_attempts')" ]
check "... attempts 1" [ "$(field "$row_p" 6)" = 1 ]
check "... the error text" contains "$(field "$row_p" 8)" "parse-failed-marker: bad input 7"
check "... the time (x-dead-at, RFC 3339 UTC)" \
    sh -c "printf '%s' '$(field "$row_p" 7)' | grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$'"
check "... an id" [ -n "$(field "$row_p" 3)" ]
check "... the payload preview ($(field "$row_p" 9))" [ "$(field "$row_p" 9)" = "{n = 7}" ]
check "the typo's: bus, stage, reason no_such_stage" \
    [ "$(field "$row_e" 1,2,4)" = "$(printf 'orders\tenrich\tno_such_stage')" ]
check "... names the missing stage (x-dead-stage)" [ "$(field "$row_e" 5)" = enirch ]
check "... no error (-)" [ "$(field "$row_e" 8)" = - ]
check "... the payload preview" [ "$(field "$row_e" 9)" = '"typo-payload"' ]

# list STAGE filters.
dlq_out --control "$S" list parse
check "list parse exits 0 (rc $RC)" [ "$RC" = 0 ]
only_one() {   # only_one STAGE: the header and one line, of STAGE
    [ "$(wc -l <"$D/out")" = 2 ] && grep -q "^orders	$1	" "$D/out"
}
check "list parse: the header and parse's only" only_one parse
dlq_out --control "$S" list enrich
check "list enrich: enrich's only" only_one enrich
dlq_out --control "$S" list nosuch
check "list of an unknown stage exits 1 (rc $RC)" [ "$RC" = 1 ]
check "... naming it ($(cat "$D/err"))" contains "$(cat "$D/err")" "no stage 'nosuch'"
check "... without the server's traceback" sh -c "! grep -q traceback '$D/err'"

# --json: one document, as /dlq.json.
dlq_out --control "$S" --json
check "--json exits 0 (rc $RC)" [ "$RC" = 0 ]
check "--json is one line" [ "$(wc -l <"$D/out")" = 1 ]
check "--json parses (python3 -m json.tool)" python3 -m json.tool "$D/out" /dev/null
# The Lua payload's preview is readable: as the REPL prints it, not the
# codec's bytes.
check "--json: the payload preview is readable" grep -qF '"payload_preview":"{n = 7}"' "$D/out"
python3 - "$D/out" >"$D/json.out" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1])); bad = 0
b = [x for x in d["buses"] if x["name"] == "orders"]
if len(b) != 1: print("no bus orders:", d); sys.exit(1)
dl = {x["stage"]: x for x in b[0]["dead_letters"]}
p, e = dl.get("parse"), dl.get("enrich")
if not p or p["reason"] != "max_attempts" or "parse-failed-marker" not in p.get("error", "") \
        or p["attempts"] != 1 or p["payload"] != {"n": 7} or not p["headers"].get("x-dead-at"):
    bad = 1; print("parse's dead letter:", p)
if not e or e["reason"] != "no_such_stage" or e.get("missing") != "enirch" \
        or e["headers"].get("x-dead-stage") != "enirch":
    bad = 1; print("enrich's dead letter:", e)
if "version" not in d: bad = 1; print("no version")
print("ok" if not bad else "bad")
sys.exit(bad)
EOF
rc=$?
sed 's/^/    /' "$D/json.out"
check "--json holds both, with reason, error, attempts, missing stage" [ "$rc" = 0 ]
dlq_out --json --control "$S" list enrich
check "--json with list STAGE (options in any place)" \
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if [x["stage"] for b in d["buses"] for x in b["dead_letters"]] == ["enrich"] else 1)' "$D/out"

# Cannot connect / not a seda-lua socket: exit 1, naming the path.
dlq_out --control "$D/nothing.sock"
check "a missing socket exits 1 (rc $RC)" [ "$RC" = 1 ]
check "... naming the path ($(cat "$D/err"))" contains "$(cat "$D/err")" "cannot connect to '$D/nothing.sock'"
: >"$D/regular"
dlq_out --control "$D/regular"
check "a regular file exits 1 (rc $RC)" [ "$RC" = 1 ]
check "... says it is not a socket ($(cat "$D/err"))" contains "$(cat "$D/err")" "'$D/regular': it is not a socket"
python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)
c, _ = s.accept(); c.sendall(b"HTTP/1.0 200 OK\r\n\r\nhello\n"); c.close()' "$D/other.sock" &
PYP=$!
PIDS="$PIDS $PYP"
wait_until "$DEADLINE" [ -S "$D/other.sock" ]
dlq_out --control "$D/other.sock"
wait "$PYP" 2>/dev/null
check "another program's socket exits 1 (rc $RC)" [ "$RC" = 1 ]
check "... says it is not seda-lua's ($(cat "$D/err"))" contains "$(cat "$D/err")" "'$D/other.sock' is not a seda-lua control socket"

# Usage: exit 2, naming what is wrong.
usage_is() {    # usage_is WHAT ARGS...: exit 2 and stderr says WHAT
    what=$1; shift
    dlq_out "$@"
    [ "$RC" = 2 ] && grep -qF -- "$what" "$D/err" && grep -q 'usage: seda-lua dlq --control SOCK' "$D/err"
}
check "--control without SOCK" usage_is "--control needs the socket path" --control
check "a journal command with --control" usage_is "'show' works on a stopped bus's journal" --control "$S" show 1
check "DATA_DIR with --control" usage_is "not '$D'" --control "$S" "$D" list
check "two stages" usage_is "'b' is one too many" --control "$S" list a b
check "a bad stage name" usage_is "'a b' is not a stage name" --control "$S" list "a b"
check "--json without --control" usage_is "--json goes with --control" "$D" list --json
check "--control twice" usage_is "--control given twice" --control "$S" --control "$S"
check "an unknown option" usage_is "unknown option '--bogus'" --control "$S" --bogus

# The journal forms are unchanged.
dlq_out "$D/nodir" list
check "dlq DATA_DIR list without a journal: exit 1 ($RC), as before" \
    sh -c "[ '$RC' = 1 ] && grep -q 'no journal here' '$D/err'"
dlq_out "$D"
check "dlq DATA_DIR alone: usage, exit 2 ($RC)" [ "$RC" = 2 ]
# ... and a bad journal command says what is wrong (it printed only the
# usage).
check "DATA_DIR without a command" usage_is "a command is missing" "$D"
check "an unknown command" usage_is "unknown command 'bogus'" "$D" bogus
check "show without an ID" usage_is "show needs the dead letter's ID" "$D" show
check "replay without an ID" usage_is "replay needs the dead letter's ID" "$D" replay
check "list with an argument" usage_is "'x' is one too many" "$D" list x
check "show with two IDs" usage_is "'2' is one too many" "$D" show 1 2
dlq_out --help
check "dlq --help names both forms" \
    sh -c "[ '$RC' = 0 ] && grep -q 'dlq --control SOCK' '$D/out' && grep -q 'dlq DATA_DIR list' '$D/out'"
check "seda-lua --help names the live form" sh -c "'$SEDA' --help | grep -q 'dlq --control PATH'"

check "the server still serves" ask_is "$S" alive 'print("alive")'
stop_server
check "exits 0 on SIGTERM (got $SRC)" [ "$SRC" = 0 ]
finish
