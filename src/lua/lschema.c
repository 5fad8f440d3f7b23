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
 * Sections: schema tree, compiler, value checker; the byte checker is
 * lschema_bytes.c, and the tree's structs are in lschema_tree.h.
 */
#include "lschema.h"
#include "lschema_tree.h"
#include "lpath.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- schema tree ---- */

static const char *const type_names[] = {
    "any", "string", "integer", "number", "boolean", "table", "table"
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

static int field_cmp(const void *a, const void *b)
{
    const struct field *x = a, *y = b;
    return name_cmp(x->name, x->len, y->name, y->len);
}

/* Writes "type: payload<path>" to m. */
void seda__schema_msg_path(struct seda_msgbuf *m, const struct path *p)
{
    if (p == NULL) {
        seda__path_buf_str(m, "type: payload");
        return;
    }
    seda__schema_msg_path(m, p->up);
    seda__path_name(m, p->f->name, p->f->len);
}

/* Writes "type: payload<path>: expected <t>, got <got>".  Returns -1. */
int seda__schema_fail_type(char *err, size_t errlen, const struct path *p,
                     const struct node *n, const char *got)
{
    struct seda_msgbuf m;
    seda__path_buf_init(&m, err, errlen);
    seda__schema_msg_path(&m, p);
    seda__path_buf_str(&m, ": expected ");
    seda__path_buf_str(&m, type_names[n->type]);
    seda__path_buf_str(&m, ", got ");
    seda__path_buf_str(&m, got);
    return -1;
}

/* Writes "type: payload<path>.<first missing>: missing (expected <t>)",
 * naming the first required field of n not marked in seen.  Returns -1. */
int seda__schema_fail_missing(char *err, size_t errlen, const struct path *p,
                        const struct node *n, const bits_t *seen)
{
    for (unsigned i = 0; i < n->nfields; i++) {
        const struct field *f = &n->fields[i];
        if (f->node.optional || bit_get(seen, (int)i))
            continue;
        struct path sub = {p, f};
        struct seda_msgbuf m;
        seda__path_buf_init(&m, err, errlen);
        seda__schema_msg_path(&m, &sub);
        seda__path_buf_str(&m, ": missing (expected ");
        seda__path_buf_str(&m, type_names[f->node.type]);
        seda__path_buf_str(&m, ")");
        return -1;
    }
    return -1; /* not reached: the caller counted a missing field */
}

/* Writes "type: payload: <what>".  Returns -1. */
int seda__schema_fail_plain(char *err, size_t errlen, const char *what)
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
        return seda__schema_fail_plain(c->err, c->errlen, "nested too deeply");
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
            seda__schema_msg_path(&m, p);
            seda__path_key(&m, L, top + 1);
            seda__path_buf_str(&m, ": unexpected field (strict)");
            lua_settop(L, top);
            return -1;
        }
        lua_pop(L, 1);
    }
    if (nseen < n->nrequired)
        return seda__schema_fail_missing(c->err, c->errlen, p, n, &seen);
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
        return n->optional ? 0 : seda__schema_fail_type(c->err, c->errlen, p, n, "nil");
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
    return ok ? 0 : seda__schema_fail_type(c->err, c->errlen, p, n, got_lua(c->L, idx, n));
}

int seda__schema_check_value(const struct seda_schema *s, lua_State *L,
                             int idx, char *err, size_t errlen)
{
    struct vchk c = {L, err, errlen};

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    return vcheck_node(&c, &s->root, lua_absindex(L, idx), NULL);
}
