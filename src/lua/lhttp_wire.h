/* SPDX-License-Identifier: MIT */
/*
 * lhttp_wire.h -- what bus:listen (lhttp.c) needs of lhttp_wire.c: a
 * request written as a payload in the codec's wire format, a payload
 * skipped through without a Lua state (read with lcodec_read.h).  An
 * answer's JSON is ljson_write.h's.  Internal to the Lua layer.
 */
#ifndef SEDA_LHTTP_WIRE_H
#define SEDA_LHTTP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lcodec_read.h"
#include "lcodec_write.h"
#include "lseda.h"
#include "seda_http.h"

/* The request as the payload { method, path, query, headers, body }. */
SEDA__API void seda__l_hw_encode_request(struct buf *b, const seda_http_req_t *r);

/* Skip a value, or the rest of one whose head was read (lcodec_read.h):
 * 0, or -1 on malformed bytes. */
SEDA__API int seda__l_hw_rd_skip(struct cr *r, int depth);
SEDA__API int seda__l_hw_rd_skip_rest(struct cr *r, const struct cval *v,
                                      int depth);

#endif /* SEDA_LHTTP_WIRE_H */
