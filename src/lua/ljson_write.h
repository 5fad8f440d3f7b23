/* SPDX-License-Identifier: MIT */
/*
 * ljson_write.h -- the one JSON writer of payloads, without a Lua state:
 * the remote stages' `format = "json"` (lformat.c) and bus:listen's
 * answers (lhttp.c) write the codec's bytes (lcodec_read.h) as JSON text
 * through it, so a number reads back alike from both: an integer as an
 * integer (`3`), a float always with a fraction or an exponent (`3.0`,
 * `0.1`, `1e+300`: the shortest text that reads back as the same
 * double).  nan and +-inf are refused, naming the path to them
 * ("payload.total: JSON cannot carry nan").
 *
 * Two modes differ only in what JSON cannot carry exactly:
 *   SEDA_JSON_EXACT   (remote formats) refuses a table with both list
 *                     items and other keys, a key that is not a UTF-8
 *                     string (or holds a NUL), and a string that is not
 *                     UTF-8, each naming its path.
 *   SEDA_JSON_ANSWER  (HTTP answers) writes such a table as an object
 *                     ("1", "2", ... for the list items), a number or
 *                     boolean key as its text, skips a table key, and
 *                     copies a string's bytes as they are.
 * Also the path notation and refusal buffer lformat.c's MessagePack
 * writer shares.  No state; any thread.
 */
#ifndef SEDA_LJSON_WRITE_H
#define SEDA_LJSON_WRITE_H

#include <stdbool.h>
#include <stddef.h>

#include "lcodec_read.h"
#include "lcodec_write.h"
#include "lseda.h"

/* The path to the value at hand, for messages: "payload.items[3]". */
struct seda_jpath {
    char b[160];
    size_t n;
};

/* A refusal: "<path>: <what>" into the caller's err, the first only. */
struct seda_jerr {
    char *err;
    size_t errlen;
    bool set;
};

/* Step into a key or a list index; each returns the length to go back
 * to with seda__l_jpath_back. */
SEDA__API size_t seda__l_jpath_key(struct seda_jpath *p, const char *k,
                                   size_t kl);
SEDA__API size_t seda__l_jpath_idx(struct seda_jpath *p, long long i);
SEDA__API void seda__l_jpath_back(struct seda_jpath *p, size_t old);

/* Record a refusal at path p (unless one is recorded); returns -1. */
SEDA__API int seda__l_jrefuse(struct seda_jerr *e, const struct seda_jpath *p,
                              const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Whether s[0..n) is well-formed UTF-8 (no surrogates, no overlongs). */
SEDA__API bool seda__l_utf8_ok(const unsigned char *s, size_t n);

/* What a value is, for messages: "an integer", "a table", ... */
SEDA__API const char *seda__l_cv_name(const struct cval *v);

enum { SEDA_JSON_EXACT, SEDA_JSON_ANSWER };

/* Write the value whose head v was read from r (its elements follow in
 * r) as JSON into b, at path p and nesting depth.  0, or -1 with the
 * refusal in e (bytes that are not the codec's say so too). */
SEDA__API int seda__l_json_write(struct buf *b, struct cr *r,
                                 const struct cval *v, int mode,
                                 struct seda_jpath *p, int depth,
                                 struct seda_jerr *e);

/* A number as JSON text (as above: floats keep a fraction or an
 * exponent); -1 for nan and +-inf, writing nothing. */
SEDA__API int seda__l_json_num(struct buf *b, const struct cval *v);

#endif /* SEDA_LJSON_WRITE_H */
