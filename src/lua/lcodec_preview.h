/* SPDX-License-Identifier: MIT */
/*
 * lcodec_preview.h -- a payload's kept first bytes as readable text (the
 * payload_preview of dead letters and taps; lcodec_preview.c says how).
 */
#ifndef SEDA_LCODEC_PREVIEW_H
#define SEDA_LCODEC_PREVIEW_H

#include <stddef.h>

#include "lseda.h"

/* Room for the preview of kept bytes of any length: the text is cut (and
 * ends "...") past it. */
#define SEDA_PREVIEW_MAX 512

/* Write the preview of p[0..len), the first len bytes of a payload of
 * size bytes and kind (SEDA_KIND_RAW, SEDA_KIND_LUA), into out (cap bytes,
 * cap >= 64; no NUL added); returns its length.  Valid UTF-8 without
 * control bytes.  Cannot fail; no state, any thread. */
SEDA__API size_t seda__l_codec_preview(const void *p, size_t len,
                                       size_t size, int kind, char *out,
                                       size_t cap);

#endif /* SEDA_LCODEC_PREVIEW_H */
