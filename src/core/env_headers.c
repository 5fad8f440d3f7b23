/* SPDX-License-Identifier: MIT */
/*
 * env_headers.c -- an envelope's headers: the table of name/value pairs
 * in its extension block (struct env_hdrs, env.h), read, set and deleted
 * by its holder, copied whole for a nack's undo (a snapshot copies them
 * itself, env.c).
 *
 * DESIGN
 *   A small array searched in order (at most SEDA_HEADERS_MAX pairs),
 *   each name and value its own copy; a delete moves the last pair into
 *   the hole.  The first change during a delivery keeps a deep copy of
 *   the table first (seda__env_undo_save_headers, env.c), so a nack puts
 *   it back.
 */
#include <string.h>

#include "env.h"

#define HDRS(env) ((env)->ext ? (env)->ext->hdrs : NULL)

void seda__env_headers_free(struct env_hdrs *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n; i++) {
        seda__free(h->kv[i].key);
        seda__free(h->kv[i].value);
    }
    seda__free(h);
}

/* A deep copy of h (NULL for none).  *ok false when out of memory. */
struct env_hdrs *seda__env_headers_dup(const struct env_hdrs *h, bool *ok)
{
    *ok = true;
    if (!h || h->n == 0)
        return NULL;
    struct env_hdrs *c = seda__malloc(sizeof *c + sizeof c->kv[0] *
                                      (size_t)h->n);
    if (!c) {
        *ok = false;
        return NULL;
    }
    c->n = 0;
    c->cap = h->n;
    for (int i = 0; i < h->n; i++) {
        char *k = seda__strdup(h->kv[i].key);
        char *v = k ? seda__strdup(h->kv[i].value) : NULL;
        if (!v) {
            seda__free(k);
            seda__env_headers_free(c);
            *ok = false;
            return NULL;
        }
        c->kv[c->n++] = (struct env_hdr){ k, v };
    }
    return c;
}

const char *seda_env_header(const seda_env_t *env, const char *key)
{
    const struct env_hdrs *h = HDRS(env);
    for (int i = 0; h && i < h->n; i++)
        if (strcmp(h->kv[i].key, key) == 0)
            return h->kv[i].value;
    return NULL;
}

int seda_env_header_count(const seda_env_t *env)
{
    const struct env_hdrs *h = HDRS(env);
    return h ? h->n : 0;
}

int seda_env_header_at(const seda_env_t *env, int i, const char **key,
                       const char **value)
{
    const struct env_hdrs *h = HDRS(env);
    if (!h || i < 0 || i >= h->n)
        return SEDA_ERANGE;
    *key = h->kv[i].key;
    *value = h->kv[i].value;
    return 0;
}

int seda_env_set_header(seda_env_t *env, const char *key, const char *value)
{
    if (!key)
        return SEDA_EINVAL;
    if (strlen(key) > SEDA_HEADER_KEY_MAX ||
        (value && strlen(value) > SEDA_HEADER_VALUE_MAX))
        return SEDA_ETOOLARGE;
    if (seda__env_undo_save_headers(env) != 0)
        return SEDA_ENOMEM;
    struct env_hdrs *h = HDRS(env);
    int i = 0;
    while (h && i < h->n && strcmp(h->kv[i].key, key) != 0)
        i++;
    if (!value) {                       /* delete */
        if (!h || i == h->n)
            return 0;
        seda__free(h->kv[i].key);
        seda__free(h->kv[i].value);
        h->kv[i] = h->kv[--h->n];
        return 0;
    }
    if (!seda__env_ext(env))
        return SEDA_ENOMEM;
    char *v = seda__strdup(value);
    if (!v)
        return SEDA_ENOMEM;
    if (h && i < h->n) {                /* replace */
        seda__free(h->kv[i].value);
        h->kv[i].value = v;
        return 0;
    }
    if (h && h->n >= SEDA_HEADERS_MAX) {
        seda__free(v);
        return SEDA_ETOOLARGE;
    }
    char *k = seda__strdup(key);
    if (!k) {
        seda__free(v);
        return SEDA_ENOMEM;
    }
    if (!h || h->n == h->cap) {
        int cap = h ? h->cap * 2 : 4;
        struct env_hdrs *nh = seda__realloc(h, sizeof *nh +
                                            sizeof nh->kv[0] * (size_t)cap);
        if (!nh) {
            seda__free(k);
            seda__free(v);
            return SEDA_ENOMEM;
        }
        if (!h)
            nh->n = 0;
        nh->cap = cap;
        env->ext->hdrs = h = nh;
    }
    h->kv[h->n++] = (struct env_hdr){ k, v };
    return 0;
}
