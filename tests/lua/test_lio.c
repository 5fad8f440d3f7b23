/* SPDX-License-Identifier: MIT */
/*
 * test_lio.c -- the I/O binding's life in a Lua state (src/lua/lio.c,
 * lio_tcp.c): a script that does no I/O starts no thread; the first I/O
 * starts one loop thread, which lua_close joins; sockets, pooled
 * connections and their descriptors are all closed by lua_close, whatever
 * order the finalizers run in.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "seda_lua.h"
#include "testutil.h"

static lua_State *new_state(void)
{
    lua_State *L = luaL_newstate();
    assert_non_null(L);
    luaL_openlibs(L);
    luaL_requiref(L, "seda", luaopen_seda, 1);
    lua_pop(L, 1);
    return L;
}

static void run(lua_State *L, const char *code)
{
    if (luaL_dostring(L, code) != LUA_OK)
        fail_msg("%s", lua_tostring(L, -1));
}

static void test_lio_no_io_no_thread(void **state)
{
    (void)state;
    int threads = tu_thread_count();
    lua_State *L = new_state();
    run(L, "local seda = require 'seda'\n"
           "assert(type(seda.sleep) == 'function')\n"
           "assert(type(seda.http.request) == 'function')\n"
           "assert(type(seda.socket.tcp) == 'function')\n");
    assert_int_equal(tu_thread_count(), threads);
    lua_close(L);
}

static void test_lio_loop_joined_at_close(void **state)
{
    (void)state;
    int threads = tu_thread_count();
    lua_State *L = new_state();
    run(L, "seda.sleep(0)");
    assert_int_equal(tu_thread_count(), threads + 1);
    run(L, "seda.sleep(0.001)");
    assert_int_equal(tu_thread_count(), threads + 1);   /* one loop */
    lua_close(L);
    assert_true(tu_wait_threads(threads, TU_DEADLINE));
}

static void test_lio_sockets_closed_at_close(void **state)
{
    (void)state;
    int port;
    /* Connections complete in its backlog; nobody accepts them. */
    int lfd = tu_listen_loopback(16, &port);
    int threads = tu_thread_count();
    int fds = tu_fd_count();
    lua_State *L = new_state();
    char code[1024];
    snprintf(code, sizeof code,
             "local a = seda.socket.tcp()\n"
             "a:settimeout(5)\n"
             "assert(a:connect('127.0.0.1', %d))\n"
             "assert(a:setkeepalive(0, 2))\n"     /* pooled, never expires */
             "KEEP = seda.socket.tcp()\n"
             "KEEP:settimeout(5)\n"
             "assert(KEEP:connect('127.0.0.1', %d))\n"
             "assert(KEEP:getreusedtimes() == 1)\n"  /* a's connection */
             "local b = seda.socket.tcp()\n"
             "b:settimeout(5)\n"
             "assert(b:connect('127.0.0.1', %d))\n"
             "assert(b:getreusedtimes() == 0)\n"
             "b:setkeepalive()\n",                    /* left in the pool */
             port, port, port);
    run(L, code);
    assert_true(tu_fd_count() > fds);
    lua_close(L);
    assert_true(tu_wait_threads(threads, TU_DEADLINE));
    assert_int_equal(tu_fd_count(), fds);
    close(lfd);
}

static void *nothing(void *arg)
{
    return arg;
}

/* Sanitizer runtimes start a thread of their own at the first
 * pthread_create: make it happen before any count is taken. */
static int group_setup(void **state)
{
    (void)state;
    pthread_t t;
    if (pthread_create(&t, NULL, nothing, NULL) != 0)
        return -1;
    pthread_join(t, NULL);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lio_no_io_no_thread),
        cmocka_unit_test(test_lio_loop_joined_at_close),
        cmocka_unit_test(test_lio_sockets_closed_at_close),
    };
    return cmocka_run_group_tests_name("lio", tests, group_setup, NULL);
}
