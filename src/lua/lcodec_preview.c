/* SPDX-License-Identifier: MIT */
/*
 * lcodec_preview.c -- a payload's kept first bytes as readable text: the
 * payload_preview of bus:dead_letters(), bus:tap(), /dlq.json and /tap
 * (see lcodec_preview.h).
 *
 * A dead letter keeps the first 256 bytes of its payload, a tap copy the
 * first 128; when that is not the whole payload (or the whole does not
 * decode) the reader gets a preview instead of the value.  The preview is
 * what the REPL prints: a string payload as a quoted string, a Lua value
 * (the codec's bytes, lcodec.c) in table-constructor syntax, read value by
 * value as far as the kept bytes go and ended with "..." where they were
 * cut; bytes that are not the codec's end it with "<N bytes not
 * decodable>".  Strings are escaped (\", \\, \n, \r, \t, \xNN for the other
 * controls and for bytes that are not valid UTF-8), so the text is valid
 * UTF-8 with no control byte: safe for JSON and for a terminal.  No state;
 * any thread.
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "lcodec.h"
#include "lcodec_preview.h"
#include "lcodec_read.h"

#define PREVIEW_DEPTH 8         /* deeper tables are shown {...} */

struct pv {
    char *out;
    size_t len, cap;            /* cap: room for the text, "..." excluded */
    bool full;                  /* the text reached cap: it ends "..." */
};

static void put(struct pv *w, const char *s, size_t n)
{
    if (w->full)
        return;
    if (n > w->cap - w->len) {
        /* Never end inside an escape (one put, at most 4 bytes) or a
         * UTF-8 sequence. */
        n = n <= 4 ? 0 : w->cap - w->len;
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
        w->full = true;
    }
    memcpy(w->out + w->len, s, n);
    w->len += n;
}

static void puts_(struct pv *w, const char *s)
{
    put(w, s, strlen(s));
}

/* The length of the valid UTF-8 sequence at s (n left), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (len == 0 || n < len)
        return 0;
    uint32_t cp = c & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    /* A C1 control (U+0080-U+009F) is escaped like the C0 ones. */
    return cp < 0xa0 ? 0 : len;
}

/* s[0..n) quoted; without the closing quote when cut. */
static void put_string(struct pv *w, const unsigned char *s, size_t n,
                       bool cut)
{
    put(w, "\"", 1);
    for (size_t i = 0; i < n && !w->full;) {
        unsigned c = s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(w, esc, 2);
        } else if (c >= 0x20 && c < 0x7f) {
            put(w, (const char *)s + i, 1);
        } else if (c == '\n' || c == '\r' || c == '\t') {
            put(w, c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t", 2);
        } else {
            size_t l = c >= 0x80 ? utf8_len(s + i, n - i) : 0;
            if (l > 0) {
                put(w, (const char *)s + i, l);
                i += l;
                continue;
            }
            snprintf(esc, sizeof esc, "\\x%02x", c);
            put(w, esc, 4);
        }
        i++;
    }
    if (!cut)
        put(w, "\"", 1);
}

