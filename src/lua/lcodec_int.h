/* SPDX-License-Identifier: MIT */
/*
 * lcodec_int.h -- what the payload codec's encoder (lcodec.c) and decoder
 * (lcodec_decode.c) share beyond lcodec.h: the bounds of the short forms
 * of the wire format (described in lcodec.c's header) and the inlining
 * hints of their hot paths.  Included by those two files only.
 */
#ifndef SEDA_LCODEC_INT_H
#define SEDA_LCODEC_INT_H

enum {
    FIXSTR_MAX = 31,
    FIXINT_MIN = -32,
    FIXINT_MAX = 127
};

/* Inlining hints for the hot paths: scalars are encoded and decoded inline
 * in the table loops, and error paths stay out of the loops' frames. */
#define NOINLINE __attribute__((noinline))
#define COLD __attribute__((noinline, cold))
#define ALWAYS_INLINE inline __attribute__((always_inline))

#endif /* SEDA_LCODEC_INT_H */
