/* SPDX-License-Identifier: MIT */
/*
 * tally.h -- a stage's counters as a value: the stage keeps one (stats.h)
 * and a drain task or a settling layer adds to a tally of its own that is
 * folded in under the stage lock at once (seda__stats_fold).  Plain
 * data: whoever holds a tally writes it.
 */
#ifndef SEDA_TALLY_H
#define SEDA_TALLY_H

#include <stdint.h>

/* Dead-letter reasons counted apart (SEDA_DEAD_* of seda.h). */
#define SEDA__DEAD_N 6

struct stage_counters {
    uint64_t enqueued;          /* admissions */
    uint64_t delivered;         /* acks */
    uint64_t nacked;            /* nacks */
    uint64_t dropped;           /* refusals, evictions, sweeps */
    uint64_t dead_lettered;     /* envelopes dead-lettered from here */
    uint64_t errors;            /* reported errors */
    uint64_t completed;         /* itineraries ended here */
    uint64_t invalid;           /* refused by the admission check */
    uint64_t refused;           /* refused by an admit rule (Lua) */
    uint64_t shed;              /* publishes refused by shedding */
    uint64_t shed_for;          /* new itineraries refused because this
                                   stage, first or on the slip, sheds */
    /* Itinerary-level counters summed into the bus totals. */
    uint64_t accepted;          /* publishes accepted as a first hop here */
    uint64_t it_dead;           /* itineraries dead-lettered here */
    uint64_t it_lost;           /* itineraries evicted or swept here */
    uint64_t it_remote;         /* itineraries handed to JetStream here
                                   (a remote stage: remote.h) */
    uint64_t dead_by[SEDA__DEAD_N]; /* dead_lettered by reason */
};

/* A delivery's result, as the drain task decides it and the layers that
 * settle or journal it receive it (store.h, remote.h). */
enum { DR_ACK, DR_RETRY, DR_DEAD_MAX, DR_DEAD_NOCONS };

#endif /* SEDA_TALLY_H */
