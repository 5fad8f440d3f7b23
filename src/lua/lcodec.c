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
 * Sections: buffer, encoder, decoder.  The path notation of messages is
 * lpath.c's, shared with lschema.c.
 */
#include "lcodec.h"
#include "lpath.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- decoder ---- */

/* The key cache.  Payloads of one kind repeat their keys, and pushing a
 * key with lua_pushlstring hashes it and looks it up in the string table
 * every time.  Each state keeps, in its registry, a full userdata whose
 * user values hold the last short keys decoded there (placed by a hash of
 * a key's length and bytes into sets of two slots) and whose block holds
 * a pointer to each one's bytes: a repeated key costs a hash, a
 * comparison and a lua_getiuservalue.  Lua strings never move, and a
 * slot's pointer and user value are always replaced together, so the
 * pointer stays valid.
 * The cache is created after the first table decoded in a state (never by
 * input that fails), lives as long as the state, and holds at most
 * KC_SLOTS strings of at most KC_MAXLEN bytes. */
enum {
    KC_SLOTS = 64,       /* power of two */
    KC_MAXLEN = FIXSTR_MAX
};

struct kcache {
    const struct kcache *self;    /* its own address: proof it is ours */
    const char *s[KC_SLOTS];      /* bytes of user value i + 1 */
    unsigned char len[KC_SLOTS];  /* its length; 0xff for an empty slot */
};

/* The cache's registry key is this variable's address.  Access is raw,
 * so a registry with a metatable cannot make the decoder call Lua. */
static const char kc_key;

struct dec {
    lua_State *L;
    const unsigned char *start; /* first input byte, for offsets */
    const unsigned char *p;     /* next byte to read */
    const unsigned char *end;   /* one past the last byte */
    size_t pending;             /* values open tables still owe, >= 1 B */
    int depth;                  /* tables currently open */
    struct kcache *kc;          /* key cache, or NULL */
    int kci;                    /* its stack index (when kc is set) */
    char *err;                  /* message output, borrowed */
    size_t errlen;              /* size of err */
};

/* Writes "<what> at byte <offset>" to d->err.  Returns -1. */
static COLD int dfail(struct dec *d, const char *what)
{
    struct seda_msgbuf m;
    char tmp[48];
    seda__path_buf_init(&m, d->err, d->errlen);
    seda__path_buf_str(&m, what);
    snprintf(tmp, sizeof tmp, " at byte %zu", (size_t)(d->p - d->start));
    seda__path_buf_str(&m, tmp);
    return -1;
}

/* Bytes that may still be consumed: what is left after reserving one
 * byte for every value an open table still owes.  The decoder keeps
 * pending <= end - p, so this never wraps. */
static inline size_t avail(const struct dec *d)
{
    return (size_t)(d->end - d->p) - d->pending;
}

/* The first of the two cache slots for the n-byte key s (1 <= n <=
 * KC_MAXLEN): a hash of its length and of up to three overlapping
 * windows of its bytes (all of them when n <= 24). */
static inline unsigned kc_set(const unsigned char *s, size_t n)
{
    uint64_t h;
    if (n >= 8)
        h = seda__ld64(s) * UINT64_C(0x9e3779b97f4a7c15) ^
            seda__ld64(s + (n >> 1) - 4) * UINT64_C(0xc2b2ae3d27d4eb4f) ^
            seda__ld64(s + n - 8);
    else if (n >= 4)
        h = seda__ld32(s) * UINT64_C(0x9e3779b97f4a7c15) ^
            seda__ld32(s + n - 4);
    else
        h = (uint64_t)s[0] << 16 ^ (uint64_t)s[n >> 1] << 8 ^ s[n - 1];
    h = (h ^ n) * UINT64_C(0xff51afd7ed558ccd);
    return (unsigned)(h >> 59) * 2; /* KC_SLOTS / 2 sets of two */
}

/* Whether the n-byte strings a and b (1 <= n <= KC_MAXLEN) are equal:
 * two overlapping loads each up to 16 bytes, memcmp beyond. */
