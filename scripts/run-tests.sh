#!/bin/sh
# Run the cmocka test binaries given as arguments, then the Lua test
# scripts (tests/lua/*.lua) through seda-lua, the program's shell tests
# (tests/cli/) and the remote stages' multi-process ones (tests/remote/).
# Stops at the first failure and prints a summary line.
set -u
B=${B:-build/release}
passed=0
failed=0
TO=${TEST_TIMEOUT:-300}
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1 abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1 halt_on_error=1}"
for t in "$@"; do
    echo "== $t"
    if timeout "$TO" "$t"; then
        passed=$((passed + 1))
    else
        echo "FAILED: $t (exit $?)"
        failed=$((failed + 1))
        break
    fi
done
if [ "$failed" = 0 ] && [ -x "$B/seda-lua" ] && [ -d tests/lua ]; then
    for s in tests/lua/test_*.lua; do
        [ -e "$s" ] || continue
        echo "== $s"
        if timeout "$TO" "$B/seda-lua" "$s"; then
            passed=$((passed + 1))
        else
            echo "FAILED: $s (exit $?)"
            failed=$((failed + 1))
            break
        fi
    done
fi
if [ "$failed" = 0 ] && [ -x "$B/seda-lua" ] && [ -d tests/cli ]; then
    for s in tests/cli/test_*.sh; do
        [ -e "$s" ] || continue
        echo "== $s"
        if SEDA="$B/seda-lua" timeout "$TO" sh "$s"; then
            passed=$((passed + 1))
        else
            echo "FAILED: $s (exit $?)"
            failed=$((failed + 1))
            break
        fi
    done
fi
# Remote stages: several seda-lua processes around a private nats-server.
if [ "$failed" = 0 ] && [ -x "$B/seda-lua" ] && [ -d tests/remote ]; then
    for s in tests/remote/test_*.sh; do
        [ -e "$s" ] || continue
        echo "== $s"
        if SEDA="$B/seda-lua" timeout "$TO" sh "$s"; then
            passed=$((passed + 1))
        else
            echo "FAILED: $s (exit $?)"
            failed=$((failed + 1))
            break
        fi
    done
fi
if [ "$failed" = 0 ]; then
    echo "== scripts/fuzz.sh --quick (payload decoder)"
    if sh scripts/fuzz.sh --quick; then
        passed=$((passed + 1))
    else
        echo "FAILED: decoder fuzz run"
        failed=$((failed + 1))
    fi
fi
echo "tests: $passed passed, $failed failed"
[ "$failed" = 0 ]
