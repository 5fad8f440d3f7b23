/* SPDX-License-Identifier: MIT */
/*
 * test_admission.c -- SPEC §10 in the core, through the public C API:
 * priority lanes (order, starvation by age, drop_oldest evicting low
 * first), adaptive shedding (SEDA_ESHED for low then normal, never high;
 * at the door, for a stage on the slip),
 * retry backoff (delayed on a timer, lower bounds, swept at shutdown) and
 * seda_stage_tune_admission's checks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

/* A consumer that records payloads (uint64) in order, holds the first
 * one on a gate, and spins `cost` seconds per envelope. */
typedef struct rec {
    pthread_mutex_t mu;
    uint64_t seen[1024];        /* guarded by mu */
    double at[1024];            /* seda_now() of each call; mu */
    int attempts[1024];         /* guarded by mu */
    int n;                      /* guarded by mu */
    tu_gate gate;
    tu_counter calls;
    double cost;
    bool nack;                  /* always nack */
} rec_t;

static bool rec_consumer(seda_env_t *env, void *ud)
{
    rec_t *r = ud;
    uint64_t v = tu_env_u64(env);
    pthread_mutex_lock(&r->mu);
    int i = r->n < 1024 ? r->n++ : 1023;
    r->seen[i] = v;
    r->at[i] = seda_now();
    r->attempts[i] = seda_env_attempts(env);
    pthread_mutex_unlock(&r->mu);
    tu_counter_add(&r->calls, 1);
    if (v == 0)
        tu_gate_wait(&r->gate, TU_DEADLINE);
    if (r->cost > 0)
        tu_spin(r->cost);
    return !r->nack;
}

static void rec_init(rec_t *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    tu_gate_init(&r->gate);
    tu_counter_init(&r->calls);
}

static void rec_destroy(rec_t *r)
{
    pthread_mutex_destroy(&r->mu);
    tu_gate_destroy(&r->gate);
    tu_counter_destroy(&r->calls);
}

static seda_bus_t *new_bus(void)
{
    seda_bus_opts o;
    seda_bus_opts_init(&o);
    o.workers = 2;
    seda_bus_t *b = NULL;
    assert_int_equal(seda_bus_new(&o, &b), 0);
    return b;
}

