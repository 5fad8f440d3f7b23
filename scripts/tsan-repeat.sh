#!/bin/sh
# Shake out rare races before CI does: run the ThreadSanitizer build's
# tests N times each and count the runs that reported a race (or failed
# for any other reason).  make tsan runs the suite once; a race that
# shows one run in ten passes it nine times out of ten.
#
#   make tsan-repeat N=20                      every test, 20 runs each
#   make tsan-repeat N=50 ONLY=tests/lua/test_listen.lua
#   make tsan-repeat N=10 ONLY='tests/lua/test_listen.lua tests/cli/test_http.sh'
#
# Tests: the cmocka binaries of build/tsan/tests, tests/lua/test_*.lua
# through build/tsan/seda-lua, tests/cli/test_*.sh and
# tests/remote/test_*.sh, as scripts/run-tests.sh runs them.  ONLY (a
# list of test paths, shell globs allowed) narrows the set.  Each failed
# run's output is kept in build/tsan/repeat/ (NAME.RUN.log); the summary
# names every test with a failed run and what the first line of each
# report was.  Exit status 0 only when every run of every test passed.
set -u
N=${N:-10}
B=${B:-build/tsan}
OUT="$B/repeat"
TO=${TEST_TIMEOUT:-300}
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}"

case "$N" in
    ''|*[!0-9]*|0) echo "tsan-repeat: N must be a positive count, got '$N'" >&2
                   exit 2 ;;
esac
if [ ! -x "$B/seda-lua" ]; then
    echo "tsan-repeat: $B/seda-lua is missing (make V=tsan all first)" >&2
    exit 2
fi
rm -rf "$OUT"
mkdir -p "$OUT"

# The list of tests, one a line.
list() {
    if [ -n "${ONLY:-}" ]; then
        for t in $ONLY; do
            [ -e "$t" ] || { echo "tsan-repeat: no such test: $t" >&2
                             exit 2; }
            echo "$t"
        done
        return
    fi
    for t in "$B"/tests/*/test_*; do
        case "$t" in *.o|*.d) continue ;; esac
        [ -x "$t" ] && echo "$t"
    done
    for t in tests/lua/test_*.lua tests/cli/test_*.sh tests/remote/test_*.sh; do
        [ -e "$t" ] && echo "$t"
    done
}

run_one() {                     # run_one TEST LOG
    case "$1" in
        *.lua) timeout "$TO" "$B/seda-lua" "$1" ;;
        *.sh)  SEDA="$B/seda-lua" timeout "$TO" sh "$1" ;;
        *)     timeout "$TO" "$1" ;;
    esac >"$2" 2>&1
}

tests=$(list) || exit 2
total=0
bad=0
reports=0
summary=""
for t in $tests; do
    name=$(echo "$t" | sed 's|^build/[a-z]*/||; s|/|_|g')
    fails=0
    i=1
    while [ "$i" -le "$N" ]; do
        log="$OUT/$name.$i.log"
        total=$((total + 1))
        if run_one "$t" "$log" && ! grep -q "ThreadSanitizer" "$log"; then
            rm -f "$log"
        else
            fails=$((fails + 1))
            bad=$((bad + 1))
            if grep -q "WARNING: ThreadSanitizer" "$log"; then
                reports=$((reports + 1))
                what=$(grep -m1 -A2 "WARNING: ThreadSanitizer" "$log" |
                       tr '\n' ' ' | cut -c1-160)
            else
                what="failed without a report: $(tail -n 3 "$log" |
                       tr '\n' ' ' | cut -c1-160)"
            fi
            summary="$summary
  $t run $i: $what (log: $log)"
        fi
        i=$((i + 1))
    done
    printf '%-44s %d/%d runs passed\n' "$t" $((N - fails)) "$N"
done
echo "tsan-repeat: $total runs, $((total - bad)) passed, $bad failed," \
     "$reports with a ThreadSanitizer report$summary"
[ "$bad" = 0 ]
