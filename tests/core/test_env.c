/* SPDX-License-Identifier: MIT */
/* test_env.c -- envelopes: construction, headers, payload, slip. */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/tally.h"

static seda_env_t *mk(const void *p, size_t n, const seda_publish_opts *o)
{
    int rc;
    seda_env_t *e = seda__env_new(p, n, o, &rc);
    assert_non_null(e);
    assert_int_equal(rc, 0);
    return e;
}

static void test_env_new_copies_everything(void **state)
{
    (void)state;
    const char *hdr[] = { "a", "1", "b", "2" };
    const char *slip[] = { "s1", "s2", "s3" };
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.sender = "me";
    o.headers = hdr;
    o.nheaders = 2;
    o.slip = slip;
    o.nslip = 3;
    char big[1000];
    memset(big, 'x', sizeof big);
    seda_env_t *e = mk(big, sizeof big, &o);
    size_t len;
    const char *p = seda_env_payload(e, &len);
    assert_int_equal(len, sizeof big);
    assert_memory_equal(p, big, sizeof big);
    assert_string_equal(seda_env_sender(e), "me");
    assert_string_equal(seda_env_header(e, "b"), "2");
    assert_null(seda_env_header(e, "c"));
    assert_int_equal(seda_env_attempts(e), 1);
    assert_int_equal(seda_env_slip_count(e), 3);
    assert_string_equal(seda_env_slip_at(e, 0), "s1");
    assert_string_equal(seda__env_slip_pop(e), "s1");
    assert_string_equal(seda__env_slip_pop(e), "s2");
    assert_string_equal(seda__env_slip_pop(e), "s3");
    assert_null(seda__env_slip_pop(e));
    seda__env_free(e);
}

static void test_env_ids_unique_and_formatted(void **state)
{
    (void)state;
    seda_env_t *a = mk("x", 1, NULL), *b = mk("y", 1, NULL);
    char ba[SEDA_ID_MAX], bb[SEDA_ID_MAX];
    assert_true(seda_env_seq(a) != seda_env_seq(b));
    assert_string_not_equal(seda_env_id(a, ba), seda_env_id(b, bb));
    seda__env_free(a);
    seda__env_free(b);
}

static void test_env_forward_inserts_in_order(void **state)
{
    (void)state;
    const char *slip[] = { "c" };
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.slip = slip;
    o.nslip = 1;
    seda_env_t *e = mk(NULL, 0, &o);
    const char *ins[] = { "a", "b" };
    assert_int_equal(seda_env_forward(e, ins, 2), 0);
    const char *bad[] = { "no spaces" };
    assert_int_equal(seda_env_forward(e, bad, 1), SEDA_EINVAL);
    assert_int_equal(seda_env_slip_count(e), 3);
    assert_string_equal(seda_env_slip_at(e, 0), "a");
    assert_string_equal(seda_env_slip_at(e, 1), "b");
    assert_string_equal(seda_env_slip_at(e, 2), "c");
    assert_null(seda_env_slip_at(e, 3));
    /* Forward on an empty slip too. */
    seda__env_slip_clear(e);
    assert_int_equal(seda_env_forward(e, ins + 1, 1), 0);
    assert_string_equal(seda__env_slip_pop(e), "b");
    seda__env_free(e);
}

static void test_env_headers_set_replace_delete(void **state)
{
    (void)state;
    seda_env_t *e = mk(NULL, 0, NULL);
    char k[16];
    for (int i = 0; i < 20; i++) {           /* grows past the first block */
        snprintf(k, sizeof k, "k%d", i);
        assert_int_equal(seda_env_set_header(e, k, k), 0);
    }
    assert_int_equal(seda_env_header_count(e), 20);
    assert_int_equal(seda_env_set_header(e, "k3", "new"), 0);
    assert_string_equal(seda_env_header(e, "k3"), "new");
    assert_int_equal(seda_env_set_header(e, "k3", NULL), 0);
    assert_null(seda_env_header(e, "k3"));
    assert_int_equal(seda_env_header_count(e), 19);
    const char *kk, *vv;
    assert_int_equal(seda_env_header_at(e, 19, &kk, &vv), SEDA_ERANGE);
    assert_int_equal(seda_env_header_at(e, 0, &kk, &vv), 0);
    assert_string_equal(kk, "k0");
    seda__env_free(e);
}

