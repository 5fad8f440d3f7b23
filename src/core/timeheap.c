/* SPDX-License-Identifier: MIT */
/*
 * timeheap.c -- tasks due at a time: a binary min-heap by due time (see
 * timeheap.h).
 */
#include "timeheap.h"

static void heap_up(struct seda__timed *h, int i)
{
    while (i > 0) {
        int up = (i - 1) / 2;
        if (h[up].due <= h[i].due)
            break;
        struct seda__timed t = h[up];
        h[up] = h[i];
        h[i] = t;
        i = up;
    }
}

static void heap_down(struct seda__timed *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l].due < h[m].due)
            m = l;
        if (r < n && h[r].due < h[m].due)
            m = r;
        if (m == i)
            break;
        struct seda__timed t = h[m];
        h[m] = h[i];
        h[i] = t;
        i = m;
    }
}

int seda__timeheap_push(struct seda__timeheap *h, int64_t due,
                        seda__task_fn fn, void *arg)
{
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 64;
        struct seda__timed *v = seda__realloc(h->v, sizeof *v * (size_t)cap);
        if (!v)
            return SEDA_ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    h->v[h->n] = (struct seda__timed){ due, fn, arg };
    heap_up(h->v, h->n++);
    return 0;
}

struct seda__timed seda__timeheap_pop(struct seda__timeheap *h)
{
    struct seda__timed t = h->v[0];
    h->v[0] = h->v[--h->n];
    heap_down(h->v, h->n, 0);
    return t;
}

void seda__timeheap_free(struct seda__timeheap *h)
{
    seda__free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}
