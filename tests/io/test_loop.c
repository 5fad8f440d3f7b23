/* SPDX-License-Identifier: MIT */
/*
 * test_loop.c -- the I/O loop (include/seda_io.h) through its timers: due
 * order, submission order for equal times, ten thousand pending, cancel
 * before and after firing and racing with it, freeing the op early,
 * freeing the loop with ops pending (each callback fires cancelled, before
 * seda_io_loop_free returns), submissions from several threads; every
 * callback once, on the loop thread.  A driven loop (no thread of its
 * own): a submission runs the turn inline, timers wake its descriptor,
 * two drivers and two submitters racing, freed with ops pending.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "seda_io.h"
#include "testutil.h"

/* What callbacks saw, in the order they fired. */
typedef struct rec {
    pthread_mutex_t mu;
    int *order;                 /* ids; guarded by mu */
    int *status;                /* by id; guarded by mu */
    int *calls;                 /* by id; guarded by mu */
    int n, cap;                 /* guarded by mu */
    int off_loop;               /* callbacks not on the loop thread; mu */
    seda_io_loop_t *loop;
    tu_counter fired;
} rec_t;

typedef struct slot {
    rec_t *r;
    int id;
    seda_io_op_t *op;
} slot_t;

static void rec_init(rec_t *r, seda_io_loop_t *loop, int cap)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->order = calloc((size_t)cap, sizeof *r->order);
    r->status = calloc((size_t)cap, sizeof *r->status);
    r->calls = calloc((size_t)cap, sizeof *r->calls);
    assert_non_null(r->order);
    assert_non_null(r->status);
    assert_non_null(r->calls);
    r->cap = cap;
    r->loop = loop;
    tu_counter_init(&r->fired);
}

static void rec_destroy(rec_t *r)
{
    free(r->order);
    free(r->status);
    free(r->calls);
    tu_counter_destroy(&r->fired);
    pthread_mutex_destroy(&r->mu);
}

static void on_done(seda_io_op_t *op, void *ud)
{
    slot_t *s = ud;
    rec_t *r = s->r;
    pthread_mutex_lock(&r->mu);
    if (r->n < r->cap)
        r->order[r->n++] = s->id;
    r->status[s->id] = seda_io_op_status(op);
    r->calls[s->id]++;
    if (!seda_io_loop_is_current(r->loop))
        r->off_loop++;
    pthread_mutex_unlock(&r->mu);
    tu_counter_add(&r->fired, 1);
}

static void sleep_ok(seda_io_loop_t *loop, slot_t *s, double secs)
{
    int rc = seda_io_sleep(loop, secs, on_done, s, &s->op);
    assert_int_equal(rc, 0);
}

static int rec_calls(rec_t *r, int id)
{
    pthread_mutex_lock(&r->mu);
    int c = r->calls[id];
    pthread_mutex_unlock(&r->mu);
    return c;
}

/* ---- tests ---- */

static void test_loop_timers_fire_in_due_order(void **state)
{
    (void)state;
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new(&loop), 0);
    rec_t r;
    rec_init(&r, loop, 8);
    slot_t s[3] = { { &r, 0, NULL }, { &r, 1, NULL }, { &r, 2, NULL } };
    double t0 = seda_now();
    sleep_ok(loop, &s[2], 0.06);
    sleep_ok(loop, &s[0], 0.02);
    sleep_ok(loop, &s[1], 0.04);
    TU_WAIT(tu_counter_wait_ge(&r.fired, 3, TU_DEADLINE), "three sleeps");
    assert_true(seda_now() - t0 >= 0.06);
    pthread_mutex_lock(&r.mu);
    assert_int_equal(r.order[0], 0);
    assert_int_equal(r.order[1], 1);
    assert_int_equal(r.order[2], 2);
    assert_int_equal(r.off_loop, 0);
    pthread_mutex_unlock(&r.mu);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r.status[i], SEDA_IO_OK);
        seda_io_op_free(s[i].op);
    }
    seda_io_loop_free(loop);
    rec_destroy(&r);
}

