#!/bin/sh
# What stats() and top show, through the control socket: stages in
# declaration order, sojourn and service p99, a rate over the last second
# (0 a second after the work stops, where the binding's `rate` is a
# trailing 5 s figure), a bus throughput line counting each itinerary
# once, the memory of every worker's Lua state, and top()'s sparkline
# per stage from the history (sampled by the run loop: no --http).
. "$(dirname "$0")/lib.sh"

cat >"$D/p.lua" <<'LUA'
local seda = require "seda"
B = seda.bus{ workers = 2 }
B:stage{ name = "zz_first", handler = function(env) end }
B:stage{ name = "aa_second", handler = function(env) end }
-- About 2000 itineraries a second, each through both stages.
FEED = seda.every(0.01, function()
  for i = 1, 20 do B:publish("zz_first", i, { slip = { "aa_second" } }) end
end)
LUA
S="$D/ctl.sock"
start_server "$D/log" --serve --control "$S" "$D/p.lua"
check "server answers" wait_until "$DEADLINE" sock_up "$S"

# The stage's row in stats() text: "name depth/cap inflt rate ...".
rate_of() { printf '%s\n' "$1" | awk -v s="$2" '$1 == s { print $4 }'; }
busy() {
    out=$(ask "$S" 'print(stats())')
    r=$(rate_of "$out" zz_first)
    [ -n "$r" ] && [ "$r" != "-" ] && [ "$r" -gt 0 ] 2>/dev/null
}
check "under load the rate column is non-zero" wait_until "$DEADLINE" busy
# top()'s sparkline per stage, from the history the run loop samples
# (no --http here: no observer thread).
sparkline() {
    out=$(ask "$S" 'top()')
    printf '%s\n' "$out" | grep -qE '^  zz_first +[ ▁▂▃▄▅▆▇█]*[▁▂▃▄▅▆▇█]  peak [1-9]' &&
        printf '%s\n' "$out" | grep -qE '^  aa_second +[ ▁▂▃▄▅▆▇█]*[▁▂▃▄▅▆▇█]  peak [1-9]'
}
check "top() draws each stage's delivered/s of the last minute (the run loop's samples)" wait_until "$DEADLINE" sparkline
check "... under its header" contains "$(ask "$S" 'top()')" "bus1: delivered/s, the last 60 s (oldest left)"
check "stats() has no sparkline" eval '! contains "$(ask "$S" "print(stats())")" "the last 60 s"'
out=$(ask "$S" 'print(stats())')
first=$(printf '%s\n' "$out" | awk '$1 == "zz_first" { print NR }')
second=$(printf '%s\n' "$out" | awk '$1 == "aa_second" { print NR }')
check "stages in declaration order ($first < $second)" [ "$first" -lt "$second" ]
check "sojourn and service p99 columns" contains "$out" "sojourn99  service99"
check "a throughput line" contains "$out" "completed/s"
check "a memory line with each worker's state" contains "$out" "memory: w0 "
check "... and the second worker's" contains "$out" " w1 "
# Each itinerary once: completed/s is about one stage's rate, not the sum
# of the two stages' rates (what the old (total) row showed).
sumok() {
    out=$(ask "$S" 'print(stats())')
    a=$(rate_of "$out" zz_first); b=$(rate_of "$out" aa_second)
    c=$(printf '%s\n' "$out" | sed -n 's/.*throughput: \([0-9]*\) completed.*/\1/p')
    [ -n "$c" ] && [ "$c" -gt 0 ] && [ $((4 * c)) -lt $((3 * (a + b))) ]
}
check "completed/s counts each itinerary once" wait_until "$DEADLINE" sumok
ask "$S" 'FEED:cancel()' >/dev/null
idle1s() {
    out=$(ask "$S" 'print(stats())')
    [ "$(rate_of "$out" zz_first)" = 0 ]
}
check "a second after the work stops the rate is 0" wait_until "$DEADLINE" idle1s
tr=$(ask "$S" 'print(B:stats("zz_first").rate > 0)')
check "(while the trailing 5 s rate of bus:stats() is still $tr)" [ "$tr" = true ]
out=$(ask "$S" 'print(stats())')
check "completed/s is 0 too" contains "$out" "throughput: 0 completed/s"
out=$(ask "$S" 'workers()')
n=$(printf '%s\n' "$out" | grep -c "workers")
check "workers() prints each size once ($n: $out)" [ "$n" = 1 ]
out=$(ask "$S" 'B:stats("zz_first")')
check "a stage's stats print as key = value lines" contains "$out" "  capacity = 1024,"
check "... not as a table address" sh -c "! printf '%s' '$out' | grep -q 'table: 0x'"
out=$(ask "$S" 't = {1, 2, x = {y = {}}}; t.me = t' 't')
check "a cycle is marked" contains "$out" "me = <cycle: the top>"
check "a short table prints on one line" contains "$out" 'x = { y = {} }'
stop_server
check "server exits 0 (got $SRC)" [ "$SRC" = 0 ]
finish
