/* SPDX-License-Identifier: MIT */
/*
 * wire.c -- the envelope body, the completion message and the header
 * escaping (the format is described in wire.h).
 *
 * DESIGN
 *   Decoding reads untrusted bytes (anyone may publish on a stage's
 *   subject), so every read is checked against the end of the body, and
 *   decoding runs in two passes: the first validates and measures, the
 *   second copies the strings, NUL-terminated, into one allocation.  A
 *   refusal names what was wrong and allocates nothing.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/seda_int.h"
#include "wire.h"

/* ---- buffers ---- */

int seda__rbuf_put(struct rbuf *b, const void *p, size_t n)
{
    if (n > SIZE_MAX / 2 - b->len)
        return SEDA_ENOMEM;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *np = seda__realloc(b->p, cap);
        if (!np)
            return SEDA_ENOMEM;
        b->p = np;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

void seda__rbuf_free(struct rbuf *b)
{
    seda__free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- writing ---- */

static int put_u8(struct rbuf *b, unsigned v)
{
    unsigned char c = (unsigned char)v;
    return seda__rbuf_put(b, &c, 1);
}

static int put_uv(struct rbuf *b, uint64_t v)
{
    unsigned char tmp[10];
    int n = 0;
    do {
        tmp[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[n] |= 0x80;
        n++;
    } while (v);
    return seda__rbuf_put(b, tmp, (size_t)n);
}

static int put_str(struct rbuf *b, const char *s)
{
    size_t n = strlen(s);
    int rc = put_uv(b, n);
    return rc ? rc : seda__rbuf_put(b, s, n);
}

static int put_le(struct rbuf *b, uint64_t v, int bytes)
{
    unsigned char tmp[8];
    for (int i = 0; i < bytes; i++)
        tmp[i] = (unsigned char)(v >> (8 * i));
    return seda__rbuf_put(b, tmp, (size_t)bytes);
}

int seda__rw_encode(struct rbuf *b, const struct rw_env *e)
{
    if (!e->id || !*e->id || strlen(e->id) >= SEDA_ID_MAX ||
        e->kind < 0 || e->kind > 255 || e->priority < 0 ||
        e->priority > 2 || e->attempts < 1 || e->attempts > 65535 ||
        e->rhop < 1 || e->nslip < 0 || e->nslip > SEDA_RW_MAX_SLIP ||
        (e->nslip && !e->slip) || (e->plen && !e->payload) ||
        (e->origin && !*e->origin))
        return SEDA_EINVAL;
    for (int i = 0; i < e->nslip; i++)
        if (!seda__valid_name(e->slip[i]))
            return SEDA_EINVAL;
    size_t start = b->len;
    unsigned flags = (e->origin ? 1u : 0u) | (e->sender ? 2u : 0u);
    int rc = seda__rbuf_put(b, "SDR", 3);
    rc = rc ? rc : put_u8(b, SEDA_RW_VERSION);
    rc = rc ? rc : put_u8(b, flags);
    rc = rc ? rc : put_u8(b, (unsigned)e->kind);
    rc = rc ? rc : put_u8(b, (unsigned)e->priority);
    rc = rc ? rc : put_le(b, (uint64_t)e->attempts, 2);
    rc = rc ? rc : put_le(b, e->rhop, 4);
    rc = rc ? rc : put_str(b, e->id);
    if (e->origin)
        rc = rc ? rc : put_str(b, e->origin);
    if (e->sender)
        rc = rc ? rc : put_str(b, e->sender);
    rc = rc ? rc : put_uv(b, (uint64_t)e->nslip);
    for (int i = 0; i < e->nslip && !rc; i++)
        rc = put_str(b, e->slip[i]);
    rc = rc ? rc : seda__rbuf_put(b, e->payload, e->plen);
    if (rc)
        b->len = start;
    return rc;
}

int seda__rw_done_encode(struct rbuf *b, const struct rw_done *d)
{
    if (!d->id || !*d->id || !d->stage || d->outcome < 0 ||
        d->outcome > 2 || d->kind < 0 || d->kind > 255 || d->nh < 0 ||
        d->nh > SEDA_RW_MAX_HEADERS || (d->nh && !d->hdr) ||
        (d->plen && !d->payload))
        return SEDA_EINVAL;
    size_t start = b->len;
    int rc = seda__rbuf_put(b, "SDC", 3);
    rc = rc ? rc : put_u8(b, SEDA_RW_VERSION);
    rc = rc ? rc : put_u8(b, (unsigned)d->outcome);
    rc = rc ? rc : put_u8(b, (unsigned)d->kind);
    rc = rc ? rc : put_u8(b, d->sender ? 2u : 0u);
    rc = rc ? rc : put_str(b, d->id);
    rc = rc ? rc : put_str(b, d->stage);
    if (d->sender)
        rc = rc ? rc : put_str(b, d->sender);
    rc = rc ? rc : put_uv(b, (uint64_t)d->nh);
    for (int i = 0; i < 2 * d->nh && !rc; i++)
        rc = put_str(b, d->hdr[i]);
    rc = rc ? rc : seda__rbuf_put(b, d->payload, d->plen);
    if (rc)
        b->len = start;
    return rc;
}

/* ---- reading ---- */

struct rd {
    const unsigned char *p;
    size_t len;
    size_t pos;
    const char *err;            /* first problem, static text */
};

static bool rd_fail(struct rd *r, const char *why)
{
    if (!r->err)
        r->err = why;
    return false;
}

static bool rd_u8(struct rd *r, unsigned *v)
{
    if (r->pos + 1 > r->len)
        return rd_fail(r, "truncated");
    *v = r->p[r->pos++];
    return true;
}

static bool rd_le(struct rd *r, int bytes, uint64_t *v)
{
    if (r->len - r->pos < (size_t)bytes)
        return rd_fail(r, "truncated");
    *v = 0;
    for (int i = 0; i < bytes; i++)
        *v |= (uint64_t)r->p[r->pos + (size_t)i] << (8 * i);
    r->pos += (size_t)bytes;
    return true;
}

static bool rd_uv(struct rd *r, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        unsigned c;
        if (!rd_u8(r, &c))
            return false;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return true;
    }
    return rd_fail(r, "a length is malformed");
}

/* A string: its offset and length in the body; it may not hold a NUL. */
static bool rd_str(struct rd *r, size_t *off, size_t *n, size_t max,
                   const char *what)
{
    uint64_t len;
    if (!rd_uv(r, &len))
        return false;
    if (len > r->len - r->pos)
        return rd_fail(r, "truncated");
    if (len > max)
        return rd_fail(r, what);
    if (memchr(r->p + r->pos, 0, (size_t)len))
        return rd_fail(r, what);
    *off = r->pos;
    *n = (size_t)len;
    r->pos += (size_t)len;
    return true;
}

/* The second pass: strings copied, NUL-terminated, into one block. */
struct sink {
    char *mem;
    size_t used;
};

static const char *sink_str(struct sink *s, const struct rd *r, size_t off,
                            size_t n)
{
    char *d = s->mem + s->used;
    memcpy(d, r->p + off, n);
    d[n] = '\0';
    s->used += n + 1;
    return d;
}

static bool check_magic(struct rd *r, const char *magic, const char *what,
                        char *err, size_t errlen)
{
    if (r->len < 4 || memcmp(r->p, magic, 3) != 0) {
        snprintf(err, errlen, "not a seda %s (no %s header)", what, magic);
        return false;
    }
    if (r->p[3] != SEDA_RW_VERSION) {
        snprintf(err, errlen, "%s version %u unknown (this build reads %d)",
                 what, r->p[3], SEDA_RW_VERSION);
        return false;
    }
    r->pos = 4;
    return true;
}

int seda__rw_is_envelope(const void *body, size_t len)
{
    return len >= 4 && memcmp(body, "SDR", 3) == 0;
}

int seda__rw_decode(const void *body, size_t len, struct rw_env *out,
                    void **mem, char *err, size_t errlen)
{
    struct rd r = { body, len, 0, NULL };
    *mem = NULL;
    memset(out, 0, sizeof *out);
    if (!check_magic(&r, "SDR", "envelope", err, errlen))
        return -1;
    unsigned flags = 0, kind = 0, prio = 0;
    uint64_t att = 0, rhop = 0, nslip = 0;
    size_t id_off = 0, id_n = 0, or_off = 0, or_n = 0, se_off = 0, se_n = 0;
    size_t slip0 = 0, strings = 0;
    bool ok = rd_u8(&r, &flags) && rd_u8(&r, &kind) && rd_u8(&r, &prio) &&
              rd_le(&r, 2, &att) && rd_le(&r, 4, &rhop) &&
              rd_str(&r, &id_off, &id_n, SEDA_ID_MAX - 1,
                     "id is too long or holds a NUL");
    if (ok && (flags & ~3u))
        ok = rd_fail(&r, "unknown flags");
    if (ok && id_n == 0)
        ok = rd_fail(&r, "id is empty");
    if (ok && prio > 2)
        ok = rd_fail(&r, "priority out of range");
    if (ok && (att < 1 || rhop < 1))
        ok = rd_fail(&r, "attempts or hop count is 0");
    if (ok && (flags & 1))
        ok = rd_str(&r, &or_off, &or_n, 255, "origin is malformed") &&
             (or_n > 0 || rd_fail(&r, "origin is empty"));
    if (ok && (flags & 2))
        ok = rd_str(&r, &se_off, &se_n, SIZE_MAX, "sender holds a NUL");
    if (ok)
        ok = rd_uv(&r, &nslip);
    if (ok && nslip > SEDA_RW_MAX_SLIP)
        ok = rd_fail(&r, "slip is too long");
    slip0 = r.pos;
    for (uint64_t i = 0; ok && i < nslip; i++) {
        size_t o, n;
        ok = rd_str(&r, &o, &n, SEDA_NAME_MAX, "slip: not a stage name");
        if (ok) {
            char name[SEDA_NAME_MAX + 1];
            memcpy(name, r.p + o, n);
            name[n] = '\0';
            if (!seda__valid_name(name))
                ok = rd_fail(&r, "slip: not a stage name");
            strings += n + 1;
        }
    }
    if (!ok) {
        snprintf(err, errlen, "envelope: %s", r.err);
        return -1;
    }
    size_t ptrs = sizeof(char *) * (size_t)(nslip ? nslip : 1);
    struct sink s = { seda__malloc(ptrs + strings + id_n + or_n + se_n + 3),
                      ptrs };
    if (!s.mem) {
        snprintf(err, errlen, "envelope: out of memory");
        return -1;
    }
    const char **slip = (const char **)(void *)s.mem;
    out->id = sink_str(&s, &r, id_off, id_n);
    out->origin = (flags & 1) ? sink_str(&s, &r, or_off, or_n) : NULL;
    out->sender = (flags & 2) ? sink_str(&s, &r, se_off, se_n) : NULL;
    struct rd again = { body, len, slip0, NULL };
    for (uint64_t i = 0; i < nslip; i++) {
        size_t o, n;
        rd_str(&again, &o, &n, SEDA_NAME_MAX, "");
        slip[i] = sink_str(&s, &again, o, n);
    }
    out->kind = (int)kind;
    out->priority = (int)prio;
    out->attempts = (int)att;
    out->rhop = (uint32_t)rhop;
    out->nslip = (int)nslip;
    out->slip = nslip ? slip : NULL;
    out->payload = r.p + r.pos;
    out->plen = len - r.pos;
    *mem = s.mem;
    return 0;
}

int seda__rw_done_decode(const void *body, size_t len, struct rw_done *out,
                         void **mem, char *err, size_t errlen)
{
    struct rd r = { body, len, 0, NULL };
    *mem = NULL;
    memset(out, 0, sizeof *out);
    if (!check_magic(&r, "SDC", "completion", err, errlen))
        return -1;
    unsigned outcome = 0, kind = 0, flags = 0;
    size_t id_off = 0, id_n = 0, st_off = 0, st_n = 0, se_off = 0, se_n = 0;
    uint64_t nh = 0;
    size_t h0 = 0, strings = 0;
    bool ok = rd_u8(&r, &outcome) && rd_u8(&r, &kind) && rd_u8(&r, &flags) &&
              rd_str(&r, &id_off, &id_n, SEDA_ID_MAX - 1,
                     "id is too long or holds a NUL") &&
              rd_str(&r, &st_off, &st_n, SEDA_NAME_MAX,
                     "stage is not a stage name");
    if (ok && (outcome > 2 || (flags & ~2u) || id_n == 0))
        ok = rd_fail(&r, "outcome, flags or id out of range");
    if (ok && (flags & 2))
        ok = rd_str(&r, &se_off, &se_n, SIZE_MAX, "sender holds a NUL");
    if (ok)
        ok = rd_uv(&r, &nh);
    if (ok && nh > SEDA_RW_MAX_HEADERS)
        ok = rd_fail(&r, "too many headers");
    h0 = r.pos;
    for (uint64_t i = 0; ok && i < 2 * nh; i++) {
        size_t o, n;
        ok = rd_str(&r, &o, &n, SIZE_MAX, "a header holds a NUL");
        strings += n + 1;
    }
    if (!ok) {
        snprintf(err, errlen, "completion: %s", r.err);
        return -1;
    }
    size_t ptrs = sizeof(char *) * (size_t)(nh ? 2 * nh : 1);
    struct sink s = { seda__malloc(ptrs + strings + id_n + st_n + se_n + 3),
                      ptrs };
    if (!s.mem) {
        snprintf(err, errlen, "completion: out of memory");
        return -1;
    }
    const char **hdr = (const char **)(void *)s.mem;
    out->id = sink_str(&s, &r, id_off, id_n);
    out->stage = sink_str(&s, &r, st_off, st_n);
    out->sender = (flags & 2) ? sink_str(&s, &r, se_off, se_n) : NULL;
    struct rd again = { body, len, h0, NULL };
    for (uint64_t i = 0; i < 2 * nh; i++) {
        size_t o, n;
        rd_str(&again, &o, &n, SIZE_MAX, "");
        hdr[i] = sink_str(&s, &again, o, n);
    }
    out->outcome = (int)outcome;
    out->kind = (int)kind;
    out->nh = (int)nh;
    out->hdr = nh ? hdr : NULL;
    out->payload = r.p + r.pos;
    out->plen = len - r.pos;
    *mem = s.mem;
    return 0;
}

/* ---- header escaping ---- */

static const char hexd[] = "0123456789ABCDEF";

static int put_esc(struct rbuf *b, unsigned char c)
{
    char e[3] = { '%', hexd[c >> 4], hexd[c & 15] };
    return seda__rbuf_put(b, e, 3);
}

static bool key_plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

int seda__rw_key_escape(struct rbuf *b, const char *key)
{
    size_t start = b->len;
    bool nats = strncasecmp(key, "nats-", 5) == 0;
    int rc = 0;
    for (const unsigned char *p = (const unsigned char *)key; *p && !rc;
         p++) {
        if (key_plain(*p) && !(nats && p == (const unsigned char *)key))
            rc = seda__rbuf_put(b, p, 1);
        else
            rc = put_esc(b, *p);
    }
    rc = rc ? rc : seda__rbuf_put(b, "~", 2);   /* '~' and the NUL */
    if (rc)
        b->len = start;
    return rc;
}

int seda__rw_val_escape(struct rbuf *b, const char *val)
{
    size_t start = b->len, n = strlen(val);
    int rc = 0;
    if (n == 0)
        rc = seda__rbuf_put(b, "%", 2);
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char c = (unsigned char)val[i];
        bool blank = c == ' ' || c == '\t';
        bool edge = i == 0 || i == n - 1;
        if (c < 0x20 || c == 0x7f || c == '%' || (blank && edge))
            rc = put_esc(b, c);
        else
            rc = seda__rbuf_put(b, &c, 1);
    }
    if (n && !rc)
        rc = seda__rbuf_put(b, "", 1);
    if (rc)
        b->len = start;
    return rc;
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Unescape s[0..n) into b with a NUL; -1 on a bad or NUL escape. */
static int unescape(struct rbuf *b, const char *s, size_t n)
{
    size_t start = b->len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            int hi = n - i >= 3 ? hexv(s[i + 1]) : -1;
            int lo = n - i >= 3 ? hexv(s[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                b->len = start;
                return -1;
            }
            c = (unsigned char)(hi * 16 + lo);
            i += 2;
        }
        if (seda__rbuf_put(b, &c, 1)) {
            b->len = start;
            return SEDA_ENOMEM;
        }
    }
    if (seda__rbuf_put(b, "", 1)) {
        b->len = start;
        return SEDA_ENOMEM;
    }
    return 0;
}

int seda__rw_key_unescape(struct rbuf *b, const char *nk)
{
    size_t n = strlen(nk);
    if (n == 0 || nk[n - 1] != '~')
        return 1;
    if (memchr(nk, '~', n - 1))
        return -1;
    return unescape(b, nk, n - 1);
}

int seda__rw_val_unescape(struct rbuf *b, const char *nv)
{
    if (strcmp(nv, "%") == 0)
        return seda__rbuf_put(b, "", 1);
    return unescape(b, nv, strlen(nv));
}
