/* SPDX-License-Identifier: MIT */
/*
 * lhttp_wire.c -- bus:listen's bytes without a Lua state: a request
 * written as a payload in the codec's wire format (lcodec.c's header
 * describes it) and a payload skipped through value by value, so a
 * request becomes an envelope on the server's thread and an answer is
 * built on whichever thread ends the itinerary (its JSON by the payloads'
 * one JSON writer, ljson_write.c).  No state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lhttp_wire.h"

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

int seda__l_hw_rd_skip(struct cr *r, int depth)
{
    struct cval v;
    if (seda__l_cr_head(r, &v) != 0)
        return -1;
    return seda__l_cr_skip_rest(r, &v, depth);
}

int seda__l_hw_rd_skip_rest(struct cr *r, const struct cval *v, int depth)
{
    return seda__l_cr_skip_rest(r, v, depth);
}
