/* SPDX-License-Identifier: MIT */
/*
 * resolve.c -- host name lookups off the loop thread: one resolver thread
 * per loop, started on the first name (a loop that only ever sees numeric
 * addresses has none), running getaddrinfo for queued jobs in turn and
 * posting each answer back to the loop as a task.
 *
 * DESIGN
 *   getaddrinfo blocks (up to the resolver's own timeouts, seconds), so it
 *   never runs on the loop thread.  Jobs wait in a FIFO under the
 *   resolver's mutex; the thread takes one, looks it up unlocked, posts it
 *   to the loop (seda__io_post), where the job's done function runs.  A
 *   cancelled connect does not stop its lookup: its done function finds
 *   the op finished and frees the job.  One thread means lookups are
 *   serial: a slow name delays the names behind it, never the loop.
 *   At the loop's end the thread is told to stop and joined (after the
 *   lookup in progress, if any); jobs still queued are answered
 *   EAI_CANCELED on the loop thread.
 */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "io_int.h"

/*
 * Locking:
 *   mu guards head, tail, stop.
 *   Immutable after creation: loop, thread.
 *   Lock order: mu is a leaf; seda__io_post (which takes the loop's
 *   lock) is called with mu released.
 */
struct seda__io_resolver {
    pthread_mutex_t mu;
    pthread_cond_t cv;              /* a job was queued, or stop */
    struct seda__io_resolve_job *head;  /* guarded by mu */
    struct seda__io_resolve_job *tail;  /* guarded by mu */
    bool stop;                      /* guarded by mu */
    seda_io_loop_t *loop;
    pthread_t thread;
};

static void run_done(seda_io_loop_t *loop, struct seda__io_task *t)
{
    struct seda__io_resolve_job *j = (struct seda__io_resolve_job *)t;
    j->done(loop, j);
}

static void *resolver_main(void *arg)
{
    struct seda__io_resolver *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->head && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->stop)
            break;
        struct seda__io_resolve_job *j = r->head;
        r->head = j->next;
        if (!r->head)
            r->tail = NULL;
        pthread_mutex_unlock(&r->mu);
        struct addrinfo hints = {
            .ai_family = AF_UNSPEC,
            .ai_socktype = SOCK_STREAM,
            .ai_flags = AI_ADDRCONFIG,
        };
        j->gai = getaddrinfo(j->host, j->port, &hints, &j->res);
        seda__io_post(r->loop, &j->task);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int seda__io_resolve(seda_io_loop_t *loop, struct seda__io_resolve_job *j)
{
    struct seda__io_resolver **slot = seda__io_resolver_slot(loop);
    if (!*slot) {
        struct seda__io_resolver *r = calloc(1, sizeof *r);
        if (!r)
            return -ENOMEM;
        pthread_mutex_init(&r->mu, NULL);
        pthread_cond_init(&r->cv, NULL);
        r->loop = loop;
        if (pthread_create(&r->thread, NULL, resolver_main, r) != 0) {
            pthread_cond_destroy(&r->cv);
            pthread_mutex_destroy(&r->mu);
            free(r);
            return -EAGAIN;
        }
        *slot = r;
    }
    struct seda__io_resolver *r = *slot;
    j->task.run = run_done;
    j->next = NULL;
    j->res = NULL;
    j->gai = 0;
    pthread_mutex_lock(&r->mu);
    if (r->tail)
        r->tail->next = j;
    else
        r->head = j;
    r->tail = j;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

void seda__io_resolve_free(struct seda__io_resolve_job *j)
{
    if (!j)
        return;
    if (j->res)
        freeaddrinfo(j->res);
    free(j->host);
    free(j);
}

void seda__io_resolver_stop(seda_io_loop_t *loop)
{
    struct seda__io_resolver **slot = seda__io_resolver_slot(loop);
    struct seda__io_resolver *r = *slot;
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    struct seda__io_resolve_job *left = r->head;
    r->head = r->tail = NULL;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    while (left) {
        struct seda__io_resolve_job *next = left->next;
        left->gai = EAI_CANCELED;
        left->done(loop, left);
        left = next;
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
    *slot = NULL;
}
