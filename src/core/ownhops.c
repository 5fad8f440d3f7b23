/* SPDX-License-Identifier: MIT */
/*
 * ownhops.c -- the "nats:" hops this program's own slips name (see
 * ownhops.h): a small set of strings, looked up linearly (a program names
 * a handful of result subjects; the set is bounded).
 */
#include <string.h>

#include "ownhops.h"

void seda__ownhops_init(struct seda__ownhops *h)
{
    seda__mutex_init(&h->mu);
    h->names = NULL;
    h->n = h->cap = 0;
}

void seda__ownhops_destroy(struct seda__ownhops *h)
{
    for (int i = 0; i < h->n; i++)
        seda__free(h->names[i]);
    seda__free(h->names);
    h->names = NULL;
    h->n = h->cap = 0;
    seda__mutex_destroy(&h->mu);
}

static bool has_locked(const struct seda__ownhops *h, const char *hop)
{
    for (int i = 0; i < h->n; i++)
        if (strcmp(h->names[i], hop) == 0)
            return true;
    return false;
}

void seda__ownhops_note(struct seda__ownhops *h, const char *const *names,
                        int n)
{
    for (int i = 0; i < n; i++) {
        const char *s = names[i];
        if (!s || strncmp(s, "nats:", 5) != 0)
            continue;
        seda__mutex_lock(&h->mu);
        if (!has_locked(h, s) && h->n < SEDA__OWNHOPS_MAX) {
            if (h->n == h->cap) {
                int cap = h->cap ? 2 * h->cap : 8;
                char **a = seda__realloc(h->names, sizeof *a * (size_t)cap);
                if (a) {
                    h->names = a;
                    h->cap = cap;
                }
            }
            char *c = h->n < h->cap ? seda__strdup(s) : NULL;
            if (c)
                h->names[h->n++] = c;
        }
        seda__mutex_unlock(&h->mu);
    }
}

bool seda__ownhops_has(struct seda__ownhops *h, const char *hop)
{
    seda__mutex_lock(&h->mu);
    bool yes = has_locked(h, hop);
    seda__mutex_unlock(&h->mu);
    return yes;
}
