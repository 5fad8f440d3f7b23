/* SPDX-License-Identifier: MIT */
/* test_pool.c -- the shared worker pool (src/core/pool.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sched.h>
#include <stdatomic.h>

#include <string.h>

#include "core/pool.h"

struct counter {
    seda__mutex_t mu;
    pthread_cond_t cv;
    int n;                       /* guarded by mu */
    int started, stopped;        /* guarded by mu */
};

static void bump(void *arg)
{
    struct counter *c = arg;
    seda__mutex_lock(&c->mu);
    c->n++;
    pthread_cond_broadcast(&c->cv);
    seda__mutex_unlock(&c->mu);
}

static void *on_start(int index, void *ud)
{
    struct counter *c = ud;
    seda__mutex_lock(&c->mu);
    c->started++;
    seda__mutex_unlock(&c->mu);
    return (void *)(intptr_t)(index + 100);
}

static void on_stop(int index, void *data, void *ud)
{
    struct counter *c = ud;
    assert_int_equal((intptr_t)data, index + 100);
    seda__mutex_lock(&c->mu);
    c->stopped++;
    seda__mutex_unlock(&c->mu);
}

static void counter_init(struct counter *c)
{
    seda__mutex_init(&c->mu);
    assert_int_equal(seda__cond_init(&c->cv), 0);
    c->n = c->started = c->stopped = 0;
}

static void counter_destroy(struct counter *c)
{
    pthread_cond_destroy(&c->cv);
    seda__mutex_destroy(&c->mu);
}

static void wait_for(struct counter *c, int n)
{
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    seda__mutex_lock(&c->mu);
    while (c->n < n)
        if (seda__cond_wait(&c->cv, &c->mu, deadline) == ETIMEDOUT)
            fail_msg("timed out: %d of %d tasks ran", c->n, n);
    seda__mutex_unlock(&c->mu);
}

/* Wait (yielding, up to 10 s) until no task is queued. */
static void tu_sleep_until_pending_zero(struct seda_pool *p)
{
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while (seda__pool_pending(p) && seda__now_ns() < deadline)
        sched_yield();
}

