#!/bin/sh
# bench/lua_path.sh: instructions per envelope on the worker, counted by
# callgrind (not part of make bench; needs valgrind).  Two shapes:
#   lua  seda-lua runs a bus of one worker with one stage (capacity 1024,
#        policy block, concurrency 1) whose handler is
#        `function(env) local p = env.payload end`; the main state
#        publishes 8-byte strings with bus:publish_many, 1 000 a call;
#   c    bench/path_c.c: the same bus and stage with a C consumer that
#        only counts, fed by seda_publish_many, 1 000 a call.
# Each shape runs twice under valgrind --tool=callgrind
# --separate-threads=yes, with 50 000 and with 150 000 envelopes; the
# figure is the difference of the worker threads' instructions (Ir) over
# the 100 000 envelopes between, so start-up and shutdown cancel out.
# The main thread's share (publishing) is reported the same way.  A
# thread is a worker when its profile holds the pool's worker_main.
#
#   sh bench/lua_path.sh [lua|c]...      (default: both)
#
# Environment: SEDA (the seda-lua binary, default build/release/seda-lua),
# LIBSEDA (default build/release/libseda.a, for path_c), N1 and N2 (the
# two envelope counts, multiples of 1000), REPEAT (pairs of runs per
# shape, default 1), KEEP=DIR (keep the last pair's callgrind files there,
# for callgrind_annotate --inclusive=yes DIR/<shape>.<N>.*).
# Prints one line per pair of runs:
#   {"shape":"lua","worker_ir_per_env":...,"main_ir_per_env":...,...}
# and with REPEAT > 1 one more per shape with the medians
# ("worker_ir_median", "main_ir_median").
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SEDA=${SEDA:-$ROOT/build/release/seda-lua}
LIBSEDA=${LIBSEDA:-$ROOT/build/release/libseda.a}
N1=${N1:-50000}
N2=${N2:-150000}
REPEAT=${REPEAT:-1}
SHAPES=${*:-lua c}
command -v valgrind >/dev/null || { echo "lua_path.sh: needs valgrind" >&2; exit 2; }
case $REPEAT in ''|*[!0-9]*|0) echo "lua_path.sh: REPEAT must be a count >= 1 (got '$REPEAT')" >&2; exit 2 ;; esac
if [ "$N2" -le "$N1" ] || [ $((N1 % 1000)) -ne 0 ] || [ $((N2 % 1000)) -ne 0 ]; then
    echo "lua_path.sh: N1 < N2, both multiples of 1000 (got $N1, $N2)" >&2
    exit 2
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/seda-luapath.XXXXXX")
trap 'rm -rf "$T"' EXIT
OUT=${KEEP:-$T}
mkdir -p "$OUT"

cat >"$T/path.lua" <<'LUA'
local seda = require "seda"
local n_total = tonumber(os.getenv("LUA_PATH_N"))
local bus = seda.bus{ workers = 1, name = "lua_path" }
bus:stage{ name = "s", capacity = 1024, policy = "block",
           handler = function(env) local p = env.payload end }
local batch = {}
for i = 1, 1000 do batch[i] = "abcdefgh" end
local n = 0
while n < n_total do n = n + bus:publish_many("s", batch) end
bus:wait()
local s = bus:stats("s")
print(("published %d handled %d"):format(n, s.completed))
assert(s.completed == n, "not every envelope was handled")
LUA

for shape in $SHAPES; do
    case $shape in
    lua) [ -x "$SEDA" ] || { echo "lua_path.sh: no $SEDA (make first)" >&2; exit 2; } ;;
    c)   [ -f "$LIBSEDA" ] || { echo "lua_path.sh: no $LIBSEDA (make first)" >&2; exit 2; }
         ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -I"$ROOT/include" \
             "$ROOT/bench/path_c.c" "$LIBSEDA" -lpthread -lm -o "$T/path_c" ;;
    *)   echo "lua_path.sh: unknown shape '$shape' (lua or c)" >&2; exit 2 ;;
    esac
    ws=""; ms=""
    r=0
    while [ "$r" -lt "$REPEAT" ]; do
        r=$((r + 1))
        for n in $N1 $N2; do
            rm -f "$OUT/$shape.$n".*
            if [ "$shape" = lua ]; then
                set -- "$SEDA" "$T/path.lua"
            else
                set -- "$T/path_c" "$n"
            fi
            if ! LUA_PATH_N=$n valgrind --tool=callgrind --separate-threads=yes \
                    --callgrind-out-file="$OUT/$shape.$n.%p" "$@" \
                    >"$T/run.out" 2>"$T/run.err"; then
                cat "$T/run.out" "$T/run.err" >&2
                echo "lua_path.sh: the $shape run of $n envelopes failed" >&2
                exit 1
            fi
        done
        # Sum the totals: lines per kind of thread.
        for n in $N1 $N2; do
            w=0; m=0
            for f in "$OUT/$shape.$n".*-*; do
                ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$f")
                case $f in
                *-01) m=$((m + ir)) ;;
                *) if grep -q 'worker_main' "$f"; then w=$((w + ir)); fi ;;
                esac
            done
            eval "w_$n=$w; m_$n=$m"
        done
        eval "dw=\$((w_$N2 - w_$N1)); dm=\$((m_$N2 - m_$N1))"
        envs=$((N2 - N1))
        awk -v s="$shape" -v dw="$dw" -v dm="$dm" -v e="$envs" -v n1="$N1" -v n2="$N2" 'BEGIN {
            printf "{\"shape\":\"%s\",\"worker_ir_per_env\":%.1f,\"main_ir_per_env\":%.1f,\"envelopes\":%d,\"n1\":%d,\"n2\":%d}\n",
                s, dw / e, dm / e, e, n1, n2 }'
        ws="$ws $dw"; ms="$ms $dm"
    done
    if [ "$REPEAT" -gt 1 ]; then
        echo "$ws" | tr ' ' '\n' | grep . | sort -n >"$T/w"
        echo "$ms" | tr ' ' '\n' | grep . | sort -n >"$T/m"
        awk -v s="$shape" -v e="$envs" -v k="$REPEAT" 'NR == FNR { w[FNR] = $1; next }
            { m[FNR] = $1 }
            END { i = int((k + 1) / 2); j = int(k / 2) + 1
                  printf "{\"shape\":\"%s\",\"worker_ir_median\":%.1f,\"main_ir_median\":%.1f,\"pairs\":%d}\n",
                      s, (w[i] + w[j]) / 2 / e, (m[i] + m[j]) / 2 / e, k }' "$T/w" "$T/m"
    fi
done
