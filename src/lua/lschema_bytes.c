/* SPDX-License-Identifier: MIT */
/*
 * lschema_bytes.c -- typed stages: the byte checker, an `accepts` schema
 * checked against a payload's lcodec bytes without Lua (worker hops, C
 * publishers), with the verdicts and messages of the value checker in
 * lschema.c.
 *
 * It mirrors lcodec's decoder: the same "pending" debt (one byte per
 * value an open table still owes), the same depth limit and the same
 * refusals (nil and NaN keys, trailing bytes), so it refuses whatever the
 * decoder refuses.  It uses only the C stack; messages are built only on
 * failure.  The design both checkers share is in lschema.c's header.
 */
#include "lschema.h"
#include "lschema_tree.h"
#include "lpath.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What a tag byte holds, as the checker sees it. */
enum kind { K_BAD, K_NIL, K_BOOL, K_INT, K_FLOAT, K_STR, K_TABLE };

static inline enum kind kind_of(unsigned tag)
{
    if (tag >= SEDA_TAG_FIXINT)
        return K_INT;
    if (tag >= SEDA_TAG_FIXSTR && tag < SEDA_TAG_FIXSTR + 32)
        return K_STR;
    switch (tag) {
    case SEDA_TAG_NIL: case SEDA_TAG_NULL: return K_NIL;
    case SEDA_TAG_FALSE: case SEDA_TAG_TRUE: return K_BOOL;
    case SEDA_TAG_FLOAT: return K_FLOAT;
    case SEDA_TAG_INT8: case SEDA_TAG_INT8 + 1:
    case SEDA_TAG_INT8 + 2: case SEDA_TAG_INT8 + 3:
        return K_INT;
    case SEDA_TAG_STR8: case SEDA_TAG_STR8 + 1:
    case SEDA_TAG_STR8 + 2: case SEDA_TAG_STR8 + 3:
        return K_STR;
    case SEDA_TAG_TBL8: case SEDA_TAG_TBL32: return K_TABLE;
    default: return K_BAD;
    }
}

/* The reader.  As in lcodec's decoder, pending counts the values open
 * tables still owe (each at least one byte) and is kept <= end - p. */
struct bchk {
    const unsigned char *p;   /* next byte to read */
    const unsigned char *end; /* one past the last byte */
    size_t pending;           /* values open tables still owe */
    int depth;                /* tables currently open */
    char *err;                /* message output, borrowed */
    size_t errlen;            /* size of err */
};

/* Bytes that may still be consumed after the debt of open tables. */
static inline size_t avail(const struct bchk *r)
{
    return (size_t)(r->end - r->p) - r->pending;
}

static int malformed(struct bchk *r)
{
    return seda__schema_fail_plain(r->err, r->errlen, "malformed");
}

/* Reads a string value: sets *s and *len and consumes it.  Returns 0, or
 * -1 when the bytes are not a whole string (nothing written). */
static inline int read_str(struct bchk *r, const char **s, size_t *len)
{
    if (avail(r) < 1)
        return -1;
    const unsigned char *p = r->p;
    unsigned tag = p[0];
    uint64_t n;
    size_t w;
    if (tag >= SEDA_TAG_FIXSTR && tag < SEDA_TAG_FIXSTR + 32) {
        n = tag - SEDA_TAG_FIXSTR;
        w = 0;
    } else if (tag >= SEDA_TAG_STR8 && tag <= SEDA_TAG_STR8 + 3) {
        w = (size_t)1 << (tag - SEDA_TAG_STR8);
        if (avail(r) < 1 + w)
            return -1;
        n = w == 1 ? p[1] : w == 2 ? seda__ld16(p + 1)
            : w == 4 ? seda__ld32(p + 1) : seda__ld64(p + 1);
    } else {
        return -1;
    }
    if (n > avail(r) - 1 - w)
        return -1;
    *s = (const char *)p + 1 + w;
    *len = (size_t)n;
    r->p += 1 + w + n;
    return 0;
}

/* Consumes a table header and opens the table: *narr and *nrec receive
 * its counts.  Returns 0, or -1 (malformed) when the header is cut short,
 * the counts exceed what the input can hold, or the table would be nested
 * deeper than the decoder allows. */
static int open_table(struct bchk *r, uint64_t *narr, uint64_t *nrec)
{
    const unsigned char *p = r->p;
    if (p[0] == SEDA_TAG_TBL8) {
        if (avail(r) < 3)
            return -1;
        *narr = p[1];
        *nrec = p[2];
        r->p += 3;
    } else {
        if (avail(r) < 9)
            return -1;
        *narr = seda__ld32(p + 1);
        *nrec = seda__ld32(p + 5);
        r->p += 9;
    }
    if (*narr > INT_MAX || *nrec > INT_MAX ||
        *narr + 2 * *nrec > avail(r) || r->depth == SEDA_CODEC_MAX_DEPTH)
        return -1;
    r->depth++;
    r->pending += (size_t)(*narr + 2 * *nrec);
    return 0;
}

