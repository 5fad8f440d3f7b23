#!/bin/sh
# C11 end to end: `seda-lua --serve --watch --control SOCK` runs a pipeline
# that keeps publishing (one envelope at a time: each on_complete publishes
# the next).  The handler file is rewritten while it runs -- a good
# version (write-to-temp-and-rename, in a burst), then a syntax error
# (in place).  Checked through `seda-lua attach`: every envelope handled
# exactly once; by the old code before and the new code after (versions
# never go back); the broken version reported in last_error and on
# stderr, and never installed.
. "$(dirname "$0")/lib.sh"

handler() {   # handler VERSION
    printf '%s\n' \
        "local V = $1" \
        'return function(env)' \
        '  local id = env.payload' \
        '  seda.shared:incr("seen:" .. id, 1)' \
        '  seda.shared:set("by:" .. id, V)' \
        '  seda.shared:incr("ver:" .. V, 1)' \
        'end'
}

handler 1 >"$D/h.lua"
printf '%s\n' \
    'local seda = require "seda"' \
    'B = seda.bus{ workers = 2 }' \
    'B:stage{ name = "work", handler = "h.lua", concurrency = 2 }' \
    'N, DONE = 0, 0' \
    'local function pub()' \
    '  if STOP then return end' \
    '  N = N + 1' \
    '  assert(B:publish("work", N, { on_complete = function()' \
    '    DONE = DONE + 1' \
    '    pub()' \
    '  end }))' \
    'end' \
    'pub()' >"$D/p.lua"
S="$D/ctl.sock"
start_server "$D/log" --serve --watch --control "$S" "$D/p.lua"

check "server answers on the control socket" wait_until "$DEADLINE" sock_up "$S"
check "pipeline runs with version 1" \
    wait_until "$DEADLINE" ask_is "$S" true 'print((seda.shared:get("ver:1") or 0) >= 20)'

# A good version 2, as an editor saves it (temporary file renamed over the
# original), five times in a burst: debounced into one reload.
for i in 1 2 3 4 5; do
    handler 2 >"$D/h.lua.tmp~"
    mv "$D/h.lua.tmp~" "$D/h.lua"
done
check "new code handles envelopes after the reload" \
    wait_until "$DEADLINE" ask_is "$S" true 'print((seda.shared:get("ver:2") or 0) >= 20)'
# The burst is debounced into fewer reloads than saves (under load perhaps
# two): the version is 2 or more, and it is what a broken save must keep.
# Take it once it has not changed for a second (the watcher's debounce is
# far shorter).
version_settled() {
    a=$(ask "$S" 'print(B:stats("work").version)')
    sleep 1
    b=$(ask "$S" 'print(B:stats("work").version)')
    [ -n "$a" ] && [ "$a" = "$b" ] && V2=$b
}
V2=0
wait_until "$DEADLINE" version_settled
check "stats version went up ($V2)" [ "${V2:-0}" -ge 2 ]
check "no reload error" ask_is "$S" nil 'print(B:stats("work").last_error)'

# A broken version 3, written in place.
printf 'local V = 3\nreturn function(env) this is not lua end\n' >"$D/h.lua"
check "the broken version is reported in last_error" \
    wait_until "$DEADLINE" ask_is "$S" true 'print(B:stats("work").last_error ~= nil)'
out=$(ask "$S" 'print(B:stats("work").last_error)')
check "last_error names the file and line ($out)" contains "$out" "h.lua:2"
check "the broken version is not installed (version stays $V2)" \
    ask_is "$S" "$V2" 'print(B:stats("work").version)'
ask "$S" '_G.MARK = seda.shared:get("ver:2")' >/dev/null
check "the old (version 2) code keeps handling" \
    wait_until "$DEADLINE" ask_is "$S" true 'print(seda.shared:get("ver:2") >= MARK + 20)'

# Stop publishing, wait until the bus is quiet, then verify every id (a
# multi-line chunk: the server continues incomplete chunks).
# (a client's globals are its own: _G.X reaches the script's globals)
ask "$S" '_G.STOP = true' >/dev/null
check "bus drains" wait_until "$DEADLINE" ask_is "$S" true 'print(B:stats().in_system == 0 and DONE == N)'
out=$(ask "$S" \
'do' \
'local bad, last, v = {}, 0, {0, 0, 0}' \
'for i = 1, N do' \
'  local s, by = seda.shared:get("seen:" .. i), seda.shared:get("by:" .. i)' \
'  if s ~= 1 then bad[#bad + 1] = "id " .. i .. " seen " .. tostring(s) end' \
'  if not by or by < last then bad[#bad + 1] = "id " .. i .. " by " .. tostring(by) .. " after " .. last end' \
'  last = by or last' \
'  if by then v[by] = v[by] + 1 end' \
'end' \
'local st = B:stats("work")' \
'if st.delivered ~= N then bad[#bad + 1] = "delivered " .. st.delivered .. " ~= " .. N end' \
'if DONE ~= N then bad[#bad + 1] = "completed " .. DONE .. " ~= " .. N end' \
'if v[3] ~= 0 or seda.shared:get("ver:3") then bad[#bad + 1] = "version 3 ran" end' \
'if v[1] == 0 or v[2] == 0 or v[1] + v[2] ~= N then bad[#bad + 1] = "v1+v2 ~= N" end' \
'print(#bad == 0 and ("VERIFIED " .. N .. " " .. v[1] .. " " .. v[2]) or table.concat(bad, "; "))' 'end')
check "every envelope exactly once, old code then new ($out)" contains "$out" "VERIFIED"

stop_server
check "server exits 0 on SIGTERM (got $SRC)" [ "$SRC" = 0 ]
log=$(cat "$D/log")
check "reload outcome printed" contains "$log" "reloaded stage 'work'"
check "failed reload printed" contains "$log" "failed, keeping version $V2"
n=$(grep -c "reloaded stage 'work'" "$D/log")
check "a burst of five saves reloaded fewer than five times ($n)" [ "$n" -ge 1 -a "$n" -lt 5 ]
check "socket removed at exit" [ ! -e "$S" ]
[ "$FAILS" = 0 ] || sed 's/^/  log: /' "$D/log"
finish
