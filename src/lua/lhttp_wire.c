/* SPDX-License-Identifier: MIT */
/*
 * lhttp_wire.c -- bus:listen's bytes without a Lua state: a request
 * written as a payload in the codec's wire format (lcodec.c's header
 * describes it), a payload read back value by value, and a table written
 * as JSON, so a request becomes an envelope on the server's thread and an
 * answer is built on whichever thread ends the itinerary.  No state.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lhttp_wire.h"

static void put_cstr(struct buf *b, const char *s)
{
    seda__l_cw_put(b, s, strlen(s));
}

/* ---- the request as a payload (the wire format of lcodec.c) ---- */

static void cw_cstr(struct buf *b, const char *s)
{
    seda__l_cw_str(b, s, strlen(s));
}

typedef void (*pair_at)(const seda_http_req_t *r, int i, const char **k,
                        const char **v);

/* Pair i's key came before it (the first one is the one kept). */
static bool seen_before(const seda_http_req_t *r, int i, pair_at at)
{
    const char *k, *v, *k2, *v2;
    at(r, i, &k, &v);
    for (int j = 0; j < i; j++) {
        at(r, j, &k2, &v2);
        if (strcmp(k, k2) == 0)
            return true;
    }
    return false;
}

/* A table of the n pairs; a repeated key keeps its first value (a table
 * has one value per key, and the count must be exact). */
static void w_pairs(struct buf *b, const seda_http_req_t *r, int n,
                    pair_at at)
{
    int distinct = 0;
    for (int i = 0; i < n; i++)
        distinct += !seen_before(r, i, at);
    seda__l_cw_table(b, 0, (uint32_t)distinct);
    for (int i = 0; i < n; i++) {
        const char *k, *v;
        at(r, i, &k, &v);
        if (seen_before(r, i, at))
            continue;
        cw_cstr(b, k);
        cw_cstr(b, v);
    }
}

void seda__l_hw_encode_request(struct buf *b, const seda_http_req_t *r)
{
    size_t blen;
    const void *body = seda_http_req_body(r, &blen);
    seda__l_cw_table(b, 0, 5);
    cw_cstr(b, "method");
    cw_cstr(b, seda_http_req_method(r));
    cw_cstr(b, "path");
    cw_cstr(b, seda_http_req_path(r));
    cw_cstr(b, "query");
    w_pairs(b, r, seda_http_req_query_count(r), seda_http_req_query_at);
    cw_cstr(b, "headers");
    w_pairs(b, r, seda_http_req_header_count(r), seda_http_req_header_at);
    cw_cstr(b, "body");
    seda__l_cw_str(b, body, blen);
}

/* ---- reading a payload (the wire format) ---- */




#define MAX_DEPTH 64

int seda__l_hw_rd_skip(struct cr *r, int depth)
{
    struct cval v;
    if (seda__l_cr_head(r, &v) != 0)
        return -1;
    return seda__l_hw_rd_skip_rest(r, &v, depth);
}

int seda__l_hw_rd_skip_rest(struct cr *r, const struct cval *v, int depth)
{
    if (v->t != CV_TABLE)
        return 0;
    if (depth > MAX_DEPTH)
        return -1;
    for (uint64_t i = 0; i < v->narr + 2 * v->nrec; i++)
        if (seda__l_hw_rd_skip(r, depth + 1) != 0)
            return -1;
    return 0;
}

/* ---- JSON ---- */

static void json_str(struct buf *b, const unsigned char *s, size_t n)
{
    seda__l_cw_byte(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned c = s[i];
        if (c == '"' || c == '\\') {
            seda__l_cw_byte(b, '\\');
            seda__l_cw_byte(b, c);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            put_cstr(b, e);
        } else {
            seda__l_cw_byte(b, c);
        }
    }
    seda__l_cw_byte(b, '"');
}

void seda__l_hw_json_num(struct buf *b, const struct cval *v)
{
    char n[40];
    if (v->t == CV_INT)
        snprintf(n, sizeof n, "%lld", (long long)v->i);
    else if (!isfinite(v->f))
        snprintf(n, sizeof n, "null");
    else if (v->f == floor(v->f) && fabs(v->f) < 1e15)
        snprintf(n, sizeof n, "%.0f", v->f);
    else {
        /* The shortest form that reads back the same. */
        snprintf(n, sizeof n, "%.15g", v->f);
        if (strtod(n, NULL) != v->f)
            snprintf(n, sizeof n, "%.17g", v->f);
    }
    put_cstr(b, n);
}

static int json_value(struct buf *b, struct cr *r, int depth)
{
    struct cval v;
    if (seda__l_cr_head(r, &v) != 0)
        return -1;
    return seda__l_hw_json_rest(b, r, &v, depth);
}

/* A key as a JSON string. */
static int json_key(struct buf *b, struct cr *r, int depth)
{
    struct cval k;
    if (seda__l_cr_head(r, &k) != 0)
        return -1;
    if (k.t == CV_STR) {
        json_str(b, k.s, k.len);
        return 0;
    }
    seda__l_cw_byte(b, '"');
    if (k.t == CV_INT || k.t == CV_FLOAT)
        seda__l_hw_json_num(b, &k);
    else if (k.t == CV_BOOL)
        put_cstr(b, k.i ? "true" : "false");
    else if (seda__l_hw_rd_skip_rest(r, &k, depth) != 0)
        return -1;
    seda__l_cw_byte(b, '"');
    return 0;
}

int seda__l_hw_json_rest(struct buf *b, struct cr *r, const struct cval *v,
                     int depth)
{
    switch (v->t) {
    case CV_NIL:
    case CV_NULL:
        put_cstr(b, "null");
        return 0;
    case CV_BOOL:
        put_cstr(b, v->i ? "true" : "false");
        return 0;
    case CV_INT:
    case CV_FLOAT:
        seda__l_hw_json_num(b, v);
        return 0;
    case CV_STR:
        json_str(b, v->s, v->len);
        return 0;
    case CV_TABLE:
        break;
    default:
        return -1;
    }
    if (depth > MAX_DEPTH)
        return -1;
    bool array = v->nrec == 0 && v->narr > 0;
    seda__l_cw_byte(b, array ? '[' : '{');
    for (uint64_t i = 0; i < v->narr; i++) {
        if (i)
            seda__l_cw_byte(b, ',');
        if (!array) {
            char k[32];
            snprintf(k, sizeof k, "\"%llu\":", (unsigned long long)i + 1);
            put_cstr(b, k);
        }
        if (json_value(b, r, depth + 1) != 0)
            return -1;
    }
    for (uint64_t i = 0; i < v->nrec; i++) {
        if (i || v->narr)
            seda__l_cw_byte(b, ',');
        if (json_key(b, r, depth + 1) != 0)
            return -1;
        seda__l_cw_byte(b, ':');
        if (json_value(b, r, depth + 1) != 0)
            return -1;
    }
    seda__l_cw_byte(b, array ? ']' : '}');
    return 0;
}