/* Refuses a pair key the decoder would refuse (nil, seda.null, NaN).
 * Returns 0 or -1.  Requires avail(r) >= 1. */
static inline int bad_key(const struct bchk *r)
{
    const unsigned char *p = r->p;
    return p[0] == SEDA_TAG_NIL || p[0] == SEDA_TAG_NULL ||
           (p[0] == SEDA_TAG_FLOAT && avail(r) >= 9 &&
            (seda__ld64(p + 1) & ~(UINT64_C(1) << 63)) >
                UINT64_C(0x7ff) << 52);
}

static int skip_value(struct bchk *r);

/* Skips the body of a table opened by open_table().  Returns 0 or -1. */
static int skip_body(struct bchk *r, uint64_t narr, uint64_t nrec)
{
    for (uint64_t i = 0; i < narr; i++) {
        r->pending--;
        if (skip_value(r) != 0)
            return -1;
    }
    for (uint64_t i = 0; i < nrec; i++) {
        r->pending--;
        if (avail(r) < 1 || bad_key(r) || skip_value(r) != 0)
            return -1;
        r->pending--;
        if (skip_value(r) != 0)
            return -1;
    }
    r->depth--;
    return 0;
}

/* Validates and consumes one value.  Returns 0, or -1 when the bytes are
 * malformed (no message: the caller reports it). */
static int skip_value(struct bchk *r)
{
    if (avail(r) < 1)
        return -1;
    const unsigned char *p = r->p;
    unsigned tag = p[0];
    size_t w;
    const char *s;
    size_t len;

    switch (kind_of(tag)) {
    case K_NIL:
    case K_BOOL:
        r->p++;
        return 0;
    case K_INT:
        w = tag >= SEDA_TAG_FIXINT ? 0 : (size_t)1 << (tag - SEDA_TAG_INT8);
        if (avail(r) < 1 + w)
            return -1;
        r->p += 1 + w;
        return 0;
    case K_FLOAT:
        if (avail(r) < 9)
            return -1;
        r->p += 9;
        return 0;
    case K_STR:
        return read_str(r, &s, &len);
    case K_TABLE: {
        uint64_t narr, nrec;
        if (open_table(r, &narr, &nrec) != 0)
            return -1;
        return skip_body(r, narr, nrec);
    }
    default:
        return -1;
    }
}

/* Names the kind of a value for "got ...". */
static const char *got_kind(enum kind k, const struct node *n)
{
    switch (k) {
    case K_NIL: return "nil";
    case K_BOOL: return "boolean";
    case K_FLOAT: return n->type == T_INTEGER ? "float" : "number";
    case K_INT: return "number";
    case K_STR: return "string";
    default: return "table";
    }
}

/* Appends the path step for the (valid) encoded key at p. */
static void msg_bkey(struct seda_msgbuf *m, const unsigned char *p)
{
    unsigned tag = p[0];
    switch (kind_of(tag)) {
    case K_STR: {
        size_t w = tag >= SEDA_TAG_FIXSTR ? 0
                   : (size_t)1 << (tag - SEDA_TAG_STR8);
        size_t len = w == 0 ? tag - SEDA_TAG_FIXSTR : w == 1 ? p[1]
                     : w == 2 ? (size_t)seda__ld16(p + 1)
                     : w == 4 ? (size_t)seda__ld32(p + 1)
                              : (size_t)seda__ld64(p + 1);
        seda__path_name(m, (const char *)p + 1 + w, len);
        break;
    }
    case K_INT: {
        int64_t v;
        if (tag >= SEDA_TAG_FIXINT)
            v = (int64_t)tag - 0x80;
        else if (tag == SEDA_TAG_INT8)
            v = (int8_t)p[1];
        else if (tag == SEDA_TAG_INT8 + 1)
            v = (int16_t)(uint16_t)seda__ld16(p + 1);
        else if (tag == SEDA_TAG_INT8 + 2)
            v = (int32_t)(uint32_t)seda__ld32(p + 1);
        else
            v = (int64_t)seda__ld64(p + 1);
        seda__path_int(m, (lua_Integer)v);
        break;
    }
    case K_FLOAT: {
        uint64_t u = seda__ld64(p + 1);
        double d;
        memcpy(&d, &u, sizeof d);
        seda__path_float(m, d);
        break;
    }
    case K_BOOL:
        seda__path_buf_str(m, tag == SEDA_TAG_TRUE ? "[true]" : "[false]");
        break;
    default:
        seda__path_buf_str(m, "[{...}]");
        break;
    }
}

/* Writes the strict-mode error for the key at k (or the array index i
 * when k is NULL).  Returns -1. */
