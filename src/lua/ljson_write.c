/* SPDX-License-Identifier: MIT */
/*
 * ljson_write.c -- the one JSON writer of payloads (ljson_write.h says
 * what it writes and refuses).  No state.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lcodec.h"
#include "ljson_write.h"

/* ---- paths and refusals ---- */

size_t seda__l_jpath_key(struct seda_jpath *p, const char *k, size_t kl)
{
    size_t old = p->n;
    bool ident = kl > 0 && kl < 40 && !(k[0] >= '0' && k[0] <= '9');
    for (size_t i = 0; i < kl && ident; i++)
        ident = (k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z')
                || (k[i] >= '0' && k[i] <= '9') || k[i] == '_';
    int w = ident ? snprintf(p->b + p->n, sizeof p->b - p->n, ".%.*s",
                             (int)kl, k)
                  : snprintf(p->b + p->n, sizeof p->b - p->n, "[\"%.*s\"]",
                             (int)(kl < 40 ? kl : 40), k);
    if (w > 0)
        p->n += (size_t)w < sizeof p->b - p->n ? (size_t)w
                                                : sizeof p->b - p->n - 1;
    return old;
}

size_t seda__l_jpath_idx(struct seda_jpath *p, long long i)
{
    size_t old = p->n;
    int w = snprintf(p->b + p->n, sizeof p->b - p->n, "[%lld]", i);
    if (w > 0)
        p->n += (size_t)w < sizeof p->b - p->n ? (size_t)w
                                                : sizeof p->b - p->n - 1;
    return old;
}

void seda__l_jpath_back(struct seda_jpath *p, size_t old)
{
    p->n = old;
    p->b[old] = '\0';
}

int seda__l_jrefuse(struct seda_jerr *e, const struct seda_jpath *p,
                    const char *fmt, ...)
{
    if (e->set)
        return -1;
    e->set = true;
    int n = snprintf(e->err, e->errlen, "%s: ", p->b);
    if (n < 0 || (size_t)n >= e->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err + n, e->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

bool seda__l_utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1
                 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 9;
        if (k == 9 || (k && c < 0xc2) || n - i - 1 < k)
            return false;
        uint32_t cp = k ? c & (0x3fu >> k) : c;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3fu);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return false;
        i += k + 1;
    }
    return true;
}

const char *seda__l_cv_name(const struct cval *v)
{
    static const char *const n[] = { "nil", "seda.null", "a boolean",
                                     "an integer", "a float", "a string",
                                     "a table" };
    return v->t >= 0 && v->t <= CV_TABLE ? n[v->t] : "a value";
}

/* ---- text ---- */

static void put_cstr(struct buf *b, const char *s)
{
    seda__l_cw_put(b, s, strlen(s));
}

int seda__l_json_num(struct buf *b, const struct cval *v)
{
    char n[48];
    if (v->t == CV_INT) {
        snprintf(n, sizeof n, "%lld", (long long)v->i);
    } else {
        if (!isfinite(v->f))
            return -1;
        /* The shortest that reads back as the same double, then a
         * fraction if it has neither one nor an exponent: 3.0 stays a
         * float for every JSON reader that tells them apart. */
        for (int k = 15; k <= 17; k++) {
            snprintf(n, sizeof n, "%.*g", k, v->f);
            if (strtod(n, NULL) == v->f)
                break;
        }
        if (!strpbrk(n, ".eE"))
            strcat(n, ".0");
    }
    put_cstr(b, n);
    return 0;
}

static void json_str(struct buf *b, const unsigned char *s, size_t n)
{
    seda__l_cw_byte(b, '"');
    size_t run = 0;                     /* bytes copied as they are */
    for (size_t i = 0; i < n; i++) {
        unsigned c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        seda__l_cw_put(b, s + run, i - run);
        run = i + 1;
        char e[8];
        switch (c) {
        case '"': put_cstr(b, "\\\""); break;
        case '\\': put_cstr(b, "\\\\"); break;
        case '\n': put_cstr(b, "\\n"); break;
        case '\r': put_cstr(b, "\\r"); break;
        case '\t': put_cstr(b, "\\t"); break;
        default:
            snprintf(e, sizeof e, "\\u%04x", c);
            put_cstr(b, e);
        }
    }
    seda__l_cw_put(b, s + run, n - run);
    seda__l_cw_byte(b, '"');
}

static int refuse_num(struct seda_jerr *e, const struct seda_jpath *p,
                      double f)
{
    return seda__l_jrefuse(e, p, "JSON cannot carry %s", isnan(f) ? "nan"
                           : f > 0 ? "inf" : "-inf");
}