static seda_stage_t *add(seda_bus_t *b, seda_stage_opts *o, rec_t *r)
{
    seda_stage_t *st = NULL;
    char err[256];
    if (seda_stage_add(b, o, &st, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_true(seda_stage_consume(st, rec_consumer, r) >= 0);
    return st;
}

static int pub(seda_bus_t *b, uint64_t v, int prio)
{
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.priority = prio;
    return tu_publish_u64(b, "s", v, &po);
}

/* Hold the gate envelope (payload 0) in the consumer. */
static void hold(seda_bus_t *b, rec_t *r)
{
    assert_int_equal(pub(b, 0, SEDA_PRIO_NORMAL), 0);
    TU_WAIT(tu_counter_wait_ge(&r->calls, 1, TU_DEADLINE), "the gate held");
}

static void test_admission_priority_order(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t r;
    rec_init(&r);
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "s";
    seda_stage_t *st = add(b, &o, &r);
    hold(b, &r);
    /* 1x normal, 2x low, 3x high, in an interleaved order. */
    static const int pr[] = { SEDA_PRIO_NORMAL, SEDA_PRIO_LOW, SEDA_PRIO_HIGH,
                              SEDA_PRIO_NORMAL, SEDA_PRIO_HIGH, SEDA_PRIO_LOW };
    static const uint64_t v[] = { 11, 21, 31, 12, 32, 22 };
    for (int i = 0; i < 6; i++)
        assert_int_equal(pub(b, v[i], pr[i]), 0);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.depth, 6);
    assert_int_equal(s.depth_high, 2);
    assert_int_equal(s.depth_low, 2);
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.priority = 7;
    assert_int_equal(tu_publish_u64(b, "s", 1, &po), SEDA_EINVAL);
    tu_gate_open(&r.gate);
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    static const uint64_t want[] = { 0, 31, 32, 11, 12, 21, 22 };
    assert_int_equal(r.n, 7);
    for (int i = 0; i < 7; i++)
        assert_int_equal(r.seen[i], want[i]);
    seda_bus_free(b);
    rec_destroy(&r);
}

static void test_admission_starvation_by_age(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t r;
    rec_init(&r);
    r.cost = 0.001;
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "s";
    o.starve_after = 0.03;
    add(b, &o, &r);
    hold(b, &r);
    assert_int_equal(pub(b, 999, SEDA_PRIO_LOW), 0);
    for (uint64_t i = 1; i <= 300; i++)
        assert_int_equal(pub(b, i, SEDA_PRIO_HIGH), 0);
    tu_gate_open(&r.gate);
    assert_int_equal(seda_bus_wait_idle(b, 60), 0);
    int pos = -1;
    for (int i = 0; i < r.n; i++)
        if (r.seen[i] == 999)
            pos = i;
    /* Not after all 300 high ones, and not before its time either. */
    assert_true(pos > 1 && pos < 300);
    seda_bus_free(b);
    rec_destroy(&r);
}

static void test_admission_drop_oldest_evicts_low_first(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t r;
    rec_init(&r);
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "s";
    o.capacity = 3;
    o.policy = SEDA_POLICY_DROP_OLDEST;
    add(b, &o, &r);
    hold(b, &r);
    assert_int_equal(pub(b, 1, SEDA_PRIO_NORMAL), 0);
    assert_int_equal(pub(b, 2, SEDA_PRIO_LOW), 0);
    assert_int_equal(pub(b, 3, SEDA_PRIO_HIGH), 0);
    assert_int_equal(pub(b, 4, SEDA_PRIO_NORMAL), 0);   /* evicts 2 */
    assert_int_equal(pub(b, 5, SEDA_PRIO_LOW), 0);      /* evicts 1 */
    tu_gate_open(&r.gate);
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    static const uint64_t want[] = { 0, 3, 4, 5 };
    assert_int_equal(r.n, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(r.seen[i], want[i]);
    seda_bus_stats bs;
    seda_bus_stats_get(b, &bs);
    assert_int_equal(bs.dropped, 2);
    assert_int_equal(bs.accepted, bs.completed + bs.dropped);
    seda_bus_free(b);
    rec_destroy(&r);
}

/* Stage "s" of b: a consumer taking 2 ms an envelope (500 a second),
 * shedding at a 10 ms target over `interval`; the gate open. */
static seda_stage_t *slow_shedding_stage(seda_bus_t *b, rec_t *r,
                                         int capacity, double interval)
{
    rec_init(r);
    r->cost = 0.002;
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "s";
    o.capacity = capacity;
    o.shed_target = 0.01;
    o.shed_interval = interval;
    seda_stage_t *st = add(b, &o, r);
    tu_gate_open(&r->gate);
    return st;
}

/* Wait until b is idle with everything it accepted completed; free it. */
static void drain_all_completed(seda_bus_t *b, rec_t *r)
{
    assert_int_equal(seda_bus_wait_idle(b, 120), 0);
    seda_bus_stats bs;
    seda_bus_stats_get(b, &bs);
    assert_int_equal(bs.accepted, bs.completed);
    seda_bus_free(b);
    rec_destroy(r);
}

static void test_admission_shed_low_then_normal_never_high(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t r;
    seda_stage_t *st = slow_shedding_stage(b, &r, 2000, 0.03);
    int low = 0, normal = 0, high = 0;
    double end = seda_now() + 20;
    uint64_t v = 1;
    while (normal == 0 && seda_now() < end) {
        int rc = pub(b, v++, SEDA_PRIO_LOW);
        if (rc == SEDA_ESHED)
            low++;
        else
            assert_int_equal(rc, 0);
        rc = pub(b, v++, SEDA_PRIO_NORMAL);
        if (rc == SEDA_ESHED)
            normal++;
        else
            assert_int_equal(rc, 0);
        if (pub(b, v++, SEDA_PRIO_HIGH) != 0)
            high++;
    }
    assert_true(low > 0);
    assert_true(normal > 0);
    assert_int_equal(high, 0);
    assert_string_equal(seda_strerror(SEDA_ESHED), "shed");
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.shed, (uint64_t)(low + normal));
    assert_true(s.shedding >= 1);
    /* Turning it off ends the shedding at once. */
    seda_stage_opts t;
    seda_stage_opts_init(&t);
    t.shed_target = 0;
    assert_int_equal(seda_stage_tune_admission(st, &t, SEDA_TUNE_SHED, NULL,
                                               0), 0);
    assert_int_equal(pub(b, v++, SEDA_PRIO_LOW), 0);
    drain_all_completed(b, &r);
}

/* Shedding at the door (SPEC §13): a new itinerary through "f" whose slip
 * names the shedding "s" is refused at "f" (counted in f's shed and s's
 * shed_for); high priority still enters; every accepted one completes
 * (hops are never shed). */
static void test_admission_shed_at_the_door(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t r, rf;
    slow_shedding_stage(b, &r, 4000, 0.03);
    rec_init(&rf);
    tu_gate_open(&rf.gate);
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "f";
    o.capacity = 4000;
    seda_stage_t *f = add(b, &o, &rf);
    const char *slip[] = { "s" };
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.slip = slip;
    po.nslip = 1;
    int accepted = 0, refused = 0;
    uint64_t v = 1;
    double end = seda_now() + 20;
    while (refused == 0 && seda_now() < end) {
        int rc = tu_publish_u64(b, "f", v++, &po);
        if (rc == SEDA_ESHED)
            refused++;
        else if (rc == 0)
            accepted++;
        else
            fail_msg("publish: %s", seda_strerror(rc));
    }
    assert_true(refused > 0);
    seda_stage_stats fs, ss;
    seda_stage_stats_get(f, &fs);
    seda_stage_stats_get(seda_bus_stage(b, "s"), &ss);
    assert_true(ss.shed_for >= 1);
    assert_int_equal(fs.shed_for, 0);
    assert_true(fs.shed >= 1);
    /* Straight to "s" with no slip: its own shedding, its own shed_for. */
    int own = 0;
    for (int i = 0; i < 50 && !own; i++)
        own = pub(b, v++, SEDA_PRIO_NORMAL) == SEDA_ESHED;
    if (own) {
        seda_stage_stats_get(seda_bus_stage(b, "s"), &ss);
        assert_true(ss.shed_for >= 2);
    }
    po.priority = SEDA_PRIO_HIGH;
    assert_int_equal(tu_publish_u64(b, "f", v++, &po), 0);
    assert_int_equal(seda_bus_wait_idle(b, 120), 0);
    seda_bus_stats bs;
    seda_bus_stats_get(b, &bs);
    assert_int_equal(bs.accepted, bs.completed);
    assert_int_equal(bs.dropped, 0);
    seda_bus_free(b);
    rec_destroy(&r);
    rec_destroy(&rf);
}

/* Publish normal envelopes, one per `pace` seconds, until one is shed;
 * returns how many were accepted before it (or -1 past `until`). */
static int paced_until_shed(seda_bus_t *b, uint64_t *v, double pace,
                            double until)
{
    int accepted = 0;
    double next = seda_now();
    while (seda_now() < until) {
        while (seda_now() < next)
            ;
        next += pace;
        int rc = pub(b, (*v)++, SEDA_PRIO_NORMAL);
        if (rc == SEDA_ESHED)
            return accepted;
        assert_int_equal(rc, 0);
        accepted++;
    }
    return -1;
}

/* Once shedding has ended, the stage stays armed for a while: when the
 * queue is slow again (a start above target), it sheds again at once, at
 * the level it had, not after another interval above target (and another
 * to reach normal priority).  Before, a steady overload filled the queue
 * each time: the sojourn swung between target and the full-queue delay. */
static void test_admission_shed_rearms_at_once(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t r;
    seda_stage_t *st = slow_shedding_stage(b, &r, 5000, 0.5);
    /* Twice the stage's rate, normal priority only: shed after one
     * interval above target (about 500 publishes at this pace), normal at
     * once since no low-priority publish came to refuse first (two
     * intervals, about 1000, before). */
    uint64_t v = 1;
    double end = seda_now() + 60;
    int first = paced_until_shed(b, &v, 0.001, end);
    assert_true(first > 0);
    if (first >= 800)
        fail_msg("%d accepted before normal publishes were shed: that "
                 "took two intervals", first);
    /* Let the queue drain; the next publish ends the shedding. */
    seda_stage_stats s;
    do {
        seda_stage_stats_get(st, &s);
    } while ((s.depth > 0 || s.in_flight > 0) && seda_now() < end);
    assert_int_equal(s.depth, 0);
    /* The same overload again: shed as soon as a start waits past the
     * target (10 ms: about 10 publishes in), far sooner than the two
     * intervals (about 1000 publishes) the first time took. */
    int again = paced_until_shed(b, &v, 0.001, end);
    print_message("accepted before shedding: %d the first time, %d after "
                  "it ended\n", first, again);
    assert_true(again >= 0);
    if (again >= first / 4)
        fail_msg("%d accepted before the stage shed again (%d the first "
                 "time)", again, first);
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.shedding, 2);
    drain_all_completed(b, &r);
}

