/* SPDX-License-Identifier: MIT */
/*
 * timer.c -- the loop's timers: a binary min-heap of internal timers
 * (struct seda__io_timer), which every deadline of the layer uses, and the
 * sleep op (seda_io_sleep) built on it.
 *
 * DESIGN
 *   The heap is ordered by (due, seq); seq grows with every arming, so
 *   timers due at the same moment fire in the order they were armed, and
 *   sleeps in the order they were submitted (the loop starts ops in
 *   submission order).  Each timer knows its slot, so disarming is
 *   O(log n): thousands of pending sleeps cost a pointer each in the heap.
 *   A pass (seda__io_timers_run) fires only timers armed before it began,
 *   so a callback that sleeps 0 waits for the next turn instead of
 *   keeping the pass going.  Loop thread only, throughout.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "io_int.h"

/* ---- the heap ---- */

static bool before(const struct seda__io_timer *a,
                   const struct seda__io_timer *b)
{
    return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void place(struct seda__io_timers *ts, size_t i,
                  struct seda__io_timer *t)
{
    ts->heap[i] = t;
    t->slot = i;
}

static void sift_up(struct seda__io_timers *ts, size_t i)
{
    struct seda__io_timer *t = ts->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(t, ts->heap[parent]))
            break;
        place(ts, i, ts->heap[parent]);
        i = parent;
    }
    place(ts, i, t);
}

static void sift_down(struct seda__io_timers *ts, size_t i)
{
    struct seda__io_timer *t = ts->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= ts->n)
            break;
        if (c + 1 < ts->n && before(ts->heap[c + 1], ts->heap[c]))
            c++;
        if (!before(ts->heap[c], t))
            break;
        place(ts, i, ts->heap[c]);
        i = c;
    }
    place(ts, i, t);
}

void seda__io_timer_init(struct seda__io_timer *t,
    void (*fire)(seda_io_loop_t *, struct seda__io_timer *))
{
    t->due = 0;
    t->seq = 0;
    t->slot = SIZE_MAX;
    t->fire = fire;
}

bool seda__io_timer_armed(const struct seda__io_timer *t)
{
    return t->slot != SIZE_MAX;
}

void seda__io_timer_disarm(seda_io_loop_t *loop, struct seda__io_timer *t)
{
    struct seda__io_timers *ts = seda__io_timers_of(loop);
    if (t->slot == SIZE_MAX)
        return;
    size_t i = t->slot;
    t->slot = SIZE_MAX;
    ts->n--;
    if (i == ts->n)
        return;
    place(ts, i, ts->heap[ts->n]);
    if (i > 0 && before(ts->heap[i], ts->heap[(i - 1) / 2]))
        sift_up(ts, i);
    else
        sift_down(ts, i);
}

int seda__io_timer_arm(seda_io_loop_t *loop, struct seda__io_timer *t,
                       uint64_t due)
{
    struct seda__io_timers *ts = seda__io_timers_of(loop);
    seda__io_timer_disarm(loop, t);
    if (ts->n == ts->cap) {
        size_t cap = ts->cap ? 2 * ts->cap : 64;
        struct seda__io_timer **h = realloc(ts->heap, cap * sizeof *h);
        if (!h)
            return -ENOMEM;
        ts->heap = h;
        ts->cap = cap;
    }
    t->due = due;
    t->seq = ts->seq++;
    place(ts, ts->n++, t);
    sift_up(ts, t->slot);
    return 0;
}

int seda__io_timers_wait_ms(struct seda__io_timers *ts, uint64_t now)
{
    if (ts->n == 0)
        return -1;
    uint64_t due = ts->heap[0]->due;
    if (due <= now)
        return 0;
    uint64_t ms = (due - now + 999999) / 1000000;     /* never early */
    return ms > 3600000 ? 3600000 : (int)ms;
}

void seda__io_timers_run(seda_io_loop_t *loop, struct seda__io_timers *ts,
                         uint64_t now)
{
    uint64_t limit = ts->seq;
    while (ts->n > 0) {
        struct seda__io_timer *t = ts->heap[0];
        if (t->due > now || t->seq >= limit)
            break;
        seda__io_timer_disarm(loop, t);
        t->fire(loop, t);       /* may arm, disarm, free timers */
    }
}

void seda__io_timers_free(struct seda__io_timers *ts)
{
    free(ts->heap);
    ts->heap = NULL;
    ts->n = ts->cap = 0;
}

/* ---- the sleep op ---- */

struct sleep_op {
    seda_io_op_t op;            /* first: the op is the sleep */
    uint64_t due;               /* ns, from the submission's clock */
    struct seda__io_timer timer;
};

static void sleep_fire(seda_io_loop_t *loop, struct seda__io_timer *t)
{
    (void)loop;
    struct sleep_op *s = (struct sleep_op *)((char *)t -
                                             offsetof(struct sleep_op, timer));
    seda__io_complete(&s->op, SEDA_IO_OK, NULL);
}

static void sleep_start(seda_io_op_t *op)
{
    struct sleep_op *s = (struct sleep_op *)op;
    if (seda__io_timer_arm(op->loop, &s->timer, s->due) != 0)
        seda__io_complete(op, SEDA_IO_OTHER, "out of memory");
}

static void sleep_cancel(seda_io_op_t *op)
{
    struct sleep_op *s = (struct sleep_op *)op;
    seda__io_timer_disarm(op->loop, &s->timer);
    seda__io_complete(op, SEDA_IO_CANCELLED, NULL);
}

static void sleep_destroy(seda_io_op_t *op)
{
    free(op);
}

static const struct seda__io_kind sleep_kind = {
    .name = "sleep",
    .start = sleep_start,
    .cancel = sleep_cancel,
    .destroy = sleep_destroy,
};

int seda_io_sleep(seda_io_loop_t *loop, double seconds, seda_io_cb cb,
                  void *ud, seda_io_op_t **opp)
{
    if (isnan(seconds))
        return -EINVAL;
    if (seconds > 1e9)
        seconds = 1e9;          /* about 31 years: forever enough */
    struct sleep_op *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->due = seda__io_now() + (seconds > 0 ? (uint64_t)(seconds * 1e9) : 0);
    seda__io_timer_init(&s->timer, sleep_fire);
    int rc = seda__io_submit(loop, &s->op, &sleep_kind, cb, ud, opp);
    if (rc != 0)
        free(s);
    return rc;
}
