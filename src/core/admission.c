/* SPDX-License-Identifier: MIT */
/*
 * admission.c -- a stage's admission part (struct seda_admission,
 * admission.h): made and freed with the stage, its options' ranges, and
 * the head ring's size a capacity and concurrency need.  A leaf: the
 * admission itself (the paths a publish takes) is stage.c's.
 */
#include <stdio.h>

#include "admission.h"
#include "seda_int.h"

int seda__admission_init(struct seda_admission *a, const seda_stage_opts *o)
{
    if (seda__cond_init(&a->not_full))
        return SEDA_ENOMEM;
    a->capacity = o->capacity;
    a->concurrency = o->concurrency;
    a->policy = o->policy;
    atomic_init(&a->cap_fast, o->capacity);
    atomic_init(&a->conc_fast, o->concurrency);
    return 0;
}

void seda__admission_free(struct seda_admission *a)
{
    pthread_cond_destroy(&a->not_full);
}

/* The admission options' ranges; 0, or -1 with why naming the field.
 * A NaN fails every comparison, so each test is written to fail on it. */
static int check_admission(double starve, double target, double interval,
                           double backoff, double max_backoff, double mult,
                           char *why, size_t n)
{
    if (!(starve > 0))
        return snprintf(why, n, "starve_after must be > 0 (got %g)",
                        starve), -1;
    if (!(target >= 0))
        return snprintf(why, n, "shed.target must be >= 0 (got %g)",
                        target), -1;
    if (target > 0 && !(interval > 0))
        return snprintf(why, n, "shed.interval must be > 0 (got %g)",
                        interval), -1;
    if (!(backoff >= 0))
        return snprintf(why, n, "retry.backoff must be >= 0 (got %g)",
                        backoff), -1;
    if (backoff > 0 && !(max_backoff >= backoff))
        return snprintf(why, n, "retry.max_backoff must be >= "
                        "retry.backoff (got %g < %g)", max_backoff,
                        backoff), -1;
    if (backoff > 0 && !(mult >= 1))
        return snprintf(why, n, "retry.multiplier must be >= 1 (got %g)",
                        mult), -1;
    return 0;
}

int seda__admission_check(const seda_stage_opts *o, unsigned what,
                          char *why, size_t n)
{
    bool shed = what & SEDA_TUNE_SHED, retry = what & SEDA_TUNE_RETRY,
         starve = what & SEDA_TUNE_STARVE;
    return check_admission(starve ? o->starve_after : 1,
                           shed ? o->shed_target : 0,
                           shed ? o->shed_interval : 0,
                           retry ? o->retry_backoff : 0,
                           retry ? o->retry_max_backoff : 0,
                           retry ? o->retry_multiplier : 1, why, n);
}
