/* SPDX-License-Identifier: MIT */
/*
 * test_fanout.c -- handlers that publish never stall the pool (SPEC §9):
 * managed blocking through the public C API.  A C consumer that fans out
 * into a small stage, with two workers and with one; a chain of fanning
 * stages; a consumer waiting on a pull stage; loans bounded by max_loans
 * and back to 0 when idle; a self-cycle still ends in hop_refused within
 * hop_timeout.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

/* A fan-out stage's consumer publishes `fan` envelopes into `to`, each
 * carrying a distinct id (its own payload * fan + i). */
typedef struct fan {
    seda_bus_t *bus;
    const char *to;
    int fan;
    atomic_long refused;        /* publishes that failed */
    atomic_int last_rc;
} fan_t;

static bool fan_consumer(seda_env_t *env, void *ud)
{
    fan_t *f = ud;
    uint64_t base = tu_env_u64(env) * (uint64_t)f->fan;
    for (int i = 0; i < f->fan; i++) {
        uint64_t v = base + (uint64_t)i;
        int rc = seda_publish(f->bus, f->to, &v, sizeof v, NULL);
        if (rc != 0) {
            atomic_fetch_add(&f->refused, 1);
            atomic_store(&f->last_rc, rc);
        }
    }
    return true;
}

/* The sink records every id it sees. */
typedef struct sink {
    tu_idset ids;
    tu_counter calls;
} sink_t;

static bool sink_consumer(seda_env_t *env, void *ud)
{
    sink_t *s = ud;
    tu_idset_add(&s->ids, tu_env_u64(env));
    tu_counter_add(&s->calls, 1);
    return true;
}

static void sink_init(sink_t *s)
{
    tu_idset_init(&s->ids);
    tu_counter_init(&s->calls);
}

static void sink_destroy(sink_t *s)
{
    tu_idset_destroy(&s->ids);
    tu_counter_destroy(&s->calls);
}

static seda_bus_t *new_bus(int workers, int max_loans, double hop_timeout)
{
    seda_bus_opts o;
    seda_bus_opts_init(&o);
    o.workers = workers;
    o.max_loans = max_loans;
    if (hop_timeout > 0)
        o.hop_timeout = hop_timeout;
    seda_bus_t *b = NULL;
    assert_int_equal(seda_bus_new(&o, &b), 0);
    return b;
}

static seda_stage_t *add(seda_bus_t *b, const char *name, int capacity,
                         int concurrency, seda_consumer_fn fn, void *ud)
{
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = name;
    o.capacity = capacity;
    o.concurrency = concurrency;
    seda_stage_t *st = NULL;
    char err[256];
    assert_int_equal(seda_stage_add(b, &o, &st, err, sizeof err), 0);
    if (fn)
        assert_true(seda_stage_consume(st, fn, ud) >= 0);
    return st;
}

static seda_bus_stats bstats(seda_bus_t *b)
{
    seda_bus_stats s;
    seda_bus_stats_get(b, &s);
    return s;
}

/* Loans back to 0 once nothing waits (polled with a deadline). */
static void wait_no_loans(seda_bus_t *b)
{
    double end = seda_now() + TU_DEADLINE;
    while (bstats(b).workers_loaned != 0) {
        if (seda_now() > end)
            fail_msg("workers_loaned still %d after %.0f s",
                     bstats(b).workers_loaned, (double)TU_DEADLINE);
        struct timespec nap = { 0, 1000000 };   /* polling back-off only */
        nanosleep(&nap, NULL);
    }
}

/* The case: src (concurrency 2) fans 1000 each into sink
 * (capacity 64); four sources give 4000 deliveries, each exactly once,
 * no refusal, no dead letter. */
