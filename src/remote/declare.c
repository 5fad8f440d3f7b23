/* SPDX-License-Identifier: MIT */
/*
 * declare.c -- the public API of remote stages (include/seda_remote.h):
 * declaring one, starting to consume, its figures; and what the
 * connection dispatches to it.
 *
 * DESIGN
 *   Declaring checks every option first (an error names the stage and
 *   the field), then connects (or shares the bus's connection to the
 *   url), finds or creates the stream and the durable consumer, and only
 *   then makes the core stage: with the consumer's effective max_deliver
 *   as its max_attempts (an existing consumer's settings rule: a process
 *   terms a message when JetStream would stop redelivering it), and with
 *   the remote hooks installed before it is registered.  The stage is
 *   attached to the connection last, so nothing is dispatched to a stage
 *   that is not complete.
 */
#include <stdio.h>
#include <string.h>

#include "remote_int.h"

void seda_remote_opts_init(seda_remote_opts *o)
{
    memset(o, 0, sizeof *o);
    o->stream = "SEDA";
    o->connect_timeout = 2.0;
    o->dedup_window = 120.0;
}

bool seda_stage_is_remote(const seda_stage_t *st)
{
    return seda__stage_is_remote(st, &seda__rstage_ops);
}

/* ---- what the connection dispatches ---- */

static void on_js(void *ud, natsMsg *m, const struct rjs_meta *meta)
{
    seda__rfeed_on_js(ud, m, meta);
}

static void on_reply(void *ud, char kind, const char *rest, natsMsg *m)
{
    struct rstage *rs = ud;
    uint64_t n = strtoull(rest, NULL, 10);
    switch (kind) {
    case 'a':
        seda__rpub_on_reply(rs, n, m);
        break;
    case 'p':
        seda__rfeed_on_status(rs, n, m);
        break;
    case 'i':
        seda__rfeed_on_info(rs, m);
        break;
    case 'x':
        /* The origin's "+OK", or no responders: it is gone. */
        seda__rcomp_on_reply(rs, n, m);
        break;
    default:
        break;
    }
}

/* ---- declaring again ---- */

void seda__rstage_need_setup(struct rstage *rs, const char *why)
{
    /* Said as a check, not as a loss: JetStream has no responders for a
     * stream that is missing, and as well for one electing a leader or
     * restoring after a restart.  The check's outcome (declared again,
     * or there all along) is said when it is known. */
    if (why)
        atomic_store_explicit(&rs->setup_said, true, memory_order_relaxed);
    if (!atomic_exchange_explicit(&rs->need_setup, true,
                                  memory_order_acq_rel) && why)
        seda__rconn_report(rs->conn, "stage '%s': %s: checking that its "
                           "stream and consumer exist",
                           seda_stage_name(rs->st), why);
}

void seda__rstage_setup_tick(struct rstage *rs, int64_t now)
{
    if (!atomic_load_explicit(&rs->need_setup, memory_order_acquire) ||
        now < rs->setup_at || !seda__rconn_up(rs->conn) ||
        atomic_load_explicit(&rs->closing, memory_order_acquire))
        return;
    struct rcons_cfg got;
    char e[400];
    /* Blocks this thread for a few JetStream API requests (bounded by
     * the JetStream context's wait): rare, and nothing can flow anyway
     * while the stream is gone. */
    int rc = seda__rsetup_ensure(rs->conn, rs->stream, rs->subject,
                                 rs->consume ? rs->consumer : NULL,
                                 rs->dup_ns, rs->replicas, rs->tap,
                                 &rs->want, &got, e, sizeof e);
    if (rc) {
        rs->setup_backoff = rs->setup_backoff ? rs->setup_backoff * 2
                                              : 500000000LL;
        if (rs->setup_backoff > 10000000000LL)
            rs->setup_backoff = 10000000000LL;
        rs->setup_at = now + rs->setup_backoff;
        seda__rconn_report(rs->conn, "stage '%s': %s (next try in "
                           "%.1f s): %s", seda_stage_name(rs->st),
                           rc == SEDA_EUNAVAIL
                               ? "its stream is not available (no quorum, "
                                 "or a leader being elected?)"
                               : "declaring its stream again failed",
                           (double)rs->setup_backoff / 1e9, e);
        return;
    }
    rs->setup_backoff = 0;
    rs->setup_at = 0;
    if (got.stream_created || got.created) {
        atomic_fetch_add_explicit(&rs->redeclared, 1, memory_order_relaxed);
        /* Loud: whatever the old stream held is gone with it. */
        char line[1024];
        snprintf(line, sizeof line, "remote %s: %s%s%s was missing on the "
                 "server and is created again (messages it held are lost "
                 "with it; publishes waiting are sent again)",
                 rs->conn->shown,
                 got.stream_created ? "stream '" : "",
                 got.stream_created ? rs->stream : "",
                 got.stream_created ? (got.created ? "' and its consumer"
                                                   : "'")
                                    : "its consumer");
        seda_log_write(SEDA_LOG_WARN, seda_stage_name(rs->st), line);
    } else if (atomic_exchange_explicit(&rs->setup_said, false,
                                        memory_order_relaxed)) {
        char line[600];
        snprintf(line, sizeof line, "remote %s: stream '%s'%s %s there: "
                 "nothing was declared again (JetStream was not answering "
                 "for a while: a leader election or a restart)",
                 rs->conn->shown, rs->stream,
                 rs->consume ? " and its consumer" : "",
                 rs->consume ? "were" : "was");
        seda_log_write(SEDA_LOG_INFO, seda_stage_name(rs->st), line);
    }
    atomic_store_explicit(&rs->setup_said, false, memory_order_relaxed);
    atomic_store_explicit(&rs->need_setup, false, memory_order_release);
    seda__rfeed_reconnect(rs);          /* requests before are void */
}

