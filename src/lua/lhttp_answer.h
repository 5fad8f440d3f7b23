/* SPDX-License-Identifier: MIT */
/*
 * lhttp_answer.h -- bus:listen's answers (lhttp_answer.c): the done
 * callback that turns an itinerary's end into an HTTP answer, and the
 * bus's own answers.  Each answers req once (seda_http_respond), after
 * which req must not be touched.  Any thread; none blocks or fails (an
 * answer that cannot be sent is the server's to drop).
 */
#ifndef SEDA_LHTTP_ANSWER_H
#define SEDA_LHTTP_ANSWER_H

#include "lseda.h"
#include "seda_http.h"

/* The core's done callback of a request's envelope (ud: the request).
 * Any thread, no Lua. */
SEDA__API void seda__l_http_answer_done(seda_env_t *env, int outcome,
                                        void *ud);

/* An answer of the bus's own: status with the reason why (Seda-Reason),
 * and for 503 a Retry-After. */
SEDA__API void seda__l_http_answer_plain(seda_http_req_t *req, int status,
                                         const char *why);

/* The answer to a request that met a stage that does not exist (from:
 * the stage that sent it there, or NULL): 500 naming the stage, logged at
 * most once every 10 s in the process. */
SEDA__API void seda__l_http_answer_missing(seda_http_req_t *req,
                                           const char *stage,
                                           const char *from);

#endif /* SEDA_LHTTP_ANSWER_H */
