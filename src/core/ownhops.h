/* SPDX-License-Identifier: MIT */
/*
 * ownhops.h -- the plain-subject hops ("nats:<subject>") this program's
 * own slips name: the entries of the slips given to seda_stage_publish
 * and seda_env_forward.  A slip that arrives in a message (another
 * process wrote it, perhaps a hostile one) never passes through those, so
 * the remote layer lets a "nats:" hop after a stage publish only to a
 * subject noted here or in the stage's reach (remote.reach).
 *
 * Locking: mu guards names, n and cap; the part is its bus's and lives as
 * long as it.
 */
#ifndef SEDA_OWNHOPS_H
#define SEDA_OWNHOPS_H

#include <stdbool.h>

#include "seda_int.h"

#define SEDA__OWNHOPS_MAX 4096      /* distinct hops kept; more are not */

struct seda__ownhops {
    seda__mutex_t mu;
    char **names;                   /* guarded by mu */
    int n, cap;                     /* guarded by mu */
};

/* Init / destroy (the storage is the caller's).  Cannot fail. */
SEDA__API void seda__ownhops_init(struct seda__ownhops *h);
SEDA__API void seda__ownhops_destroy(struct seda__ownhops *h);

/* Note the "nats:" entries of NAMES (N of them; others are skipped).
 * Out of memory or past SEDA__OWNHOPS_MAX a name is not noted (its hop
 * is then refused as not reachable, which says so).  Takes mu. */
SEDA__API void seda__ownhops_note(struct seda__ownhops *h,
                                  const char *const *names, int n);

/* Whether HOP ("nats:<subject>") was noted.  Takes mu. */
SEDA__API bool seda__ownhops_has(struct seda__ownhops *h, const char *hop);

#endif /* SEDA_OWNHOPS_H */