static void test_pool_runs_every_task_and_hooks(void **state)
{
    (void)state;
    struct counter c;
    counter_init(&c);
    struct seda_pool *p;
    assert_int_equal(seda__pool_new(3, -1, on_start, on_stop, &c, &c, &p), 0);
    assert_int_equal(seda__pool_size(p), 3);
    assert_int_equal(seda__pool_reserve(p, 1000), 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(seda__pool_submit(p, bump, &c, true), 0);
    wait_for(&c, 1000);
    seda__pool_free(p);
    assert_int_equal(c.started, 3);
    assert_int_equal(c.stopped, 3);
    counter_destroy(&c);
}

static void check_owner(void *arg)
{
    struct counter *c = arg;
    assert_ptr_equal(seda__pool_current_owner(), c);
    assert_true(seda_worker_index() >= 0);
    bump(c);
}

static void test_pool_worker_identity(void **state)
{
    (void)state;
    struct counter c;
    counter_init(&c);
    struct seda_pool *p;
    assert_null(seda__pool_current_owner());
    assert_int_equal(seda_worker_index(), -1);
    assert_int_equal(seda__pool_new(2, -1, NULL, NULL, NULL, &c, &p), 0);
    assert_int_equal(seda__pool_reserve(p, 4), 0);
    for (int i = 0; i < 4; i++)
        seda__pool_submit(p, check_owner, &c, true);
    wait_for(&c, 4);
    seda__pool_free(p);
    counter_destroy(&c);
}

static void test_pool_submit_after_stop_is_refused(void **state)
{
    (void)state;
    struct counter c;
    counter_init(&c);
    struct seda_pool *p;
    assert_int_equal(seda__pool_new(1, -1, NULL, NULL, NULL, NULL, &p), 0);
    assert_int_equal(seda__pool_reserve(p, 1), 0);
    seda__pool_stop(p);
    assert_true(seda__pool_stopping(p));
    assert_int_equal(seda__pool_submit(p, bump, &c, true), SEDA_ECLOSED);
    seda__pool_stop(p);                      /* idempotent */
    seda__pool_free(p);
    assert_int_equal(c.n, 0);
    counter_destroy(&c);
}

/* A chain of tasks, each submitting the next from its worker.  A submit
 * from a worker wakes nobody for one queued task (that worker takes it
 * next); so if a shrink retires that worker as its task ends, it must
 * hand the task to a sleeper, or the chain stalls with every remaining
 * worker asleep.  The chain is placed on worker 1 (worker 0 held by a
 * gated task), worker 0 is let go to sleep, then the pool shrinks to 1
 * while a step runs. */
struct chain {
    struct counter c;
    struct seda_pool *p;
    int goal;
    atomic_int hold;            /* the gated task waits while set */
    atomic_int refused;         /* a submit failed before the stop */
};

static void chain_step(void *arg)
{
    struct chain *ch = arg;
    bump(&ch->c);
    seda__mutex_lock(&ch->c.mu);
    bool more = ch->c.n < ch->goal;
    seda__mutex_unlock(&ch->c.mu);
    /* Longer than an idle worker spins before it sleeps. */
    int64_t until = seda__now_ns() + 300000;
    while (seda__now_ns() < until)
        ;
    /* Refused only once the pool stops (the test is over). */
    if (more && seda__pool_submit(ch->p, chain_step, ch, true) != 0 &&
        !seda__pool_stopping(ch->p))
        atomic_store(&ch->refused, 1);
}

static void gated(void *arg)
{
    struct chain *ch = arg;
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while (atomic_load(&ch->hold) && seda__now_ns() < deadline)
        sched_yield();
}

static void test_pool_shrink_never_strands_a_chain(void **state)
{
    (void)state;
    for (int round = 0; round < 5; round++) {
        struct chain ch;
        counter_init(&ch.c);
        ch.goal = 1000000;
        atomic_init(&ch.hold, 1);
        atomic_init(&ch.refused, 0);
        assert_int_equal(seda__pool_new(2, -1, NULL, NULL, NULL, NULL, &ch.p), 0);
        assert_int_equal(seda__pool_reserve(ch.p, 4), 0);
        assert_int_equal(seda__pool_submit(ch.p, gated, &ch, true), 0);
        /* Let the gated task start, so the chain goes to the other worker. */
        tu_sleep_until_pending_zero(ch.p);
        assert_int_equal(seda__pool_submit(ch.p, chain_step, &ch, true), 0);
        wait_for(&ch.c, 3);
        atomic_store(&ch.hold, 0);
        wait_for(&ch.c, 8);             /* worker 0 has gone to sleep */
        assert_int_equal(seda__pool_resize(ch.p, 1), 0);
        seda__mutex_lock(&ch.c.mu);
        int n = ch.c.n;
        seda__mutex_unlock(&ch.c.mu);
        wait_for(&ch.c, n + 5);
        seda__mutex_lock(&ch.c.mu);
        ch.goal = 0;                    /* stop the chain */
        seda__mutex_unlock(&ch.c.mu);
        seda__pool_free(ch.p);
        counter_destroy(&ch.c);
        assert_int_equal(atomic_load(&ch.refused), 0);
    }
}

/* A worker task that queues another and then waits for it: with prompt
 * false (or inside a managed block) a sleeping worker must be woken, or
 * the waiter waits forever (its own deadline here). */
struct waiter {
    struct seda_pool *p;
    atomic_int ran;             /* the queued task ran */
    atomic_int waited_ok;       /* the waiter saw it before its deadline */
    bool kick;                  /* submit prompt, then block_begin */
};

static void mark_ran(void *arg)
{
    atomic_store(&((struct waiter *)arg)->ran, 1);
}

static void submit_and_wait(void *arg)
{
    struct waiter *w = arg;
    assert_int_equal(seda__pool_submit(w->p, mark_ran, w, w->kick), 0);
    struct seda_pool *b = w->kick ? seda__pool_loan_block_begin() : NULL;
    int64_t deadline = seda__now_ns() + 5 * (int64_t)1000000000;
    while (!atomic_load(&w->ran) && seda__now_ns() < deadline)
        sched_yield();
    seda__pool_loan_block_end(b);
    atomic_store(&w->waited_ok, atomic_load(&w->ran));
}

static void test_pool_worker_waiting_on_its_own_task_is_helped(void **state)
{
    (void)state;
    for (int kick = 0; kick < 2; kick++) {
        struct waiter w = { .kick = kick };
        atomic_init(&w.ran, 0);
        atomic_init(&w.waited_ok, 0);
        assert_int_equal(seda__pool_new(2, -1, NULL, NULL, NULL, NULL, &w.p), 0);
        assert_int_equal(seda__pool_reserve(w.p, 2), 0);
        /* Both workers asleep first: the case where nobody would look. */
        int64_t until = seda__now_ns() + 50000000;
        while (seda__now_ns() < until)
            sched_yield();
        assert_int_equal(seda__pool_submit(w.p, submit_and_wait, &w, false),
                         0);
        int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
        while (!atomic_load(&w.waited_ok) && seda__now_ns() < deadline)
            sched_yield();
        if (!atomic_load(&w.waited_ok))
            fail_msg("%s: the queued task did not run while its submitter "
                     "waited", kick ? "prompt + block" : "prompt false");
        seda__pool_free(w.p);
    }
}

/* seda__pool_take removes exactly the task asked for and keeps the rest
 * in order. */
struct order {
    seda__mutex_t mu;
    int seen[8];                /* guarded by mu */
    int n;                      /* guarded by mu */
    atomic_int hold;            /* the first task waits while set */
};

struct order_arg {
    struct order *o;
    int id;
};

static void order_record(void *arg)
{
    struct order_arg *a = arg;
    if (a->id == 0) {
        int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
        while (atomic_load(&a->o->hold) && seda__now_ns() < deadline)
            sched_yield();
    }
    seda__mutex_lock(&a->o->mu);
    a->o->seen[a->o->n++] = a->id;
    seda__mutex_unlock(&a->o->mu);
}

static void test_pool_take_removes_one_task_keeps_order(void **state)
{
    (void)state;
    struct order o;
    memset(&o, 0, sizeof o);
    seda__mutex_init(&o.mu);
    atomic_init(&o.hold, 1);
    struct order_arg a[5];
    for (int i = 0; i < 5; i++)
        a[i] = (struct order_arg){ &o, i };
    struct seda_pool *p = NULL;
    assert_int_equal(seda__pool_new(1, -1, NULL, NULL, NULL, NULL, &p), 0);
    assert_int_equal(seda__pool_reserve(p, 5), 0);
    assert_int_equal(seda__pool_submit(p, order_record, &a[0], false), 0);
    tu_sleep_until_pending_zero(p);     /* task 0 runs and holds */
    for (int i = 1; i < 5; i++)
        assert_int_equal(seda__pool_submit(p, order_record, &a[i], false),
                         0);
    assert_true(seda__pool_take(p, order_record, &a[2]));
    assert_false(seda__pool_take(p, order_record, &a[2]));
    atomic_store(&o.hold, 0);
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    for (;;) {
        seda__mutex_lock(&o.mu);
        int n = o.n;
        seda__mutex_unlock(&o.mu);
        if (n == 4 || seda__now_ns() > deadline)
            break;
        sched_yield();
    }
    seda__pool_free(p);
    assert_int_equal(o.n, 4);
    int want[4] = { 0, 1, 3, 4 };
    for (int i = 0; i < 4; i++)
        assert_int_equal(o.seen[i], want[i]);
    seda__mutex_destroy(&o.mu);
}

/* ---- managed blocking (loans) ---- */

/* Wait (yielding, up to 10 s) until pred(p) holds; fail with what. */
static void wait_until(bool (*pred)(struct seda_pool *), struct seda_pool *p,
                       const char *what)
{
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while (!pred(p)) {
        if (seda__now_ns() > deadline)
            fail_msg("timed out waiting until %s", what);
        sched_yield();
    }
}

static int lent_now(struct seda_pool *p)
{
    int lent, peak, max;
    uint64_t loans;
    seda__pool_loan_stats(p, &lent, &loans, &peak, &max);
    return lent;
}

static bool no_loans(struct seda_pool *p) { return lent_now(p) == 0; }

/* Blockers: each one, on a worker, queues the next and waits (in a
 * managed block) until released; the last one queued only counts. */
struct blockers {
    struct seda_pool *p;
    int depth;                  /* blockers to chain */
    atomic_int started;         /* blockers that began their wait */
    atomic_int leaf_ran;        /* the task after the last blocker ran */
    atomic_int release;         /* every blocker may return */
    atomic_int index_ok;        /* loan threads' indexes and data were right */
    struct blocker_arg {
        struct blockers *b;
        int level;
    } arg[16];
};

static void leaf(void *arg)
{
    struct blockers *b = arg;
    /* Tasks past the regular worker run on loan threads. */
    if (seda_worker_index() < SEDA_LOAN_INDEX0)
        atomic_store(&b->index_ok, 0);
    atomic_store(&b->leaf_ran, 1);
}

static void blocker(void *arg)
{
    struct blocker_arg *a = arg;
    struct blockers *b = a->b;
    if (a->level > 0) {
        int idx = seda_worker_index();
        void *data = seda_worker_data();
        if (idx < SEDA_LOAN_INDEX0 || (intptr_t)data != idx + 100)
            atomic_store(&b->index_ok, 0);
    }
    if (a->level + 1 < b->depth)
        assert_int_equal(seda__pool_submit(b->p, blocker, &b->arg[a->level + 1],
                                           false), 0);
    else
        assert_int_equal(seda__pool_submit(b->p, leaf, b, false), 0);
    struct seda_pool *lp = seda__pool_loan_block_begin();
    assert_ptr_equal(lp, b->p);
    atomic_fetch_add(&b->started, 1);
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while (!atomic_load(&b->release) && seda__now_ns() < deadline)
        sched_yield();
    seda__pool_loan_block_end(lp);
}

static void blockers_init(struct blockers *b, int depth)
{
    memset(b, 0, sizeof *b);
    b->depth = depth;
    atomic_init(&b->started, 0);
    atomic_init(&b->leaf_ran, 0);
    atomic_init(&b->release, 0);
    atomic_init(&b->index_ok, 1);
    for (int i = 0; i < depth; i++)
        b->arg[i] = (struct blocker_arg){ b, i };
}

/* One worker, three nested waits: each wait lends a thread, which runs the
 * next task (nothing else could: the only worker waits), up to the leaf.
 * Loan threads have their own index and data (made lazily by the start
 * hook); the loans end when the waits do. */
static void test_pool_block_lends_a_thread(void **state)
{
    (void)state;
    struct counter c;
    counter_init(&c);
    struct blockers b;
    blockers_init(&b, 3);
    assert_int_equal(seda__pool_new(1, -1, on_start, on_stop, &c, NULL, &b.p),
                     0);
    assert_int_equal(seda__pool_reserve(b.p, 8), 0);
    assert_null(seda__pool_loan_block_begin());      /* not a worker: no-op */
    seda__pool_loan_block_end(NULL);
    assert_int_equal(seda__pool_submit(b.p, blocker, &b.arg[0], false), 0);
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while ((!atomic_load(&b.leaf_ran) || atomic_load(&b.started) < 3) &&
           seda__now_ns() < deadline)
        sched_yield();
    assert_int_equal(atomic_load(&b.leaf_ran), 1);
    assert_int_equal(atomic_load(&b.started), 3);
    int lent, peak, max;
    uint64_t loans;
    seda__pool_loan_stats(b.p, &lent, &loans, &peak, &max);
    assert_int_equal(lent, 3);
    assert_int_equal(peak, 3);
    assert_int_equal((int)loans, 3);
    assert_int_equal(max, 4);                   /* 4 * workers */
    atomic_store(&b.release, 1);
    wait_until(no_loans, b.p, "the loans ended");
    assert_int_equal(atomic_load(&b.index_ok), 1);
    seda__mutex_lock(&c.mu);
    int started = c.started;
    seda__mutex_unlock(&c.mu);
    /* The worker, and the two loan threads that asked for their data (the
     * one that ran only the leaf never did: made lazily). */
    assert_int_equal(started, 3);
    /* A second round is served by the spare threads, with their data. */
    struct seda_pool *p = b.p;
    blockers_init(&b, 3);
    b.p = p;
    assert_int_equal(seda__pool_submit(b.p, blocker, &b.arg[0], false), 0);
    deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while (!atomic_load(&b.leaf_ran) && seda__now_ns() < deadline)
        sched_yield();
    assert_int_equal(atomic_load(&b.leaf_ran), 1);
    seda__pool_loan_stats(b.p, &lent, &loans, &peak, &max);
    assert_int_equal((int)loans, 6);
    atomic_store(&b.release, 1);
    wait_until(no_loans, b.p, "the loans ended");
    seda__mutex_lock(&c.mu);
    started = c.started;
    seda__mutex_unlock(&c.mu);
    /* At most the spare that had not needed data yet makes some now. */
    assert_true(started <= 4);
    seda__pool_free(b.p);
    assert_int_equal(c.stopped, started);       /* every one stopped */
    seda__pool_free(NULL);
    counter_destroy(&c);
}

/* One task in two nested waits (a blocked worker that helps another
 * stage's drain, which blocks again, counts as two): two loans, with
 * nothing to do, both asleep on the idle stack beside nothing else --
 * more sleepers than the pool has workers.  The idle stack once had room
 * for the workers only (AddressSanitizer: a heap overflow here). */
struct nested {
    struct seda_pool *p;
    atomic_int in;              /* both waits began */
    atomic_int release;
};

static void nested_blocker(void *arg)
{
    struct nested *n = arg;
    struct seda_pool *a = seda__pool_loan_block_begin();
    struct seda_pool *b = seda__pool_loan_block_begin();
    atomic_store(&n->in, 1);
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while (!atomic_load(&n->release) && seda__now_ns() < deadline)
        sched_yield();
    seda__pool_loan_block_end(b);
    seda__pool_loan_block_end(a);
}

static bool two_lent_asleep(struct seda_pool *p)
{
    return lent_now(p) == 2 && seda__pool_idle(p) == 2;
}

static void test_pool_more_sleepers_than_workers(void **state)
{
    (void)state;
    struct nested n;
    memset(&n, 0, sizeof n);
    assert_int_equal(seda__pool_new(1, 4, NULL, NULL, NULL, NULL, &n.p), 0);
    assert_int_equal(seda__pool_reserve(n.p, 4), 0);
    assert_int_equal(seda__pool_submit(n.p, nested_blocker, &n, false), 0);
    wait_until(two_lent_asleep, n.p, "two loan threads asleep");
    atomic_store(&n.release, 1);
    wait_until(no_loans, n.p, "the loans ended");
    seda__pool_free(n.p);
}

/* Loans never exceed max_loans: a wait beyond the bound gets none, so the
 * task queued behind it waits until a blocker returns. */
static void test_pool_loans_never_exceed_max_loans(void **state)
{
    (void)state;
    struct blockers b;
    blockers_init(&b, 4);
    assert_int_equal(seda__pool_new(1, 2, NULL, NULL, NULL, NULL, &b.p), 0);
    assert_int_equal(seda__pool_reserve(b.p, 8), 0);
    assert_int_equal(seda__pool_submit(b.p, blocker, &b.arg[0], false), 0);
    /* Worker + 2 loans run blockers 0..2; blocker 3 waits in the ring. */
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while (atomic_load(&b.started) < 3 && seda__now_ns() < deadline)
        sched_yield();
    assert_int_equal(atomic_load(&b.started), 3);
    assert_true(seda__pool_loan_exhausted(b.p));
    /* Give a wrongly made third loan every chance to show up. */
    deadline = seda__now_ns() + 50000000;
    while (seda__now_ns() < deadline)
        sched_yield();
    assert_int_equal(atomic_load(&b.started), 3);
    assert_int_equal(atomic_load(&b.leaf_ran), 0);
    int lent, peak, max;
    uint64_t loans;
    seda__pool_loan_stats(b.p, &lent, &loans, &peak, &max);
    assert_int_equal(lent, 2);
    assert_int_equal(peak, 2);
    assert_int_equal(max, 2);
    atomic_store(&b.release, 1);
    deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while (!atomic_load(&b.leaf_ran) && seda__now_ns() < deadline)
        sched_yield();
    assert_int_equal(atomic_load(&b.leaf_ran), 1);
    wait_until(no_loans, b.p, "the loans ended");
    seda__pool_loan_stats(b.p, &lent, &loans, &peak, &max);
    assert_true(peak <= 2);
    seda__pool_free(b.p);
}

/* max_loans 0: a wait lends nothing (the only worker's queued task waits
 * for it), and a pool stopped while a loan thread serves joins it. */
static void test_pool_no_loans_and_stop_with_loans(void **state)
{
    (void)state;
    struct blockers b;
    blockers_init(&b, 1);
    assert_int_equal(seda__pool_new(1, 0, NULL, NULL, NULL, NULL, &b.p), 0);
    assert_int_equal(seda__pool_reserve(b.p, 4), 0);
    assert_int_equal(seda__pool_submit(b.p, blocker, &b.arg[0], false), 0);
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while (atomic_load(&b.started) < 1 && seda__now_ns() < deadline)
        sched_yield();
    deadline = seda__now_ns() + 30000000;
    while (seda__now_ns() < deadline)
        sched_yield();
    assert_int_equal(atomic_load(&b.leaf_ran), 0);
    assert_int_equal(lent_now(b.p), 0);
    atomic_store(&b.release, 1);
    seda__pool_free(b.p);

    blockers_init(&b, 2);
    assert_int_equal(seda__pool_new(1, -1, NULL, NULL, NULL, NULL, &b.p), 0);
    assert_int_equal(seda__pool_reserve(b.p, 4), 0);
    assert_int_equal(seda__pool_submit(b.p, blocker, &b.arg[0], false), 0);
    deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    while (!atomic_load(&b.leaf_ran) && seda__now_ns() < deadline)
        sched_yield();
    assert_int_equal(atomic_load(&b.leaf_ran), 1);
    atomic_store(&b.release, 1);
    seda__pool_free(b.p);               /* joins worker and loans */
}

/* ---- timed tasks ---- */

struct timed_rec {
    seda__mutex_t mu;
    int order[8];               /* guarded by mu */
    int64_t at[8];              /* guarded by mu */
    int n;                      /* guarded by mu */
};

struct timed_arg {
    struct timed_rec *r;
    int id;
};

static void timed_fire(void *arg)
{
    struct timed_arg *a = arg;
    seda__mutex_lock(&a->r->mu);
    a->r->at[a->r->n] = seda__now_ns();
    a->r->order[a->r->n++] = a->id;
    seda__mutex_unlock(&a->r->mu);
}

static int dropped_n;
static void timed_drop(seda__task_fn fn, void *arg, void *ud)
{
    (void)ud;
    assert_ptr_equal(fn, timed_fire);
    assert_non_null(arg);
    dropped_n++;
}

/* Timed tasks run in due order, not before they are due, on idle workers
 * that sleep until then; what is left at stop is handed back. */
static void test_pool_timed_tasks_run_when_due(void **state)
{
    (void)state;
    struct timed_rec r;
    memset(&r, 0, sizeof r);
    seda__mutex_init(&r.mu);
    struct timed_arg a[4];
    for (int i = 0; i < 4; i++)
        a[i] = (struct timed_arg){ &r, i };
    struct seda_pool *p = NULL;
    assert_int_equal(seda__pool_new(2, -1, NULL, NULL, NULL, NULL, &p), 0);
    int64_t t0 = seda__now_ns();
    /* Submitted out of order: 60 ms, 20 ms, 40 ms. */
    assert_int_equal(seda__pool_submit_at(p, t0 + 60000000, timed_fire,
                                          &a[2]), 0);
    assert_int_equal(seda__pool_submit_at(p, t0 + 20000000, timed_fire,
                                          &a[0]), 0);
    assert_int_equal(seda__pool_submit_at(p, t0 + 40000000, timed_fire,
                                          &a[1]), 0);
    assert_int_equal(seda__pool_submit_at(p, t0 + 3600 * (int64_t)1000000000,
                                          timed_fire, &a[3]), 0);
    int64_t deadline = seda__now_ns() + 10 * (int64_t)1000000000;
    for (;;) {
        seda__mutex_lock(&r.mu);
        int n = r.n;
        seda__mutex_unlock(&r.mu);
        if (n >= 3 || seda__now_ns() > deadline)
            break;
        sched_yield();
    }
    assert_int_equal(seda__pool_timers(p), 1);  /* the hour-long one */
    seda__pool_stop(p);
    dropped_n = 0;
    seda__pool_drop_timers(p, timed_drop, NULL);
    assert_int_equal(dropped_n, 1);
    assert_int_equal(seda__pool_timers(p), 0);
    assert_int_equal(seda__pool_submit_at(p, 0, timed_fire, &a[0]),
                     SEDA_ECLOSED);
    seda__pool_free(p);
    assert_int_equal(r.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r.order[i], i);
        assert_true(r.at[i] - t0 >= (int64_t)(i + 1) * 20000000);
    }
    seda__mutex_destroy(&r.mu);
}

static void test_pool_rejects_bad_size(void **state)
{
    (void)state;
    struct seda_pool *p = NULL;
    assert_int_equal(seda__pool_new(0, -1, NULL, NULL, NULL, NULL, &p),
                     SEDA_EINVAL);
    assert_null(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_runs_every_task_and_hooks),
        cmocka_unit_test(test_pool_worker_identity),
        cmocka_unit_test(test_pool_submit_after_stop_is_refused),
        cmocka_unit_test(test_pool_rejects_bad_size),
        cmocka_unit_test(test_pool_shrink_never_strands_a_chain),
        cmocka_unit_test(test_pool_worker_waiting_on_its_own_task_is_helped),
        cmocka_unit_test(test_pool_take_removes_one_task_keeps_order),
        cmocka_unit_test(test_pool_block_lends_a_thread),
        cmocka_unit_test(test_pool_more_sleepers_than_workers),
        cmocka_unit_test(test_pool_loans_never_exceed_max_loans),
        cmocka_unit_test(test_pool_no_loans_and_stop_with_loans),
        cmocka_unit_test(test_pool_timed_tasks_run_when_due),
    };
    return cmocka_run_group_tests_name("pool", tests, NULL, NULL);
}
