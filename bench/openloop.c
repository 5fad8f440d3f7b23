/* SPDX-License-Identifier: MIT */
/*
 * openloop.c -- an open-loop HTTP/1.1 load generator for the http_overload
 * row (WORKLOAD.md, "The bus meets the network").
 *
 * Requests are scheduled at a constant rate, whatever the server does;
 * each one's latency runs from its scheduled send time, not from when a
 * connection was free to send it, so a slow server cannot hide its delay
 * by slowing the client (no coordinated omission).  One request per
 * connection at a time (keep-alive, no pipelining); a request due when
 * every connection is busy opens another, up to -c, and beyond that waits
 * in a queue with its clock running.
 *
 *   openloop -p PORT -u PATH -r RATE -d SECONDS [-c MAXCONN] [-b BODYBYTES]
 *
 * Prints one JSON object: counts by class, goodput, latency percentiles of
 * the 2xx and of the 503 answers (nearest rank), where a 503's time went
 * (p99_503_lag_us: scheduled to its last byte written -- the client's
 * own lag or its wait for a connection; p50/p99_503_sent_us: from then
 * to the answer, the server's part), and a per-second series of the 2xx
 * p99 (the overload chart).  Between requests it sleeps to the
 * nanosecond (epoll_pwait2), never spinning: on a small machine a
 * spinning client takes a core from the server it measures.  libc only; a standalone tool, not
 * part of seda-bench.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct conn {
    int fd;
    bool busy;
    bool connecting;
    double sched;               /* the request's scheduled time */
    double sent_at;             /* when its last byte was written */
    size_t sent;                /* bytes of the request written */
    char buf[8192];
    size_t have;
};

struct sample {
    double t;                   /* scheduled, from the start */
    float lat;                  /* seconds */
    float lag;                  /* scheduled to written, seconds */
    short status;               /* 0: error */
};

static struct sockaddr_in addr;
static char *req;
static size_t reqlen;
static int ep;

static struct sample *samples;
static size_t nsamples;

static double *queue;           /* scheduled times waiting for a connection */
static size_t qhead, qtail, qcap;

static void record(double t0, const struct conn *c, double done, int status)
{
    double sched = c->sched;
    samples[nsamples].t = sched - t0;
    samples[nsamples].lat = (float)(done - sched);
    samples[nsamples].lag = (float)((c->sent_at ? c->sent_at : done) - sched);
    samples[nsamples].status = (short)status;
    nsamples++;
}

static int open_conn(struct conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = connect(c->fd, (struct sockaddr *)&addr, sizeof addr);
    c->connecting = rc != 0;
    if (rc != 0 && errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET,
                              .data.ptr = c };
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    c->have = 0;
    return 0;
}

static void try_send(struct conn *c)
{
    while (c->busy && !c->connecting && c->sent < reqlen) {
        ssize_t n = send(c->fd, req + c->sent, reqlen - c->sent,
                         MSG_NOSIGNAL);
        if (n <= 0)
            return;
        c->sent += (size_t)n;
        if (c->sent == reqlen)
            c->sent_at = now();
    }
}

static void start(struct conn *c, double sched)
{
    c->busy = true;
    c->sched = sched;
    c->sent = 0;
    c->sent_at = 0;
    c->have = 0;
    try_send(c);
}

/* A whole response in c->buf?  Returns its status and length, or 0. */
static int parse(struct conn *c, size_t *len)
{
    c->buf[c->have < sizeof c->buf ? c->have : sizeof c->buf - 1] = '\0';
    char *end = strstr(c->buf, "\r\n\r\n");
    if (!end)
        return 0;
    int status = atoi(c->buf + 9);
    size_t cl = 0;
    char *h = strcasestr(c->buf, "\r\nContent-Length:");
    if (h && h < end)
        cl = strtoul(h + 17, NULL, 10);
    size_t total = (size_t)(end + 4 - c->buf) + cl;
    if (c->have < total)
        return 0;
    *len = total;
    return status;
}

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static double pct(float *v, size_t n, double p)
{
    if (!n)
        return 0;
    return v[(size_t)(p * (double)(n - 1))] * 1e6;
}

