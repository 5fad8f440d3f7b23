/* SPDX-License-Identifier: MIT */
/*
 * test_nack.c -- one nack rule (SPEC §3): a nack discards the attempt's
 * changes, so a retry and a dead letter carry the payload and headers as
 * they were delivered to that attempt -- from a C consumer (returning
 * false, or seda_env_fail), from a pub/sub consumer (the others' acked
 * changes stay), and from a pull lease (nack and expiry).  An ack keeps
 * them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

/* What one delivery saw. */
typedef struct seen {
    char payload[32];
    char hx[32];                /* header x, or "-" */
    char hy[32];                /* header y, or "-" */
    char reason[32];            /* x-dead-reason, or "-" */
    int slip;
    int attempt;
} seen_t;

typedef struct rec {
    pthread_mutex_t mu;
    seen_t seen[8];             /* guarded by mu */
    int n;                      /* guarded by mu */
    tu_counter calls;
    int nack_until;             /* nack while attempts < this (0: never) */
    bool use_fail;              /* nack through seda_env_fail */
    const char *tag;            /* what this consumer writes */
} rec_t;

static void rec_init(rec_t *r, int nack_until, const char *tag)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    tu_counter_init(&r->calls);
    r->nack_until = nack_until;
    r->tag = tag;
}

static void rec_destroy(rec_t *r)
{
    pthread_mutex_destroy(&r->mu);
    tu_counter_destroy(&r->calls);
}

static void copy_str(char *dst, const char *src)
{
    snprintf(dst, 32, "%s", src ? src : "-");
}

static void record(rec_t *r, seda_env_t *env)
{
    size_t len = 0;
    const char *p = seda_env_payload(env, &len);
    pthread_mutex_lock(&r->mu);
    if (r->n < 8) {
        seen_t *s = &r->seen[r->n++];
        snprintf(s->payload, sizeof s->payload, "%.*s", (int)len, p ? p : "");
        copy_str(s->hx, seda_env_header(env, "x"));
        copy_str(s->hy, seda_env_header(env, "y"));
        copy_str(s->reason, seda_env_header(env, "x-dead-reason"));
        s->slip = seda_env_slip_count(env);
        s->attempt = seda_env_attempts(env);
    }
    pthread_mutex_unlock(&r->mu);
    tu_counter_add(&r->calls, 1);
}

/* Record what was delivered, change payload and headers and forward a
 * hop, then nack while attempts < nack_until. */
static bool changer(seda_env_t *env, void *ud)
{
    rec_t *r = ud;
    record(r, env);
    char buf[32];
    snprintf(buf, sizeof buf, "changed-by-%s", r->tag);
    assert_int_equal(seda_env_set_payload(env, buf, strlen(buf)), 0);
    assert_int_equal(seda_env_set_header(env, "x", r->tag), 0);
    assert_int_equal(seda_env_set_header(env, "y", "added"), 0);
    static const char *const hop[] = { "nowhere" };
    bool nack = r->nack_until == 0 || seda_env_attempts(env) < r->nack_until;
    if (nack) {
        assert_int_equal(seda_env_forward(env, hop, 1), 0);
        if (r->use_fail) {
            seda_env_fail(env, "failing on purpose");
            return true;
        }
        return false;
    }
    assert_int_equal(seda_env_set_header(env, "y", NULL), 0);
    return true;
}

