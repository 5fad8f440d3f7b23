/* SPDX-License-Identifier: MIT */
/*
 * receive.h -- the pull model's public side (receive.c): what the core
 * calls of it.  seda_stage_receive and the leases' functions are in
 * seda.h; the leases themselves are pull.c's part (pull.h).
 */
#ifndef SEDA_RECEIVE_H
#define SEDA_RECEIVE_H

#include "seda_int.h"

struct seda_stage_s;

/* Settle every lease at shutdown, each counted dropped on st and ended
 * (receive.c; no lock held).  Returns how many. */
SEDA__API int seda__receive_sweep(struct seda_stage_s *st);

#endif /* SEDA_RECEIVE_H */