static ALWAYS_INLINE int kc_same(const unsigned char *a,
                                 const unsigned char *b, size_t n)
{
    if (n >= 8)
        return n > 16 ? memcmp(a, b, n) == 0
                      : seda__ld64(a) == seda__ld64(b) &&
                        seda__ld64(a + n - 8) == seda__ld64(b + n - 8);
    if (n >= 4)
        return seda__ld32(a) == seda__ld32(b) &&
               seda__ld32(a + n - 4) == seda__ld32(b + n - 4);
    return a[0] == b[0] && a[n >> 1] == b[n >> 1] && a[n - 1] == b[n - 1];
}

/* Pushes the n-byte key s (1 <= n <= KC_MAXLEN, n bytes readable),
 * through the cache d->kc.  Each key may sit in either slot of its set;
 * a new key takes the first and moves the one there to the second, so
 * two keys that share a set both stay.  May raise a Lua memory error. */
static ALWAYS_INLINE void push_key(struct dec *d, const unsigned char *s,
                                   size_t n)
{
    lua_State *L = d->L;
    struct kcache *kc = d->kc;
    unsigned i = kc_set(s, n);

    if (kc->len[i] == n && kc_same((const unsigned char *)kc->s[i], s, n)) {
        lua_getiuservalue(L, d->kci, (int)i + 1);
        return;
    }
    if (kc->len[i + 1] == n &&
        kc_same((const unsigned char *)kc->s[i + 1], s, n)) {
        lua_getiuservalue(L, d->kci, (int)i + 2);
        return;
    }
    lua_pushlstring(L, (const char *)s, n);
    if (kc->len[i] != 0xff) {
        lua_getiuservalue(L, d->kci, (int)i + 1);
        lua_setiuservalue(L, d->kci, (int)i + 2);
        kc->s[i + 1] = kc->s[i];
        kc->len[i + 1] = kc->len[i];
    }
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, d->kci, (int)i + 1);
    kc->s[i] = lua_tostring(L, -1);
    kc->len[i] = (unsigned char)n;
}

/* Pushes the key cache of L and returns it, or returns NULL and pushes
 * nothing when L has none yet. */
static struct kcache *kc_get(lua_State *L)
{
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &kc_key) == LUA_TUSERDATA &&
        lua_rawlen(L, -1) == sizeof(struct kcache)) {
        struct kcache *kc = lua_touserdata(L, -1);
        if (kc->self == kc)
            return kc;
    }
    lua_pop(L, 1);
    return NULL;
}

/* Gives L an empty key cache.  May raise a Lua memory error. */
static void kc_new(lua_State *L)
{
    struct kcache *kc = lua_newuserdatauv(L, sizeof *kc, KC_SLOTS);
    memset(kc, 0, sizeof *kc);
    kc->self = kc;
    memset(kc->len, 0xff, sizeof kc->len);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &kc_key);
}

static int dec_any(struct dec *d);
static NOINLINE int dec_table(struct dec *d, uint64_t narr, uint64_t nrec);

/* Decodes one value and pushes it.  Returns 0, or -1 with the message set
 * (and possibly partial values left on the stack for the caller to drop).
 * Inlined into the table loops; dec_any() is the out-of-line copy. */
