/* SPDX-License-Identifier: MIT */
/*
 * lschema.c -- typed stages: the `accepts` schema compiler and checkers.
 *
 * A stage that declares `accepts` refuses payloads of the wrong shape
 * before they are queued, so handlers can rely on the types they were
 * promised.  This file compiles the Lua schema value into a small C tree
 * and checks payloads against it, either as Lua values (publish path) or
 * as lcodec bytes (worker hops, C publishers), with identical verdicts and
 * messages.
 *
 * DESIGN
 *   - Compiled form: a tree of `struct node`.  A table schema owns a
 *     malloc'd array of fields sorted by name (bytewise, shorter first on
 *     a common prefix), so a key is found by a short scan (up to 8
 *     fields) or binary search, and missing fields are reported in a
 *     fixed order.  The tree is immutable after
 *     compile and holds no Lua references: any thread may check with it.
 *   - Both checkers walk the payload once, in its own order (lua_next for
 *     a value, byte order for an encoding, which is the lua_next order of
 *     the encoding state), look each string key up in the schema, check
 *     the fields they meet, and mark them in a bitmap on the C stack
 *     (SEDA_SCHEMA_MAX_FIELDS bits per open table schema).  Missing
 *     required fields are found from the bitmap afterwards.  Walking the
 *     payload rather than the schema costs O(payload), which the encoder
 *     pays right after anyway, and needs no key strings to be created, so
 *     check_value never allocates or raises.
 *   - The byte checker mirrors lcodec's decoder: it keeps the same
 *     "pending" debt (one byte per value an open table still owes), the
 *     same depth limit and the same refusals (nil and NaN keys, trailing
 *     bytes), so it refuses whatever the decoder refuses.  It uses only
 *     the C stack; messages are built only on failure.
 *   - Duplicate keys: the encoder never writes a key twice, but hostile
 *     bytes may, and the decoder keeps the last one.  A schema field seen
 *     twice is therefore refused as malformed, and a nil value counts as
 *     absent, so an accepted encoding always decodes to a conforming
 *     value.  Duplicates of keys outside the schema do not matter.
 *   - The wire constants are lcodec.h's (SEDA_TAG_*), shared with the
 *     codec; tests/lua/test_schema.c round-trips payloads through
 *     seda__codec_encode to keep the two in step.  The path notation of messages is
 *     lpath.c's, shared with lcodec.c, so both print the same paths.
 *
 * Sections: schema tree, compiler, value checker, byte checker.
 */
#include "lschema.h"
#include "lpath.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- schema tree ---- */

enum type {
    T_ANY,     /* anything but nil */
    T_STRING,
    T_INTEGER, /* the integer subtype only; 2.0 is a float */
    T_NUMBER,  /* integer or float */
    T_BOOLEAN,
    T_TABLE,   /* any table */
    T_SCHEMA   /* a table checked field by field */
};

static const char *const type_names[] = {
    "any", "string", "integer", "number", "boolean", "table", "table"
};

struct field;

struct node {
    unsigned char type;     /* enum type */
    unsigned char optional; /* 1: nil or absent is accepted too */
    unsigned char strict;   /* T_SCHEMA: keys not listed are errors */
    unsigned nfields;       /* T_SCHEMA: entries in fields */
    unsigned nrequired;     /* T_SCHEMA: fields that are not optional */
    struct field *fields;   /* T_SCHEMA: sorted by name; NULL if none */
};

struct field {
    char *name;       /* malloc'd, NUL-terminated (may hold NULs) */
    size_t len;       /* bytes in name */
    struct node node; /* what the field must hold */
};

struct seda_schema {
    struct node root; /* applies to the payload itself */
};

/* The path from the payload to the value being checked: one entry per
 * schema field descended into, linked from the innermost. */
struct path {
    const struct path *up; /* enclosing field, NULL at the payload */
    const struct field *f; /* the field */
};

static void node_free(struct node *n)
{
    for (unsigned i = 0; i < n->nfields; i++) {
        free(n->fields[i].name);
        node_free(&n->fields[i].node);
    }
    free(n->fields);
}

void seda__schema_free(struct seda_schema *s)
{
    if (s == NULL)
        return;
    node_free(&s->root);
    free(s);
}

/* Orders names bytewise, a prefix before the longer name. */
static int name_cmp(const char *a, size_t la, const char *b, size_t lb)
{
    int c = memcmp(a, b, la < lb ? la : lb);
    if (c != 0)
        return c;
    return la < lb ? -1 : la > lb;
}

