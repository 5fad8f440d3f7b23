/* SPDX-License-Identifier: MIT */
/*
 * lcodec.c -- the payload codec: Lua values to bytes and back (see docs/reference.md, Publish options).
 *
 * A payload published from one lua_State is handled in another, so it
 * travels as bytes.  This file turns plain data (nil, booleans, integers,
 * floats, strings and trees of tables of those) into a compact byte string
 * and back, refusing everything that cannot be copied faithfully
 * (functions, userdata, threads, cycles) with a message that names the
 * path to the offending value.
 *
 * DESIGN
 *   - Speed first: the encoder appends to a caller-owned, reused buffer,
 *     makes no allocation per value, and walks each table exactly once with
 *     lua_next; the decoder sizes every table exactly with lua_createtable.
 *   - Repeated keys are cheap to decode: each state keeps a small cache of
 *     the short keys it decoded last (see "The key cache" below), so a
 *     key seen before is not hashed and interned again.
 *   - No Lua errors in the encoder: raw access only, no metamethods, no
 *     string conversions.  Error paths are built only when an error
 *     happens, from keys that lua_next still holds on the Lua stack, so the
 *     hot path carries no path bookkeeping beyond one stack index per level.
 *   - Hostile input is expected in the decoder.  Each open table owes its
 *     remaining elements at least one byte each; the decoder keeps that debt
 *     ("pending") and refuses any length or count the bytes left after the
 *     debt cannot cover, before allocating.  Total allocation is therefore
 *     linear in the input size, and a 2 GiB claim in a 10-byte input costs
 *     nothing.
 *   - Threads: none of its own.  Both directions use only the lua_State
 *     passed in, which the calling thread owns.
 *
 * HOW IT WORKS (wire format)
 *   Every value is one tag byte followed by a payload whose size the tag
 *   determines; multi-byte numbers are little-endian.
 *
 *     tag        meaning                 payload
 *     0x00       nil                     -
 *     0x01/0x02  false / true            -
 *     0x03       float                   8 bytes, IEEE-754 bits, exact
 *     0x04-0x07  integer                 1/2/4/8 bytes, two's complement
 *     0x08-0x0b  string                  1/2/4/8-byte length, then bytes
 *     0x0c       table (small)           u8 narr, u8 nrec, then elements
 *     0x0d       table (large)           u32 narr, u32 nrec, then elements
 *     0x0e       seda.null               -
 *     0x20-0x3f  short string            length = tag - 0x20, then bytes
 *     0x60-0xff  small integer           value = tag - 0x80 (-32..127)
 *     others     invalid
 *
 *   A table's elements are narr values (keys 1..narr, in order) followed by
 *   nrec key/value pairs.  The encoder fills the array part with the run
 *   of keys 1, 2, 3, ... that lua_next yields first (Lua yields the array
 *   part in order), and sends every other pair with its key.  Because the
 *   counts are known only after the walk, the encoder reserves a small
 *   header and patches it, widening it with one memmove of the table's
 *   body in the rare case a table has more than 255 entries of either
 *   kind.  The decoder accepts non-minimal forms (a large header with
 *   small counts, a wide integer holding a small value); the format is
 *   not required to be canonical.
 *
 *   Example: {id = 7, name = "ab", 10} encodes to 16 bytes:
 *     0c 01 02            table, 1 array element, 2 pairs
 *     8a                  [1] = 10
 *     22 69 64   87       "id" = 7
 *     24 6e 61 6d 65      "name"
 *     22 61 62            = "ab"
 *   (pair order follows lua_next and may differ.)
 *
 * Sections: buffer, encoder; the decoder is lcodec_decode.c.  The path
 * notation of messages is lpath.c's, shared with lschema.c.
 */
#include "lcodec.h"
#include "lcodec_int.h"
#include "lpath.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffer ---- */

void seda__codec_wbuf_free(seda_wbuf *b)
{
    if (b == NULL)
        return;
    if (b->alloc && b->p)
        b->alloc(b->alloc_ud, b->p, b->cap, 0);
    else
        free(b->p);
    b->p = NULL;
    b->len = 0;
    b->cap = 0;
}

void seda__codec_wbuf_trim(seda_wbuf *b, size_t keep)
{
    if (b && b->cap > keep)
        seda__codec_wbuf_free(b);
}

/* Grows b so that n more bytes fit.  Returns 0, or -1 with b unchanged
 * when the size overflows, passes b->limit (b->over set) or the
 * allocation fails (b->over set when b->alloc refused). */
