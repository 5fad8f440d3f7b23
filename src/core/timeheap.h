/* SPDX-License-Identifier: MIT */
/*
 * timeheap.h -- tasks due at a time, as a binary min-heap by due time
 * (the pool's timed tasks: retry backoff, see seda__pool_submit_at).  A
 * leaf: plain data that whoever holds the heap writes (the pool, under
 * its mu).
 */
#ifndef SEDA_TIMEHEAP_H
#define SEDA_TIMEHEAP_H

#include <stdbool.h>
#include <stdint.h>

#include "pool.h"

/* A task due at a time (monotonic ns). */
struct seda__timed {
    int64_t due;
    seda__task_fn fn;
    void *arg;
};

struct seda__timeheap {
    struct seda__timed *v;      /* n entries, heap-ordered */
    int n;
    int cap;
};

/* Add a task: 0, or SEDA_ENOMEM (the heap unchanged). */
SEDA__API int seda__timeheap_push(struct seda__timeheap *h, int64_t due,
                                  seda__task_fn fn, void *arg);

/* Take the earliest task (n > 0). */
SEDA__API struct seda__timed seda__timeheap_pop(struct seda__timeheap *h);

/* Free the heap's memory (its tasks are the caller's). */
SEDA__API void seda__timeheap_free(struct seda__timeheap *h);

/* The earliest due time, or INT64_MAX when empty. */
static inline int64_t seda__timeheap_next(const struct seda__timeheap *h)
{
    return h->n ? h->v[0].due : INT64_MAX;
}

/* A task is due now: reads the clock only when one waits. */
static inline bool seda__timeheap_due(const struct seda__timeheap *h)
{
    return h->n && seda__now_ns() >= h->v[0].due;
}

#endif /* SEDA_TIMEHEAP_H */