static void fanout_case(int workers)
{
    seda_bus_t *b = new_bus(workers, 0, 0);
    sink_t s;
    sink_init(&s);
    fan_t f = { .bus = b, .to = "sink", .fan = 1000 };
    atomic_init(&f.refused, 0);
    atomic_init(&f.last_rc, 0);
    add(b, "sink", 64, 1, sink_consumer, &s);
    add(b, "src", 1024, 2, fan_consumer, &f);
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(tu_publish_u64(b, "src", i, NULL), 0);
    TU_WAIT(tu_counter_wait_ge(&s.calls, 4000, TU_DEADLINE),
            "4000 sink deliveries");
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    seda_bus_stats bs = bstats(b);
    assert_int_equal(atomic_load(&f.refused), 0);
    assert_int_equal(tu_idset_size(&s.ids), 4000);
    assert_int_equal(tu_idset_dups(&s.ids), 0);
    assert_int_equal(bs.accepted, 4004);
    assert_int_equal(bs.completed, 4004);
    assert_int_equal(bs.dead_lettered, 0);
    assert_int_equal(bs.dropped, 0);
    assert_int_equal(bs.max_loans, 4 * workers);
    assert_true(bs.loans >= 1);                 /* the wait was covered */
    assert_true(bs.loans_peak >= 1 && bs.loans_peak <= bs.max_loans);
    wait_no_loans(b);
    assert_int_equal(seda_bus_shutdown(b, TU_DEADLINE), 0);
    seda_bus_free(b);
    sink_destroy(&s);
}

static void test_fanout_two_workers_delivers_every_envelope(void **state)
{
    (void)state;
    fanout_case(2);
}

static void test_fanout_one_worker_delivers_every_envelope(void **state)
{
    (void)state;
    fanout_case(1);
}

/* a -> b -> c -> sink, each stage fanning 10 out into the next, every
 * capacity 8, one worker: 5 * 10 * 10 * 10 = 5000 at the sink. */
static void test_fanout_chain_of_three_stages(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(1, 0, 0);
    sink_t s;
    sink_init(&s);
    fan_t fa = { .bus = b, .to = "b", .fan = 10 };
    fan_t fb = { .bus = b, .to = "c", .fan = 10 };
    fan_t fc = { .bus = b, .to = "sink", .fan = 10 };
    fan_t *all[3] = { &fa, &fb, &fc };
    for (int i = 0; i < 3; i++) {
        atomic_init(&all[i]->refused, 0);
        atomic_init(&all[i]->last_rc, 0);
    }
    add(b, "sink", 8, 1, sink_consumer, &s);
    add(b, "c", 8, 1, fan_consumer, &fc);
    add(b, "b", 8, 1, fan_consumer, &fb);
    add(b, "a", 8, 1, fan_consumer, &fa);
    for (uint64_t i = 0; i < 5; i++)
        assert_int_equal(tu_publish_u64(b, "a", i, NULL), 0);
    TU_WAIT(tu_counter_wait_ge(&s.calls, 5000, TU_DEADLINE),
            "5000 sink deliveries");
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(atomic_load(&all[i]->refused), 0);
    assert_int_equal(tu_idset_size(&s.ids), 5000);
    assert_int_equal(tu_idset_dups(&s.ids), 0);
    seda_bus_stats bs = bstats(b);
    assert_int_equal(bs.completed, bs.accepted);
    assert_int_equal(bs.dead_lettered, 0);
    assert_true(bs.loans_peak <= bs.max_loans);
    wait_no_loans(b);
    seda_bus_free(b);
    sink_destroy(&s);
}

/* max_loans bounds the loans even when more handlers wait than it allows:
 * then the waits that got none run out at hop_timeout (refused, counted,
 * reported), and the accounting still holds. */
static void test_fanout_loans_never_exceed_max_loans(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(1, 1, 0.2);
    sink_t s;
    sink_init(&s);
    fan_t f = { .bus = b, .to = "sink", .fan = 10 };
    atomic_init(&f.refused, 0);
    atomic_init(&f.last_rc, 0);
    seda_stage_t *sink = add(b, "sink", 4, 1, sink_consumer, &s);
    add(b, "src", 1024, 4, fan_consumer, &f);
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(tu_publish_u64(b, "src", i, NULL), 0);
    assert_int_equal(seda_bus_wait_idle(b, 30), 0);
    seda_bus_stats bs = bstats(b);
    assert_int_equal(bs.max_loans, 1);
    assert_true(bs.loans_peak <= 1);
    long refused = atomic_load(&f.refused);
    assert_int_equal(tu_counter_get(&s.calls) + refused, 40);
    if (refused > 0) {
        assert_int_equal(atomic_load(&f.last_rc), SEDA_ETIMEDOUT);
        seda_stage_stats ss;
        seda_stage_stats_get(sink, &ss);
        assert_true(ss.errors >= 1);            /* the hop_timeout report */
    }
    assert_int_equal(bs.accepted, bs.completed + bs.dead_lettered +
                                      bs.dropped + bs.in_system);
    wait_no_loans(b);
    seda_bus_free(b);
    sink_destroy(&s);
}