/* ---- values ---- */

/* An object key whose head k was read; steps the path into it. */
static int json_key(struct buf *b, struct cr *r, const struct cval *k,
                    int mode, struct seda_jpath *p, size_t *old,
                    struct seda_jerr *e)
{
    if (k->t == CV_STR) {
        if (mode == SEDA_JSON_EXACT &&
            (!seda__l_utf8_ok(k->s, k->len) || memchr(k->s, 0, k->len)))
            return seda__l_jrefuse(e, p, "JSON cannot carry the key (a "
                                   "binary string) (object keys are UTF-8 "
                                   "strings)");
        json_str(b, k->s, k->len);
        *old = seda__l_jpath_key(p, (const char *)k->s, k->len);
        return 0;
    }
    if (mode == SEDA_JSON_EXACT)
        return seda__l_jrefuse(e, p, "JSON cannot carry the key %s (object "
                               "keys are UTF-8 strings)", seda__l_cv_name(k));
    /* An answer: a number or boolean key as its text, a table key as
     * "" (its contents skipped). */
    *old = p->n;
    seda__l_cw_byte(b, '"');
    if (k->t == CV_INT || k->t == CV_FLOAT) {
        if (seda__l_json_num(b, k) != 0)
            return refuse_num(e, p, k->f);
        *old = k->t == CV_INT ? seda__l_jpath_idx(p, (long long)k->i) : p->n;
    } else if (k->t == CV_BOOL) {
        put_cstr(b, k->i ? "true" : "false");
    } else if (k->t == CV_TABLE &&
               seda__l_cr_skip_rest(r, k, 1) != 0) {
        return seda__l_jrefuse(e, p, "not the payload codec's bytes");
    }
    seda__l_cw_byte(b, '"');
    return 0;
}

/* The value next in r written at b, one level below depth; p (its path)
 * is set back to old length after.  0, or -1 with e set. */
static int write_next(struct buf *b, struct cr *r, int mode,
                      struct seda_jpath *p, size_t old, int depth,
                      struct seda_jerr *e)
{
    struct cval x;
    int rc = seda__l_cr_head(r, &x) != 0
                 ? seda__l_jrefuse(e, p, "not the payload codec's bytes")
                 : seda__l_json_write(b, r, &x, mode, p, depth + 1, e);
    seda__l_jpath_back(p, old);
    return rc;
}

static int json_table(struct buf *b, struct cr *r, const struct cval *v,
                      int mode, struct seda_jpath *p, int depth,
                      struct seda_jerr *e)
{
    if (depth >= SEDA_CODEC_MAX_DEPTH)
        return seda__l_jrefuse(e, p, "nested deeper than %d",
                               SEDA_CODEC_MAX_DEPTH);
    if (mode == SEDA_JSON_EXACT && v->narr && v->nrec)
        return seda__l_jrefuse(e, p, "JSON cannot carry a table with both "
                               "list items and other keys");
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
        size_t old = seda__l_jpath_idx(p, (long long)i + 1);
        if (write_next(b, r, mode, p, old, depth, e) != 0)
            return -1;
    }
    for (uint64_t i = 0; i < v->nrec; i++) {
        if (i || v->narr)
            seda__l_cw_byte(b, ',');
        struct cval k;
        size_t old = p->n;
        if (seda__l_cr_head(r, &k) != 0)
            return seda__l_jrefuse(e, p, "not the payload codec's bytes");
        if (json_key(b, r, &k, mode, p, &old, e) != 0)
            return -1;
        seda__l_cw_byte(b, ':');
        if (write_next(b, r, mode, p, old, depth, e) != 0)
            return -1;
    }
    seda__l_cw_byte(b, array ? ']' : '}');
    return 0;
}

int seda__l_json_write(struct buf *b, struct cr *r, const struct cval *v,
                       int mode, struct seda_jpath *p, int depth,
                       struct seda_jerr *e)
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
        return seda__l_json_num(b, v) == 0 ? 0 : refuse_num(e, p, v->f);
    case CV_STR:
        if (mode == SEDA_JSON_EXACT && !seda__l_utf8_ok(v->s, v->len))
            return seda__l_jrefuse(e, p, "JSON cannot carry a binary "
                                   "string (not UTF-8; use format "
                                   "\"msgpack\")");
        json_str(b, v->s, v->len);
        return 0;
    case CV_TABLE:
        return json_table(b, r, v, mode, p, depth, e);
    default:
        return seda__l_jrefuse(e, p, "not the payload codec's bytes");
    }
}
