/* SPDX-License-Identifier: MIT */
/*
 * fuzz_codec.c -- a libFuzzer target for the payload decoder.
 *
 * Feeds arbitrary bytes to seda__codec_decode().  The decoder must never
 * crash, read out of bounds or raise anything but a memory error, and
 * whatever it accepts must be plain data that survives a second round
 * trip unchanged:  decode(x) = v, encode(v) = y, decode(y) = v' with v and
 * v' deep-equal.  A violation calls abort(), which the fuzzer (or the
 * standalone driver in fuzz_main.c) reports as a crash.
 *
 * DESIGN
 *   - One lua_State for the whole process, created on the first input and
 *     reachable from a static pointer (so LeakSanitizer does not report
 *     it).  Each input runs under lua_pcall so that a Lua memory error is
 *     an ordinary failure, not a panic.
 *   - Single-threaded, as libFuzzer calls the target from one thread.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "lua/lcodec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct input {
    const uint8_t *data; /* the bytes under test, borrowed */
    size_t size;         /* their length */
};

static lua_State *fuzz_L;   /* the process-wide state */
static seda_wbuf fuzz_buf;  /* reused re-encoding buffer */

/* Deep equality of the values at absolute indices a and b: same types and
 * number subtypes, bit-identical floats, equal strings, and tables whose
 * pairs match (table keys are matched by deep equality).  Returns 1 when
 * equal.  May raise a Lua memory error. */
static int deep_equal(lua_State *L, int a, int b)
{
    int t = lua_type(L, a);
    if (t != lua_type(L, b))
        return 0;
    switch (t) {
    case LUA_TNIL:
        return 1;
    case LUA_TBOOLEAN:
        return lua_toboolean(L, a) == lua_toboolean(L, b);
    case LUA_TNUMBER:
        if (lua_isinteger(L, a) != lua_isinteger(L, b))
            return 0;
        if (lua_isinteger(L, a))
            return lua_tointeger(L, a) == lua_tointeger(L, b);
        else {
            double x = lua_tonumber(L, a), y = lua_tonumber(L, b);
            return memcmp(&x, &y, sizeof x) == 0;
        }
    case LUA_TSTRING: {
        size_t la, lb;
        const char *sa = lua_tolstring(L, a, &la);
        const char *sb = lua_tolstring(L, b, &lb);
        return la == lb && memcmp(sa, sb, la) == 0;
    }
    case LUA_TLIGHTUSERDATA:            /* seda.null */
        return lua_touserdata(L, a) == lua_touserdata(L, b);
    case LUA_TTABLE:
        break;
    default:
        return 0;
    }

    luaL_checkstack(L, 6, "deep_equal");
    size_t na = 0, nb = 0;
    int ok = 1;
    lua_pushnil(L);
    while (ok && lua_next(L, a) != 0) {
        int k = lua_gettop(L) - 1;
        na++;
        if (lua_type(L, k) != LUA_TTABLE) {
            lua_pushvalue(L, k);
            lua_rawget(L, b);
            ok = deep_equal(L, k + 1, k + 2);
            lua_pop(L, 1);
        } else {
            ok = 0;
            lua_pushnil(L);
            while (!ok && lua_next(L, b) != 0) {
                ok = lua_type(L, -2) == LUA_TTABLE &&
                     deep_equal(L, k, k + 2) && deep_equal(L, k + 1, k + 3);
                lua_pop(L, 1);
            }
            if (ok)
                lua_pop(L, 1); /* the key lua_next left on a match */
        }
        lua_pop(L, 1);
    }
    if (!ok) {
        lua_pop(L, 1); /* the key */
        return 0;
    }
    lua_pushnil(L);
    while (lua_next(L, b) != 0) {
        nb++;
        lua_pop(L, 1);
    }
    return na == nb;
}

/* Runs one input inside lua_pcall.  Returns nothing; aborts on a broken
 * invariant. */
static int run_one(lua_State *L)
{
    const struct input *in = lua_touserdata(L, 1);
    char err[256];

    lua_settop(L, 0);
    if (seda__codec_decode(L, in->data, in->size, err, sizeof err) != 0) {
        if (lua_gettop(L) != 0 || err[0] == '\0')
            abort(); /* a failed decode pushes nothing and says why */
        return 0;
    }
    if (lua_gettop(L) != 1)
        abort();
    fuzz_buf.len = 0;
    if (seda__codec_encode(L, 1, &fuzz_buf, "payload", err, sizeof err)) {
        fprintf(stderr, "fuzz_codec: decoded value does not encode: %s\n",
                err);
        abort();
    }
    if (lua_gettop(L) != 1)
        abort();
    if (seda__codec_decode(L, fuzz_buf.p, fuzz_buf.len, err, sizeof err)) {
        fprintf(stderr, "fuzz_codec: re-encoding does not decode: %s\n", err);
        abort();
    }
    if (!deep_equal(L, 1, 2)) {
        fprintf(stderr, "fuzz_codec: second round trip changed the value\n");
        abort();
    }
    lua_settop(L, 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, size};

    if (fuzz_L == NULL) {
        fuzz_L = luaL_newstate();
        if (fuzz_L == NULL)
            abort();
    }
    lua_settop(fuzz_L, 0);
    lua_pushcfunction(fuzz_L, run_one);
    lua_pushlightuserdata(fuzz_L, &in);
    if (lua_pcall(fuzz_L, 1, 0, 0) != LUA_OK) {
        /* Only a memory error may escape the codec. */
        if (lua_type(fuzz_L, -1) != LUA_TSTRING ||
            strstr(lua_tostring(fuzz_L, -1), "memory") == NULL) {
            fprintf(stderr, "fuzz_codec: unexpected Lua error: %s\n",
                    lua_tostring(fuzz_L, -1));
            abort();
        }
    }
    lua_settop(fuzz_L, 0);
    return 0;
}