static void test_admission_retry_backoff(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t r;
    rec_init(&r);
    r.nack = true;
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "s";
    o.max_attempts = 3;
    o.retry_backoff = 0.05;
    o.retry_multiplier = 3;
    o.retry_jitter = false;
    seda_stage_t *st = add(b, &o, &r);
    tu_gate_open(&r.gate);
    assert_int_equal(pub(b, 7, SEDA_PRIO_NORMAL), 0);
    assert_true(tu_stage_wait(st, tu_pred_in_flight_eq, 0, TU_DEADLINE));
    TU_WAIT(tu_counter_wait_ge(&r.calls, 1, TU_DEADLINE), "first attempt");
    seda_stage_stats s;
    double until = seda_now() + TU_DEADLINE;
    do {
        seda_stage_stats_get(st, &s);
    } while (s.delayed == 0 && r.n < 3 && seda_now() < until);
    assert_true(s.delayed == 1 || r.n >= 2);
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    assert_int_equal(r.n, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(r.attempts[i], i + 1);
    assert_true(r.at[1] - r.at[0] >= 0.05);
    assert_true(r.at[2] - r.at[1] >= 0.15);
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.delayed, 0);
    assert_int_equal(s.nacked, 3);
    assert_int_equal(s.dead_lettered, 1);
    seda_bus_free(b);
    rec_destroy(&r);
}