static void test_env_set_payload_grows_and_shrinks(void **state)
{
    (void)state;
    seda_env_t *e = mk("abc", 3, NULL);
    char big[5000];
    memset(big, 7, sizeof big);
    assert_int_equal(seda_env_set_payload_kind(e, big, sizeof big, 1), 0);
    size_t n;
    assert_memory_equal(seda_env_payload(e, &n), big, sizeof big);
    assert_int_equal(n, sizeof big);
    assert_int_equal(seda_env_payload_kind(e), 1);
    assert_int_equal(seda_env_set_payload(e, "hi", 2), 0);
    assert_memory_equal(seda_env_payload(e, &n), "hi", 2);
    assert_int_equal(n, 2);
    assert_int_equal(seda_env_payload_kind(e), 0);
    seda__env_free(e);
}

static int fail_after = -1;
static void *counting_malloc(size_t n)
{
    if (fail_after == 0)
        return NULL;
    if (fail_after > 0)
        fail_after--;
    return malloc(n);
}

static void test_env_new_enomem_at_every_allocation(void **state)
{
    (void)state;
    const char *hdr[] = { "a", "1" };
    const char *slip[] = { "s1" };
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.sender = "me";
    o.headers = hdr;
    o.nheaders = 1;
    o.slip = slip;
    o.nslip = 1;
    char big[600] = { 0 };
    seda_set_allocator(counting_malloc, NULL, NULL);
    int ok_at = -1;
    for (int k = 0; k < 20 && ok_at < 0; k++) {
        fail_after = k;
        int rc;
        seda_env_t *e = seda__env_new(big, sizeof big, &o, &rc);
        if (e) {
            ok_at = k;
            seda__env_free(e);
        } else {
            assert_int_equal(rc, SEDA_ENOMEM);
        }
    }
    fail_after = -1;
    seda_set_allocator(NULL, NULL, NULL);
    assert_true(ok_at > 0);   /* failed cleanly before, then succeeded */
}

/* Arrays with counts: a NULL array with a positive count, or a negative
 * count, is SEDA_EINVAL (nothing allocated), never a crash. */
static void test_env_new_refuses_bad_counts(void **state)
{
    (void)state;
    long before = seda__env_unaccounted();
    seda_publish_opts o;
    int rc = 0;
    seda_publish_opts_init(&o);
    o.nheaders = 2;                 /* headers NULL */
    assert_null(seda__env_new("x", 1, &o, &rc));
    assert_int_equal(rc, SEDA_EINVAL);
    seda_publish_opts_init(&o);
    o.nslip = 1;                    /* slip NULL */
    assert_null(seda__env_new("x", 1, &o, &rc));
    assert_int_equal(rc, SEDA_EINVAL);
    seda_publish_opts_init(&o);
    o.nheaders = -1;
    assert_null(seda__env_new("x", 1, &o, &rc));
    assert_int_equal(rc, SEDA_EINVAL);
    seda_publish_opts_init(&o);
    o.nslip = -3;
    assert_null(seda__env_new("x", 1, &o, &rc));
    assert_int_equal(rc, SEDA_EINVAL);
    assert_int_equal(seda__env_unaccounted(), before);
}

/* Envelope blocks a thread took from the shared depot and had not used
 * when it exited go back to the depot (a publishing thread that never
 * frees an envelope used to lose them: LeakSanitizer saw ~30 per exited
 * producer against a recycling build). */
enum { EXIT_THREADS = 4, EXIT_EACH = 50, DEPOT_FILL = 2000 };

