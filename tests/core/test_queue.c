/* SPDX-License-Identifier: MIT */
/* test_queue.c -- the bounded pointer ring (src/core/queue.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/queue.h"

#define P(i) ((void *)(uintptr_t)(i))

static void test_queue_fifo_and_wrap(void **state)
{
    (void)state;
    struct seda_queue q;
    assert_int_equal(seda__queue_init(&q, 5), 0);
    assert_int_equal(q.mask + 1, 8);         /* rounded to a power of two */
    uintptr_t next_in = 1, next_out = 1;
    for (int round = 0; round < 100; round++) {
        for (int k = 0; k < 5; k++)
            seda__queue_push(&q, P(next_in++));
        for (int k = 0; k < 5; k++)
            assert_ptr_equal(seda__queue_pop(&q), P(next_out++));
    }
    assert_null(seda__queue_pop(&q));
    assert_int_equal(seda__queue_count(&q), 0);
    seda__queue_destroy(&q);
}

static void test_queue_push_front_is_next(void **state)
{
    (void)state;
    struct seda_queue q;
    assert_int_equal(seda__queue_init(&q, 4), 0);
    seda__queue_push(&q, P(2));
    seda__queue_push(&q, P(3));
    seda__queue_push_front(&q, P(1));
    seda__queue_push_front(&q, P(0));
    assert_int_equal(seda__queue_room(&q), 0);
    for (uintptr_t i = 0; i < 4; i++)
        assert_ptr_equal(seda__queue_pop(&q), P(i));
    seda__queue_destroy(&q);
}

static void test_queue_pop_many_across_wrap(void **state)
{
    (void)state;
    struct seda_queue q;
    void *out[8];
    assert_int_equal(seda__queue_init(&q, 8), 0);
    for (uintptr_t i = 0; i < 6; i++)
        seda__queue_push(&q, P(i));
    assert_int_equal(seda__queue_pop_many(&q, out, 5), 5);
    for (uintptr_t i = 6; i < 13; i++)      /* wraps around */
        seda__queue_push(&q, P(i));
    assert_int_equal(seda__queue_count(&q), 8);
    assert_int_equal(seda__queue_pop_many(&q, out, 100), 8);
    for (uintptr_t i = 0; i < 8; i++)
        assert_ptr_equal(out[i], P(5 + i));
    assert_int_equal(seda__queue_pop_many(&q, out, 4), 0);
#ifdef SEDA_DEBUG
    seda__queue_check(&q);
#endif
    seda__queue_destroy(&q);
}

static void test_queue_reserve_keeps_order(void **state)
{
    (void)state;
    struct seda_queue q;
    assert_int_equal(seda__queue_init(&q, 4), 0);
    seda__queue_push(&q, P(1));
    seda__queue_push(&q, P(2));
    (void)seda__queue_pop(&q);
    seda__queue_push(&q, P(3));
    seda__queue_push(&q, P(4));
    seda__queue_push(&q, P(5));             /* wrapped, full */
    assert_int_equal(seda__queue_reserve(&q, 10), 0);
    assert_int_equal(q.mask + 1, 16);
    seda__queue_push_front(&q, P(0));
    for (uintptr_t i = 0; i <= 5; i++)
        if (i != 1)
            assert_ptr_equal(seda__queue_pop(&q), P(i));
    seda__queue_destroy(&q);
}

static int fail_next;
static void *failing_malloc(size_t n)
{
    if (fail_next) {
        fail_next = 0;
        return NULL;
    }
    return malloc(n);
}

static void test_queue_init_enomem_leaves_queue_untouched(void **state)
{
    (void)state;
    struct seda_queue q = { 0 };
    seda_set_allocator(failing_malloc, NULL, NULL);
    fail_next = 1;
    assert_int_equal(seda__queue_init(&q, 16), SEDA_ENOMEM);
    assert_null(q.slot);
    assert_int_equal(seda__queue_init(&q, 2), 0);
    seda__queue_push(&q, P(7));
    fail_next = 1;
    assert_int_equal(seda__queue_reserve(&q, 64), SEDA_ENOMEM);
    assert_int_equal(q.mask + 1, 2);
    assert_ptr_equal(seda__queue_pop(&q), P(7));
    seda__queue_destroy(&q);
    seda_set_allocator(NULL, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_fifo_and_wrap),
        cmocka_unit_test(test_queue_push_front_is_next),
        cmocka_unit_test(test_queue_pop_many_across_wrap),
        cmocka_unit_test(test_queue_reserve_keeps_order),
        cmocka_unit_test(test_queue_init_enomem_leaves_queue_untouched),
    };
    return cmocka_run_group_tests_name("queue", tests, NULL, NULL);
}
