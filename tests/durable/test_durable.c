/* SPDX-License-Identifier: MIT */
/*
 * test_durable.c -- durable stages through the public C API
 * (src/durable/durable.c): seda_stage_replay's contract -- malformed rows
 * quarantined and the rest replayed, a replayed hop to a stage added
 * later waits for it (until hop_timeout after the replay began), and
 * seda_bus_journal_stats.
 *
 * Two tests also hold the bus's journal (the journal's test hook) to show
 * that a drain batch's acknowledgements, and a hop from an in-memory
 * stage into a durable one, do not hold their worker.
 *
 * Every test works in a fresh mkdtemp directory under /tmp.  Journals are
 * prepared by a bus whose pull stage nobody receives from (shutdown keeps
 * the rows) and changed with SQLite directly.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seda.h"
#include "core/store.h"
#include "durable/journal.h"

#include "dir_fixture.h"
#include "testutil.h"

struct fx {
    struct dir_fx d;            /* d.sub: dir/data, the data_dir */
    atomic_int calls[3];        /* consumer calls per counter */
};

static int fx_setup(void **state)
{
    *state = dir_fx_new(sizeof(struct fx), "durable", "data");
    return *state ? 0 : -1;
}

static int fx_teardown(void **state)
{
    dir_fx_free(*state);
    return 0;
}

static seda_bus_t *open_bus(struct fx *f, double hop_timeout,
                            const char *dlq)
{
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    bo.data_dir = f->d.sub;
    bo.sync_normal = true;
    bo.hop_timeout = hop_timeout;
    bo.dead_letter = dlq;
    seda_bus_t *bus = NULL;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    return bus;
}

static seda_stage_t *add_stage(seda_bus_t *bus, const char *name,
                               int durable, bool pull)
{
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = name;
    so.durable = durable;
    so.pull = pull;
    seda_stage_t *st = NULL;
    char err[256];
    int rc = seda_stage_add(bus, &so, &st, err, sizeof err);
    if (rc != 0)
        fail_msg("stage_add %s: %d %s", name, rc, err);
    return st;
}

static bool counting(seda_env_t *env, void *ud)
{
    (void)env;
    atomic_fetch_add_explicit((atomic_int *)ud, 1, memory_order_relaxed);
    return true;
}

/* Journal n envelopes (ids r1..rn) at durable stage "a", slip `next`. */
static void fill(struct fx *f, int n, const char *next)
{
    seda_bus_t *bus = open_bus(f, 5, NULL);
    add_stage(bus, "a", SEDA_AT_LEAST_ONCE, true);
    for (int i = 1; i <= n; i++) {
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        seda_publish_opts po;
        seda_publish_opts_init(&po);
        po.id = id;
        po.slip = next ? &next : NULL;  /* no array without a count */
        po.nslip = next ? 1 : 0;
        assert_int_equal(seda_publish(bus, "a", id, strlen(id), &po), 0);
    }
    seda_bus_shutdown(bus, 0);
    seda_bus_free(bus);
}

