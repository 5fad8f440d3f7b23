/* SPDX-License-Identifier: MIT */
/*
 * lcodec_write.h -- the payload codec's bytes (lcodec.c's header
 * describes them) written without a Lua state, into a growing buffer:
 * bus:listen's requests (lhttp_wire.c) and the remote formats' readers
 * (lformat.c) make payloads so on whatever thread they run.  The
 * counterpart of lcodec_read.h.
 */
#ifndef SEDA_LCODEC_WRITE_H
#define SEDA_LCODEC_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lseda.h"

/* A growing byte buffer (malloc'd, or the caller's array while it fits);
 * failed once an allocation failed, and every append after is a no-op. */
struct buf {
    unsigned char *p;
    size_t len, cap;
    bool failed;
    bool borrowed;              /* p is the caller's (a stack array) */
};

/* Append n bytes (none: p may be NULL), or one byte. */
SEDA__API void seda__l_cw_put(struct buf *b, const void *p, size_t n);
SEDA__API void seda__l_cw_byte(struct buf *b, unsigned c);

/* One value, or a table's head (narr array values, then nrec key and
 * value pairs follow). */
SEDA__API void seda__l_cw_int(struct buf *b, int64_t v);
SEDA__API void seda__l_cw_float(struct buf *b, double d);
SEDA__API void seda__l_cw_str(struct buf *b, const void *s, size_t n);
SEDA__API void seda__l_cw_table(struct buf *b, uint64_t narr, uint64_t nrec);

#endif
