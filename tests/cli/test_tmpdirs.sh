#!/bin/sh
# The Lua test scripts leave no temporary directory behind: the harness's
# T.tmpdir makes them under $TMPDIR and removes them when a script ends.
. "$(dirname "$0")/lib.sh"
mkdir -p "$D/tmp"
for s in test_reload test_observe; do
    TMPDIR="$D/tmp" timeout 120 "$SEDA" "$(dirname "$0")/../lua/$s.lua" >"$D/$s.out" 2>&1
    check "$s passes" grep -q ' 0 failed$' "$D/$s.out"
done
left=$(ls -A "$D/tmp" | head -5)
check "nothing left in TMPDIR ($left)" [ -z "$left" ]
finish