static int unexpected(struct bchk *r, const struct path *p,
                      const unsigned char *k, uint64_t i)
{
    struct seda_msgbuf m;
    seda__path_buf_init(&m, r->err, r->errlen);
    seda__schema_msg_path(&m, p);
    if (k != NULL)
        msg_bkey(&m, k);
    else
        seda__path_int(&m, (lua_Integer)i);
    seda__path_buf_str(&m, ": unexpected field (strict)");
    return -1;
}

static int bcheck_node(struct bchk *r, const struct node *n,
                       const struct path *p);

/* Checks a table (r->p at its tag) against the table schema n.  Returns 0
 * or -1 (message set). */
static int bcheck_table(struct bchk *r, const struct node *n,
                        const struct path *p)
{
    uint64_t narr, nrec;
    bits_t seen, present;
    unsigned npresent = 0;

    if (open_table(r, &narr, &nrec) != 0)
        return malformed(r);
    /* Keys 1..narr: never schema fields, only strict mode cares. */
    for (uint64_t i = 1; i <= narr; i++) {
        r->pending--;
        if (avail(r) < 1)
            return malformed(r);
        if (n->strict && r->p[0] != SEDA_TAG_NIL)
            return unexpected(r, p, NULL, i);
        if (skip_value(r) != 0)
            return malformed(r);
    }
    memset(&seen, 0, sizeof seen);
    memset(&present, 0, sizeof present);
    for (uint64_t j = 0; j < nrec; j++) {
        const unsigned char *k = r->p;
        const char *s;
        size_t len;
        int i = -1;

        r->pending--;
        if (avail(r) < 1 || bad_key(r))
            return malformed(r);
        if (kind_of(k[0]) == K_STR) {
            if (read_str(r, &s, &len) != 0)
                return malformed(r);
            if (n->nfields > 0)
                i = lookup(n, s, len);
        } else if (skip_value(r) != 0) {
            return malformed(r);
        }
        r->pending--;
        if (avail(r) < 1)
            return malformed(r);
        if (r->p[0] == SEDA_TAG_NIL) { /* absent once decoded */
            if (i >= 0) {
                if (bit_get(&seen, i))
                    return malformed(r);
                bit_set(&seen, i);
            }
            r->p++;
            continue;
        }
        if (i >= 0) {
            const struct field *f = &n->fields[i];
            struct path sub = {p, f};
            if (bit_get(&seen, i))
                return malformed(r);
            bit_set(&seen, i);
            bit_set(&present, i);
            npresent += !f->node.optional;
            if (bcheck_node(r, &f->node, &sub) != 0)
                return -1;
        } else if (n->strict) {
            return unexpected(r, p, k, 0);
        } else if (skip_value(r) != 0) {
            return malformed(r);
        }
    }
    r->depth--;
    if (npresent < n->nrequired)
        return seda__schema_fail_missing(r->err, r->errlen, p, n, &present);
    return 0;
}

/* Checks one value (r->p at its tag) against n and consumes it.  Returns
 * 0 or -1 (message set). */
static int bcheck_node(struct bchk *r, const struct node *n,
                       const struct path *p)
{
    if (avail(r) < 1)
        return malformed(r);
    enum kind k = kind_of(r->p[0]);
    int ok;

    if (k == K_BAD)
        return malformed(r);
    if (k == K_NIL) {
        if (!n->optional)
            return seda__schema_fail_type(r->err, r->errlen, p, n, "nil");
        r->p++;
        return 0;
    }
    switch (n->type) {
    case T_ANY:
        ok = 1;
        break;
    case T_STRING:
        ok = k == K_STR;
        break;
    case T_INTEGER:
        ok = k == K_INT;
        break;
    case T_NUMBER:
        ok = k == K_INT || k == K_FLOAT;
        break;
    case T_BOOLEAN:
        ok = k == K_BOOL;
        break;
    case T_TABLE:
        ok = k == K_TABLE;
        break;
    default: /* T_SCHEMA */
        if (k == K_TABLE)
            return bcheck_table(r, n, p);
        ok = 0;
        break;
    }
    if (!ok)
        return seda__schema_fail_type(r->err, r->errlen, p, n, got_kind(k, n));
    return skip_value(r) == 0 ? 0 : malformed(r);
}

int seda__schema_check_bytes(const struct seda_schema *s, const void *p,
                             size_t len, int kind, char *err, size_t errlen)
{
    struct bchk r;

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    r.p = p;
    r.end = len > 0 ? r.p + len : r.p; /* no arithmetic on a NULL p */
    r.pending = 0;
    r.depth = 0;
    r.err = err;
    r.errlen = errlen;
    if (kind == SEDA_SCHEMA_RAW) {
        const struct node *n = &s->root;
        if (n->type == T_ANY || n->type == T_STRING)
            return 0;
        return seda__schema_fail_type(err, errlen, NULL, n, "string");
    }
    if (kind != SEDA_SCHEMA_CODEC)
        return malformed(&r);
    if (bcheck_node(&r, &s->root, NULL) != 0)
        return -1;
    return r.p == r.end ? 0 : malformed(&r);
}
