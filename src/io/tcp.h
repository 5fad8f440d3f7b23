/* SPDX-License-Identifier: MIT */
/*
 * tcp.h -- what tcp.c (sockets and their ops) and tcp_recv.c (the read
 * buffer and LuaSocket's receive patterns) share: the socket and op
 * structs.  Loop thread only, except where the Locking notes say.
 */
#ifndef SEDA_IO_TCP_H
#define SEDA_IO_TCP_H

#include <netdb.h>

#include "io_int.h"

enum what { CONNECT, SEND, RECV };

/*
 * Locking: see the DESIGN above.
 *   Immutable after seda_io_tcp_new: loop.
 *   Atomic: busy (acq_rel exchange by the owner at submission / release
 *   store by the loop thread before the op completes).
 *   Loop thread while an op is pending, the owner between ops: w (the
 *   descriptor), connected, eof, rbuf/rpos/rlen/rcap, op.
 */
struct seda_io_tcp_s {
    struct seda__io_watch w;        /* first: the graveyard frees it */
    seda_io_loop_t *loop;
    atomic_bool busy;               /* an op is pending */
    bool connected;
    bool eof;                       /* the peer closed its side */
    char *rbuf;                     /* read buffer: [rpos, rlen) unread */
    size_t rpos, rlen, rcap;
    struct tcp_op *op;              /* the pending op, or NULL */
    struct seda__io_task close_task;
};

struct tcp_op {
    seda_io_op_t op;                /* first */
    seda_io_tcp_t *s;               /* while pending */
    enum what what;
    uint64_t deadline;              /* ns; 0: none */
    struct seda__io_timer timer;
    /* connect */
    char *host;
    char port[8];
    struct seda__io_resolve_job *job;   /* a lookup in progress */
    struct addrinfo *ai, *ai_next;      /* addresses to try */
    bool ai_owned;                      /* ai from a job (freeaddrinfo) */
    int last_errno;
    /* send */
    char *data;
    size_t len, sent;
    /* receive */
    enum seda_io_recv_mode mode;
    size_t want;                    /* RECV_BYTES */
    char *out;                      /* the result (NUL-terminated) */
    size_t outlen;
};

/* Detach R from its socket (disarm, unwatch, clear op and busy) and
 * complete it with STATUS and MSG (NULL: none).  Loop thread. */
SEDA__API void seda__io_tcp_end(struct tcp_op *r, int status,
                                const char *msg);

/* The op status for a failed syscall's errno. */
SEDA__API int seda__io_tcp_errno_status(int e);

/* tcp_recv.c: move what R's pattern took so far out of the read buffer
 * into R's data (all of it when FINAL: the op ends now, on an error with
 * partial data); whether the pattern is satisfied.  Loop thread. */
SEDA__API bool seda__io_tcp_take(struct tcp_op *r, bool final);

/* tcp_recv.c: drive a receive op: from the buffer, then the socket, until
 * done (completed) or EAGAIN (watching for EPOLLIN).  Loop thread. */
SEDA__API void seda__io_tcp_recv_progress(struct tcp_op *r);

#endif /* SEDA_IO_TCP_H */
