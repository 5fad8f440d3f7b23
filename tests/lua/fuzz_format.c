/* SPDX-License-Identifier: MIT */
/*
 * fuzz_format.c -- a libFuzzer target for the payload formats of remote
 * stages (src/lua/lformat.c): the JSON and MessagePack readers take
 * untrusted message bodies.
 *
 * The first byte picks the mode, the rest is the input:
 *   0  a JSON body: read it; what it accepts must be codec bytes the
 *      codec's decoder takes, and written back as JSON (when JSON can)
 *      read again.
 *   1  a MessagePack body: read it; what it accepts must decode, and
 *      written back as MessagePack (always possible) read again.
 *   2  codec bytes: when the codec decodes them, written as MessagePack
 *      (always possible) and as JSON (when possible), and read back.
 * A violation calls abort(), which the fuzzer (or the standalone driver
 * fuzz_main.c, built with -DFUZZ_TARGET_FORMAT) reports as a crash.
 * Single-threaded; one lua_State for the process, as in fuzz_codec.c.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "lua/lcodec.h"
#include "lua/lseda.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static lua_State *fuzz_L;   /* the process-wide state */

/* Do the codec's bytes decode?  (A Lua memory error counts as yes.) */
static int codec_ok(const void *p, size_t n)
{
    char err[200];
    int top = lua_gettop(fuzz_L);
    int rc = seda__codec_decode(fuzz_L, p, n, err, sizeof err);
    lua_settop(fuzz_L, top);
    return rc == 0 || strstr(err, "memory") != NULL;
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "fuzz_format: %s (%s)\n", what, err);
    abort();
}

/* Read body with f; when it accepts, check its output and write it back
 * with f (must succeed when must_write) and read that again. */
static void read_check(const seda_remote_format *f, const void *body,
                       size_t n, int must_write)
{
    char err[256];
    int kind;
    void *out = NULL;
    size_t outlen = 0;
    if (f->decode(body, n, &kind, &out, &outlen, err, sizeof err) != 0)
        return;
    if (!out)
        return;                         /* the body as it is (raw) */
    if (kind != SEDA_KIND_LUA || !codec_ok(out, outlen))
        die("accepted a body into bad codec bytes", f->name);
    void *again = NULL;
    size_t alen = 0;
    if (f->encode(kind, out, outlen, &again, &alen, err, sizeof err) != 0) {
        if (must_write)
            die("could not write back what it read", err);
    } else {
        void *back = NULL;
        size_t blen = 0;
        if (f->decode(again, alen, &kind, &back, &blen, err,
                      sizeof err) != 0)
            die("could not read back what it wrote", err);
        free(back);
    }
    free(again);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_L)
        fuzz_L = luaL_newstate();
    if (size < 1)
        return 0;
    const seda_remote_format *json = seda__l_format("json");
    const seda_remote_format *mp = seda__l_format("msgpack");
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    /* A heap copy of exactly n bytes: ASan sees any read past the end. */
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy)
        return 0;
    memcpy(copy, p, n);
    switch (data[0] % 3) {
    case 0:
        read_check(json, copy, n, 0);
        break;
    case 1:
        read_check(mp, copy, n, 1);
        break;
    default:
        if (codec_ok(copy, n)) {
            char err[256];
            void *out = NULL;
            size_t outlen = 0;
            if (mp->encode(SEDA_KIND_LUA, copy, n, &out, &outlen, err,
                           sizeof err) != 0)
                die("MessagePack refused a codec value", err);
            read_check(mp, out, outlen, 1);
            free(out);
            out = NULL;
            if (json->encode(SEDA_KIND_LUA, copy, n, &out, &outlen, err,
                             sizeof err) == 0)
                read_check(json, out, outlen, 0);
            free(out);
        }
    }
    free(copy);
    return 0;
}
