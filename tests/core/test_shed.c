/* SPDX-License-Identifier: MIT */
/*
 * test_shed.c -- adaptive shedding as a leaf (core/shed.c over struct
 * seda_shed, no stage, no bus): the level rises after a whole interval of
 * starts above target, counts in the bus's count it is handed, ends at a
 * start within target and comes back at once while armed; the level
 * asked now ends when the backlog the drain's handling time implies is
 * under target; forward targets are forgotten after the window given.
 * The stage-level behaviour is in test_admission.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/drain_state.h"
#include "core/shed.h"

#define MS 1000000LL

static void test_shed_rises_after_an_interval_and_counts_at_the_bus(void **s)
{
    (void)s;
    atomic_int count;
    atomic_init(&count, 0);
    struct seda_shed sh = {0};
    seda__shed_init(&sh, 1 * MS, 10 * MS, &count);
    int64_t t0 = 1000 * MS;

    seda__shed_update(&sh, 2 * MS, t0);             /* first start above */
    seda__shed_update(&sh, 2 * MS, t0 + 5 * MS);    /* half an interval */
    assert_int_equal(seda__shed_level(&sh), 0);
    assert_int_equal(atomic_load(&count), 0);

    /* A whole interval above target, no low traffic offered meanwhile:
     * straight to level 2 (nothing low to refuse first). */
    seda__shed_update(&sh, 2 * MS, t0 + 10 * MS);
    assert_int_equal(seda__shed_level(&sh), 2);
    assert_int_equal(atomic_load(&count), 1);

    /* A start within target ends it; the bus's count goes back. */
    seda__shed_update(&sh, MS / 2, t0 + 11 * MS);
    assert_int_equal(seda__shed_level(&sh), 0);
    assert_int_equal(atomic_load(&count), 0);

    /* Armed: the next start above target sheds again at once, at the
     * level it had. */
    seda__shed_update(&sh, 2 * MS, t0 + 12 * MS);
    assert_int_equal(seda__shed_level(&sh), 2);
    assert_int_equal(atomic_load(&count), 1);

    /* Off: setting 0 keeps the count right, and an update does nothing. */
    seda__shed_set(&sh, 0);
    sh.target_ns = 0;
    seda__shed_update(&sh, 2 * MS, t0 + 100 * MS);
    assert_int_equal(seda__shed_level(&sh), 0);
    assert_int_equal(atomic_load(&count), 0);
}

static void test_shed_low_traffic_is_refused_first(void **s)
{
    (void)s;
    atomic_int count;
    atomic_init(&count, 0);
    struct seda_shed sh = {0};
    seda__shed_init(&sh, 1 * MS, 10 * MS, &count);
    int64_t t0 = 1000 * MS;
    seda__shed_update(&sh, 2 * MS, t0);
    sh.low_offered++;                   /* a low-priority publish came */
    seda__shed_update(&sh, 2 * MS, t0 + 10 * MS);
    assert_int_equal(seda__shed_level(&sh), 1);
    /* Another whole interval at level 1: normal priority too. */
    seda__shed_update(&sh, 2 * MS, t0 + 15 * MS);
    assert_int_equal(seda__shed_level(&sh), 1);
    seda__shed_update(&sh, 2 * MS, t0 + 20 * MS);
    assert_int_equal(seda__shed_level(&sh), 2);
    assert_int_equal(atomic_load(&count), 1);
}

static void test_shed_level_now_reads_the_drain_it_is_given(void **s)
{
    (void)s;
    atomic_int count;
    atomic_init(&count, 0);
    struct seda_shed sh = {0};
    seda__shed_init(&sh, 1 * MS, 10 * MS, &count);
    struct seda_drain dr;
    seda__drain_init(&dr);

    assert_int_equal(seda__shed_level_now(&sh, &dr, 100, 1, 1), 0);

    seda__shed_set(&sh, 1);
    /* No call measured yet and envelopes queued: counts as slow. */
    assert_int_equal(seda__shed_level_now(&sh, &dr, 100, 1, 1), 1);
    /* 100 queued at 1 ms each, one worker for four permits: 100 ms. */
    atomic_store(&dr.svc_ns, (unsigned)MS);
    assert_int_equal(seda__shed_level_now(&sh, &dr, 100, 4, 1), 1);
    /* A suspended call's life counts, not the worker's share. */
    atomic_store(&dr.svc_ns, 1000u);
    dr.life_ns = (uint64_t)MS;
    assert_int_equal(seda__shed_level_now(&sh, &dr, 100, 100, 1), 1);
    /* ... spread over 100 permits, with as many workers: 1 ms, not
     * under target yet; 50 queued: 0.5 ms, under: it ends here. */
    assert_int_equal(seda__shed_level_now(&sh, &dr, 100, 100, 100), 1);
    assert_int_equal(atomic_load(&count), 1);
    assert_int_equal(seda__shed_level_now(&sh, &dr, 50, 100, 100), 0);
    assert_int_equal(seda__shed_level(&sh), 0);
    assert_int_equal(atomic_load(&count), 0);

    /* Target set to 0 while shedding: asking ends it. */
    seda__shed_set(&sh, 2);
    sh.target_ns = 0;
    assert_int_equal(seda__shed_level_now(&sh, &dr, 100, 1, 1), 0);
    assert_int_equal(atomic_load(&count), 0);
}

static void test_shed_forward_targets_forgotten_after_the_window(void **s)
{
    (void)s;
    struct seda_fwd_seen f;
    seda__shed_fwd_init(&f);
    int a, b;                   /* stand-ins: the part never follows them */
    struct seda_stage_s *sa = (struct seda_stage_s *)(void *)&a;
    struct seda_stage_s *sb = (struct seda_stage_s *)(void *)&b;
    struct seda_stage_s *out[SEDA__FWD_SEEN];
    assert_int_equal(seda__shed_fwd_seen(&f, seda__now_ns(), MS, out), 0);
    seda__shed_fwd_learn(&f, sa);
    seda__shed_fwd_learn(&f, sb);
    seda__shed_fwd_learn(&f, sa);       /* known: refreshed, not added */
    int64_t now = seda__now_ns();
    assert_int_equal(seda__shed_fwd_seen(&f, now, 1000 * MS, out), 2);
    assert_true((out[0] == sa && out[1] == sb) ||
                (out[0] == sb && out[1] == sa));
    assert_int_equal(seda__shed_fwd_seen(&f, now + 2000 * MS, 1000 * MS,
                                         out), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shed_rises_after_an_interval_and_counts_at_the_bus),
        cmocka_unit_test(test_shed_low_traffic_is_refused_first),
        cmocka_unit_test(test_shed_level_now_reads_the_drain_it_is_given),
        cmocka_unit_test(test_shed_forward_targets_forgotten_after_the_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