static void sql(struct fx *f, const char *q)
{
    char path[160];
    snprintf(path, sizeof path, "%s/seda.db", f->d.sub);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    if (sqlite3_exec(db, q, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", q, msg);
    sqlite3_close(db);
}

/* Wait (10 s at most) until *c >= n. */
static void wait_count(atomic_int *c, int n, const char *what)
{
    double until = seda_now() + 10;
    while (atomic_load_explicit(c, memory_order_relaxed) < n) {
        if (seda_now() > until)
            fail_msg("timed out waiting for %s", what);
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
}

static void test_durable_replay_quarantines_malformed_rows(void **state)
{
    struct fx *f = *state;
    fill(f, 6, NULL);
    sql(f, "UPDATE envelopes SET slip = CAST('x' AS BLOB) WHERE id = 'r2';"
           "UPDATE envelopes SET id = printf('%.*c', 10000, 'i') "
           "WHERE id = 'r4';");
    seda_bus_t *bus = open_bus(f, 5, NULL);
    seda_stage_t *a = add_stage(bus, "a", SEDA_AT_LEAST_ONCE, false);
    assert_true(seda_stage_consume(a, counting, &f->calls[0]) >= 0);
    seda_journal_stats js;
    seda_bus_journal_stats(bus, &js);
    assert_true(js.open);
    assert_int_equal(js.quarantined, 0);
    assert_int_equal(seda_stage_replay(a), 4);
    seda_bus_journal_stats(bus, &js);
    assert_int_equal(js.quarantined, 2);
    assert_int_equal(js.wal_discarded_frames, 0);
    assert_int_equal(seda_bus_wait_idle(bus, 10), 0);
    assert_int_equal(atomic_load(&f->calls[0]), 4);
    seda_bus_free(bus);
    /* They are not replayed again. */
    bus = open_bus(f, 5, NULL);
    a = add_stage(bus, "a", SEDA_AT_LEAST_ONCE, false);
    assert_int_equal(seda_stage_replay(a), 0);
    seda_bus_free(bus);
}

static void test_durable_replayed_hop_waits_for_its_stage(void **state)
{
    struct fx *f = *state;
    fill(f, 5, "b");
    seda_bus_t *bus = open_bus(f, 30, NULL);
    seda_stage_t *a = add_stage(bus, "a", SEDA_AT_LEAST_ONCE, false);
    assert_true(seda_stage_consume(a, counting, &f->calls[0]) >= 0);
    assert_int_equal(seda_stage_replay(a), 5);
    wait_count(&f->calls[0], 1, "a handled a replayed envelope");
    seda_stage_t *b = add_stage(bus, "b", SEDA_MEMORY, false);
    assert_true(seda_stage_consume(b, counting, &f->calls[1]) >= 0);
    assert_int_equal(seda_bus_wait_idle(bus, 20), 0);
    seda_bus_stats bs;
    seda_bus_stats_get(bus, &bs);
    assert_int_equal(bs.accepted, 5);
    assert_int_equal(bs.completed, 5);
    assert_int_equal(bs.dead_lettered, 0);
    assert_int_equal(atomic_load(&f->calls[1]), 5);
    seda_bus_free(bus);
}

static void test_durable_replayed_hop_gives_up_at_hop_timeout(void **state)
{
    struct fx *f = *state;
    fill(f, 3, "never");
    seda_bus_t *bus = open_bus(f, 0.2, NULL);
    seda_stage_t *a = add_stage(bus, "a", SEDA_AT_LEAST_ONCE, false);
    assert_true(seda_stage_consume(a, counting, &f->calls[0]) >= 0);
    double t0 = seda_now();
    assert_int_equal(seda_stage_replay(a), 3);
    assert_int_equal(seda_bus_wait_idle(bus, 20), 0);
    seda_bus_stats bs;
    seda_bus_stats_get(bus, &bs);
    assert_int_equal(bs.dead_lettered, 3);
    assert_int_equal(bs.completed, 0);
    assert_true(seda_now() - t0 >= 0.19);   /* it did wait */
    seda_bus_free(bus);
}

/* A new envelope (not replayed) to an unknown hop still dead-letters at
 * once, while a replay's grace period runs. */
static void test_durable_new_envelopes_do_not_wait(void **state)
{
    struct fx *f = *state;
    fill(f, 1, "later");
    seda_bus_t *bus = open_bus(f, 30, NULL);
    seda_stage_t *a = add_stage(bus, "a", SEDA_AT_LEAST_ONCE, false);
    assert_true(seda_stage_consume(a, counting, &f->calls[0]) >= 0);
    seda_stage_t *m = add_stage(bus, "m", SEDA_MEMORY, false);
    assert_true(seda_stage_consume(m, counting, &f->calls[1]) >= 0);
    assert_int_equal(seda_stage_replay(a), 1);
    wait_count(&f->calls[0], 1, "the replayed envelope waits");
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    const char *hop = "nowhere";
    po.slip = &hop;
    po.nslip = 1;
    assert_int_equal(seda_publish(bus, "m", "x", 1, &po), 0);
    double until = seda_now() + 10;
    seda_bus_stats bs;
    do {
        seda_bus_stats_get(bus, &bs);
    } while (bs.dead_lettered < 1 && seda_now() < until);
    assert_int_equal(bs.dead_lettered, 1);
    seda_stage_t *later = add_stage(bus, "later", SEDA_MEMORY, false);
    assert_true(seda_stage_consume(later, counting, &f->calls[2]) >= 0);
    assert_int_equal(seda_bus_wait_idle(bus, 20), 0);
    seda_bus_stats_get(bus, &bs);
    assert_int_equal(bs.completed, 1);      /* the replayed one */
    assert_int_equal(bs.dead_lettered, 1);  /* the new one */
    assert_int_equal(atomic_load(&f->calls[2]), 1);
    seda_bus_free(bus);
}

/* A durable stage's batch does not wait for its acknowledgements' commit:
 * with one worker and the journal held (no commit can start), the batch
 * that acked ends and the worker runs another stage's envelope; the bus
 * is not idle until the acknowledgement is committed, then the row is
 * gone. */
static atomic_int gate;

static bool gated(seda_env_t *env, void *ud)
{
    (void)env;
    atomic_fetch_add_explicit((atomic_int *)ud, 1, memory_order_relaxed);
    double until = seda_now() + 10;
    while (!atomic_load(&gate) && seda_now() < until) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    return true;
}

static void test_durable_acks_do_not_hold_the_worker(void **state)
{
    struct fx *f = *state;
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 1;
    bo.data_dir = f->d.sub;
    bo.sync_normal = true;
    seda_bus_t *bus = NULL;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    seda_stage_t *a = add_stage(bus, "a", SEDA_AT_LEAST_ONCE, false);
    atomic_store(&gate, 0);
    assert_true(seda_stage_consume(a, gated, &f->calls[0]) >= 0);
    seda_stage_t *m = add_stage(bus, "m", SEDA_MEMORY, false);
    assert_true(seda_stage_consume(m, counting, &f->calls[1]) >= 0);
    assert_int_equal(seda_publish(bus, "a", "x", 1, NULL), 0); /* committed */
    wait_count(&f->calls[0], 1, "a's consumer called");
    struct seda_journal *j = seda__bus_store(bus);
    seda__journal_hold(j, true);
    atomic_store(&gate, 1);                 /* a's batch acks now */
    assert_int_equal(seda_publish(bus, "m", "y", 1, NULL), 0);
    wait_count(&f->calls[1], 1,
               "the worker runs m while a's acknowledgement is queued");
    assert_int_not_equal(seda_bus_wait_idle(bus, 0.05), 0);   /* not yet */
    seda__journal_hold(j, false);
    assert_int_equal(seda_bus_wait_idle(bus, 10), 0);
    int64_t rows = -1;
    assert_int_equal(seda__journal_count(j, "a", &rows), 0);
    assert_int_equal(rows, 0);
    seda_bus_free(bus);
}

/* A hop from an in-memory stage into a durable one does not wait for its
 * row's commit either: with one worker and the journal held, m's handler
 * acks, its envelope's row for d is queued, and the worker runs o's
 * envelope; d gets the envelope only once the row commits, and the bus
 * is not idle before. */
static void test_durable_hop_from_memory_does_not_hold_the_worker(
    void **state)
{
    struct fx *f = *state;
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 1;
    bo.data_dir = f->d.sub;
    bo.sync_normal = true;
    seda_bus_t *bus = NULL;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    seda_stage_t *m = add_stage(bus, "m", SEDA_MEMORY, false);
    assert_true(seda_stage_consume(m, counting, &f->calls[0]) >= 0);
    seda_stage_t *d = add_stage(bus, "d", SEDA_AT_LEAST_ONCE, false);
    assert_true(seda_stage_consume(d, counting, &f->calls[1]) >= 0);
    seda_stage_t *o = add_stage(bus, "o", SEDA_MEMORY, false);
    assert_true(seda_stage_consume(o, counting, &f->calls[2]) >= 0);
    struct seda_journal *j = seda__bus_store(bus);
    seda__journal_hold(j, true);
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    const char *hop = "d";
    po.slip = &hop;
    po.nslip = 1;
    assert_int_equal(seda_publish(bus, "m", "x", 1, &po), 0);
    wait_count(&f->calls[0], 1, "m's consumer called");
    assert_int_equal(seda_publish(bus, "o", "y", 1, NULL), 0);
    wait_count(&f->calls[2], 1,
               "the worker runs o while the hop into d waits for its commit");
    assert_int_not_equal(seda_bus_wait_idle(bus, 0.05), 0);   /* not yet */
    assert_int_equal(atomic_load(&f->calls[1]), 0);  /* not before commit */
    seda__journal_hold(j, false);
    assert_int_equal(seda_bus_wait_idle(bus, 10), 0);
    assert_int_equal(atomic_load(&f->calls[1]), 1);
    seda_bus_stats bs;
    seda_bus_stats_get(bus, &bs);
    assert_int_equal(bs.completed, 2);
    int64_t rows = -1;
    assert_int_equal(seda__journal_count(j, "d", &rows), 0);
    assert_int_equal(rows, 0);
    seda_bus_free(bus);
}

/* A hop from memory into a durable stage still uncommitted when the bus
 * shuts down is committed before the sweep: the envelope is either
 * handled by d or kept in d's journal for the next start, never lost,
 * and nothing is left in a stage after the sweep. */
static void test_durable_hop_pending_at_shutdown_is_kept(void **state)
{
    struct fx *f = *state;
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 1;
    bo.data_dir = f->d.sub;
    bo.sync_normal = true;
    seda_bus_t *bus = NULL;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    seda_stage_t *m = add_stage(bus, "m", SEDA_MEMORY, false);
    assert_true(seda_stage_consume(m, counting, &f->calls[0]) >= 0);
    seda_stage_t *d = add_stage(bus, "d", SEDA_AT_LEAST_ONCE, false);
    assert_true(seda_stage_consume(d, counting, &f->calls[1]) >= 0);
    struct seda_journal *j = seda__bus_store(bus);
    seda__journal_hold(j, true);
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    const char *hop = "d";
    po.slip = &hop;
    po.nslip = 1;
    assert_int_equal(seda_publish(bus, "m", "x", 1, &po), 0);
    double until = seda_now() + 10;
    while (seda__journal_pending(j) < 1) {
        if (seda_now() > until)
            fail_msg("timed out waiting for the hop's row to queue");
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    seda__journal_hold(j, false);
    seda_bus_shutdown(bus, 0);
    seda_bus_free(bus);
    bus = open_bus(f, 5, NULL);
    add_stage(bus, "d", SEDA_AT_LEAST_ONCE, true);
    int64_t rows = -1;
    assert_int_equal(seda__journal_count(seda__bus_store(bus), "d", &rows),
                     0);
    assert_int_equal(rows + atomic_load(&f->calls[1]), 1);
    seda_bus_free(bus);
}

static void test_durable_journal_stats_without_journal(void **state)
{
    (void)state;
    seda_bus_t *bus = NULL;
    assert_int_equal(seda_bus_new(NULL, &bus), 0);
    seda_journal_stats js;
    memset(&js, 0xff, sizeof js);
    seda_bus_journal_stats(bus, &js);
    assert_false(js.open);
    assert_int_equal(js.quarantined, 0);
    assert_int_equal(js.wal_discarded_bytes, 0);
    seda_bus_free(bus);
}

/* ---- a retry's due time survives a restart ---- */

struct retry_rec {
    atomic_int calls;
    atomic_int attempts;        /* of the last call */
    atomic_llong first_ns;      /* seda_now of the first call, ns */
    atomic_llong last_ns;       /* of the last call */
    atomic_bool nack;
};

static bool nack_if_told(seda_env_t *env, void *ud)
{
    struct retry_rec *r = ud;
    long long now = (long long)(seda_now() * 1e9);
    long long zero = 0;
    atomic_compare_exchange_strong(&r->first_ns, &zero, now);
    atomic_store(&r->last_ns, now);
    atomic_store(&r->attempts, seda_env_attempts(env));
    atomic_fetch_add(&r->calls, 1);
    return !atomic_load(&r->nack);
}

static seda_stage_t *add_retrying(seda_bus_t *bus, struct retry_rec *r)
{
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "a";
    so.durable = SEDA_AT_LEAST_ONCE;
    so.max_attempts = 3;
    so.retry_backoff = 2.0;
    so.retry_max_backoff = 2.0;
    so.retry_jitter = false;
    seda_stage_t *st = NULL;
    char err[256];
    if (seda_stage_add(bus, &so, &st, err, sizeof err) != 0)
        fail_msg("stage_add: %s", err);
    seda_stage_consume(st, nack_if_told, r);
    return st;
}

/* Read the journal row of stage a: attempts and due_wall (0 if NULL). */
static int journal_row(struct fx *f, int *attempts, double *due_wall)
{
    char path[160];
    snprintf(path, sizeof path, "%s/seda.db", f->d.sub);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT attempts, "
                                        "coalesce(due_wall, 0) FROM "
                                        "envelopes WHERE stage = 'a'", -1,
                                        &s, NULL), SQLITE_OK);
    int rows = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        *attempts = sqlite3_column_int(s, 0);
        *due_wall = sqlite3_column_double(s, 1);
        rows++;
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return rows;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool delayed_eq(const seda_stage_stats *s, long n)
{
    return s->delayed == n;
}

/* One envelope into stage a, nacked at its first attempt; once its retry
 * waits on the backoff, the bus stops.  Returns the wall clock then. */
static double nack_once_then_stop(struct fx *f, struct retry_rec *r)
{
    memset(r, 0, sizeof *r);
    atomic_store(&r->nack, true);
    seda_bus_t *bus = open_bus(f, 5, NULL);
    seda_stage_t *st = add_retrying(bus, r);
    assert_int_equal(seda_publish(bus, "a", "x", 1, NULL), 0);
    wait_count(&r->calls, 1, "the first attempt");
    if (!tu_stage_wait(st, delayed_eq, 1, 10))
        fail_msg("the retry never waited on its backoff");
    double wall = wall_now();
    seda_bus_shutdown(bus, 0);
    seda_bus_free(bus);
    assert_int_equal(atomic_load(&r->calls), 1);
    return wall;
}

/* A durable stage's nack with a retry backoff journals the next attempt
 * and its due time; a bus that stops meanwhile keeps the row, and the
 * next one waits out the rest of the backoff (a lower bound, across the
 * restart) before the retry, which is attempt 2. */
static void test_durable_retry_due_time_survives_restart(void **state)
{
    struct fx *f = *state;
    struct retry_rec r;
    double wall_before = nack_once_then_stop(f, &r);
    seda_stage_stats s;

    int attempts = 0;
    double due = 0;
    assert_int_equal(journal_row(f, &attempts, &due), 1);
    assert_int_equal(attempts, 2);
    assert_true(due > wall_before);             /* not due yet */
    assert_true(due <= wall_before + 2.0 + 0.01);

    /* The next run: the retry waits on a timer, then succeeds. */
    atomic_store(&r.nack, false);
    seda_bus_t *bus = open_bus(f, 5, NULL);
    seda_stage_t *st = add_retrying(bus, &r);
    assert_int_equal(seda_stage_replay(st), 1);
    seda_stage_stats_get(st, &s);
    assert_true(s.delayed == 1 || atomic_load(&r.calls) == 2);
    assert_int_equal(seda_bus_wait_idle(bus, 10), 0);
    assert_int_equal(atomic_load(&r.calls), 2);
    assert_int_equal(atomic_load(&r.attempts), 2);
    double waited = (double)(atomic_load(&r.last_ns) -
                             atomic_load(&r.first_ns)) / 1e9;
    if (waited < 2.0 - 0.05)
        fail_msg("the retry came %.3f s after the first attempt, before "
                 "its 2 s backoff", waited);
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.delayed, 0);
    assert_int_equal(s.completed, 1);
    seda_bus_shutdown(bus, 0);
    seda_bus_free(bus);
    assert_int_equal(journal_row(f, &attempts, &due), 0);
}

/* A row whose due time has passed (the bus was down longer than the
 * backoff) is replayed at once, with its attempt count. */
static void test_durable_retry_due_in_the_past_runs_at_once(void **state)
{
    struct fx *f = *state;
    struct retry_rec r;
    nack_once_then_stop(f, &r);
    sql(f, "UPDATE envelopes SET due_wall = due_wall - 3600");

    atomic_store(&r.nack, false);
    seda_bus_t *bus = open_bus(f, 5, NULL);
    seda_stage_t *st = add_retrying(bus, &r);
    seda_stage_stats s;
    assert_int_equal(seda_stage_replay(st), 1);
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.delayed, 0);
    assert_int_equal(seda_bus_wait_idle(bus, 10), 0);
    assert_int_equal(atomic_load(&r.calls), 2);
    assert_int_equal(atomic_load(&r.attempts), 2);
    seda_bus_shutdown(bus, 0);
    seda_bus_free(bus);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_durable_replay_quarantines_malformed_rows),
        T(test_durable_replayed_hop_waits_for_its_stage),
        T(test_durable_replayed_hop_gives_up_at_hop_timeout),
        T(test_durable_new_envelopes_do_not_wait),
        T(test_durable_acks_do_not_hold_the_worker),
        T(test_durable_hop_from_memory_does_not_hold_the_worker),
        T(test_durable_hop_pending_at_shutdown_is_kept),
        T(test_durable_journal_stats_without_journal),
        T(test_durable_retry_due_time_survives_restart),
        T(test_durable_retry_due_in_the_past_runs_at_once),
    };
    return cmocka_run_group_tests_name("durable", tests, NULL, NULL);
}