static void on_tick(void *ud, int64_t now)
{
    seda__rstage_setup_tick(ud, now);
    seda__rpub_tick(ud, now);
    seda__rfeed_tick(ud, now);
    seda__rcomp_tick(ud, now);
}

static void on_reconnect(void *ud)
{
    /* The server may have come back without the stream (an empty store,
     * another server of the cluster): the next tick makes sure of both,
     * quietly when they are there. */
    seda__rstage_need_setup(ud, NULL);
    seda__rpub_reconnect(ud);
    seda__rfeed_reconnect(ud);
}

static void on_flush(void *ud)
{
    seda__rstage_intake_flush(ud);
}

/* ---- declaring ---- */

#define FAIL(code, ...) do { \
        if (err && errlen) { \
            int k_ = snprintf(err, errlen, "stage '%s': remote: ", name); \
            if (k_ >= 0 && (size_t)k_ < errlen) \
                snprintf(err + k_, errlen - (size_t)k_, __VA_ARGS__); \
        } \
        rc = (code); \
        goto fail; \
    } while (0)

/* [A-Za-z0-9_-]{1,64}: a JetStream stream or consumer name. */
static bool js_name(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return n > 0 && n <= SEDA_NAME_MAX;
}

/* A literal subject: tokens of printable ASCII, no wildcards. */
static bool subject_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 150 || s[0] == '.' || s[n - 1] == '.' ||
        strstr(s, ".."))
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] >= 0x7f || s[i] == '*' || s[i] == '>')
            return false;
    return true;
}

/* Check a remote stage's options and name its consumer and subject (into
 * the caller's buffers): 0, or a code with err written (naming the stage
 * and field).  Reads the bus's registry; no lock held. */