static bool recorder(seda_env_t *env, void *ud)
{
    record(ud, env);
    return true;
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

static seda_stage_t *add(seda_bus_t *b, const char *name, int max_attempts,
                         int delivery, const char *dlq)
{
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = name;
    o.max_attempts = max_attempts;
    o.delivery = delivery;
    o.dead_letter = dlq;
    seda_stage_t *st = NULL;
    assert_int_equal(seda_stage_add(b, &o, &st, NULL, 0), 0);
    return st;
}

static void publish_orig(seda_bus_t *b, const char *to)
{
    static const char *const hdrs[] = { "x", "orig" };
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.headers = hdrs;
    po.nheaders = 1;
    assert_int_equal(seda_publish(b, to, "orig", 4, &po), 0);
}

static void assert_original(const seen_t *s, int attempt)
{
    assert_string_equal(s->payload, "orig");
    assert_string_equal(s->hx, "orig");
    assert_string_equal(s->hy, "-");
    assert_int_equal(s->slip, 0);
    assert_int_equal(s->attempt, attempt);
}

static void retry_sees_original(bool use_fail)
{
    seda_bus_t *b = new_bus();
    rec_t r, sink;
    rec_init(&r, 3, "c");
    r.use_fail = use_fail;
    rec_init(&sink, 0, "sink");
    seda_stage_t *st = add(b, "s", 3, SEDA_DELIVERY_P2P, NULL);
    assert_true(seda_stage_consume(st, changer, &r) >= 0);
    publish_orig(b, "s");
    TU_WAIT(tu_counter_wait_ge(&r.calls, 3, TU_DEADLINE), "three attempts");
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    /* Attempts 1 and 2 nacked their changes away; 3 acked. */
    for (int a = 0; a < 3; a++)
        assert_original(&r.seen[a], a + 1);
    seda_bus_stats bs;
    seda_bus_stats_get(b, &bs);
    assert_int_equal(bs.completed, 1);
    seda_bus_free(b);
    rec_destroy(&r);
    rec_destroy(&sink);
}

static void test_nack_retry_sees_what_the_attempt_was_given(void **state)
{
    (void)state;
    retry_sees_original(false);
}

static void test_nack_by_env_fail_discards_changes_too(void **state)
{
    (void)state;
    retry_sees_original(true);
}

/* The dead letter carries the delivered payload and headers, plus the
 * x-dead-* headers; an acked change travels on. */
static void test_nack_dead_letter_carries_the_delivered_envelope(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t r, dlq, ok, next;
    rec_init(&r, 0, "c");                       /* always nacks */
    rec_init(&dlq, 0, "dlq");
    rec_init(&ok, 1, "ok");                     /* acks at once */
    rec_init(&next, 0, "next");
    seda_stage_t *st = add(b, "s", 2, SEDA_DELIVERY_P2P, "dlq");
    assert_true(seda_stage_consume(st, changer, &r) >= 0);
    seda_stage_t *d = add(b, "dlq", 1, SEDA_DELIVERY_P2P, NULL);
    assert_true(seda_stage_consume(d, recorder, &dlq) >= 0);
    seda_stage_t *a = add(b, "a", 1, SEDA_DELIVERY_P2P, NULL);
    assert_true(seda_stage_consume(a, changer, &ok) >= 0);
    seda_stage_t *n = add(b, "n", 1, SEDA_DELIVERY_P2P, NULL);
    assert_true(seda_stage_consume(n, recorder, &next) >= 0);
    publish_orig(b, "s");
    static const char *const slip[] = { "n" };
    static const char *const hdrs[] = { "x", "orig" };
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.headers = hdrs;
    po.nheaders = 1;
    po.slip = slip;
    po.nslip = 1;
    assert_int_equal(seda_publish(b, "a", "orig", 4, &po), 0);
    TU_WAIT(tu_counter_wait_ge(&dlq.calls, 1, TU_DEADLINE), "the dead letter");
    TU_WAIT(tu_counter_wait_ge(&next.calls, 1, TU_DEADLINE), "the next hop");
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    assert_original(&r.seen[0], 1);
    assert_original(&r.seen[1], 2);
    assert_string_equal(dlq.seen[0].payload, "orig");
    assert_string_equal(dlq.seen[0].hx, "orig");
    assert_string_equal(dlq.seen[0].hy, "-");
    assert_string_equal(dlq.seen[0].reason, "max_attempts");
    /* The ack kept its changes (y was removed before acking). */
    assert_string_equal(next.seen[0].payload, "changed-by-ok");
    assert_string_equal(next.seen[0].hx, "ok");
    assert_string_equal(next.seen[0].hy, "-");
    seda_bus_free(b);
    rec_destroy(&r);
    rec_destroy(&dlq);
    rec_destroy(&ok);
    rec_destroy(&next);
}

/* Pub/sub: consumer 0 acks its change, consumer 1 nacks its own; the
 * retry calls only consumer 1, which sees 0's change and not its own. */
static bool pubsub_c1(seda_env_t *env, void *ud)
{
    rec_t *r = ud;
    record(r, env);
    assert_int_equal(seda_env_set_header(env, "y", "from-c1"), 0);
    return seda_env_attempts(env) >= 2;
}

static bool pubsub_c0(seda_env_t *env, void *ud)
{
    record(ud, env);
    assert_int_equal(seda_env_set_header(env, "x", "from-c0"), 0);
    return true;
}

static void test_nack_pubsub_keeps_other_consumers_acks(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    rec_t c0, c1;
    rec_init(&c0, 0, "c0");
    rec_init(&c1, 0, "c1");
    seda_stage_t *st = add(b, "ps", 2, SEDA_DELIVERY_PUBSUB, NULL);
    assert_true(seda_stage_consume(st, pubsub_c0, &c0) >= 0);
    assert_true(seda_stage_consume(st, pubsub_c1, &c1) >= 0);
    publish_orig(b, "ps");
    TU_WAIT(tu_counter_wait_ge(&c1.calls, 2, TU_DEADLINE), "the retry");
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    assert_int_equal(tu_counter_get(&c0.calls), 1);
    assert_string_equal(c1.seen[0].hx, "from-c0");  /* declaration order */
    assert_string_equal(c1.seen[1].hx, "from-c0");  /* c0's ack stays */
    assert_string_equal(c1.seen[1].hy, "-");        /* c1's nack went */
    seda_bus_free(b);
    rec_destroy(&c0);
    rec_destroy(&c1);
}

/* A pull lease: changes made through seda_lease_env are undone by a
 * nack and by an expiry, kept by an ack. */
static void lease_change(seda_lease_t *l)
{
    seda_env_t *env = seda_lease_env(l);
    assert_non_null(env);
    assert_int_equal(seda_env_set_payload(env, "leased", 6), 0);
    assert_int_equal(seda_env_set_header(env, "x", "leased"), 0);
    seda_lease_release_env(l);
}

static void lease_read(seda_lease_t *l, seen_t *s)
{
    seda_env_t *env = seda_lease_env(l);
    assert_non_null(env);
    size_t len;
    const char *p = seda_env_payload(env, &len);
    snprintf(s->payload, sizeof s->payload, "%.*s", (int)len, p);
    copy_str(s->hx, seda_env_header(env, "x"));
    s->attempt = seda_env_attempts(env);
    seda_lease_release_env(l);
}

static void test_nack_pull_lease_nack_and_expiry_undo(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "p";
    o.pull = true;
    o.max_attempts = 4;
    o.ack_timeout = 0.05;
    seda_stage_t *p = NULL;
    assert_int_equal(seda_stage_add(b, &o, &p, NULL, 0), 0);
    rec_t sink;
    rec_init(&sink, 0, "sink");
    seda_stage_t *n = add(b, "n", 1, SEDA_DELIVERY_P2P, NULL);
    assert_true(seda_stage_consume(n, recorder, &sink) >= 0);
    static const char *const slip[] = { "n" };
    static const char *const hdrs[] = { "x", "orig" };
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.headers = hdrs;
    po.nheaders = 1;
    po.slip = slip;
    po.nslip = 1;
    assert_int_equal(seda_publish(b, "p", "orig", 4, &po), 0);
    seda_lease_t *l = NULL;
    seen_t s;
    /* Attempt 1: changed, then nacked. */
    assert_int_equal(seda_stage_receive(p, TU_DEADLINE, &l), 0);
    lease_change(l);
    assert_int_equal(seda_lease_nack(l), 0);
    /* Attempt 2: changed, then left to expire. */
    assert_int_equal(seda_stage_receive(p, TU_DEADLINE, &l), 0);
    lease_read(l, &s);
    assert_string_equal(s.payload, "orig");
    assert_string_equal(s.hx, "orig");
    assert_int_equal(s.attempt, 2);
    lease_change(l);
    seda_lease_t *stale = l;
    /* The next receive waits for the expiry and gets attempt 3. */
    assert_int_equal(seda_stage_receive(p, TU_DEADLINE, &l), 0);
    assert_int_equal(seda_lease_ack(stale), SEDA_ETIMEDOUT);
    lease_read(l, &s);
    assert_string_equal(s.payload, "orig");
    assert_string_equal(s.hx, "orig");
    assert_int_equal(s.attempt, 3);
    /* Attempt 3: changed, then acked: the change travels on. */
    lease_change(l);
    assert_int_equal(seda_lease_ack(l), 0);
    TU_WAIT(tu_counter_wait_ge(&sink.calls, 1, TU_DEADLINE), "the next hop");
    assert_string_equal(sink.seen[0].payload, "leased");
    assert_string_equal(sink.seen[0].hx, "leased");
    assert_int_equal(seda_bus_wait_idle(b, TU_DEADLINE), 0);
    seda_bus_free(b);
    rec_destroy(&sink);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nack_retry_sees_what_the_attempt_was_given),
        cmocka_unit_test(test_nack_by_env_fail_discards_changes_too),
        cmocka_unit_test(test_nack_dead_letter_carries_the_delivered_envelope),
        cmocka_unit_test(test_nack_pubsub_keeps_other_consumers_acks),
        cmocka_unit_test(test_nack_pull_lease_nack_and_expiry_undo),
    };
    return cmocka_run_group_tests_name("nack", tests, NULL, NULL);
}