static bool is_name(const unsigned char *s, size_t n)
{
    if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

/* One value from r; false when the bytes ran out or are not the codec's
 * (*cut says which: ran out). */
static bool put_value(struct pv *w, struct cr *r, int depth, bool *cut)
{
    struct cval v;
    const unsigned char *at = r->p;
    if (seda__l_cr_head(r, &v) != 0) {
        /* A string or a table whose head claims more than was kept: the
         * kept part of a string is shown; a table's elements are read one
         * by one below as far as they go. */
        r->p = at;
        unsigned tag = r->p < r->end ? *r->p : 0;
        if (r->p >= r->end) {
            *cut = true;
            return false;
        }
        size_t left = (size_t)(r->end - r->p) - 1;
        if (tag >= SEDA_TAG_FIXSTR && tag < SEDA_TAG_FIXSTR + 32) {
            put_string(w, r->p + 1, left, true);
            *cut = true;
            return false;
        }
        if (tag >= SEDA_TAG_STR8 && tag < SEDA_TAG_STR8 + 4) {
            size_t n = (size_t)1 << (tag - SEDA_TAG_STR8);
            if (left > n)
                put_string(w, r->p + 1 + n, left - n, true);
            *cut = true;
            return false;
        }
        if (tag == SEDA_TAG_TBL8 || tag == SEDA_TAG_TBL32) {
            size_t n = tag == SEDA_TAG_TBL8 ? 1 : 4;
            if (left < 2 * n) {
                *cut = true;
                return false;
            }
            v.t = CV_TABLE;
            v.narr = n == 1 ? r->p[1] : seda__ld32(r->p + 1);
            v.nrec = n == 1 ? r->p[2] : seda__ld32(r->p + 1 + n);
            r->p += 1 + 2 * n;
        } else {
            /* A number cut in its bytes, or not the codec's bytes. */
            *cut = tag == SEDA_TAG_FLOAT || (tag >= SEDA_TAG_INT8 &&
                                             tag < SEDA_TAG_INT8 + 4);
            return false;
        }
    }
    char num[64];
    switch (v.t) {
    case CV_NIL:
        puts_(w, "nil");
        return true;
    case CV_NULL:
        puts_(w, "seda.null");
        return true;
    case CV_BOOL:
        puts_(w, v.i ? "true" : "false");
        return true;
    case CV_INT:
        snprintf(num, sizeof num, "%" PRId64, v.i);
        puts_(w, num);
        return true;
    case CV_FLOAT:
        if (isnan(v.f))
            snprintf(num, sizeof num, "0/0");
        else if (isinf(v.f))
            snprintf(num, sizeof num, "%smath.huge", v.f < 0 ? "-" : "");
        else {
            snprintf(num, sizeof num, "%.14g", v.f);
            if (!strpbrk(num, ".eEn"))
                strcat(num, ".0");      /* a float reads back as one */
        }
        puts_(w, num);
        return true;
    case CV_STR:
        put_string(w, v.s, v.len, false);
        return true;
    default:
        break;
    }
    /* A table: its array part, then its pairs, as the REPL prints. */
    if (depth >= PREVIEW_DEPTH) {
        puts_(w, "{...}");
        w->full = true;
        *cut = true;
        return false;
    }
    put(w, "{", 1);
    uint64_t n = v.narr + v.nrec;
    for (uint64_t i = 0; i < n && !w->full; i++) {
        if (i > 0)
            put(w, ", ", 2);
        if (i >= v.narr) {
            struct cval k;
            const unsigned char *kat = r->p;
            if (seda__l_cr_head(r, &k) == 0 && k.t == CV_STR &&
                is_name(k.s, k.len)) {
                put(w, (const char *)k.s, k.len);
            } else {
                r->p = kat;
                put(w, "[", 1);
                if (!put_value(w, r, depth + 1, cut))
                    return false;
                put(w, "]", 1);
            }
            put(w, " = ", 3);
        }
        if (!put_value(w, r, depth + 1, cut))
            return false;
    }
    put(w, "}", 1);
    return true;
}

size_t seda__l_codec_preview(const void *p, size_t len, size_t size,
                             int kind, char *out, size_t cap)
{
    char tail[48];
    /* Room kept for the longest ending. */
    struct pv w = { .out = out, .cap = cap > sizeof tail ? cap - sizeof tail
                                                         : 0 };
    bool kept_all = len >= size, cut = false;
    if (kind == SEDA_KIND_RAW) {
        put_string(&w, p, len, !kept_all);
        cut = !kept_all;
    } else {
        struct cr r = { .p = p, .end = (const unsigned char *)p + len };
        bool ok = put_value(&w, &r, 0, &cut);
        if (ok && r.p < r.end) {
            ok = false;
            cut = false;            /* bytes after the value */
        }
        if (!ok && !(cut && !kept_all)) {
            snprintf(tail, sizeof tail, "%s<%zu bytes not decodable>",
                     w.len ? " " : "", (size_t)(r.end - r.p));
            memcpy(out + w.len, tail, strlen(tail));
            w.len += strlen(tail);
            return w.len;
        }
    }
    if (cut || w.full) {
        memcpy(out + w.len, "...", 3);
        w.len += 3;
    }
    return w.len;
}