static void *take_some(void *arg)
{
    seda_env_t **out = arg;
    for (int i = 0; i < EXIT_EACH; i++) {
        int rc;
        out[i] = seda__env_new("12345678", 8, NULL, &rc);
        assert_non_null(out[i]);
    }
    return NULL;
}

static void test_env_exiting_thread_returns_cached_blocks(void **state)
{
    (void)state;
    assert_int_equal(seda__env_unaccounted(), 0);
    /* Fill the depot: freeing many more than a thread's stack holds. */
    static seda_env_t *fill[DEPOT_FILL];
    for (int i = 0; i < DEPOT_FILL; i++)
        fill[i] = mk("12345678", 8, NULL);
    for (int i = 0; i < DEPOT_FILL; i++)
        seda__env_free(fill[i]);
    assert_int_equal(seda__env_unaccounted(), 0);
    /* Threads that only allocate (refilling from the depot), then exit. */
    static seda_env_t *got[EXIT_THREADS][EXIT_EACH];
    pthread_t th[EXIT_THREADS];
    for (int t = 0; t < EXIT_THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, take_some, got[t]), 0);
    for (int t = 0; t < EXIT_THREADS; t++)
        assert_int_equal(pthread_join(th[t], NULL), 0);
    assert_int_equal(seda__env_unaccounted(), EXIT_THREADS * EXIT_EACH);
    for (int t = 0; t < EXIT_THREADS; t++)
        for (int i = 0; i < EXIT_EACH; i++)
            seda__env_free(got[t][i]);
    assert_int_equal(seda__env_unaccounted(), 0);
}

/* One snapshot serves taps and dead letters: id, attempts, kind, the
 * headers, the first `keep` bytes of the payload and, when asked, the last
 * error, all in the one allocation returned; the rest zero. */
static void test_env_snapshot_copies_what_it_keeps(void **state)
{
    (void)state;
    const char *hdr[] = { "a", "1", "bb", "22" };
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.headers = hdr;
    o.nheaders = 2;
    char big[300];
    memset(big, 'p', sizeof big);
    seda_env_t *e = mk(big, sizeof big, &o);
    seda_env_fail(e, "first line\nsecond");
    seda_env_snapshot s;
    size_t len = 0;
    char *blob = seda__env_snapshot(e, 128, true, &s, &len);
    assert_non_null(blob);
    char id[SEDA_ID_MAX];
    assert_string_equal(s.id, seda_env_id(e, id));
    assert_int_equal(s.attempts, 1);
    assert_int_equal(s.payload_size, sizeof big);
    assert_int_equal(s.payload_len, 128);
    assert_memory_equal(s.payload, big, 128);
    assert_string_equal(s.error, "first line");
    assert_int_equal(s.nheaders, 2);
    assert_string_equal(s.headers[2], "bb");
    assert_string_equal(s.headers[3], "22");
    assert_string_equal(s.reason, "");
    assert_string_equal(s.missing, "");
    assert_null(s.priv);
    /* Every pointer is into the one allocation. */
    const char *ptrs[] = { s.error, s.payload, s.headers[0], s.headers[3] };
    for (int i = 0; i < 4; i++)
        assert_true(ptrs[i] >= blob && ptrs[i] < blob + len);
    seda__free(blob);
    /* Without the error, a payload shorter than keep, no headers. */
    seda_env_t *f = mk("xy", 2, NULL);
    blob = seda__env_snapshot(f, 128, false, &s, &len);
    assert_non_null(blob);
    assert_null(s.error);
    assert_int_equal(s.payload_len, 2);
    assert_int_equal(s.payload_size, 2);
    assert_int_equal(s.nheaders, 0);
    assert_null(s.headers);
    seda__free(blob);
    /* Out of memory: NULL, nothing to free. */
    seda_set_allocator(counting_malloc, NULL, NULL);
    fail_after = 0;
    assert_null(seda__env_snapshot(e, 128, true, &s, &len));
    fail_after = -1;
    seda_set_allocator(NULL, NULL, NULL);
    seda__env_free(e);
    seda__env_free(f);
}