static void test_loop_equal_due_in_submission_order(void **state)
{
    (void)state;
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new(&loop), 0);
    enum { N = 200 };
    rec_t r;
    rec_init(&r, loop, N);
    slot_t *s = calloc(N, sizeof *s);
    assert_non_null(s);
    /* Zero and negative delays are all due at once: submission order. */
    for (int i = 0; i < N; i++) {
        s[i] = (slot_t){ &r, i, NULL };
        sleep_ok(loop, &s[i], i % 2 ? 0.0 : -1.0);
    }
    TU_WAIT(tu_counter_wait_ge(&r.fired, N, TU_DEADLINE), "the sleeps");
    for (int i = 0; i < N; i++) {
        assert_int_equal(r.order[i], i);
        seda_io_op_free(s[i].op);
    }
    seda_io_loop_free(loop);
    rec_destroy(&r);
    free(s);
}

/* Ten thousand sleeps from one thread, 1000 distinct delays under 0.1 s.
 * Timer i submitted before j with a delay no longer than j's is due
 * strictly before j (the clock only grows), so it must fire first: an
 * exact check, whatever the scheduler does to the submitter. */
static void test_loop_ten_thousand_timers(void **state)
{
    (void)state;
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new(&loop), 0);
    enum { N = 10000, D = 1000 };
    rec_t r;
    rec_init(&r, loop, N);
    slot_t *s = calloc(N, sizeof *s);
    int *delay = calloc(N, sizeof *delay);
    int *pos = calloc(N, sizeof *pos);
    int *maxpos = malloc(D * sizeof *maxpos);
    assert_non_null(s);
    assert_non_null(delay);
    assert_non_null(pos);
    assert_non_null(maxpos);
    for (int i = 0; i < N; i++) {
        delay[i] = (i * 7919) % D;              /* units of 0.1 ms */
        s[i] = (slot_t){ &r, i, NULL };
        sleep_ok(loop, &s[i], delay[i] / 10000.0);
    }
    TU_WAIT(tu_counter_wait_ge(&r.fired, N, TU_DEADLINE), "10 000 sleeps");
    for (int k = 0; k < N; k++)
        pos[r.order[k]] = k;
    /* maxpos[v]: the latest firing among the timers so far of delay v. */
    for (int v = 0; v < D; v++)
        maxpos[v] = -1;
    for (int j = 0; j < N; j++) {
        int before = -1;
        for (int v = 0; v <= delay[j]; v++)
            if (maxpos[v] > before)
                before = maxpos[v];
        if (pos[j] < before)
            fail_msg("timer %d (delay %d) fired before an earlier one with "
                     "a delay no longer", j, delay[j]);
        if (pos[j] > maxpos[delay[j]])
            maxpos[delay[j]] = pos[j];
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(r.calls[i], 1);
        assert_int_equal(r.status[i], SEDA_IO_OK);
        seda_io_op_free(s[i].op);
    }
    assert_int_equal(r.off_loop, 0);
    seda_io_loop_free(loop);
    rec_destroy(&r);
    free(s);
    free(delay);
    free(pos);
    free(maxpos);
}

static void test_loop_cancel_before_fire(void **state)
{
    (void)state;
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new(&loop), 0);
    rec_t r;
    rec_init(&r, loop, 4);
    slot_t s = { &r, 0, NULL };
    double t0 = seda_now();
    sleep_ok(loop, &s, 30.0);
    seda_io_cancel(s.op);
    seda_io_cancel(s.op);       /* idempotent */
    TU_WAIT(tu_counter_wait_ge(&r.fired, 1, TU_DEADLINE), "the cancel");
    assert_true(seda_now() - t0 < 5.0);
    assert_int_equal(seda_io_op_status(s.op), SEDA_IO_CANCELLED);
    assert_string_equal(seda_io_strerror(seda_io_op_status(s.op)),
                        "cancelled");
    seda_io_cancel(s.op);       /* after the callback: nothing */
    seda_io_op_free(s.op);
    seda_io_loop_free(loop);
    assert_int_equal(r.calls[0], 1);
    rec_destroy(&r);
}