static int field_cmp(const void *a, const void *b)
{
    const struct field *x = a, *y = b;
    return name_cmp(x->name, x->len, y->name, y->len);
}

/* Returns the index of the field named s[0..len) in n, or -1.  Small
 * schemas, the common case, are scanned: comparing lengths first rejects
 * most fields without a memcmp call. */
static inline int lookup(const struct node *n, const char *s, size_t len)
{
    enum { SCAN_MAX = 8 };
    if (n->nfields <= SCAN_MAX) {
        for (unsigned i = 0; i < n->nfields; i++) {
            const struct field *f = &n->fields[i];
            if (f->len == len && (len == 0 || (f->name[0] == s[0] &&
                                  memcmp(f->name, s, len) == 0)))
                return (int)i;
        }
        return -1;
    }
    int lo = 0, hi = (int)n->nfields - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const struct field *f = &n->fields[mid];
        int c = name_cmp(s, len, f->name, f->len);
        if (c == 0)
            return mid;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return -1;
}

/* One bit per field of an open table schema. */
typedef struct {
    uint64_t w[SEDA_SCHEMA_MAX_FIELDS / 64];
} bits_t;

static inline void bit_set(bits_t *b, int i)
{
    b->w[i / 64] |= UINT64_C(1) << (i % 64);
}

static inline int bit_get(const bits_t *b, int i)
{
    return (int)(b->w[i / 64] >> (i % 64) & 1);
}

/* Writes "type: payload<path>" to m. */
static void msg_path(struct seda_msgbuf *m, const struct path *p)
{
    if (p == NULL) {
        seda__path_buf_str(m, "type: payload");
        return;
    }
    msg_path(m, p->up);
    seda__path_name(m, p->f->name, p->f->len);
}

/* Writes "type: payload<path>: expected <t>, got <got>".  Returns -1. */
static int fail_type(char *err, size_t errlen, const struct path *p,
                     const struct node *n, const char *got)
{
    struct seda_msgbuf m;
    seda__path_buf_init(&m, err, errlen);
    msg_path(&m, p);
    seda__path_buf_str(&m, ": expected ");
    seda__path_buf_str(&m, type_names[n->type]);
    seda__path_buf_str(&m, ", got ");
    seda__path_buf_str(&m, got);
    return -1;
}

/* Writes "type: payload<path>.<first missing>: missing (expected <t>)",
 * naming the first required field of n not marked in seen.  Returns -1. */
static int fail_missing(char *err, size_t errlen, const struct path *p,
                        const struct node *n, const bits_t *seen)
{
    for (unsigned i = 0; i < n->nfields; i++) {
        const struct field *f = &n->fields[i];
        if (f->node.optional || bit_get(seen, (int)i))
            continue;
        struct path sub = {p, f};
        struct seda_msgbuf m;
        seda__path_buf_init(&m, err, errlen);
        msg_path(&m, &sub);
        seda__path_buf_str(&m, ": missing (expected ");
        seda__path_buf_str(&m, type_names[f->node.type]);
        seda__path_buf_str(&m, ")");
        return -1;
    }
    return -1; /* not reached: the caller counted a missing field */
}

/* Writes "type: payload: <what>".  Returns -1. */
static int fail_plain(char *err, size_t errlen, const char *what)
{
    struct seda_msgbuf m;
    seda__path_buf_init(&m, err, errlen);
    seda__path_buf_str(&m, "type: payload: ");
    seda__path_buf_str(&m, what);
    return -1;
}

/* ---- compiler ---- */

struct comp {
    lua_State *L;
    char *err;                              /* message output, borrowed */
    size_t errlen;                          /* size of err */
    unsigned char strict;                   /* the strict flag */
    int depth;                              /* table schemas open */
    struct seda_msgbuf path;                /* "accepts..." so far */
    char pathbuf[128];                      /* storage for path */
    const void *open[SEDA_CODEC_MAX_DEPTH]; /* tables on the path */
};

/* Appends the path to m, ending in "..." when it was cut short. */
static void msg_prefix(const struct comp *c, struct seda_msgbuf *m)
{
    seda__path_buf_add(m, c->path.p, c->path.n);
    if (c->path.n == sizeof c->pathbuf - 1)
        seda__path_buf_str(m, "...");
}

/* Writes "<path>: <what>" to c->err.  Returns -1. */
static int cfail(struct comp *c, const char *what)
{
    struct seda_msgbuf m;
    seda__path_buf_init(&m, c->err, c->errlen);
    msg_prefix(c, &m);
    seda__path_buf_str(&m, ": ");
    seda__path_buf_str(&m, what);
    return -1;
}