static int check_opts(seda_bus_t *bus, const seda_stage_opts *so,
                      const seda_remote_opts *ro, const char *name,
                      char consumer[SEDA_NAME_MAX + 8], char subject[200],
                      char *err, size_t errlen)
{
    int rc = 0;
    if (!so || !ro)
        FAIL(SEDA_EINVAL, "options are required");
    if (!seda__valid_name(name))
        FAIL(SEDA_EINVAL, "name must be 1-%d characters of [A-Za-z0-9_.:-]",
             SEDA_NAME_MAX);
    if ((!ro->url || !*ro->url) && ro->nurls <= 0)
        FAIL(SEDA_EINVAL, "url is required (\"nats://host:port\")");
    if (ro->nurls < 0 || (ro->nurls > 0 && !ro->urls))
        FAIL(SEDA_EINVAL, "urls: nurls must be >= 0 and urls given");
    for (int i = 0; i < ro->nurls; i++)
        if (!ro->urls[i] || !*ro->urls[i] || strchr(ro->urls[i], ','))
            FAIL(SEDA_EINVAL, "urls[%d] must be a non-empty url without "
                 "commas", i + 1);
    if (ro->replicas < 0 || ro->replicas > 5)
        FAIL(SEDA_EINVAL, "replicas must be 1-5 (got %d)", ro->replicas);
    if (ro->nreach < 0 || (ro->nreach > 0 && !ro->reach))
        FAIL(SEDA_EINVAL, "reach: nreach must be >= 0 and reach given");
    for (int i = 0; i < ro->nreach; i++)
        if (!seda__reach_valid(ro->reach[i]))
            FAIL(SEDA_EINVAL, "reach[%d] '%s' is not a NATS subject pattern "
                 "(tokens of [A-Za-z0-9_:-] separated by single dots, \"*\" "
                 "for one token, \">\" last for the rest)", i + 1,
                 ro->reach[i] ? ro->reach[i] : "(null)");
    if (so->durable)
        FAIL(SEDA_EINVAL, "durable: a remote stage is kept by JetStream; "
             "it cannot be durable too");
    if (so->pull)
        FAIL(SEDA_EINVAL, "pull: a remote stage cannot be a pull stage");
    if (so->policy == SEDA_POLICY_DROP_OLDEST)
        FAIL(SEDA_EINVAL, "policy drop_oldest: a message handed to "
             "JetStream cannot be taken back (use block, reject or "
             "drop_newest)");
    const char *stream = ro->stream ? ro->stream : "SEDA";
    if (!js_name(stream))
        FAIL(SEDA_EINVAL, "stream must be 1-%d characters of "
             "[A-Za-z0-9_-] (got '%s')", SEDA_NAME_MAX, stream);
    if (ro->consumer) {
        if (!js_name(ro->consumer))
            FAIL(SEDA_EINVAL, "consumer must be 1-%d characters of "
                 "[A-Za-z0-9_-] (got '%s')", SEDA_NAME_MAX, ro->consumer);
        snprintf(consumer, SEDA_NAME_MAX + 8, "%s", ro->consumer);
    } else {
        char derived[SEDA_NAME_MAX + 1];
        seda__rsetup_name(name, derived);
        snprintf(consumer, SEDA_NAME_MAX + 8, "seda_%.*s", SEDA_NAME_MAX - 5,
                 derived);
    }
    if (ro->subject) {
        if (!subject_ok(ro->subject))
            FAIL(SEDA_EINVAL, "subject must be a NATS subject without "
                 "wildcards or blanks (got '%.60s')", ro->subject);
        snprintf(subject, 200, "%s", ro->subject);
    } else {
        snprintf(subject, 200, "seda.%s.%s", stream, name);
    }
    if (!(ro->ack_wait >= 0) || !(ro->connect_timeout >= 0) ||
        !(ro->dedup_window >= 0) || ro->max_ack_pending < 0)
        FAIL(SEDA_EINVAL, "ack_wait, connect_timeout, dedup_window and "
             "max_ack_pending must be >= 0");
    if (seda_bus_stage(bus, name))
        FAIL(SEDA_EEXIST, "name: a stage of that name already exists");
    if (seda_bus_closed(bus))
        FAIL(SEDA_ECLOSED, "the bus is closed");

    return 0;
fail:
    return rc;
}

/* Several urls: one connection string, joined by commas (cnats tries
 * each, and those the cluster gossips); -1 when they do not fit. */
int seda__rconn_join_urls(const seda_remote_opts *ro, char *urls,
                          size_t size)
{
    size_t ul = 0;
    urls[0] = '\0';
    if (ro->url && *ro->url)
        ul = (size_t)snprintf(urls, size, "%s", ro->url);
    for (int i = 0; i < ro->nurls && ul < size; i++)
        ul += (size_t)snprintf(urls + ul, size - ul, "%s%s",
                               ul ? "," : "", ro->urls[i]);
    return ul >= size ? -1 : 0;
}

/* A remote stage's own state for what the declaration settled (the
 * consumer's settings as the server has them: got); NULL when out of
 * memory. */