/* A consumer waits on a pull stage that another stage feeds: with one
 * worker, only a loan can run the feeder while the receive waits. */
typedef struct puller {
    seda_stage_t *pull;
    atomic_int rc;
    atomic_long got;
} puller_t;

static bool pull_waiter(seda_env_t *env, void *ud)
{
    (void)env;
    puller_t *p = ud;
    seda_lease_t *l = NULL;
    int rc = seda_stage_receive(p->pull, 5.0, &l);
    atomic_store(&p->rc, rc);
    if (rc == 0) {
        seda_env_t *e = seda_lease_env(l);
        atomic_store(&p->got, (long)tu_env_u64(e));
        seda_lease_release_env(l);
        assert_int_equal(seda_lease_ack(l), 0);
    }
    return true;
}

typedef struct feeder {
    seda_bus_t *bus;
} feeder_t;

static bool feed_consumer(seda_env_t *env, void *ud)
{
    feeder_t *f = ud;
    uint64_t v = tu_env_u64(env) + 1000;
    return seda_publish(f->bus, "p", &v, sizeof v, NULL) == 0;
}

static void test_fanout_consumer_waits_on_a_pull_stage(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(1, 0, 0);
    puller_t pu;
    atomic_init(&pu.rc, 1);
    atomic_init(&pu.got, 0);
    feeder_t fe = { b };
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "p";
    o.pull = true;
    assert_int_equal(seda_stage_add(b, &o, &pu.pull, NULL, 0), 0);
    add(b, "w", 16, 1, pull_waiter, &pu);
    add(b, "feed", 16, 1, feed_consumer, &fe);
    assert_int_equal(tu_publish_u64(b, "w", 1, NULL), 0);
    /* The waiter is inside its receive (in_flight) before the feed. */
    assert_true(tu_stage_wait(seda_bus_stage(b, "w"), tu_pred_in_flight_eq,
                              1, TU_DEADLINE));
    assert_int_equal(tu_publish_u64(b, "feed", 7, NULL), 0);
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    assert_int_equal(atomic_load(&pu.rc), 0);   /* not SEDA_ETIMEDOUT */
    assert_int_equal(atomic_load(&pu.got), 1007);
    seda_bus_stats bs = bstats(b);
    assert_true(bs.loans >= 1);
    assert_int_equal(bs.completed, 3);
    wait_no_loans(b);
    seda_bus_free(b);
}

/* A stage whose only drain task routes into the stage itself while it is
 * full: no loan can drain it (its one permit waits), so the hop ends in
 * hop_refused at hop_timeout -- the last resort for a true cycle -- and
 * the report says it was a cycle. */
typedef struct cyc {
    tu_gate gate;
    tu_counter entered;
    tu_counter dlq;
    pthread_mutex_t mu;
    char reason[64];            /* guarded by mu */
} cyc_t;

static bool cyc_consumer(seda_env_t *env, void *ud)
{
    cyc_t *c = ud;
    if (tu_env_u64(env) == 1 && seda_env_attempts(env) == 1 &&
        seda_env_slip_count(env) == 1) {
        tu_counter_add(&c->entered, 1);
        tu_gate_wait(&c->gate, TU_DEADLINE);
    }
    return true;
}

static bool cyc_dlq(seda_env_t *env, void *ud)
{
    cyc_t *c = ud;
    const char *r = seda_env_header(env, "x-dead-reason");
    pthread_mutex_lock(&c->mu);
    snprintf(c->reason, sizeof c->reason, "%s", r ? r : "(none)");
    pthread_mutex_unlock(&c->mu);
    tu_counter_add(&c->dlq, 1);
    return true;
}