/* Parses a type name into n.  Returns 0, or -1 with the message set. */
static int compile_name(struct comp *c, const char *s, size_t len,
                        struct node *n)
{
    n->optional = len > 0 && s[len - 1] == '?';
    if (n->optional)
        len--;
    for (int t = T_ANY; t <= T_TABLE; t++) {
        if (strlen(type_names[t]) == len &&
            memcmp(type_names[t], s, len) == 0) {
            n->type = (unsigned char)t;
            return 0;
        }
    }
    struct seda_msgbuf m;
    seda__path_buf_init(&m, c->err, c->errlen);
    msg_prefix(c, &m);
    seda__path_buf_str(&m, ": unknown type '");
    seda__path_buf_add(&m, s, len);
    seda__path_buf_str(&m, "'");
    return -1;
}

static int compile_node(struct comp *c, int idx, struct node *n);

/* Compiles the table schema at absolute index idx into n.  Returns 0, or
 * -1 with the message set and n holding what was built so far (for
 * node_free).  The stack is unchanged on return. */
static int compile_table(struct comp *c, int idx, struct node *n)
{
    lua_State *L = c->L;
    const void *t = lua_topointer(L, idx);
    int top = lua_gettop(L);

    n->type = T_SCHEMA;
    n->strict = c->strict;
    for (int i = 0; i < c->depth; i++)
        if (c->open[i] == t)
            return cfail(c, "cyclic schema");
    if (c->depth == SEDA_CODEC_MAX_DEPTH)
        return cfail(c, "nested deeper than 200 levels");
    if (!lua_checkstack(L, 3))
        return cfail(c, "Lua stack overflow");

    /* First pass: count, and refuse keys that are not names. */
    size_t count = 0;
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            size_t n0 = c->path.n;
            seda__path_key(&c->path, L, -2);
            cfail(c, "field names must be strings");
            c->path.n = n0;
            lua_settop(L, top);
            return -1;
        }
        count++;
        lua_pop(L, 1);
    }
    if (count > SEDA_SCHEMA_MAX_FIELDS)
        return cfail(c, "more than 256 fields");
    if (count > 0) {
        n->fields = calloc(count, sizeof *n->fields);
        if (n->fields == NULL)
            return cfail(c, "out of memory");
    }

    c->open[c->depth++] = t;
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        size_t len;
        const char *s = lua_tolstring(L, -2, &len);
        struct field *f = &n->fields[n->nfields];
        f->name = malloc(len + 1);
        if (f->name == NULL) {
            lua_settop(L, top);
            return cfail(c, "out of memory");
        }
        memcpy(f->name, s, len);
        f->name[len] = '\0';
        f->len = len;
        n->nfields++;
        size_t n0 = c->path.n;
        seda__path_name(&c->path, s, len);
        int rc = compile_node(c, lua_gettop(L), &f->node);
        c->path.n = n0;
        c->path.p[n0] = '\0';
        if (rc != 0) {
            lua_settop(L, top);
            return -1;
        }
        if (!f->node.optional)
            n->nrequired++;
        lua_pop(L, 1);
    }
    c->depth--;
    if (n->nfields > 1)
        qsort(n->fields, n->nfields, sizeof *n->fields, field_cmp);
    return 0;
}

/* Compiles the schema value at absolute index idx into n.  Returns 0 or
 * -1 as compile_table() does. */
static int compile_node(struct comp *c, int idx, struct node *n)
{
    switch (lua_type(c->L, idx)) {
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(c->L, idx, &len);
        return compile_name(c, s, len, n);
    }
    case LUA_TTABLE:
        return compile_table(c, idx, n);
    default:
        return cfail(c, c->depth == 0 ? "must be a type name or a table"
                                      : "expected a type name or a table");
    }
}

struct seda_schema *seda__schema_compile(lua_State *L, int idx, bool strict,
                                         char *err, size_t errlen)
{
    struct comp *c = malloc(sizeof *c); /* ~2 KiB: keep it off the stack */
    struct seda_schema *s = calloc(1, sizeof *s);

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (c == NULL || s == NULL) {
        struct seda_msgbuf m;
        seda__path_buf_init(&m, err, errlen);
        seda__path_buf_str(&m, "accepts: out of memory");
        free(c);
        free(s);
        return NULL;
    }
    c->L = L;
    c->err = err;
    c->errlen = errlen;
    c->strict = strict;
    c->depth = 0;
    seda__path_buf_init(&c->path, c->pathbuf, sizeof c->pathbuf);
    seda__path_buf_str(&c->path, "accepts");
    int rc = compile_node(c, lua_absindex(L, idx), &s->root);
    free(c);
    if (rc != 0) {
        seda__schema_free(s);
        return NULL;
    }
    return s;
}

