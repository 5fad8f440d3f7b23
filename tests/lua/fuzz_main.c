/* SPDX-License-Identifier: MIT */
/*
 * fuzz_main.c -- a standalone driver for fuzz_codec.c, for compilers
 * without libFuzzer.
 *
 * Usage:
 *     fuzz_main [iterations [seconds [seed]]]    run the target
 *     fuzz_main --corpus DIR                     write seed inputs to DIR
 *
 * The run mode feeds LLVMFuzzerTestOneInput() up to `iterations` inputs
 * (default 1000000) for at most `seconds` (default 3) from a seeded
 * pseudo-random generator (default seed 1), so a failure can be replayed
 * with the same arguments.  It prints one summary line and exits 0; a
 * broken invariant aborts inside the target and a sanitizer error exits
 * non-zero, which is what `make test` checks.
 *
 * DESIGN
 *   - Seeds are real encodings: random value trees (every number width,
 *     special floats, strings of every length class, nested tables with
 *     array and hash parts) built in a private lua_State and encoded with
 *     seda__codec_encode().  --corpus writes the same seeds as files for
 *     libFuzzer (scripts/fuzz.sh).
 *   - Each input is one of: random bytes; a seed mutated by bit flips,
 *     interesting-byte overwrites, insertions, deletions, truncation,
 *     duplication and splicing; or a fresh random value, encoded and
 *     lightly mutated.  Every input is copied to a heap block of exactly
 *     its size so that AddressSanitizer catches any read past the end.
 *   - Single-threaded.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "lua/lcodec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
    FUZZ_MAX_INPUT = 4096, /* the largest input handed to the target */
    FUZZ_NSEEDS = 64       /* seeds kept for mutation */
};

/* ---- random numbers (xorshift64*, seeded) ---- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * UINT64_C(2685821657736338717);
}

/* A uniform value in [0, n); n must be > 0. */
static size_t below(size_t n)
{
    return (size_t)(rnd() % n);
}

/* ---- random values ---- */

static void push_random_value(lua_State *L, int depth);

static void push_random_table(lua_State *L, int depth)
{
    int narr = (int)below(depth > 3 ? 4 : 12);
    int nrec = (int)below(depth > 3 ? 4 : 10);
    lua_createtable(L, narr, nrec);
    for (int i = 1; i <= narr; i++) {
        push_random_value(L, depth + 1);
        lua_rawseti(L, -2, i);
    }
    for (int i = 0; i < nrec; i++) {
        push_random_value(L, depth + 1);
        if (lua_isnil(L, -1) ||
            (lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) !=
                                                   lua_tonumber(L, -1))) {
            lua_pop(L, 1); /* nil and nan cannot be keys */
            lua_pushinteger(L, (lua_Integer)i + 1000);
        }
        push_random_value(L, depth + 1);
        lua_rawset(L, -3);
    }
}

static void push_random_value(lua_State *L, int depth)
{
    static const double specials[] = {
        0.0, -0.0, 0.5, -1.5, 1e300, -1e-300, 4.9e-324, INFINITY,
        -INFINITY, 0.1
    };
    char s[300];
    size_t n;

    luaL_checkstack(L, 4, "fuzz_main");
    switch (below(depth < 6 ? 9 : 8)) {
    case 0:
        lua_pushnil(L);
        break;
    case 1:
        lua_pushboolean(L, (int)below(2));
        break;
    case 2:
        lua_pushinteger(L, (lua_Integer)below(300) - 150);
        break;
    case 3:
        /* Any width: shift a random 64-bit value right by 0..63. */
        {
            uint64_t u = rnd() >> below(64);
            lua_pushinteger(L, (lua_Integer)(below(2) ? u : 0 - u));
        }
        break;
    case 4:
        if (below(2)) {
            lua_pushnumber(L, specials[below(sizeof specials /
                                             sizeof specials[0])]);
        } else {
            uint64_t u = rnd();
            double d;
            memcpy(&d, &u, sizeof d);
            lua_pushnumber(L, d); /* any bits, nan included */
        }
        break;
    case 5:
    case 6:
        n = below(3) == 0 ? below(sizeof s) : below(12);
        for (size_t i = 0; i < n; i++)
            s[i] = (char)(below(4) ? 'a' + below(26) : rnd());
        lua_pushlstring(L, s, n);
        break;
    case 7:
        lua_pushstring(L, below(2) ? "id" : "name");
        break;
    default:
        push_random_table(L, depth);
        break;
    }
}

