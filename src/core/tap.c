/* SPDX-License-Identifier: MIT */
/*
 * tap.c -- live taps: an operator's view of the envelopes entering a
 * stage, as they enter (seda_tap_open / seda_tap_read / seda_tap_close).
 *
 * DESIGN
 *   A tap is a bounded ring of copies (id, headers, the first bytes of
 *   the payload); admission copies each envelope into every open tap of
 *   its stage (seda__taps_offer) and a reader takes them out, waiting
 *   for them with a deadline.  A reader slower than the traffic loses
 *   copies, counted in missed: a tap never holds up the stage.  With no
 *   tap open, admission pays one relaxed load (seda__taps_active).
 */
#include <string.h>

#include "env.h"
#include "seda_int.h"
#include "tap.h"

#define TAP_PAYLOAD 128

struct tap_item {
    seda_tap_entry e;           /* pointers into blob */
    char *blob;                 /* owned */
};

struct seda_tap_s {
    struct seda_tap_s *next;    /* guarded by the taps' mu */
    struct seda_taps *taps;     /* immutable */
    pthread_cond_t cv;          /* a reader waits here (with taps->mu) */
    struct tap_item *ring;      /* cap entries; guarded by mu */
    int cap, head, n;           /* guarded by mu */
    uint64_t missed;            /* copies lost to a full ring; mu */
};

void seda__taps_init(struct seda_taps *t)
{
    atomic_init(&t->n, 0);
    seda__mutex_init(&t->mu);
    t->list = NULL;
}

void seda__taps_free(struct seda_taps *t)
{
    seda__mutex_destroy(&t->mu);
}

/* One copy of env, or NULL when out of memory. */
static char *copy_of(const seda_env_t *env, seda_tap_entry *e)
{
    size_t len;
    char *blob = seda__env_snapshot(env, TAP_PAYLOAD, false, e, &len);
    if (blob)
        e->at = seda_now();
    return blob;
}

void seda__taps_offer(struct seda_taps *t, const seda_env_t *env)
{
    seda__mutex_lock(&t->mu);
    for (struct seda_tap_s *tap = t->list; tap; tap = tap->next) {
        /* Each tap its own copy, made into its ring's next entry. */
        struct tap_item *it = &tap->ring[(tap->head + tap->n) % tap->cap];
        if (tap->n == tap->cap || !(it->blob = copy_of(env, &it->e))) {
            tap->missed++;
            continue;
        }
        tap->n++;
        pthread_cond_signal(&tap->cv);
    }
    seda__mutex_unlock(&t->mu);
}

int seda__taps_open(struct seda_taps *t, int capacity, seda_tap_t **out)
{
    if (capacity <= 0 || capacity > 100000)
        return SEDA_EINVAL;
    struct seda_tap_s *tap = seda__calloc(1, sizeof *tap);
    if (!tap)
        return SEDA_ENOMEM;
    tap->ring = seda__calloc((size_t)capacity, sizeof *tap->ring);
    if (!tap->ring || seda__cond_init(&tap->cv) != 0) {
        seda__free(tap->ring);
        seda__free(tap);
        return SEDA_ENOMEM;
    }
    tap->cap = capacity;
    tap->taps = t;
    seda__mutex_lock(&t->mu);
    tap->next = t->list;
    t->list = tap;
    atomic_fetch_add_explicit(&t->n, 1, memory_order_relaxed);
    seda__mutex_unlock(&t->mu);
    *out = tap;
    return 0;
}

int seda_tap_read(seda_tap_t *tap, seda_tap_entry *out, int max,
                  double timeout, uint64_t *missed)
{
    struct seda_taps *t = tap->taps;
    int64_t deadline = seda__deadline(timeout);
    seda__mutex_lock(&t->mu);
    while (tap->n == 0 &&
           seda__cond_wait(&tap->cv, &t->mu, deadline) == 0)
        ;
    int k = 0;
    for (; k < max && tap->n > 0; k++) {
        out[k] = tap->ring[tap->head].e;
        /* The caller frees each entry's blob with seda_tap_entry_free:
         * the headers array starts it. */
        out[k].priv = tap->ring[tap->head].blob;
        tap->head = (tap->head + 1) % tap->cap;
        tap->n--;
    }
    if (missed)
        *missed = tap->missed;
    seda__mutex_unlock(&t->mu);
    return k;
}

void seda_tap_entry_free(seda_tap_entry *e)
{
    seda__free(e->priv);
    e->priv = NULL;
}

void seda_tap_close(seda_tap_t *tap)
{
    if (!tap)
        return;
    struct seda_taps *t = tap->taps;
    seda__mutex_lock(&t->mu);
    for (struct seda_tap_s **pp = &t->list; *pp; pp = &(*pp)->next) {
        if (*pp == tap) {
            *pp = tap->next;
            break;
        }
    }
    atomic_fetch_sub_explicit(&t->n, 1, memory_order_relaxed);
    seda__mutex_unlock(&t->mu);
    for (int i = 0; i < tap->n; i++)
        seda__free(tap->ring[(tap->head + i) % tap->cap].blob);
    pthread_cond_destroy(&tap->cv);
    seda__free(tap->ring);
    seda__free(tap);
}