static struct rstage *rstage_make(seda_bus_t *bus, struct rconn *conn,
                                  const seda_stage_opts *so,
                                  const seda_remote_opts *ro,
                                  const char *stream, const char *subject,
                                  const char *consumer,
                                  const struct rcons_cfg *want,
                                  const struct rcons_cfg *got, double dup)
{
    struct rstage *rs = seda__calloc(1, sizeof *rs);
    if (!rs)
        return NULL;
    seda__mutex_init(&rs->pmu);
    seda__mutex_init(&rs->fmu);
    seda__mutex_init(&rs->cmu);
    seda__cond_init(&rs->room);
    if (!(rs->stream = seda__strdup(stream)) ||
        !(rs->subject = seda__strdup(subject)) ||
        !(rs->consumer = seda__strdup(consumer))) {
        seda__rstage_free(rs);
        return NULL;
    }
    rs->bus = bus;
    rs->conn = conn;
    rs->cfg = *got;
    rs->want = *want;
    rs->dup_ns = seda__secs_to_ns(dup);
    rs->replicas = ro->replicas;
    rs->tap = ro->tap;
    if (ro->nreach > 0) {
        rs->reach = seda__calloc((size_t)ro->nreach, sizeof *rs->reach);
        for (int i = 0; rs->reach && i < ro->nreach; i++) {
            if (!(rs->reach[i] = seda__strdup(ro->reach[i]))) {
                rs->nreach = i;
                seda__rstage_free(rs);
                return NULL;
            }
            rs->nreach = i + 1;
        }
        if (!rs->reach) {
            seda__rstage_free(rs);
            return NULL;
        }
    }
    rs->format = ro->format;
    rs->readers = ro->readers;
    atomic_init(&rs->need_setup, false);
    atomic_init(&rs->setup_said, false);
    rs->consume = ro->consume;
    rs->ack_wait_ns = got->ack_wait_ns;
    /* JetStream stops redelivering at the consumer's max_deliver: the
     * stage's attempts end before it (an existing consumer's rules). */
    rs->max_deliver = ro->consume ? got->max_deliver : -1;
    rs->max_attempts = !ro->consume || got->max_deliver <= 0
                           ? so->max_attempts
                       : got->max_deliver > RS_LOST_DELIVERIES
                           ? got->max_deliver - RS_LOST_DELIVERIES
                           : 1;
    atomic_init(&rs->consuming, false);
    atomic_init(&rs->closing, false);
    atomic_init(&rs->js_pending, -1);
    atomic_init(&rs->js_ack_pending, -1);
    atomic_init(&rs->js_redelivered, -1);
    atomic_init(&rs->js_waiting, -1);
    return rs;
}

int seda_remote_stage_add(seda_bus_t *bus, const seda_stage_opts *so,
                          const seda_remote_opts *ro, seda_stage_t **out,
                          char *err, size_t errlen)
{
    const char *name = so && so->name ? so->name : "?";
    struct rstage *rs = NULL;
    struct rconn *conn = NULL;
    struct seda_stage_s *st = NULL;
    int rc = 0;
    char consumer[SEDA_NAME_MAX + 8], subject[200];
    rc = check_opts(bus, so, ro, name, consumer, subject, err, errlen);
    if (rc)
        goto fail;
    const char *stream = ro->stream ? ro->stream : "SEDA";
    char e[400];
    char urls[1024];
    if (seda__rconn_join_urls(ro, urls, sizeof urls) != 0)
        FAIL(SEDA_EINVAL, "urls: longer than %zu bytes together",
             sizeof urls - 1);
    struct rauth auth = { ro->tls_ca, ro->tls_cert, ro->tls_key, ro->creds,
                          ro->user, ro->password, ro->token };
    if ((rc = seda__rconn_get(bus, urls, ro->connect_timeout > 0
                                                ? ro->connect_timeout : 2.0,
                              ro->low_latency, &auth, &conn, e,
                              sizeof e)) != 0)
        FAIL(rc, "%s", e);
    double ack_wait = ro->ack_wait > 0 ? ro->ack_wait
                    : so->handler_timeout > 0 ? 2 * so->handler_timeout
                    : 30.0;
    /* Deliveries more than the attempts: a delivery lost with its
     * process (or past ack_wait) counts as one, and the message is not to
     * be stranded by it (see rstage.c, "Attempts"). */
    int max_deliver = so->max_attempts + RS_LOST_DELIVERIES;
    struct rcons_cfg want = {
        .ack_wait_ns = seda__secs_to_ns(ack_wait),
        .max_deliver = max_deliver < 65535 ? max_deliver : 65535,
        .max_ack_pending = ro->max_ack_pending > 0 ? ro->max_ack_pending
                                                   : so->capacity,
    }, got;
    double dup = ro->dedup_window > 0 ? ro->dedup_window : 120.0;
    if (dup < 2 * so->publish_timeout)
        dup = 2 * so->publish_timeout;  /* covers every re-send */
    if ((rc = seda__rsetup_ensure(conn, stream, subject,
                                  ro->consume ? consumer : NULL,
                                  seda__secs_to_ns(dup), ro->replicas,
                                  ro->tap, &want, &got, e,
                                  sizeof e)) != 0)
        FAIL(rc, "%s", e);

    if (!(rs = rstage_make(bus, conn, so, ro, stream, subject, consumer,
                           &want, &got, dup)))
        FAIL(SEDA_ENOMEM, "out of memory");
    if (got.differs)
    {
        char line[512];
        snprintf(line, sizeof line, "remote: consumer '%s' exists with "
                 "other settings (max_deliver %d, ack_wait %gs, "
                 "max_ack_pending %d); they apply (max_attempts %d)",
                 consumer, got.max_deliver, (double)got.ack_wait_ns / 1e9,
                 got.max_ack_pending, rs->max_attempts);
        seda_log_write(SEDA_LOG_WARN, name, line);
    }
    seda_stage_opts o = *so;
    o.max_attempts = rs->max_attempts;
    if ((rc = seda__bus_make_remote(bus, &o, &seda__rstage_ops, rs, &st,
                                    err, errlen)) != 0)
        goto fail_quiet;
    rs->st = st;
    struct rclient cl = {
        .ud = rs, .stream = rs->stream, .consumer = rs->consumer,
        .on_js = on_js, .on_reply = on_reply, .on_tick = on_tick,
        .on_reconnect = on_reconnect, .on_flush = on_flush,
    };
    if ((rs->sid = seda__rconn_attach(conn, &cl)) < 0)
        FAIL(SEDA_ENOMEM, "out of memory");
    rc = seda__bus_register(bus, st, out, err, errlen);
    st = NULL;                          /* registered, or freed by it */
    if (rc == 0)
        return 0;
    seda__rconn_detach(conn, rs->sid);
    goto fail_quiet;
fail:
    /* err was written by FAIL. */
fail_quiet:
    if (st)
        seda__stage_free(st);
    if (rs) {
        rs->conn = NULL;
        seda__rstage_free(rs);
    }
    seda__rconn_put(conn);
    return rc;
}

