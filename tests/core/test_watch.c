/* SPDX-License-Identifier: MIT */
/*
 * test_watch.c -- readiness served by the pool's workers (SPEC.md section
 * 16, seda_watch_add): a watched descriptor's callback runs on a worker,
 * no thread of its own, never two at once for one watch; removing a
 * watch gives its ud back once no callback of it runs (from inside its
 * own callback: when that returns); a worker busy with a
 * long run of tasks still serves readiness between them; with the only
 * worker inside one task that lasts, the pool's keeper serves it; an idle
 * pool with a watch wakes for it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "testutil.h"

struct w {
    int fd[2];                  /* a pipe: [0] watched, [1] written */
    seda_watch_t *watch;
    tu_counter calls;
    atomic_int worker;          /* seda_worker_index() in the callback */
    atomic_int inside;          /* callbacks running now */
    atomic_int overlap;         /* a second one while one ran */
    atomic_bool del_self;       /* the callback removes its own watch */
    atomic_long done_at_call;   /* the busy stage's completions then */
    seda_bus_t *bus;
    tu_counter released;
};

static void w_init(struct w *x, seda_bus_t *bus)
{
    memset(x, 0, sizeof *x);
    assert_int_equal(pipe(x->fd), 0);
    tu_counter_init(&x->calls);
    tu_counter_init(&x->released);
    atomic_init(&x->worker, -2);
    atomic_init(&x->done_at_call, -1);
    x->bus = bus;
}

static void w_destroy(struct w *x)
{
    close(x->fd[0]);
    close(x->fd[1]);
    tu_counter_destroy(&x->calls);
    tu_counter_destroy(&x->released);
}

static void on_release(void *ud)
{
    struct w *x = ud;
    /* Never while its callback runs. */
    assert_int_equal(atomic_load(&x->inside), 0);
    tu_counter_add(&x->released, 1);
}

static void on_ready(void *ud, uint32_t ev)
{
    struct w *x = ud;
    if (atomic_fetch_add(&x->inside, 1) != 0)
        atomic_store(&x->overlap, 1);
    atomic_store(&x->worker, seda_worker_index());
    if (atomic_load(&x->done_at_call) < 0) {
        seda_stage_stats ss;
        seda_stage_t *st = seda_bus_stage(x->bus, "busy");
        if (st) {
            seda_stage_stats_get(st, &ss);
            atomic_store(&x->done_at_call, (long)ss.completed);
        }
    }
    if (ev & EPOLLIN) {
        char buf[64];
        ssize_t n = read(x->fd[0], buf, sizeof buf);
        (void)n;
    }
    if (atomic_load(&x->del_self))
        seda_watch_del(x->watch, on_release);
    atomic_fetch_sub(&x->inside, 1);
    tu_counter_add(&x->calls, 1);
}

static seda_bus_t *bus_new(int workers, int batch)
{
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = workers;
    if (batch > 0)
        bo.batch = batch;
    seda_bus_t *bus;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    return bus;
}

static void bus_end(seda_bus_t *bus)
{
    assert_int_equal(seda_bus_shutdown(bus, 5.0), 0);
    seda_bus_free(bus);
}

static void test_watch_runs_on_a_worker_and_del_gives_back(void **state)
{
    (void)state;
    seda_bus_t *bus = bus_new(2, 0);
    struct w x;
    w_init(&x, bus);
    /* An idle pool (every worker parked) wakes for its first watch. */
    assert_int_equal(seda_bus_wait_idle(bus, TU_DEADLINE), 0);
    assert_int_equal(seda_watch_add(bus, x.fd[0], EPOLLIN, on_ready, &x,
                                    &x.watch), 0);
    for (int i = 1; i <= 50; i++) {
        assert_int_equal(write(x.fd[1], "x", 1), 1);
        assert_true(tu_counter_wait_ge(&x.calls, i, TU_DEADLINE));
    }
    int idx = atomic_load(&x.worker);
    assert_true(idx == 0 || idx == 1);          /* a worker, no thread of its own */
    assert_int_equal(atomic_load(&x.overlap), 0);
    /* Given back at once, or by the worker as its last call returns. */
    seda_watch_del(x.watch, on_release);
    assert_true(tu_counter_wait_ge(&x.released, 1, TU_DEADLINE));
    long calls = tu_counter_get(&x.calls);
    assert_int_equal(write(x.fd[1], "y", 1), 1);
    tu_spin(0.05);
    assert_int_equal(tu_counter_get(&x.calls), calls);     /* no more */
    bus_end(bus);
    w_destroy(&x);
}

static void test_watch_del_from_its_own_callback(void **state)
{
    (void)state;
    seda_bus_t *bus = bus_new(1, 0);
    struct w x;
    w_init(&x, bus);
    atomic_store(&x.del_self, true);
    assert_int_equal(seda_watch_add(bus, x.fd[0], EPOLLIN, on_ready, &x,
                                    &x.watch), 0);
    assert_int_equal(write(x.fd[1], "x", 1), 1);
    assert_true(tu_counter_wait_ge(&x.released, 1, TU_DEADLINE));
    assert_int_equal(tu_counter_get(&x.calls), 1);
    bus_end(bus);
    w_destroy(&x);
}