static ALWAYS_INLINE int dec_value(struct dec *d)
{
    lua_State *L = d->L;

    if (avail(d) < 1)
        return dfail(d, "truncated input");
    const unsigned char *p = d->p;
    unsigned tag = *p;
    uint64_t n;
    size_t w;

    if (tag >= SEDA_TAG_FIXINT) {
        lua_pushinteger(L, (lua_Integer)tag - 0x80);
        d->p++;
        return 0;
    }
    if (tag >= SEDA_TAG_FIXSTR && tag <= SEDA_TAG_FIXSTR + FIXSTR_MAX) {
        n = tag - SEDA_TAG_FIXSTR;
        if (n > avail(d) - 1)
            return dfail(d, "truncated string");
        lua_pushlstring(L, (const char *)p + 1, (size_t)n);
        d->p += 1 + n;
        return 0;
    }
    switch (tag) {
    case SEDA_TAG_NIL:
        lua_pushnil(L);
        break;
    case SEDA_TAG_NULL:
        lua_pushlightuserdata(L, NULL);     /* seda.null */
        break;
    case SEDA_TAG_FALSE:
    case SEDA_TAG_TRUE:
        lua_pushboolean(L, tag == SEDA_TAG_TRUE);
        break;
    case SEDA_TAG_FLOAT: {
        if (avail(d) < 9)
            return dfail(d, "truncated float");
        uint64_t u = seda__ld64(p + 1);
        double v;
        memcpy(&v, &u, sizeof v);
        lua_pushnumber(L, (lua_Number)v);
        d->p += 9;
        return 0;
    }
    case SEDA_TAG_INT8:
    case SEDA_TAG_INT8 + 1:
    case SEDA_TAG_INT8 + 2:
    case SEDA_TAG_INT8 + 3: {
        w = (size_t)1 << (tag - SEDA_TAG_INT8);
        if (avail(d) < 1 + w)
            return dfail(d, "truncated integer");
        int64_t v;
        switch (w) {
        case 1: v = (int8_t)p[1]; break;
        case 2: v = (int16_t)(uint16_t)seda__ld16(p + 1); break;
        case 4: v = (int32_t)(uint32_t)seda__ld32(p + 1); break;
        default: v = (int64_t)seda__ld64(p + 1); break;
        }
        lua_pushinteger(L, (lua_Integer)v);
        d->p += 1 + w;
        return 0;
    }
    case SEDA_TAG_STR8:
    case SEDA_TAG_STR8 + 1:
    case SEDA_TAG_STR8 + 2:
    case SEDA_TAG_STR8 + 3:
        w = (size_t)1 << (tag - SEDA_TAG_STR8);
        if (avail(d) < 1 + w)
            return dfail(d, "truncated string length");
        n = w == 1 ? p[1] : w == 2 ? seda__ld16(p + 1)
            : w == 4 ? seda__ld32(p + 1) : seda__ld64(p + 1);
        if (n > avail(d) - 1 - w)
            return dfail(d, "string length exceeds the input");
        lua_pushlstring(L, (const char *)p + 1 + w, (size_t)n);
        d->p += 1 + w + n;
        return 0;
    case SEDA_TAG_TBL8:
        if (avail(d) < 3)
            return dfail(d, "truncated table header");
        d->p += 3;
        return dec_table(d, p[1], p[2]);
    case SEDA_TAG_TBL32:
        if (avail(d) < 9)
            return dfail(d, "truncated table header");
        d->p += 9;
        return dec_table(d, seda__ld32(p + 1), seda__ld32(p + 5));
    default: {
        char what[32];
        snprintf(what, sizeof what, "invalid tag 0x%02x", tag);
        return dfail(d, what);
    }
    }
    d->p++;
    return 0;
}

static int dec_any(struct dec *d)
{
    return dec_value(d);
}

/* Decodes a table key and pushes it: a short string through the key
 * cache, anything else through dec_any().  Returns 0 or -1 as
 * dec_value() does. */
static ALWAYS_INLINE int dec_key(struct dec *d)
{
    size_t left = avail(d);
    if (left < 1)
        return dfail(d, "truncated input");
    const unsigned char *p = d->p;
    size_t n = (size_t)p[0] - SEDA_TAG_FIXSTR; /* wraps for tags below */
    if (n - 1 < KC_MAXLEN && n < left && d->kc != NULL) {
        push_key(d, p + 1, n);
        d->p += 1 + n;
        return 0;
    }
    /* lua_rawset would raise on a nil or NaN key: refuse them from the
     * bytes, before anything is pushed. */
    if (p[0] == SEDA_TAG_NIL)
        return dfail(d, "table key is nil");
    if (p[0] == SEDA_TAG_NULL)          /* the encoder never writes one */
        return dfail(d, "table key is seda.null");
    if (left >= 9 && p[0] == SEDA_TAG_FLOAT &&
        (seda__ld64(p + 1) & ~(UINT64_C(1) << 63)) > UINT64_C(0x7ff) << 52)
        return dfail(d, "table key is NaN");
    return dec_any(d);
}

