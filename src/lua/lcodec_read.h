/* SPDX-License-Identifier: MIT */
/*
 * lcodec_read.h -- the payload codec's bytes (lcodec.c's header
 * describes them) read value by value without a Lua state: bus:listen's
 * answers (lhttp.c) and the remote formats (lformat.c) read a payload so
 * on whatever thread they run.
 */
#ifndef SEDA_LCODEC_READ_H
#define SEDA_LCODEC_READ_H

#include <stddef.h>
#include <stdint.h>

#include "lseda.h"

/* A value read: its kind, and its head (a table's counts: its elements
 * follow). */
enum { CV_NIL, CV_NULL, CV_BOOL, CV_INT, CV_FLOAT, CV_STR, CV_TABLE };

struct cval {
    int t;
    int64_t i;                  /* CV_INT, CV_BOOL */
    double f;
    const unsigned char *s;     /* CV_STR */
    size_t len;
    uint64_t narr, nrec;        /* CV_TABLE */
};

/* A reader over a payload's bytes. */
struct cr {
    const unsigned char *p, *end;
};

/* Read one value's head (a table's counts, not its elements); -1 when
 * the bytes are not the codec's (or claim more than they hold). */
SEDA__API int seda__l_cr_head(struct cr *r, struct cval *v);

/* Skip the rest of a value whose head v was read (a table's elements),
 * at nesting depth; 0, or -1 on bytes that are not the codec's or nest
 * deeper than SEDA_CODEC_MAX_DEPTH. */
SEDA__API int seda__l_cr_skip_rest(struct cr *r, const struct cval *v,
                                   int depth);

#endif /* SEDA_LCODEC_READ_H */