static void test_fanout_self_cycle_ends_in_hop_refused(void **state)
{
    (void)state;
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    bo.hop_timeout = 0.3;
    bo.dead_letter = "dlq";
    seda_bus_t *b = NULL;
    assert_int_equal(seda_bus_new(&bo, &b), 0);
    cyc_t c;
    tu_gate_init(&c.gate);
    tu_counter_init(&c.entered);
    tu_counter_init(&c.dlq);
    pthread_mutex_init(&c.mu, NULL);
    c.reason[0] = 0;
    seda_stage_t *loop = add(b, "loop", 1, 1, cyc_consumer, &c);
    add(b, "dlq", 16, 1, cyc_dlq, &c);
    static const char *const slip[] = { "loop" };
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.slip = slip;
    po.nslip = 1;
    assert_int_equal(tu_publish_u64(b, "loop", 1, &po), 0);
    TU_WAIT(tu_counter_wait_ge(&c.entered, 1, TU_DEADLINE),
            "the first envelope in its handler");
    /* Fill the stage (capacity 1) while the handler holds. */
    assert_int_equal(tu_publish_u64(b, "loop", 2, NULL), 0);
    double t0 = seda_now();
    tu_gate_open(&c.gate);
    TU_WAIT(tu_counter_wait_ge(&c.dlq, 1, TU_DEADLINE), "the dead letter");
    double waited = seda_now() - t0;
    pthread_mutex_lock(&c.mu);
    assert_string_equal(c.reason, "hop_refused");
    pthread_mutex_unlock(&c.mu);
    assert_true(waited >= 0.25);                /* it did wait hop_timeout */
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    seda_stage_stats ss;
    seda_stage_stats_get(loop, &ss);
    assert_true(ss.errors >= 1);                /* the cycle was reported */
    seda_bus_stats bs = bstats(b);
    assert_int_equal(bs.dead_lettered, 1);
    assert_int_equal(bs.completed, 1);
    seda_bus_free(b);
    tu_gate_destroy(&c.gate);
    tu_counter_destroy(&c.entered);
    tu_counter_destroy(&c.dlq);
    pthread_mutex_destroy(&c.mu);
}

/* max_loans out of range is refused. */
static void test_fanout_max_loans_validated(void **state)
{
    (void)state;
    seda_bus_opts o;
    seda_bus_opts_init(&o);
    assert_int_equal(o.max_loans, 0);
    seda_bus_t *b = NULL;
    o.max_loans = SEDA_MAX_LOANS + 1;
    assert_int_equal(seda_bus_new(&o, &b), SEDA_EINVAL);
    o.max_loans = -2;
    assert_int_equal(seda_bus_new(&o, &b), SEDA_EINVAL);
    o.max_loans = -1;                           /* no loans at all */
    o.workers = 3;
    assert_int_equal(seda_bus_new(&o, &b), 0);
    assert_int_equal(bstats(b).max_loans, 0);
    seda_bus_free(b);
    o.max_loans = 0;                            /* 4 * workers, following */
    assert_int_equal(seda_bus_new(&o, &b), 0);
    assert_int_equal(bstats(b).max_loans, 12);
    assert_int_equal(seda_bus_set_workers(b, 2), 0);
    assert_int_equal(bstats(b).max_loans, 8);
    seda_bus_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fanout_two_workers_delivers_every_envelope),
        cmocka_unit_test(test_fanout_one_worker_delivers_every_envelope),
        cmocka_unit_test(test_fanout_chain_of_three_stages),
        cmocka_unit_test(test_fanout_loans_never_exceed_max_loans),
        cmocka_unit_test(test_fanout_consumer_waits_on_a_pull_stage),
        cmocka_unit_test(test_fanout_self_cycle_ends_in_hop_refused),
        cmocka_unit_test(test_fanout_max_loans_validated),
    };
    return cmocka_run_group_tests_name("fanout", tests, NULL, NULL);
}
