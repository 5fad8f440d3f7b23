#!/bin/sh
# Fuzz the payload decoder (src/lua/lcodec_decode.c) through tests/lua/fuzz_codec.c,
# and the remote stages' JSON and MessagePack readers (src/lua/lformat.c)
# through tests/lua/fuzz_format.c.
#
#   scripts/fuzz.sh            libFuzzer + ASan + UBSan (clang) for
#                              ${FUZZ_SECONDS:-60} s, seeded with a corpus
#                              of real encodings (build/fuzz/corpus)
#   scripts/fuzz.sh --quick    the default cc with the standalone driver
#                              tests/lua/fuzz_main.c, a bounded ~3 s run
#                              of each target (ASan + UBSan when the
#                              compiler has them); this is what `make
#                              test` runs
#   FUZZ_TARGET=format scripts/fuzz.sh   libFuzzer on the formats
#
# Environment: CC (quick mode, default cc), FUZZ_SECONDS, FUZZ_QUICK_SECONDS
# (default 3), FUZZ_ITERS (quick mode bound, default 5000000), FUZZ_SEED
# (default 1), FUZZ_OUT (default build/fuzz).  Exits 0 when no input
# crashed the target, non-zero otherwise.
set -eu

cd "$(dirname "$0")/.."
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
OUT=${FUZZ_OUT:-build/fuzz}
LUA_CFLAGS=$($PKG_CONFIG --cflags lua5.4)
LUA_LIBS=$($PKG_CONFIG --libs lua5.4)
CFLAGS="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra
 -Wshadow -Wundef -Wstrict-prototypes -Wmissing-prototypes -Wwrite-strings
 -Iinclude -Isrc -Isrc/lua $LUA_CFLAGS -g"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all
 -fno-omit-frame-pointer"
TARGET="src/lua/lcodec.c src/lua/lcodec_decode.c src/lua/lpath.c tests/lua/fuzz_codec.c"
FORMAT_TARGET="src/lua/lformat.c src/lua/lcodec_read.c src/lua/lcodec_write.c src/lua/ljson_write.c src/lua/lcodec.c src/lua/lcodec_decode.c src/lua/lpath.c tests/lua/fuzz_format.c"
FORMAT_LIBS=$($PKG_CONFIG --libs jansson msgpack)
mkdir -p "$OUT"

if [ "${1:-}" = "--quick" ]; then
    CC=${CC:-cc}
    if ! echo 'int main(void) { return 0; }' |
        $CC $SAN -x c - -o "$OUT/probe" >/dev/null 2>&1; then
        echo "fuzz.sh: $CC has no ASan/UBSan; running without" >&2
        SAN=""
    fi
    rm -f "$OUT/probe"
    # shellcheck disable=SC2086
    $CC $CFLAGS -O1 $SAN $TARGET tests/lua/fuzz_main.c $LUA_LIBS -lm \
        -o "$OUT/fuzz_quick"
    # shellcheck disable=SC2086
    $CC $CFLAGS -O1 $SAN $FORMAT_TARGET tests/lua/fuzz_main.c $LUA_LIBS \
        $FORMAT_LIBS -lm -o "$OUT/fuzz_format_quick"
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
        "$OUT/fuzz_quick" "${FUZZ_ITERS:-5000000}" \
        "${FUZZ_QUICK_SECONDS:-3}" "${FUZZ_SEED:-1}"
    echo "fuzz.sh: the remote formats' readers (tests/lua/fuzz_format.c)"
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
        exec "$OUT/fuzz_format_quick" "${FUZZ_ITERS:-5000000}" \
        "${FUZZ_QUICK_SECONDS:-3}" "${FUZZ_SEED:-1}"
fi
if [ "${FUZZ_TARGET:-codec}" = format ]; then
    TARGET=$FORMAT_TARGET
    LUA_LIBS="$LUA_LIBS $FORMAT_LIBS"
fi

install_clang() {
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
            echo "fuzz.sh: need root to install clang" >&2; exit 1
        fi
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q >&2 || true
    $SUDO apt-get install -y -q clang libclang-rt-14-dev >&2
}

build_fuzzer() {
    # shellcheck disable=SC2086
    clang $CFLAGS -O1 -fsanitize=fuzzer,address,undefined \
        -fno-sanitize-recover=all -fno-omit-frame-pointer $TARGET \
        $LUA_LIBS -lm -o "$OUT/fuzz_codec"
}

command -v clang >/dev/null 2>&1 || install_clang
if ! build_fuzzer; then
    echo "fuzz.sh: libFuzzer build failed; installing its runtime" >&2
    install_clang
    build_fuzzer
fi

# The seed corpus: real encodings of sample and random values.
# shellcheck disable=SC2086
${CC:-cc} $CFLAGS -O1 $TARGET tests/lua/fuzz_main.c $LUA_LIBS -lm \
    -o "$OUT/fuzz_seeds"
mkdir -p "$OUT/corpus"
"$OUT/fuzz_seeds" --corpus "$OUT/corpus"

exec "$OUT/fuzz_codec" -max_total_time="${FUZZ_SECONDS:-60}" \
    -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "$OUT/corpus"