static void test_loop_cancel_after_fire(void **state)
{
    (void)state;
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new(&loop), 0);
    rec_t r;
    rec_init(&r, loop, 4);
    slot_t s = { &r, 0, NULL }, t = { &r, 1, NULL };
    sleep_ok(loop, &s, 0.0);
    TU_WAIT(tu_counter_wait_ge(&r.fired, 1, TU_DEADLINE), "the sleep");
    seda_io_cancel(s.op);
    /* A later op's callback shows the loop went past the cancel. */
    sleep_ok(loop, &t, 0.0);
    TU_WAIT(tu_counter_wait_ge(&r.fired, 2, TU_DEADLINE), "a second sleep");
    assert_int_equal(rec_calls(&r, 0), 1);
    assert_int_equal(seda_io_op_status(s.op), SEDA_IO_OK);
    seda_io_op_free(s.op);
    seda_io_op_free(t.op);
    seda_io_loop_free(loop);
    rec_destroy(&r);
}

/* Cancels racing completions: every callback once, OK or CANCELLED. */
static void test_loop_cancel_races_completion(void **state)
{
    (void)state;
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new(&loop), 0);
    enum { N = 2000 };
    rec_t r;
    rec_init(&r, loop, N);
    slot_t *s = calloc(N, sizeof *s);
    assert_non_null(s);
    for (int i = 0; i < N; i++) {
        s[i] = (slot_t){ &r, i, NULL };
        sleep_ok(loop, &s[i], (i % 3) * 0.0005);
        if (i % 2)
            seda_io_cancel(s[i].op);
    }
    TU_WAIT(tu_counter_wait_ge(&r.fired, N, TU_DEADLINE), "the sleeps");
    for (int i = 0; i < N; i++) {
        assert_int_equal(r.calls[i], 1);
        assert_true(r.status[i] == SEDA_IO_OK ||
                    (i % 2 && r.status[i] == SEDA_IO_CANCELLED));
        seda_io_op_free(s[i].op);
    }
    seda_io_loop_free(loop);
    rec_destroy(&r);
    free(s);
}

/* The owner lets go before the callback: the op is cancelled, the
 * callback still fires once, nothing leaks. */
static void test_loop_free_op_before_callback(void **state)
{
    (void)state;
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new(&loop), 0);
    rec_t r;
    rec_init(&r, loop, 4);
    slot_t s = { &r, 0, NULL };
    sleep_ok(loop, &s, 30.0);
    seda_io_op_free(s.op);
    TU_WAIT(tu_counter_wait_ge(&r.fired, 1, TU_DEADLINE), "the callback");
    assert_int_equal(r.status[0], SEDA_IO_CANCELLED);
    seda_io_loop_free(loop);
    assert_int_equal(r.calls[0], 1);
    rec_destroy(&r);
}

static void test_loop_free_with_pending_ops(void **state)
{
    (void)state;
    int threads = tu_thread_count();
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new(&loop), 0);
    enum { N = 100 };
    rec_t r;
    rec_init(&r, loop, N);
    slot_t *s = calloc(N, sizeof *s);
    assert_non_null(s);
    for (int i = 0; i < N; i++) {
        s[i] = (slot_t){ &r, i, NULL };
        sleep_ok(loop, &s[i], 60.0);
    }
    seda_io_loop_free(loop);
    /* Every callback ran before seda_io_loop_free returned. */
    assert_int_equal(tu_counter_get(&r.fired), N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r.calls[i], 1);
        assert_int_equal(r.status[i], SEDA_IO_CANCELLED);
        seda_io_op_free(s[i].op);
    }
    assert_true(tu_wait_threads(threads, TU_DEADLINE));
    rec_destroy(&r);
    free(s);
}

typedef struct submitter {
    seda_io_loop_t *loop;
    slot_t *s;
    int from, n;
    tu_rendezvous *start;
} submitter_t;