int main(int argc, char **argv)
{
    int port = 8080, maxconn = 512, bodylen = 0;
    double rate = 1000, dur = 10;
    const char *path = "/";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-p")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-u")) path = argv[i + 1];
        else if (!strcmp(argv[i], "-r")) rate = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-d")) dur = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) maxconn = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-b")) bodylen = atoi(argv[i + 1]);
    }
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    req = malloc(1024 + (size_t)bodylen);
    reqlen = (size_t)sprintf(req, "%s %s HTTP/1.1\r\nHost: b\r\n"
                             "Content-Length: %d\r\n\r\n",
                             bodylen ? "POST" : "GET", path, bodylen);
    memset(req + reqlen, 'x', (size_t)bodylen);
    reqlen += (size_t)bodylen;
    size_t total = (size_t)(rate * dur) + 16;
    samples = calloc(total, sizeof *samples);
    qcap = total;
    queue = calloc(qcap, sizeof *queue);
    struct conn *cs = calloc((size_t)maxconn, sizeof *cs);
    ep = epoll_create1(EPOLL_CLOEXEC);
    int nconn = 0;
    for (; nconn < 64 && nconn < maxconn; nconn++)
        open_conn(&cs[nconn]);

    double t0 = now(), end = t0 + dur;
    size_t scheduled = 0, inflight = 0;
    struct epoll_event evs[256];
    while (1) {
        double t = now();
        /* Schedule what is due. */
        while (t < end && t0 + (double)scheduled / rate <= t) {
            double sched = t0 + (double)scheduled / rate;
            scheduled++;
            inflight++;
            struct conn *free_c = NULL;
            for (int i = 0; i < nconn && !free_c; i++)
                if (!cs[i].busy && cs[i].fd >= 0)
                    free_c = &cs[i];
            if (!free_c && nconn < maxconn && open_conn(&cs[nconn]) == 0)
                free_c = &cs[nconn++];
            if (free_c)
                start(free_c, sched);
            else
                queue[qtail++] = sched;
        }
        if (t >= end && inflight == 0)
            break;
        if (t >= end + 5)
            break;                      /* the rest are errors */
        /* Sleep until the next request is due (to the nanosecond:
         * epoll_wait's milliseconds would round the wait down to 0 and
         * spin, taking a core from the server under test). */
        double next = t < end ? t0 + (double)scheduled / rate : t + 0.01;
        double wait = next - t < 0 ? 0 : next - t > 0.01 ? 0.01 : next - t;
        struct timespec ts = { 0, (long)(wait * 1e9) };
        int n = epoll_pwait2(ep, evs, 256, &ts, NULL);
        for (int k = 0; k < n; k++) {
            struct conn *c = evs[k].data.ptr;
            if (c->connecting && (evs[k].events & EPOLLOUT))
                c->connecting = false;
            try_send(c);
            bool dead = evs[k].events & (EPOLLERR | EPOLLHUP);
            for (;;) {
                ssize_t r = recv(c->fd, c->buf + c->have,
                                 sizeof c->buf - 1 - c->have, 0);
                if (r == 0) {
                    dead = true;
                    break;
                }
                if (r < 0)
                    break;
                c->have += (size_t)r;
                size_t len;
                int status;
                while (c->busy && (status = parse(c, &len)) != 0) {
                    record(t0, c, now(), status);
                    inflight--;
                    memmove(c->buf, c->buf + len, c->have - len);
                    c->have -= len;
                    c->busy = false;
                    if (qhead < qtail)
                        start(c, queue[qhead++]);
                }
            }
            if (dead) {
                if (c->busy) {
                    record(t0, c, now(), 0);
                    inflight--;
                    c->busy = false;
                }
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                c->fd = -1;
                if (open_conn(c) == 0 && qhead < qtail)
                    start(c, queue[qhead++]);
            }
        }
    }
    double elapsed = now() - t0;
    /* Classes and percentiles. */
    float *ok = malloc(sizeof(float) * (nsamples + 1));
    float *s503 = malloc(sizeof(float) * (nsamples + 1));
    size_t nok = 0, n503 = 0, other = 0, errors = 0;
    for (size_t i = 0; i < nsamples; i++) {
        int st = samples[i].status;
        if (st >= 200 && st < 300) ok[nok++] = samples[i].lat;
        else if (st == 503) s503[n503++] = samples[i].lat;
        else if (st == 0) errors++;
        else other++;
    }
    errors += scheduled - nsamples;
    printf("{\"config\":\"http_overload\",\"offered_rps\":%.0f,"
           "\"duration_s\":%.1f,\"requests\":%zu,\"2xx\":%zu,\"503\":%zu,"
           "\"other\":%zu,\"errors\":%zu,\"goodput_rps\":%.0f,"
           "\"conns\":%d,", rate, dur, scheduled, nok, n503, other, errors,
           (double)nok / dur, nconn);
    /* The per-second 2xx p99 before sorting the whole set. */
    int secs = (int)dur + 1;
    printf("\"series_p99_2xx_us\":[");
    float *tmp = malloc(sizeof(float) * (nsamples + 1));
    for (int s = 0; s < secs; s++) {
        size_t m = 0;
        for (size_t i = 0; i < nsamples; i++)
            if ((int)samples[i].t == s && samples[i].status >= 200 &&
                samples[i].status < 300)
                tmp[m++] = samples[i].lat;
        qsort(tmp, m, sizeof *tmp, cmpf);
        printf("%s%.0f", s ? "," : "", pct(tmp, m, 0.99));
    }
    printf("],");
    /* Where a 503's time went: before its last byte was written (the
     * client's own lag, or its wait for a free connection), and after. */
    float *lag = malloc(sizeof(float) * (nsamples + 1));
    float *srv = malloc(sizeof(float) * (nsamples + 1));
    size_t m = 0;
    for (size_t i = 0; i < nsamples; i++) {
        if (samples[i].status != 503)
            continue;
        lag[m] = samples[i].lag;
        srv[m++] = samples[i].lat - samples[i].lag;
    }
    qsort(lag, m, sizeof *lag, cmpf);
    qsort(srv, m, sizeof *srv, cmpf);
    qsort(ok, nok, sizeof *ok, cmpf);
    qsort(s503, n503, sizeof *s503, cmpf);
    printf("\"p50_2xx_us\":%.0f,\"p99_2xx_us\":%.0f,\"p999_2xx_us\":%.0f,"
           "\"p50_503_us\":%.0f,\"p99_503_us\":%.0f,"
           "\"p99_503_lag_us\":%.0f,\"p50_503_sent_us\":%.0f,"
           "\"p99_503_sent_us\":%.0f,\"elapsed_s\":%.2f}\n",
           pct(ok, nok, 0.5), pct(ok, nok, 0.99), pct(ok, nok, 0.999),
           pct(s503, n503, 0.5), pct(s503, n503, 0.99), pct(lag, m, 0.99),
           pct(srv, m, 0.5), pct(srv, m, 0.99), elapsed);
    return 0;
}
