/* SPDX-License-Identifier: MIT */
/*
 * lcodec_read.c -- the payload codec's bytes read value by value without a
 * Lua state (see lcodec_read.h).  No state.
 */
#include <string.h>

#include "lcodec.h"
#include "lcodec_read.h"

static uint64_t ldn(const unsigned char *p, int n)
{
    return n == 1 ? p[0] : n == 2 ? seda__ld16(p) : n == 4 ? seda__ld32(p)
                                                           : seda__ld64(p);
}

int seda__l_cr_head(struct cr *r, struct cval *v)
{
    if (r->p >= r->end)
        return -1;
    size_t left = (size_t)(r->end - r->p) - 1;
    unsigned tag = *r->p++;
    memset(v, 0, sizeof *v);
    if (tag >= SEDA_TAG_FIXINT) {
        v->t = CV_INT;
        v->i = (int64_t)tag - 0x80;
    } else if (tag >= SEDA_TAG_FIXSTR && tag < SEDA_TAG_FIXSTR + 32) {
        v->t = CV_STR;
        v->len = tag - SEDA_TAG_FIXSTR;
    } else if (tag == SEDA_TAG_NIL || tag == SEDA_TAG_NULL) {
        v->t = tag == SEDA_TAG_NIL ? CV_NIL : CV_NULL;
        return 0;
    } else if (tag == SEDA_TAG_FALSE || tag == SEDA_TAG_TRUE) {
        v->t = CV_BOOL;
        v->i = tag == SEDA_TAG_TRUE;
        return 0;
    } else if (tag == SEDA_TAG_FLOAT) {
        if (left < 8)
            return -1;
        uint64_t u = seda__ld64(r->p);
        memcpy(&v->f, &u, 8);
        r->p += 8;
        v->t = CV_FLOAT;
        return 0;
    } else if (tag >= SEDA_TAG_INT8 && tag < SEDA_TAG_INT8 + 4) {
        int n = 1 << (tag - SEDA_TAG_INT8);
        if (left < (size_t)n)
            return -1;
        uint64_t u = ldn(r->p, n);
        int sh = 64 - 8 * n;
        v->i = sh ? (int64_t)(u << sh) >> sh : (int64_t)u;
        r->p += n;
        v->t = CV_INT;
        return 0;
    } else if (tag >= SEDA_TAG_STR8 && tag < SEDA_TAG_STR8 + 4) {
        int n = 1 << (tag - SEDA_TAG_STR8);
        if (left < (size_t)n)
            return -1;
        v->len = (size_t)ldn(r->p, n);
        r->p += n;
        left -= (size_t)n;
        v->t = CV_STR;
    } else if (tag == SEDA_TAG_TBL8 || tag == SEDA_TAG_TBL32) {
        int n = tag == SEDA_TAG_TBL8 ? 1 : 4;
        if (left < 2 * (size_t)n)
            return -1;
        v->narr = ldn(r->p, n);
        v->nrec = ldn(r->p + n, n);
        r->p += 2 * n;
        /* Each element takes a byte at least. */
        if (v->narr + 2 * v->nrec > (uint64_t)(r->end - r->p))
            return -1;
        v->t = CV_TABLE;
        return 0;
    } else {
        return -1;
    }
    if (v->t == CV_STR) {
        if ((size_t)(r->end - r->p) < v->len)
            return -1;
        v->s = r->p;
        r->p += v->len;
    }
    return 0;
}

int seda__l_cr_skip_rest(struct cr *r, const struct cval *v, int depth)
{
    if (v->t != CV_TABLE)
        return 0;
    if (depth > SEDA_CODEC_MAX_DEPTH)
        return -1;
    for (uint64_t i = 0; i < v->narr + 2 * v->nrec; i++) {
        struct cval x;
        if (seda__l_cr_head(r, &x) != 0 ||
            seda__l_cr_skip_rest(r, &x, depth + 1) != 0)
            return -1;
    }
    return 0;
}