/* ---- value checker ---- */

struct vchk {
    lua_State *L;
    char *err;     /* message output, borrowed */
    size_t errlen; /* size of err */
};

/* Names the type of the Lua value at idx for "got ...". */
static const char *got_lua(lua_State *L, int idx, const struct node *n)
{
    if (n->type == T_INTEGER && lua_type(L, idx) == LUA_TNUMBER &&
        !lua_isinteger(L, idx))
        return "float";
    return lua_typename(L, lua_type(L, idx));
}

static int vcheck_node(struct vchk *c, const struct node *n, int idx,
                       const struct path *p);

/* Checks the table at absolute index idx against the table schema n.
 * Returns 0 or -1 (message set); the stack is unchanged on return. */
static int vcheck_table(struct vchk *c, const struct node *n, int idx,
                        const struct path *p)
{
    lua_State *L = c->L;
    int top = lua_gettop(L);
    bits_t seen;
    unsigned nseen = 0;

    if (!lua_checkstack(L, 2))
        return fail_plain(c->err, c->errlen, "nested too deeply");
    memset(&seen, 0, sizeof seen);
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        int i = -1;
        if (lua_type(L, top + 1) == LUA_TSTRING && n->nfields > 0) {
            size_t len;
            const char *s = lua_tolstring(L, top + 1, &len);
            i = lookup(n, s, len);
        }
        if (i >= 0) {
            const struct field *f = &n->fields[i];
            struct path sub = {p, f};
            bit_set(&seen, i);
            nseen += !f->node.optional;
            if (vcheck_node(c, &f->node, top + 2, &sub) != 0) {
                lua_settop(L, top);
                return -1;
            }
        } else if (n->strict) {
            struct seda_msgbuf m;
            seda__path_buf_init(&m, c->err, c->errlen);
            msg_path(&m, p);
            seda__path_key(&m, L, top + 1);
            seda__path_buf_str(&m, ": unexpected field (strict)");
            lua_settop(L, top);
            return -1;
        }
        lua_pop(L, 1);
    }
    if (nseen < n->nrequired)
        return fail_missing(c->err, c->errlen, p, n, &seen);
    return 0;
}

/* Checks the value at absolute index idx against n.  Returns 0 or -1
 * (message set); the stack is unchanged on return. */
static int vcheck_node(struct vchk *c, const struct node *n, int idx,
                       const struct path *p)
{
    int t = lua_type(c->L, idx);
    int ok;

    if (t == LUA_TNIL || t == LUA_TNONE)
        return n->optional ? 0 : fail_type(c->err, c->errlen, p, n, "nil");
    switch (n->type) {
    case T_ANY:
        return 0;
    case T_STRING:
        ok = t == LUA_TSTRING;
        break;
    case T_INTEGER:
        ok = t == LUA_TNUMBER && lua_isinteger(c->L, idx);
        break;
    case T_NUMBER:
        ok = t == LUA_TNUMBER;
        break;
    case T_BOOLEAN:
        ok = t == LUA_TBOOLEAN;
        break;
    case T_TABLE:
        ok = t == LUA_TTABLE;
        break;
    default: /* T_SCHEMA */
        if (t == LUA_TTABLE)
            return vcheck_table(c, n, idx, p);
        ok = 0;
        break;
    }
    return ok ? 0 : fail_type(c->err, c->errlen, p, n, got_lua(c->L, idx, n));
}

int seda__schema_check_value(const struct seda_schema *s, lua_State *L,
                             int idx, char *err, size_t errlen)
{
    struct vchk c = {L, err, errlen};

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    return vcheck_node(&c, &s->root, lua_absindex(L, idx), NULL);
}

/* ---- byte checker ---- */

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
    return fail_plain(r->err, r->errlen, "malformed");
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
    msg_path(&m, p);
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
        return fail_missing(r->err, r->errlen, p, n, &present);
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
            return fail_type(r->err, r->errlen, p, n, "nil");
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
        return fail_type(r->err, r->errlen, p, n, got_kind(k, n));
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
        return fail_type(err, errlen, NULL, n, "string");
    }
    if (kind != SEDA_SCHEMA_CODEC)
        return malformed(&r);
    if (bcheck_node(&r, &s->root, NULL) != 0)
        return -1;
    return r.p == r.end ? 0 : malformed(&r);
}