static int grow(seda_wbuf *b, size_t n)
{
    if (n > SIZE_MAX - b->len)
        return -1;
    size_t need = b->len + n;
    if (b->limit && need > b->limit) {
        b->over = SEDA_WBUF_OVER_LIMIT;
        return -1;
    }
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (b->limit && cap > b->limit)
        cap = b->limit;                 /* need <= limit: it still fits */
    unsigned char *p = b->alloc ? b->alloc(b->alloc_ud, b->p, b->cap, cap)
                                : realloc(b->p, cap);
    if (p == NULL) {
        if (b->alloc)
            b->over = SEDA_WBUF_OVER_MEMORY;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

/* Makes room for n more bytes.  Returns 0 or -1 as grow() does. */
static inline int reserve(seda_wbuf *b, size_t n)
{
    return b->cap - b->len >= n ? 0 : grow(b, n);
}

/* The stores and loads are written byte by byte so that they are
 * endian-neutral; gcc and clang merge them into single moves. */
static inline void st16(unsigned char *p, uint64_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static inline void st32(unsigned char *p, uint64_t v)
{
    st16(p, v);
    st16(p + 2, v >> 16);
}

static inline void st64(unsigned char *p, uint64_t v)
{
    st32(p, v);
    st32(p + 4, v >> 32);
}

/* ---- encoder ---- */

/* One step of the path from the root to the value being encoded. */
struct step {
    int key;    /* absolute stack index of the key lua_next pushed */
    int in_key; /* 1 while encoding the key itself (a table key) */
};

struct enc {
    lua_State *L;     /* the state that holds the value */
    seda_wbuf *b;     /* output, borrowed */
    const char *root; /* name of the top-level value in messages */
    char *err;        /* message output, borrowed */
    size_t errlen;    /* size of err */
    int depth;        /* tables currently open */
    int nsteps;       /* valid entries in steps */
    int top;          /* the Lua stack top, tracked to save API calls */
    const void *open[SEDA_CODEC_MAX_DEPTH];  /* tables on the path */
    struct step steps[SEDA_CODEC_MAX_DEPTH]; /* keys on the path */
};

enum { PATH_ENDS = 8 };

/* Writes "<path>: <what>" to e->err, where <path> is the root followed by
 * the first nsteps steps.  A step inside a table key prints as "{key}".
 * Returns -1 so callers can `return fail(...)`. */
static COLD int fail(struct enc *e, int nsteps, const char *what)
{
    struct seda_msgbuf m;
    seda__path_buf_init(&m, e->err, e->errlen);
    seda__path_buf_str(&m, e->root != NULL ? e->root : "payload");
    for (int i = 0; i < nsteps; i++) {
        /* A deep path keeps its first and last steps. */
        if (nsteps > 3 * PATH_ENDS && i == PATH_ENDS) {
            char gap[48];
            snprintf(gap, sizeof gap, ".<%d more>",
                     nsteps - 2 * PATH_ENDS);
            seda__path_buf_str(&m, gap);
            i = nsteps - PATH_ENDS - 1;
            continue;
        }
        if (e->steps[i].in_key)
            seda__path_buf_str(&m, "{key}");
        else
            seda__path_key(&m, e->L, e->steps[i].key);
    }
    seda__path_buf_str(&m, ": ");
    seda__path_buf_str(&m, what);
    return -1;
}

/* Writes why the buffer could not grow to e->err: past its limit, past
 * the state's memory, or out of memory.  Returns -1. */
static COLD int fail_oom(struct enc *e)
{
    struct seda_msgbuf m;
    char what[160];
    seda__path_buf_init(&m, e->err, e->errlen);
    if (e->b->over == SEDA_WBUF_OVER_LIMIT)
        snprintf(what, sizeof what, "too_large: the encoding passes "
                 "max_payload (%zu bytes)", e->b->limit);
    else if (e->b->over == SEDA_WBUF_OVER_MEMORY)
        snprintf(what, sizeof what, "not enough memory: the encoding "
                 "passes the state's memory_limit (at %zu bytes)",
                 e->b->len);
    else
        snprintf(what, sizeof what, "out of memory");
    seda__path_buf_str(&m, what);
    return -1;
}

/* Names an unsupported type for a message, with its article. */
static const char *a_type(int t)
{
    switch (t) {
    case LUA_TFUNCTION:
        return "a function";
    case LUA_TTHREAD:
        return "a thread";
    default:
        return "a userdata"; /* full and light */
    }
}

/* Writes "<path>: cannot encode <a type><suffix>" (the path's first
 * nsteps steps) for a value of the unsupported type t.  Returns -1. */
static COLD int fail_type(struct enc *e, int nsteps, int t,
                          const char *suffix)
{
    char what[64];
    snprintf(what, sizeof what, "cannot encode %s%s", a_type(t), suffix);
    return fail(e, nsteps, what);
}

static NOINLINE int enc_table(struct enc *e, int idx);

/* Appends integer v in its shortest form.  Returns 0, or -1 when b cannot
 * grow. */
static int enc_int(seda_wbuf *b, lua_Integer v)
{
    if (reserve(b, 9) != 0)
        return -1;
    unsigned char *p = b->p + b->len;
    uint64_t u = (uint64_t)v;
    if (v >= FIXINT_MIN && v <= FIXINT_MAX) {
        p[0] = (unsigned char)(v + 0x80);
        b->len += 1;
    } else if (v >= INT8_MIN && v <= INT8_MAX) {
        p[0] = SEDA_TAG_INT8;
        p[1] = (unsigned char)u;
        b->len += 2;
    } else if (v >= INT16_MIN && v <= INT16_MAX) {
        p[0] = SEDA_TAG_INT8 + 1;
        st16(p + 1, u);
        b->len += 3;
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        p[0] = SEDA_TAG_INT8 + 2;
        st32(p + 1, u);
        b->len += 5;
    } else {
        p[0] = SEDA_TAG_INT8 + 3;
        st64(p + 1, u);
        b->len += 9;
    }
    return 0;
}

/* Copies n <= 16 bytes from s to d with at most four moves, touching only
 * s[0..n) and d[0..n): short keys and values are the common case, and a
 * memcpy call costs more than the copy. */
static inline void copy16(unsigned char *d, const unsigned char *s,
                          size_t n)
{
    if (n >= 8) {
        uint64_t a, z;
        memcpy(&a, s, 8);
        memcpy(&z, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &z, 8);
    } else if (n >= 4) {
        uint32_t a, z;
        memcpy(&a, s, 4);
        memcpy(&z, s + n - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &z, 4);
    } else if (n > 0) {
        d[0] = s[0];
        d[n >> 1] = s[n >> 1];
        d[n - 1] = s[n - 1];
    }
}

/* Appends the string s[0..len) with its shortest length header.  Returns
 * 0, or -1 when b cannot grow. */
static ALWAYS_INLINE int enc_str(seda_wbuf *b, const char *s, size_t len)
{
    if (len > SIZE_MAX - 9 || reserve(b, len + 9) != 0)
        return -1;
    unsigned char *p = b->p + b->len;
    size_t h;
    if (len <= FIXSTR_MAX) {
        p[0] = (unsigned char)(SEDA_TAG_FIXSTR + len);
        h = 1;
    } else if (len <= UINT8_MAX) {
        p[0] = SEDA_TAG_STR8;
        p[1] = (unsigned char)len;
        h = 2;
    } else if (len <= UINT16_MAX) {
        p[0] = SEDA_TAG_STR8 + 1;
        st16(p + 1, len);
        h = 3;
    } else if (len <= UINT32_MAX) {
        p[0] = SEDA_TAG_STR8 + 2;
        st32(p + 1, len);
        h = 5;
    } else {
        p[0] = SEDA_TAG_STR8 + 3;
        st64(p + 1, len);
        h = 9;
    }
    if (len <= 16)
        copy16(p + h, (const unsigned char *)s, len);
    else
        memcpy(p + h, s, len);
    b->len += h + len;
    return 0;
}

/* Encodes the value of type t at absolute index idx: scalars here, tables
 * through enc_table().  Returns 0 or -1 as enc_table() does.  Inlined into
 * the table walk, so a scalar costs no call of its own. */
static ALWAYS_INLINE int enc_value(struct enc *e, int idx, int t)
{
    lua_State *L = e->L;
    seda_wbuf *b = e->b;

    switch (t) {
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        return enc_str(b, s, len) ? fail_oom(e) : 0;
    }
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            return enc_int(b, lua_tointeger(L, idx)) ? fail_oom(e) : 0;
        {
            double d = (double)lua_tonumber(L, idx);
            uint64_t u;
            memcpy(&u, &d, sizeof u);
            if (reserve(b, 9) != 0)
                return fail_oom(e);
            b->p[b->len] = SEDA_TAG_FLOAT;
            st64(b->p + b->len + 1, u);
            b->len += 9;
        }
        return 0;
    case LUA_TTABLE:
        return enc_table(e, idx);
    case LUA_TNIL:
    case LUA_TBOOLEAN:
        if (reserve(b, 1) != 0)
            return fail_oom(e);
        b->p[b->len++] = t == LUA_TNIL ? SEDA_TAG_NIL
                         : lua_toboolean(L, idx) ? SEDA_TAG_TRUE
                                                 : SEDA_TAG_FALSE;
        return 0;
    case LUA_TLIGHTUSERDATA:
        /* seda.null, and cjson.null: both are the NULL light userdata. */
        if (lua_touserdata(L, idx) == NULL) {
            if (reserve(b, 1) != 0)
                return fail_oom(e);
            b->p[b->len++] = SEDA_TAG_NULL;
            return 0;
        }
        return fail_type(e, e->nsteps, t, "");
    default:
        return fail_type(e, e->nsteps, t, "");
    }
}

/* Encodes the table at absolute index idx, which is at or below e->top.
 * Returns 0 or -1 (message set, partial output left for the caller to
 * drop); the stack is balanced on success and may hold extra values on
 * failure. */
static int enc_table(struct enc *e, int idx)
{
    lua_State *L = e->L;
    seda_wbuf *b = e->b;
    const void *t = lua_topointer(L, idx);

    for (int i = 0; i < e->depth; i++)
        if (e->open[i] == t)
            return fail(e, e->nsteps, "cannot encode a cyclic table");
    if (e->depth == SEDA_CODEC_MAX_DEPTH)
        return fail(e, e->nsteps, "cannot encode a table nested deeper "
                                  "than 200 levels");
    if (!lua_checkstack(L, 2)) /* room for a key and a value */
        return fail(e, e->nsteps, "Lua stack overflow");

    /* Reserve a small header; the counts are patched in at the end. */
    size_t hdr = b->len;
    if (reserve(b, 3) != 0)
        return fail_oom(e);
    b->len += 3;

    e->open[e->depth++] = t;
    struct step *st = &e->steps[e->nsteps++];
    size_t narr = 0, nrec = 0;
    int array = 1;
    int base = e->top;
    int k = base + 1; /* where lua_next leaves the key; the value is k+1 */

    st->key = k;
    st->in_key = 0;
    e->top = k + 1;
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        int kt = lua_type(L, k);
        if (array) {
            /* Keys never hold floats with integral values, so this
             * succeeds exactly for integer keys. */
            int isint = 0;
            lua_Integer i = kt == LUA_TNUMBER ? lua_tointegerx(L, k, &isint)
                                              : 0;
            if (isint && i == (lua_Integer)narr + 1)
                narr++;
            else
                array = 0;
        }
        if (!array) {
            nrec++;
            if (kt == LUA_TTABLE) {
                st->in_key = 1;
                if (enc_table(e, k) != 0)
                    return -1;
                st->in_key = 0;
            } else if (kt == LUA_TSTRING || kt == LUA_TNUMBER ||
                       kt == LUA_TBOOLEAN) {
                if (enc_value(e, k, kt) != 0)
                    return -1;
            } else {
                return fail_type(e, e->nsteps - 1, kt, " as a table key");
            }
        }
        if (enc_value(e, k + 1, lua_type(L, k + 1)) != 0)
            return -1;
        lua_pop(L, 1);
    }
    e->top = base;
    e->nsteps--;
    e->depth--;

    unsigned char *p = b->p + hdr;
    if (narr <= UINT8_MAX && nrec <= UINT8_MAX) {
        p[0] = SEDA_TAG_TBL8;
        p[1] = (unsigned char)narr;
        p[2] = (unsigned char)nrec;
        return 0;
    }
    /* Rare: widen the header.  The body moves once per large table. */
    if (narr > UINT32_MAX || nrec > UINT32_MAX)
        return fail(e, e->nsteps, "cannot encode a table this large");
    if (reserve(b, 6) != 0)
        return fail_oom(e);
    p = b->p + hdr;
    memmove(p + 9, p + 3, b->len - hdr - 3);
    b->len += 6;
    p[0] = SEDA_TAG_TBL32;
    st32(p + 1, narr);
    st32(p + 5, nrec);
    return 0;
}

int seda__codec_encode(lua_State *L, int idx, seda_wbuf *b,
                       const char *root, char *err, size_t errlen)
{
    struct enc e;
    int top = lua_gettop(L);
    size_t len0 = b->len;

    b->over = 0;
    e.L = L;
    e.b = b;
    e.root = root;
    e.err = err;
    e.errlen = errlen;
    e.depth = 0;
    e.nsteps = 0;
    e.top = top;
    if (idx < 0 && idx > LUA_REGISTRYINDEX)
        idx = top + 1 + idx;
    if (enc_value(&e, idx, lua_type(L, idx)) != 0) {
        b->len = len0;
        lua_settop(L, top);
        return -1;
    }
    return 0;
}