/* The envelope is a leaf: its end counts into the counters it is given
 * (a tally as is, the stage's under their lock), never into a stage. */
struct end_seen {
    int calls;
    int outcome;
};

static void end_done(seda_env_t *env, int outcome, void *ud)
{
    (void)env;
    struct end_seen *s = ud;
    s->calls++;
    s->outcome = outcome;
}

static void test_env_end_counts_in_the_counters_it_is_given(void **state)
{
    (void)state;
    long before = seda__env_unaccounted();
    seda__mutex_t mu;
    seda__mutex_init(&mu);
    struct stage_counters c, tally;
    memset(&c, 0, sizeof c);
    memset(&tally, 0, sizeof tally);
    struct end_seen seen = { 0, -1 };

    seda_env_t *e = mk("x", 1, NULL);   /* no tally: c, under mu */
    e->done = end_done;
    e->done_ud = &seen;
    seda__env_end(e, SEDA_COMPLETED, NULL, &mu, &c);
    assert_int_equal(c.completed, 1);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.outcome, SEDA_COMPLETED);

    e = mk("x", 1, NULL);               /* a tally takes it, c does not */
    e->done = end_done;
    e->done_ud = &seen;
    seda__env_end(e, SEDA_DROPPED, &tally, &mu, &c);
    assert_int_equal(tally.it_lost, 1);
    assert_int_equal(c.it_lost, 0);
    assert_int_equal(seen.calls, 2);
    assert_int_equal(seen.outcome, SEDA_DROPPED);

    e = mk("x", 1, NULL);               /* counted dead already: no count */
    e->flags |= ENV_DEAD;
    seda__env_end(e, SEDA_DROPPED, NULL, &mu, &c);
    assert_int_equal(c.it_lost, 0);
    assert_int_equal(c.completed, 1);
    assert_int_equal(seda__env_unaccounted(), before);   /* all freed */
    seda__mutex_destroy(&mu);
}

/* The payload limit is passed in: over it the envelope keeps its payload
 * and the caller hears SEDA_ETOOLARGE; at it the payload is taken. */
static void test_env_put_payload_holds_to_the_limit_given(void **state)
{
    (void)state;
    seda_env_t *e = mk("old", 3, NULL);
    char big[64];
    memset(big, 'b', sizeof big);
    assert_int_equal(seda__env_put_payload(e, big, sizeof big, 2, 63),
                     SEDA_ETOOLARGE);
    size_t len;
    const char *p = seda_env_payload(e, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(p, "old", 3);
    assert_int_equal(seda__env_put_payload(e, big, sizeof big, 2, 64), 0);
    p = seda_env_payload(e, &len);
    assert_int_equal(len, 64);
    assert_memory_equal(p, big, 64);
    assert_int_equal(seda_env_payload_kind(e), 2);
    /* Not at a stage: no bus limit, only the 4 GiB one. */
    assert_int_equal(seda_env_set_payload(e, "new", 3), 0);
    seda__env_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_new_copies_everything),
        cmocka_unit_test(test_env_ids_unique_and_formatted),
        cmocka_unit_test(test_env_forward_inserts_in_order),
        cmocka_unit_test(test_env_headers_set_replace_delete),
        cmocka_unit_test(test_env_set_payload_grows_and_shrinks),
        cmocka_unit_test(test_env_new_enomem_at_every_allocation),
        cmocka_unit_test(test_env_new_refuses_bad_counts),
        cmocka_unit_test(test_env_exiting_thread_returns_cached_blocks),
        cmocka_unit_test(test_env_snapshot_copies_what_it_keeps),
        cmocka_unit_test(test_env_end_counts_in_the_counters_it_is_given),
        cmocka_unit_test(test_env_put_payload_holds_to_the_limit_given),
    };
    return cmocka_run_group_tests_name("env", tests, NULL, NULL);
}