static void *submit_many(void *arg)
{
    submitter_t *sb = arg;
    tu_rendezvous_arrive(sb->start, TU_DEADLINE);
    for (int i = sb->from; i < sb->from + sb->n; i++) {
        if (seda_io_sleep(sb->loop, (i % 5) * 0.001, on_done, &sb->s[i],
                          &sb->s[i].op) != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_loop_submissions_from_threads(void **state)
{
    (void)state;
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new(&loop), 0);
    enum { T = 4, PER = 1000 };
    rec_t r;
    rec_init(&r, loop, T * PER);
    slot_t *s = calloc(T * PER, sizeof *s);
    assert_non_null(s);
    for (int i = 0; i < T * PER; i++)
        s[i] = (slot_t){ &r, i, NULL };
    tu_rendezvous start;
    tu_rendezvous_init(&start, T);
    pthread_t th[T];
    submitter_t sb[T];
    for (int t = 0; t < T; t++) {
        sb[t] = (submitter_t){ loop, s, t * PER, PER, &start };
        assert_int_equal(pthread_create(&th[t], NULL, submit_many, &sb[t]), 0);
    }
    for (int t = 0; t < T; t++) {
        void *ret;
        pthread_join(th[t], &ret);
        assert_null(ret);
    }
    TU_WAIT(tu_counter_wait_ge(&r.fired, T * PER, TU_DEADLINE), "the sleeps");
    for (int i = 0; i < T * PER; i++) {
        assert_int_equal(r.calls[i], 1);
        assert_int_equal(r.status[i], SEDA_IO_OK);
        seda_io_op_free(s[i].op);
    }
    assert_int_equal(r.off_loop, 0);
    seda_io_loop_free(loop);
    tu_rendezvous_destroy(&start);
    rec_destroy(&r);
    free(s);
}

static void test_loop_strerror_and_bad_arguments(void **state)
{
    (void)state;
    assert_string_equal(seda_io_strerror(SEDA_IO_OK), "ok");
    assert_string_equal(seda_io_strerror(SEDA_IO_TIMEOUT), "timeout");
    assert_string_equal(seda_io_strerror(SEDA_IO_REFUSED), "refused");
    assert_string_equal(seda_io_strerror(SEDA_IO_DNS), "dns");
    assert_string_equal(seda_io_strerror(SEDA_IO_TLS), "tls");
    assert_string_equal(seda_io_strerror(SEDA_IO_TOO_LARGE), "too_large");
    assert_string_equal(seda_io_strerror(SEDA_IO_CLOSED), "closed");
    assert_string_equal(seda_io_strerror(SEDA_IO_OTHER), "other");
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new(&loop), 0);
    seda_io_op_t *op = NULL;
    assert_int_equal(seda_io_sleep(loop, NAN, on_done, NULL, &op), -EINVAL);
    assert_null(op);
    seda_io_loop_free(loop);
    seda_io_loop_free(NULL);
    seda_io_cancel(NULL);
    seda_io_op_free(NULL);
}

/* ---- a driven loop ---- */

static void test_loop_driven_no_thread_runs_inline(void **state)
{
    (void)state;
    int threads = tu_thread_count();
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new_driven(&loop), 0);
    assert_true(seda_io_loop_fd(loop) >= 0);
    assert_int_equal(tu_thread_count(), threads);       /* no thread */
    rec_t r;
    rec_init(&r, loop, 4);
    slot_t s[2] = { { &r, 0, NULL }, { &r, 1, NULL } };
    /* A sleep of 0 is due on the turn that starts it: with the turn free,
     * that turn is the submitter's own, so the callback has run, on this
     * thread and as the loop thread, before the submission returns. */
    sleep_ok(loop, &s[0], 0);
    assert_int_equal(tu_counter_get(&r.fired), 1);
    assert_int_equal(r.status[0], SEDA_IO_OK);
    assert_int_equal(r.off_loop, 0);
    assert_false(seda_io_loop_is_current(loop));        /* turn given back */
    /* Nothing drives it: a pending op waits, then ends with the loop. */
    sleep_ok(loop, &s[1], 60.0);
    seda_io_loop_run(loop);
    assert_int_equal(tu_counter_get(&r.fired), 1);
    seda_io_loop_free(loop);
    assert_int_equal(tu_counter_get(&r.fired), 2);
    assert_int_equal(r.status[1], SEDA_IO_CANCELLED);
    assert_int_equal(r.off_loop, 0);
    seda_io_op_free(s[0].op);
    seda_io_op_free(s[1].op);
    assert_int_equal(tu_thread_count(), threads);
    /* A loop with its own thread has no descriptor to drive. */
    assert_int_equal(seda_io_loop_new(&loop), 0);
    assert_int_equal(seda_io_loop_fd(loop), -1);
    seda_io_loop_run(loop);                             /* does nothing */
    seda_io_loop_free(loop);
    rec_destroy(&r);
}

/* A driver: waits (no bound) for the loop's descriptor or its stop
 * eventfd, runs the loop. */
typedef struct driver {
    seda_io_loop_t *loop;
    int stopfd;
    long turns;
} driver_t;