/* Decodes the elements of a table whose header (already consumed) claims
 * narr array values and nrec pairs, and pushes the table.  Returns 0, or
 * -1 with the message set (and possibly partial values left on the stack
 * for the caller to drop).  May raise a Lua memory error. */
static int dec_table(struct dec *d, uint64_t narr, uint64_t nrec)
{
    lua_State *L = d->L;

    if (narr > INT_MAX || nrec > INT_MAX || narr + 2 * nrec > avail(d))
        return dfail(d, "table size exceeds the input");
    if (d->depth == SEDA_CODEC_MAX_DEPTH)
        return dfail(d, "tables nested deeper than 200 levels");
    /* The entry point made room for the outermost table, key and value;
     * each nested table needs room for its own key and value. */
    if (d->depth > 0 && !lua_checkstack(L, 2))
        return dfail(d, "Lua stack overflow");
    d->depth++;
    d->pending += (size_t)(narr + 2 * nrec);
    lua_createtable(L, (int)narr, (int)nrec);
    for (lua_Integer i = 1; i <= (lua_Integer)narr; i++) {
        d->pending--;
        if (dec_value(d) != 0)
            return -1;
        lua_rawseti(L, -2, i);
    }
    for (uint64_t i = 0; i < nrec; i++) {
        d->pending--;
        if (dec_key(d) != 0)
            return -1;
        d->pending--;
        if (dec_value(d) != 0)
            return -1;
        lua_rawset(L, -3);
    }
    d->depth--;
    return 0;
}

/* The decoder's entry: one value from p[0..len), the key cache kc (at
 * stack index kci) or none.  Pushes the value (and nothing else) and
 * returns 0, or returns -1 with the message set and pushes nothing. */
static int decode(lua_State *L, const void *p, size_t len,
                  struct kcache *kc, int kci, char *err, size_t errlen)
{
    struct dec d;
    int top = lua_gettop(L);

    d.L = L;
    d.start = p;
    d.p = p;
    d.end = len > 0 ? d.p + len : d.p; /* no arithmetic on a NULL p */
    d.pending = 0;
    d.depth = 0;
    d.kc = kc;
    d.kci = kci;
    d.err = err;
    d.errlen = errlen;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    /* Room for the outermost table, a key and a value. */
    if (!lua_checkstack(L, 3)) {
        dfail(&d, "Lua stack overflow");
        return -1;
    }
    if (dec_any(&d) != 0) {
        lua_settop(L, top);
        return -1;
    }
    if (d.p != d.end) {
        lua_settop(L, top);
        dfail(&d, "trailing bytes after the value");
        return -1;
    }
    return 0;
}

/* Whether the bytes hold a table (the only values the key cache serves). */
static inline int is_table(const void *p, size_t len)
{
    const unsigned char *b = p;
    return len > 0 && (b[0] == SEDA_TAG_TBL8 || b[0] == SEDA_TAG_TBL32);
}

int seda__codec_decode(lua_State *L, const void *p, size_t len,
                       char *err, size_t errlen)
{
    if (!is_table(p, len))
        return decode(L, p, len, NULL, 0, err, errlen);
    if (!lua_checkstack(L, 1)) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "Lua stack overflow at byte 0");
        return -1;
    }
    int top = lua_gettop(L);
    struct kcache *kc = kc_get(L);     /* pushed at top + 1, or nothing */
    int rc = decode(L, p, len, kc, top + 1, err, errlen);
    if (kc != NULL) {
        if (rc == 0)
            lua_replace(L, top + 1);   /* the value over the cache */
        else
            lua_settop(L, top);
    } else if (rc == 0) {
        kc_new(L);
    }
    return rc;
}

void seda__codec_push_keycache(lua_State *L)
{
    if (kc_get(L) == NULL) {
        kc_new(L);
        kc_get(L);
    }
}

int seda__codec_decode_kc(lua_State *L, const void *p, size_t len, int kci,
                          char *err, size_t errlen)
{
    struct kcache *kc = NULL;
    if (is_table(p, len)) {
        kc = lua_touserdata(L, kci);
        if (kc == NULL || kc->self != kc)
            return seda__codec_decode(L, p, len, err, errlen);
    }
    return decode(L, p, len, kc, kci, err, errlen);
}