static bool slow_handler(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    tu_spin(0.002);
    return true;
}

static void test_watch_served_between_tasks_of_a_busy_worker(void **state)
{
    (void)state;
    /* One worker, one envelope per task, 1 000 tasks of 2 ms: readiness
     * is served between them, long before the last. */
    seda_bus_t *bus = bus_new(1, 1);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "busy";
    so.capacity = 2000;
    seda_stage_t *st;
    char err[256];
    assert_int_equal(seda_stage_add(bus, &so, &st, err, sizeof err), 0);
    seda_stage_consume(st, slow_handler, NULL);
    struct w x;
    w_init(&x, bus);
    assert_int_equal(seda_watch_add(bus, x.fd[0], EPOLLIN, on_ready, &x,
                                    &x.watch), 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(tu_publish_u64(bus, "busy", (uint64_t)i, NULL), 0);
    assert_int_equal(write(x.fd[1], "x", 1), 1);
    assert_true(tu_counter_wait_ge(&x.calls, 1, 30));
    long at = atomic_load(&x.done_at_call);
    assert_true(at >= 0 && at < 1000);
    /* The worker between two tasks, or the keeper during one (a task of
     * 2 ms outlasts the keeper's millisecond). */
    int idx = atomic_load(&x.worker);
    assert_true(idx == 0 || idx == -1);
    seda_watch_del(x.watch, on_release);
    assert_true(tu_counter_wait_ge(&x.released, 1, TU_DEADLINE));
    assert_int_equal(seda_bus_wait_idle(bus, 60), 0);
    bus_end(bus);
    w_destroy(&x);
}

/* Holds its worker until the watch's callback has run (or 60 s). */
static atomic_int hold_running, hold_saw_call;
static bool hold_handler(seda_env_t *env, void *ud)
{
    (void)env;
    struct w *x = ud;
    atomic_store(&hold_running, 1);
    double end = seda_now() + 60;
    while (tu_counter_get(&x->calls) < 1 && seda_now() < end)
        ;
    atomic_store(&hold_saw_call, tu_counter_get(&x->calls) >= 1);
    atomic_store(&hold_running, 0);
    return true;
}

static void test_watch_served_by_the_keeper_during_a_long_task(void **state)
{
    (void)state;
    /* One worker inside a task that ends only once the callback has run:
     * nobody looks between tasks, so the keeper must. */
    seda_bus_t *bus = bus_new(1, 1);
    struct w x;
    w_init(&x, bus);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "hold";
    seda_stage_t *st;
    char err[256];
    assert_int_equal(seda_stage_add(bus, &so, &st, err, sizeof err), 0);
    seda_stage_consume(st, hold_handler, &x);
    assert_int_equal(seda_watch_add(bus, x.fd[0], EPOLLIN, on_ready, &x,
                                    &x.watch), 0);
    atomic_store(&hold_running, 0);
    atomic_store(&hold_saw_call, 0);
    assert_int_equal(tu_publish_u64(bus, "hold", 1, NULL), 0);
    double end = seda_now() + TU_DEADLINE;
    while (!atomic_load(&hold_running) && seda_now() < end)
        tu_spin(0.001);
    assert_true(atomic_load(&hold_running));
    assert_int_equal(write(x.fd[1], "x", 1), 1);
    assert_true(tu_counter_wait_ge(&x.calls, 1, 30));
    assert_int_equal(atomic_load(&x.worker), -1);   /* the keeper: no worker */
    assert_int_equal(seda_bus_wait_idle(bus, 60), 0);
    assert_true(atomic_load(&hold_saw_call));       /* served during the task */
    seda_watch_del(x.watch, on_release);
    assert_true(tu_counter_wait_ge(&x.released, 1, TU_DEADLINE));
    bus_end(bus);
    w_destroy(&x);
}

static void test_watch_misuse(void **state)
{
    (void)state;
    seda_bus_t *bus = bus_new(1, 0);
    seda_watch_t *w;
    assert_int_equal(seda_watch_add(bus, -1, EPOLLIN, on_ready, NULL, &w),
                     SEDA_EINVAL);
    assert_int_equal(seda_watch_add(bus, 0, EPOLLIN, NULL, NULL, &w),
                     SEDA_EINVAL);
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    assert_int_equal(seda_watch_add(bus, fd[0], EPOLLIN, on_ready, NULL, &w),
                     0);
    seda_watch_t *w2;
    assert_int_equal(seda_watch_add(bus, fd[0], EPOLLIN, on_ready, NULL, &w2),
                     -EEXIST);
    seda_watch_del(w, NULL);
    close(fd[0]);
    close(fd[1]);
    bus_end(bus);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_watch_runs_on_a_worker_and_del_gives_back),
        cmocka_unit_test(test_watch_del_from_its_own_callback),
        cmocka_unit_test(test_watch_served_between_tasks_of_a_busy_worker),
        cmocka_unit_test(test_watch_served_by_the_keeper_during_a_long_task),
        cmocka_unit_test(test_watch_misuse),
    };
    return cmocka_run_group_tests_name("watch", tests, NULL, NULL);
}