static void *drive_main(void *arg)
{
    driver_t *d = arg;
    struct pollfd p[2] = { { seda_io_loop_fd(d->loop), POLLIN, 0 },
                           { d->stopfd, POLLIN, 0 } };
    for (;;) {
        if (poll(p, 2, -1) < 0)
            continue;
        if (p[1].revents)
            return NULL;
        seda_io_loop_run(d->loop);
        d->turns++;
    }
}

static void test_loop_driven_by_two_threads(void **state)
{
    (void)state;
    seda_io_loop_t *loop;
    assert_int_equal(seda_io_loop_new_driven(&loop), 0);
    enum { T = 2, PER = 1000, LATE = 50 };
    rec_t r;
    rec_init(&r, loop, T * PER + LATE);
    slot_t *s = calloc(T * PER + LATE, sizeof *s);
    assert_non_null(s);
    for (int i = 0; i < T * PER + LATE; i++)
        s[i] = (slot_t){ &r, i, NULL };
    int stopfd = eventfd(0, EFD_CLOEXEC);
    assert_true(stopfd >= 0);
    driver_t d[2] = { { loop, stopfd, 0 }, { loop, stopfd, 0 } };
    pthread_t dt[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&dt[i], NULL, drive_main, &d[i]), 0);
    /* Sleeps of 1..4 ms: only the timerfd in the loop's set wakes the
     * drivers for them (they wait without a bound). */
    tu_rendezvous start;
    tu_rendezvous_init(&start, T);
    pthread_t th[T];
    submitter_t sb[T];
    for (int t = 0; t < T; t++) {
        sb[t] = (submitter_t){ loop, s, t * PER, PER, &start };
        assert_int_equal(pthread_create(&th[t], NULL, submit_many, &sb[t]), 0);
    }
    for (int t = 0; t < T; t++) {
        void *ret;
        pthread_join(th[t], &ret);
        assert_null(ret);
    }
    TU_WAIT(tu_counter_wait_ge(&r.fired, T * PER, TU_DEADLINE), "the sleeps");
    /* A sleep submitted from here, due in 20 ms: the drivers wake for it. */
    sleep_ok(loop, &s[T * PER], 0.02);
    TU_WAIT(tu_counter_wait_ge(&r.fired, T * PER + 1, TU_DEADLINE),
            "a later sleep, woken by its timer alone");
    for (int i = T * PER + 1; i < T * PER + LATE; i++)
        sleep_ok(loop, &s[i], 60.0);
    uint64_t one = 1;
    assert_int_equal(write(stopfd, &one, sizeof one), (ssize_t)sizeof one);
    for (int i = 0; i < 2; i++)
        pthread_join(dt[i], NULL);
    seda_io_loop_free(loop);
    assert_int_equal(tu_counter_get(&r.fired), T * PER + LATE);
    for (int i = 0; i < T * PER + LATE; i++) {
        assert_int_equal(r.calls[i], 1);
        assert_int_equal(r.status[i], i <= T * PER ? SEDA_IO_OK
                                                   : SEDA_IO_CANCELLED);
        seda_io_op_free(s[i].op);
    }
    assert_int_equal(r.off_loop, 0);
    assert_true(d[0].turns + d[1].turns > 0);
    close(stopfd);
    tu_rendezvous_destroy(&start);
    rec_destroy(&r);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loop_timers_fire_in_due_order),
        cmocka_unit_test(test_loop_equal_due_in_submission_order),
        cmocka_unit_test(test_loop_ten_thousand_timers),
        cmocka_unit_test(test_loop_cancel_before_fire),
        cmocka_unit_test(test_loop_cancel_after_fire),
        cmocka_unit_test(test_loop_cancel_races_completion),
        cmocka_unit_test(test_loop_free_op_before_callback),
        cmocka_unit_test(test_loop_free_with_pending_ops),
        cmocka_unit_test(test_loop_submissions_from_threads),
        cmocka_unit_test(test_loop_strerror_and_bad_arguments),
        cmocka_unit_test(test_loop_driven_no_thread_runs_inline),
        cmocka_unit_test(test_loop_driven_by_two_threads),
    };
    return cmocka_run_group_tests_name("io_loop", tests, NULL, NULL);
}
