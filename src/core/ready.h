/* SPDX-License-Identifier: MIT */
/*
 * ready.h -- the pool's readiness set (ready.c): watched descriptors, one
 * epoll set, an eventfd to wake its waiter.  The pool (pool.c) owns one
 * and decides which worker waits; the watches are public (seda.h:
 * seda_watch_add and friends).
 */
#ifndef SEDA_READY_H
#define SEDA_READY_H

#include <sys/epoll.h>

#include "seda_int.h"

struct seda_ready;

/* A new set.  0, SEDA_ENOMEM or a negative errno (epoll, eventfd). */
SEDA__API int seda__ready_new(struct seda_ready **out);
/* Free rd (no worker waits or dispatches any more).  NULL is ignored. */
SEDA__API void seda__ready_free(struct seda_ready *rd);
/* Whether any watch is registered (a hint; relaxed). */
SEDA__API bool seda__ready_any(const struct seda_ready *rd);
SEDA__API int seda__ready_add(struct seda_ready *rd, int fd, uint32_t events,
                              seda_watch_fn fn, void *ud,
                              seda_watch_t **out);
/* Wait up to timeout_ms (0: a look, -1: until something) for events; the
 * pool's own wake-ups are taken out.  Returns how many are in evs. */
SEDA__API int seda__ready_wait(struct seda_ready *rd, struct epoll_event *evs,
                               int max, int timeout_ms);
/* Run the callbacks of evs (from seda__ready_wait) on this thread. */
SEDA__API void seda__ready_dispatch(struct seda_ready *rd,
                                    const struct epoll_event *evs, int n);
/* Wake the thread in seda__ready_wait (or the next to call it). */
SEDA__API void seda__ready_kick(struct seda_ready *rd);

#endif
