/* SPDX-License-Identifier: MIT */
/* test_hist.c -- log-bucket latency histograms (src/core/hist.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "core/hist.h"

static void test_hist_value_falls_in_its_bucket(void **state)
{
    (void)state;
    uint64_t v = 0;
    for (int k = 0; k < 200000; k++) {
        v = k < 5000 ? (uint64_t)k : v + 1 + v / 997;
        if (v >= (UINT64_C(1) << SEDA_HIST_MAXBIT))
            break;
        int i = seda__hist_index(v);
        assert_true(i >= 0 && i < SEDA_HIST_N);
        uint64_t lo, hi;
        seda__hist_bounds(i, &lo, &hi);
        if (v < lo || v > hi)
            fail_msg("value %llu in bucket %d [%llu, %llu]",
                     (unsigned long long)v, i, (unsigned long long)lo,
                     (unsigned long long)hi);
        /* Bucket width at most 1/16 of its lower bound. */
        assert_true((hi - lo) * 16 <= (lo > 16 ? lo : 16));
    }
    assert_int_equal(seda__hist_index(UINT64_MAX), SEDA_HIST_N - 1);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_hist_quantiles_within_resolution(void **state)
{
    (void)state;
    enum { N = 100000 };
    static uint64_t v[N];
    static struct seda_hist h;
    memset(&h, 0, sizeof h);
    srand(7);
    for (int i = 0; i < N; i++) {
        /* Log-uniform from 100 ns to ~10 ms, like real latencies. */
        double e = 2.0 + 5.0 * rand() / (double)RAND_MAX;
        v[i] = (uint64_t)__builtin_pow(10.0, e);
        seda__hist_add(&h, v[i]);
    }
    qsort(v, N, sizeof v[0], cmp_u64);
    const double qs[] = { 0.0, 0.5, 0.9, 0.99, 0.999, 1.0 };
    for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
        double exact = (double)v[(size_t)(qs[k] * (N - 1))];
        double got = seda__hist_quantile(&h, qs[k]);
        double err = got > exact ? got - exact : exact - got;
        if (err > exact * 0.035)
            fail_msg("q=%g: exact %.0f got %.0f", qs[k], exact, got);
    }
    assert_int_equal(h.count, N);
    assert_int_equal(h.max, v[N - 1]);
}

static void test_hist_empty_and_single(void **state)
{
    (void)state;
    struct seda_hist h;
    memset(&h, 0, sizeof h);
    assert_true(seda__hist_quantile(&h, 0.99) == 0);
    seda__hist_add(&h, 12345);
    double q = seda__hist_quantile(&h, 0.5);
    assert_true(q <= 12345 && q > 12345 * 0.96);
    assert_true(seda__hist_quantile(&h, 1.0) <= 12345);
}

/* The sum (a Prometheus summary's _sum) is exact, whatever the buckets. */
static void test_hist_sum_is_exact(void **state)
{
    (void)state;
    struct seda_hist h;
    memset(&h, 0, sizeof h);
    uint64_t sum = 0;
    for (uint64_t v = 0; v < 100000; v += 7 + v / 3) {
        seda__hist_add(&h, v);
        sum += v;
    }
    assert_int_equal(h.sum, sum);
    seda__hist_add(&h, UINT64_C(1) << 45);  /* past the last bucket */
    assert_int_equal(h.sum, sum + (UINT64_C(1) << 45));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_value_falls_in_its_bucket),
        cmocka_unit_test(test_hist_quantiles_within_resolution),
        cmocka_unit_test(test_hist_empty_and_single),
        cmocka_unit_test(test_hist_sum_is_exact),
    };
    return cmocka_run_group_tests_name("hist", tests, NULL, NULL);
}
