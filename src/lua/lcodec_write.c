/* SPDX-License-Identifier: MIT */
/*
 * lcodec_write.c -- the payload codec's bytes written without a Lua
 * state (lcodec_write.h).  No state.
 */
#include <stdlib.h>
#include <string.h>

#include "lcodec.h"
#include "lcodec_write.h"

void seda__l_cw_put(struct buf *b, const void *p, size_t n)
{
    if (b->failed || n == 0)            /* (an empty string may be NULL) */
        return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n && cap < SIZE_MAX / 2)
            cap *= 2;
        unsigned char *np = cap - b->len < n ? NULL
                            : b->borrowed ? malloc(cap)
                                          : realloc(b->p, cap);
        if (!np) {
            b->failed = true;
            return;
        }
        if (b->borrowed)
            memcpy(np, b->p, b->len);
        b->borrowed = false;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void seda__l_cw_byte(struct buf *b, unsigned c)
{
    unsigned char x = (unsigned char)c;
    seda__l_cw_put(b, &x, 1);
}

static void put_le(struct buf *b, uint64_t v, int n)
{
    unsigned char t[8];
    for (int i = 0; i < n; i++)
        t[i] = (unsigned char)(v >> (8 * i));
    seda__l_cw_put(b, t, (size_t)n);
}

void seda__l_cw_int(struct buf *b, int64_t v)
{
    if (v >= -32 && v <= 127) {
        seda__l_cw_byte(b, (unsigned)(SEDA_TAG_FIXINT + 0x20 + v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        seda__l_cw_byte(b, SEDA_TAG_INT8 + 2);
        put_le(b, (uint64_t)v, 4);
    } else {
        seda__l_cw_byte(b, SEDA_TAG_INT8 + 3);
        put_le(b, (uint64_t)v, 8);
    }
}

void seda__l_cw_float(struct buf *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    seda__l_cw_byte(b, SEDA_TAG_FLOAT);
    put_le(b, u, 8);
}

void seda__l_cw_str(struct buf *b, const void *s, size_t n)
{
    if (n <= 31) {
        seda__l_cw_byte(b, SEDA_TAG_FIXSTR + (unsigned)n);
    } else if (n <= 0xff) {
        seda__l_cw_byte(b, SEDA_TAG_STR8);
        put_le(b, n, 1);
    } else if (n <= 0xffff) {
        seda__l_cw_byte(b, SEDA_TAG_STR8 + 1);
        put_le(b, n, 2);
    } else {
        seda__l_cw_byte(b, SEDA_TAG_STR8 + 3);
        put_le(b, n, 8);
    }
    seda__l_cw_put(b, s, n);
}

void seda__l_cw_table(struct buf *b, uint64_t narr, uint64_t nrec)
{
    if (narr <= 0xff && nrec <= 0xff) {
        seda__l_cw_byte(b, SEDA_TAG_TBL8);
        seda__l_cw_byte(b, (unsigned)narr);
        seda__l_cw_byte(b, (unsigned)nrec);
    } else {
        seda__l_cw_byte(b, SEDA_TAG_TBL32);
        put_le(b, narr, 4);
        put_le(b, nrec, 4);
    }
}
