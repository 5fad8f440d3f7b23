/* SPDX-License-Identifier: MIT */
/*
 * test_tap.c -- live taps (seda_tap_open/read/close): every envelope that
 * enters a tapped stage reaches every open tap, in order, with its id,
 * headers and the start of its payload; a full tap counts what it missed
 * and never holds up the stage; a closed tap sees nothing more.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

static bool ack(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    return true;
}

static seda_bus_t *one_stage(seda_stage_t **st)
{
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    seda_bus_t *bus;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "t";
    char err[256];
    assert_int_equal(seda_stage_add(bus, &so, st, err, sizeof err), 0);
    assert_true(seda_stage_consume(*st, ack, NULL) >= 0);
    return bus;
}

static void test_tap_two_taps_see_every_envelope_in_order(void **state)
{
    (void)state;
    seda_stage_t *st;
    seda_bus_t *bus = one_stage(&st);
    seda_tap_t *a, *b;
    assert_int_equal(seda_tap_open(st, 100, &a), 0);
    assert_int_equal(seda_tap_open(st, 100, &b), 0);
    const char *hdr[] = { "k", "v" };
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.headers = hdr;
    po.nheaders = 1;
    for (uint64_t i = 0; i < 50; i++)
        assert_int_equal(tu_publish_u64(bus, "t", i, &po), 0);
    seda_tap_t *taps[2] = { a, b };
    for (int t = 0; t < 2; t++) {
        int got = 0;
        while (got < 50) {
            seda_tap_entry e[8];
            uint64_t missed;
            int k = seda_tap_read(taps[t], e, 8, TU_DEADLINE, &missed);
            assert_true(k > 0);
            assert_int_equal(missed, 0);
            for (int i = 0; i < k; i++, got++) {
                uint64_t v;
                assert_int_equal(e[i].payload_len, sizeof v);
                memcpy(&v, e[i].payload, sizeof v);
                assert_int_equal(v, (uint64_t)got);
                assert_int_equal(e[i].nheaders, 1);
                assert_string_equal(e[i].headers[0], "k");
                assert_string_equal(e[i].headers[1], "v");
                assert_true(e[i].id[0] != '\0');
                seda_tap_entry_free(&e[i]);
            }
        }
    }
    seda_tap_close(a);
    /* Closed: b still sees, a is gone. */
    assert_int_equal(tu_publish_u64(bus, "t", 99, NULL), 0);
    seda_tap_entry e;
    assert_int_equal(seda_tap_read(b, &e, 1, TU_DEADLINE, NULL), 1);
    seda_tap_entry_free(&e);
    seda_tap_close(b);
    assert_int_equal(seda_bus_shutdown(bus, 5), 0);
    seda_bus_free(bus);
}

static void test_tap_full_counts_missed_never_blocks(void **state)
{
    (void)state;
    seda_stage_t *st;
    seda_bus_t *bus = one_stage(&st);
    seda_tap_t *a;
    assert_int_equal(seda_tap_open(st, 4, &a), 0);
    for (uint64_t i = 0; i < 100; i++)
        assert_int_equal(tu_publish_u64(bus, "t", i, NULL), 0);
    assert_int_equal(seda_bus_wait_idle(bus, TU_DEADLINE), 0);
    seda_tap_entry e[8];
    uint64_t missed = 0;
    int k = seda_tap_read(a, e, 8, 0, &missed);
    assert_int_equal(k, 4);
    assert_int_equal(missed, 96);
    for (int i = 0; i < k; i++)
        seda_tap_entry_free(&e[i]);
    /* Nothing more: a read times out with none. */
    assert_int_equal(seda_tap_read(a, e, 8, 0.05, NULL), 0);
    seda_tap_close(a);
    assert_int_equal(seda_tap_open(st, 0, &a), SEDA_EINVAL);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.delivered, 100);
    assert_int_equal(seda_bus_shutdown(bus, 5), 0);
    seda_bus_free(bus);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tap_two_taps_see_every_envelope_in_order),
        cmocka_unit_test(test_tap_full_counts_missed_never_blocks),
    };
    return cmocka_run_group_tests_name("tap", tests, NULL, NULL);
}
