/* SPDX-License-Identifier: MIT */
/*
 * queue.h -- a bounded ring of pointers with push at both ends.
 *
 * Not synchronised: the owner (a stage) guards it with its own mutex.  The
 * ring's physical size is a power of two at least `slots`; the admission
 * bound (the stage capacity) is enforced by the caller, which keeps some
 * headroom so that a nacked envelope can always go back to the head.
 */
#ifndef SEDA_QUEUE_H
#define SEDA_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "seda_int.h"

struct seda_queue {
    void **slot;        /* ring storage, mask + 1 entries */
    uint32_t mask;      /* physical size - 1 */
    uint32_t head;      /* index of the first element (wraps) */
    uint32_t count;     /* elements stored */
};

/* Initialise with room for at least slots elements.  Returns 0 or
 * SEDA_ENOMEM (q untouched). */
SEDA__API int seda__queue_init(struct seda_queue *q, uint32_t slots);

/* Free the storage; the elements are the caller's (pop them first). */
SEDA__API void seda__queue_destroy(struct seda_queue *q);

/* Grow the ring to hold at least slots elements, keeping order.  Returns 0
 * or SEDA_ENOMEM (q unchanged).  Never shrinks. */
SEDA__API int seda__queue_reserve(struct seda_queue *q, uint32_t slots);

static inline uint32_t seda__queue_count(const struct seda_queue *q)
{
    return q->count;
}

static inline uint32_t seda__queue_room(const struct seda_queue *q)
{
    return q->mask + 1 - q->count;
}

/* Append at the tail.  The caller guarantees room (assert). */
static inline void seda__queue_push(struct seda_queue *q, void *p)
{
    assert(q->count <= q->mask);
    q->slot[(q->head + q->count) & q->mask] = p;
    q->count++;
}

/* Insert at the head.  The caller guarantees room (assert). */
static inline void seda__queue_push_front(struct seda_queue *q, void *p)
{
    assert(q->count <= q->mask);
    q->head = (q->head - 1) & q->mask;
    q->slot[q->head] = p;
    q->count++;
}

/* Remove and return the head; NULL when empty. */
static inline void *seda__queue_pop(struct seda_queue *q)
{
    if (q->count == 0)
        return NULL;
    void *p = q->slot[q->head];
    q->head = (q->head + 1) & q->mask;
    q->count--;
    return p;
}

/* Move up to n elements from the head into out[]; returns how many. */
SEDA__API uint32_t seda__queue_pop_many(struct seda_queue *q, void **out,
                                        uint32_t n);

#ifdef SEDA_DEBUG
/* Walk the ring checking its invariants (assert).  Debug builds only. */
SEDA__API void seda__queue_check(const struct seda_queue *q);
#endif

#endif /* SEDA_QUEUE_H */