static void test_admission_delayed_retry_swept_at_shutdown(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t r;
    rec_init(&r);
    r.nack = true;
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "s";
    o.max_attempts = 2;
    o.retry_backoff = 100;
    o.retry_max_backoff = 100;
    seda_stage_t *st = add(b, &o, &r);
    tu_gate_open(&r.gate);
    assert_int_equal(pub(b, 5, SEDA_PRIO_NORMAL), 0);
    seda_stage_stats s;
    double until = seda_now() + TU_DEADLINE;
    do {
        seda_stage_stats_get(st, &s);
    } while (s.delayed == 0 && seda_now() < until);
    assert_int_equal(s.delayed, 1);
    seda_bus_stats bs;
    seda_bus_stats_get(b, &bs);
    assert_int_equal(bs.in_system, 1);
    assert_int_equal(seda_bus_wait_idle(b, 0.05), SEDA_ETIMEDOUT);
    assert_int_equal(seda_bus_shutdown(b, 0.05), SEDA_ETIMEDOUT);
    seda_bus_stats_get(b, &bs);
    assert_int_equal(bs.dropped, 1);
    assert_int_equal(bs.in_system, 0);
    assert_int_equal(bs.accepted, bs.completed + bs.dead_lettered +
                                      bs.dropped);
    seda_bus_free(b);
    rec_destroy(&r);
}

static void test_admission_tune_checks_everything_first(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t r;
    rec_init(&r);
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "s";
    seda_stage_t *st = add(b, &o, &r);
    char err[256];
    seda_stage_opts t;
    seda_stage_opts_init(&t);
    t.shed_target = 0.01;
    t.retry_backoff = 0.5;
    t.retry_max_backoff = 0.1;               /* below backoff: refused */
    assert_int_equal(seda_stage_tune_admission(st, &t, SEDA_TUNE_SHED |
                                               SEDA_TUNE_RETRY, err,
                                               sizeof err), SEDA_EINVAL);
    assert_non_null(strstr(err, "stage 's'"));
    assert_non_null(strstr(err, "retry.max_backoff"));
    t.retry_max_backoff = 1;
    t.starve_after = 0;
    assert_int_equal(seda_stage_tune_admission(st, &t, SEDA_TUNE_STARVE, err,
                                               sizeof err), SEDA_EINVAL);
    assert_non_null(strstr(err, "starve_after"));
    /* Bad options at creation are refused the same way. */
    seda_stage_opts bad;
    seda_stage_opts_init(&bad);
    bad.name = "bad";
    bad.shed_target = -1;
    assert_int_equal(seda_stage_add(b, &bad, NULL, err, sizeof err),
                     SEDA_EINVAL);
    assert_non_null(strstr(err, "shed.target"));
    bad.shed_target = 0;
    bad.retry_backoff = 0.1;
    bad.retry_multiplier = 0.5;
    assert_int_equal(seda_stage_add(b, &bad, NULL, err, sizeof err),
                     SEDA_EINVAL);
    assert_non_null(strstr(err, "retry.multiplier"));
    assert_null(seda_bus_stage(b, "bad"));
    seda_bus_free(b);
    rec_destroy(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admission_priority_order),
        cmocka_unit_test(test_admission_starvation_by_age),
        cmocka_unit_test(test_admission_drop_oldest_evicts_low_first),
        cmocka_unit_test(test_admission_shed_low_then_normal_never_high),
        cmocka_unit_test(test_admission_shed_rearms_at_once),
        cmocka_unit_test(test_admission_shed_at_the_door),
        cmocka_unit_test(test_admission_retry_backoff),
        cmocka_unit_test(test_admission_delayed_retry_swept_at_shutdown),
        cmocka_unit_test(test_admission_tune_checks_everything_first),
    };
    return cmocka_run_group_tests_name("admission", tests, NULL, NULL);
}