/* Encodes a fresh random value into b (b->len reset).  Returns 0, or -1
 * if the value did not fit in FUZZ_MAX_INPUT bytes. */
static int random_encoding(lua_State *L, seda_wbuf *b)
{
    char err[128];
    push_random_value(L, 0);
    b->len = 0;
    int rc = seda__codec_encode(L, -1, b, "payload", err, sizeof err);
    lua_pop(L, 1);
    if (rc != 0) {
        fprintf(stderr, "fuzz_main: encode failed: %s\n", err);
        exit(2);
    }
    return b->len <= FUZZ_MAX_INPUT ? 0 : -1;
}

/* ---- seeds ---- */

struct seed {
    unsigned char *p; /* malloc'd bytes */
    size_t len;       /* their count */
};

static const char *const fixed_seeds[] = {
    "return {id = 12345, name = 'sensor-17', value = 21.5, ok = true,"
    " tags = 'a,b'}",
    "return {1, 2, 3, {x = {y = {z = 'deep'}}}, [1.5] = 'f', [true] = 0}",
    "return {math.mininteger, math.maxinteger, 0/0, -0.0, 1/0, -1/0}",
    "local t = {} for i = 1, 300 do t[i] = i; t['k' .. i] = -i end return t",
    "return ('x'):rep(70000):sub(1, 3000)",
    "local t = {} local c = t for i = 1, 199 do c[1] = {} c = c[1] end"
    " return t",
};

static int make_seeds(lua_State *L, struct seed *seeds)
{
    seda_wbuf b = {0};
    char err[128];
    int n = 0;

    for (size_t i = 0; i < sizeof fixed_seeds / sizeof fixed_seeds[0]; i++) {
        if (luaL_dostring(L, fixed_seeds[i]) != 0) {
            fprintf(stderr, "fuzz_main: %s\n", lua_tostring(L, -1));
            exit(2);
        }
        b.len = 0;
        if (seda__codec_encode(L, -1, &b, "payload", err, sizeof err)) {
            fprintf(stderr, "fuzz_main: %s\n", err);
            exit(2);
        }
        lua_settop(L, 0);
        if (b.len > FUZZ_MAX_INPUT)
            continue;
        seeds[n].p = malloc(b.len);
        if (seeds[n].p == NULL)
            exit(2);
        memcpy(seeds[n].p, b.p, b.len);
        seeds[n++].len = b.len;
    }
    while (n < FUZZ_NSEEDS) {
        if (random_encoding(L, &b) != 0)
            continue;
        seeds[n].p = malloc(b.len ? b.len : 1);
        if (seeds[n].p == NULL)
            exit(2);
        memcpy(seeds[n].p, b.p, b.len);
        seeds[n++].len = b.len;
    }
    seda__codec_wbuf_free(&b);
    return n;
}

/* ---- mutation ---- */

/* Applies 1..4 random mutations to buf[0..*len), which has room for
 * FUZZ_MAX_INPUT bytes. */
