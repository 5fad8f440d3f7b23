/* SPDX-License-Identifier: MIT */
/*
 * lschema_tree.h -- the compiled form of an `accepts` schema (the tree
 * lschema.c builds) and what both checkers share: the field lookup, the
 * bitmap of the fields met, the path to the value checked and the
 * messages of a refusal.  Included by lschema.c (the compiler and the
 * value checker) and lschema_bytes.c (the byte checker) only; the rest of
 * the binding sees the opaque struct seda_schema of lschema.h.
 */
#ifndef SEDA_LSCHEMA_TREE_H
#define SEDA_LSCHEMA_TREE_H

#include <stdint.h>
#include <string.h>

#include "lpath.h"
#include "lschema.h"

enum type {
    T_ANY,     /* anything but nil */
    T_STRING,
    T_INTEGER, /* the integer subtype only; 2.0 is a float */
    T_NUMBER,  /* integer or float */
    T_BOOLEAN,
    T_TABLE,   /* any table */
    T_SCHEMA   /* a table checked field by field */
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

/* Orders names bytewise, a prefix before the longer name. */
static inline int name_cmp(const char *a, size_t la, const char *b,
                           size_t lb)
{
    int c = memcmp(a, b, la < lb ? la : lb);
    if (c != 0)
        return c;
    return la < lb ? -1 : la > lb;
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

/* The messages of a refusal (lschema.c), written to err[0..errlen):
 *   msg_path      "type: payload<path>" to m;
 *   fail_type     "type: payload<path>: expected <t>, got <got>";
 *   fail_missing  "type: payload<path>.<first missing>: missing (expected
 *                 <t>)", naming the first required field of n not marked
 *                 in seen;
 *   fail_plain    "type: payload: <what>".
 * The fail_ functions return -1.  None allocates; any thread may call
 * them. */
SEDA__API void seda__schema_msg_path(struct seda_msgbuf *m,
                                     const struct path *p);
SEDA__API int seda__schema_fail_type(char *err, size_t errlen,
                                     const struct path *p,
                                     const struct node *n, const char *got);
SEDA__API int seda__schema_fail_missing(char *err, size_t errlen,
                                        const struct path *p,
                                        const struct node *n,
                                        const bits_t *seen);
SEDA__API int seda__schema_fail_plain(char *err, size_t errlen,
                                      const char *what);

#endif /* SEDA_LSCHEMA_TREE_H */
