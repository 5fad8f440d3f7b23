/* SPDX-License-Identifier: MIT */
/*
 * queue.c -- the bounded pointer ring behind every stage (see queue.h).
 *
 * DESIGN: a power-of-two ring addressed by head + count, so push, push_front
 * and pop are a mask and a store.  pop_many copies at most two contiguous
 * runs with memcpy, which is what makes batched drains cheap.
 */
#include <string.h>

#include "queue.h"

static uint32_t pow2_at_least(uint32_t n)
{
    uint32_t p = 1;
    while (p < n && p < (UINT32_C(1) << 31))
        p <<= 1;
    return p;
}

int seda__queue_init(struct seda_queue *q, uint32_t slots)
{
    uint32_t size = pow2_at_least(slots ? slots : 1);
    void **s = seda__malloc(sizeof(void *) * size);
    if (!s)
        return SEDA_ENOMEM;
    q->slot = s;
    q->mask = size - 1;
    q->head = 0;
    q->count = 0;
    return 0;
}

void seda__queue_destroy(struct seda_queue *q)
{
    seda__free(q->slot);
    q->slot = NULL;
    q->mask = 0;
    q->count = 0;
}

int seda__queue_reserve(struct seda_queue *q, uint32_t slots)
{
    if (slots <= q->mask + 1)
        return 0;
    uint32_t size = pow2_at_least(slots);
    void **s = seda__malloc(sizeof(void *) * size);
    if (!s)
        return SEDA_ENOMEM;
    uint32_t n = seda__queue_pop_many(q, s, q->count);
    seda__free(q->slot);
    q->slot = s;
    q->mask = size - 1;
    q->head = 0;
    q->count = n;
    return 0;
}

uint32_t seda__queue_pop_many(struct seda_queue *q, void **out, uint32_t n)
{
    if (n > q->count)
        n = q->count;
    uint32_t first = q->mask + 1 - q->head;  /* run up to the wrap */
    if (first > n)
        first = n;
    memcpy(out, q->slot + q->head, first * sizeof(void *));
    if (n > first)
        memcpy(out + first, q->slot, (n - first) * sizeof(void *));
    q->head = (q->head + n) & q->mask;
    q->count -= n;
    return n;
}

#ifdef SEDA_DEBUG
void seda__queue_check(const struct seda_queue *q)
{
    assert(q->slot != NULL);
    assert(((q->mask + 1) & q->mask) == 0);
    assert(q->count <= q->mask + 1);
    assert(q->head <= q->mask);
}
#endif