static void mutate(unsigned char *buf, size_t *len, const struct seed *seeds,
                   int nseeds)
{
    static const unsigned char interesting[] = {
        0x00, 0x01, 0x02, 0x03, 0x07, 0x0b, 0x0c, 0x0d, 0x0e, 0x1f, 0x20,
        0x3f, 0x40, 0x5f, 0x60, 0x7f, 0x80, 0xff
    };
    int rounds = 1 + (int)below(4);

    for (int r = 0; r < rounds; r++) {
        size_t n = *len;
        switch (below(8)) {
        case 0: /* flip one bit */
            if (n > 0)
                buf[below(n)] ^= (unsigned char)(1u << below(8));
            break;
        case 1: /* overwrite with an interesting byte */
            if (n > 0)
                buf[below(n)] = interesting[below(sizeof interesting)];
            break;
        case 2: /* random byte */
            if (n > 0)
                buf[below(n)] = (unsigned char)rnd();
            break;
        case 3: /* truncate */
            *len = below(n + 1);
            break;
        case 4: { /* delete a range */
            if (n == 0)
                break;
            size_t at = below(n), k = 1 + below(n - at);
            memmove(buf + at, buf + at + k, n - at - k);
            *len = n - k;
            break;
        }
        case 5: { /* insert random bytes */
            size_t k = 1 + below(8);
            if (n + k > FUZZ_MAX_INPUT)
                break;
            size_t at = below(n + 1);
            memmove(buf + at + k, buf + at, n - at);
            for (size_t i = 0; i < k; i++)
                buf[at + i] = (unsigned char)rnd();
            *len = n + k;
            break;
        }
        case 6: { /* duplicate a range */
            if (n == 0)
                break;
            size_t at = below(n), k = 1 + below(n - at);
            if (n + k > FUZZ_MAX_INPUT)
                break;
            size_t to = below(n + 1);
            unsigned char tmp[FUZZ_MAX_INPUT];
            memcpy(tmp, buf + at, k);
            memmove(buf + to + k, buf + to, n - to);
            memcpy(buf + to, tmp, k);
            *len = n + k;
            break;
        }
        default: { /* splice in part of another seed */
            const struct seed *s = &seeds[below((size_t)nseeds)];
            if (s->len == 0)
                break;
            size_t from = below(s->len), k = 1 + below(s->len - from);
            size_t at = below(n + 1);
            if (at + k > FUZZ_MAX_INPUT)
                k = FUZZ_MAX_INPUT - at;
            memcpy(buf + at, s->p + from, k);
            if (at + k > n)
                *len = at + k;
            break;
        }
        }
    }
}

/* ---- modes ---- */

static int write_corpus(lua_State *L, const char *dir)
{
    struct seed seeds[FUZZ_NSEEDS];
    int n = make_seeds(L, seeds);

    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-%03d", dir, i);
        FILE *f = fopen(path, "wb");
        if (f == NULL || fwrite(seeds[i].p, 1, seeds[i].len, f) !=
                             seeds[i].len || fclose(f) != 0) {
            fprintf(stderr, "fuzz_main: cannot write %s\n", path);
            return 1;
        }
        free(seeds[i].p);
    }
    printf("fuzz_main: wrote %d seeds to %s\n", n, dir);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    lua_State *L = luaL_newstate();
    if (L == NULL)
        return 2;
    luaL_openlibs(L);
    rng_state = 1;
    if (argc == 3 && strcmp(argv[1], "--corpus") == 0) {
        int rc = write_corpus(L, argv[2]);
        lua_close(L);
        return rc;
    }

    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
    rng_state = seed ? seed : 1;

    struct seed seeds[FUZZ_NSEEDS];
    int nseeds = make_seeds(L, seeds);
    seda_wbuf fresh = {0};
    unsigned char buf[FUZZ_MAX_INPUT];
    double t0 = now_s();
    long done = 0;

    for (int i = 0; i < nseeds; i++)
        LLVMFuzzerTestOneInput(seeds[i].p, seeds[i].len);
    for (; done < iters; done++) {
        if ((done & 255) == 0 && now_s() - t0 > seconds)
            break;
        size_t len;
        switch (below(4)) {
        case 0: /* random bytes */
            len = below(257);
            for (size_t i = 0; i < len; i++)
                buf[i] = (unsigned char)rnd();
            break;
        case 1: /* a fresh value, lightly mutated half of the time */
            if (random_encoding(L, &fresh) != 0)
                continue;
            len = fresh.len;
            memcpy(buf, fresh.p, len);
            if (below(2))
                mutate(buf, &len, seeds, nseeds);
            break;
        default: { /* a mutated seed */
            const struct seed *s = &seeds[below((size_t)nseeds)];
            len = s->len;
            memcpy(buf, s->p, len);
            mutate(buf, &len, seeds, nseeds);
            break;
        }
        }
        unsigned char *exact = malloc(len ? len : 1);
        if (exact == NULL)
            return 2;
        memcpy(exact, buf, len);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
    }
    printf("fuzz_main: %ld inputs in %.1f s (seed %llu), no crash\n", done,
           now_s() - t0, (unsigned long long)seed);
    for (int i = 0; i < nseeds; i++)
        free(seeds[i].p);
    seda__codec_wbuf_free(&fresh);
    lua_close(L);
    return 0;
}