int seda_remote_consume(seda_stage_t *st)
{
    if (!seda_stage_is_remote(st) ||
        seda__stage_consumer_count(st) == 0 ||
        !((struct rstage *)seda__stage_remote_ctx(st))->consume)
        return SEDA_EINVAL;
    struct rstage *rs = seda__stage_remote_ctx(st);
    atomic_store_explicit(&rs->consuming, true, memory_order_release);
    seda__rfeed_request(rs);
    return 0;
}

int seda_remote_stats_get(seda_stage_t *st, seda_remote_stats *out)
{
    if (!seda_stage_is_remote(st))
        return SEDA_EINVAL;
    struct rstage *rs = seda__stage_remote_ctx(st);
    memset(out, 0, sizeof *out);
    snprintf(out->state, sizeof out->state, "%s",
             seda__rconn_state(rs->conn));
    /* Never the credentials: user info shows as "***". */
    snprintf(out->url, sizeof out->url, "%s", rs->conn->shown);
    snprintf(out->stream, sizeof out->stream, "%s", rs->stream);
    snprintf(out->consumer, sizeof out->consumer, "%s", rs->consumer);
    snprintf(out->subject, sizeof out->subject, "%s", rs->subject);
    out->consuming = atomic_load_explicit(&rs->consuming,
                                          memory_order_acquire);
#define LD(f) atomic_load_explicit(&rs->f, memory_order_relaxed)
    out->published = LD(published);
    out->duplicates = LD(duplicates);
    out->publish_failed = LD(publish_failed);
    out->republished = LD(republished);
    out->fetched = LD(fetched);
    out->acked = LD(acked);
    out->naked = LD(naked);
    out->termed = LD(termed);
    out->bad_messages = LD(bad_messages);
    out->held_twice = LD(held_twice);
    out->redeclared = LD(redeclared);
    out->in_progress = LD(in_progress);
    out->awaiting = LD(awaiting);
    out->completions_sent = LD(completions_sent);
    out->completions_received = LD(completions_received);
    out->completions_dropped = LD(completions_dropped);
    out->completions_lost = LD(completions_lost);
    out->completions_resent = LD(completions_resent);
    out->completions_too_large = LD(completions_too_large);
    out->completions_refused = atomic_load_explicit(
        &rs->conn->completions_refused, memory_order_relaxed);
    out->js_pending = LD(js_pending);
    out->js_ack_pending = LD(js_ack_pending);
    out->js_redelivered = LD(js_redelivered);
    out->js_waiting = LD(js_waiting);
    int64_t at = LD(js_at);
#undef LD
    out->js_age = at ? (double)(seda__now_ns() - at) / 1e9 : -1;
    out->reconnects = atomic_load_explicit(&rs->conn->reconnects,
                                           memory_order_relaxed);
    seda__mutex_lock(&rs->pmu);
    out->publishing = rs->inflight;
    seda__mutex_unlock(&rs->pmu);
    seda__mutex_lock(&rs->fmu);
    out->held = rs->held;
    seda__mutex_unlock(&rs->fmu);
    seda__rfeed_refresh_info(rs);
    return 0;
}
