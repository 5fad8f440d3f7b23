/* SPDX-License-Identifier: MIT */
/*
 * tcp_recv.c -- a socket's read buffer and the receive op's patterns, as
 * LuaSocket's buffer.c has them: a line ends at LF and every CR in it is
 * dropped; "*a" reads to the peer's close and then succeeds if it read
 * anything (else it is "closed", as recvall); n bytes are exactly n.  On
 * an error or a timeout what was taken toward the pattern is the op's
 * data (LuaSocket's `partial`) and leaves the buffer.
 *
 * DESIGN
 *   The buffer ([rpos, rlen) of rbuf) is filled by non-blocking reads of
 *   at least READ_CHUNK free bytes, compacted before it grows; lines and
 *   "*a" are taken from it once complete, n bytes as they come.  Loop
 *   thread only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "tcp.h"

#define READ_CHUNK 16384

/* ---- receive ---- */

/* Move what the pattern took so far out of the buffer into r->out; with
 * FINAL the op ends now (on an error: partial data).  Returns whether the
 * pattern is satisfied. */
bool seda__io_tcp_take(struct tcp_op *r, bool final)
{
    seda_io_tcp_t *s = r->s;
    const char *p = s->rbuf ? s->rbuf + s->rpos : "";
    size_t avail = s->rlen - s->rpos;
    size_t use = avail;
    bool satisfied = false;
    if (r->mode == SEDA_IO_RECV_LINE) {
        const char *nl = memchr(p, '\n', avail);
        if (nl) {
            use = (size_t)(nl - p) + 1;
            satisfied = true;
        }
    } else if (r->mode == SEDA_IO_RECV_BYTES) {
        size_t need = r->want - r->outlen;
        if (avail >= need) {
            use = need;
            satisfied = true;
        }
    }
    if (!satisfied && !final && r->mode != SEDA_IO_RECV_BYTES)
        return false;           /* lines and "*a": take once at the end */
    if (!satisfied && !final)
        use = avail;            /* bytes: collect as they come */
    char *o = realloc(r->out, r->outlen + use + 1);
    if (!o)
        return false;           /* the timer still ends the op */
    r->out = o;
    for (size_t i = 0; i < use; i++) {
        if (r->mode == SEDA_IO_RECV_LINE && (p[i] == '\r' || p[i] == '\n'))
            continue;           /* LuaSocket drops every CR */
        o[r->outlen++] = p[i];
    }
    o[r->outlen] = '\0';
    s->rpos += use;
    if (s->rpos == s->rlen)
        s->rpos = s->rlen = 0;
    return satisfied;
}

/* Read what the socket has into the buffer: 0 (EAGAIN), 1 (EOF) or a
 * positive errno. */
static int fill(seda_io_tcp_t *s)
{
    for (;;) {
        if (s->rpos > 0 && s->rpos == s->rlen)
            s->rpos = s->rlen = 0;
        if (s->rcap - s->rlen < READ_CHUNK) {
            if (s->rpos > 0) {
                memmove(s->rbuf, s->rbuf + s->rpos, s->rlen - s->rpos);
                s->rlen -= s->rpos;
                s->rpos = 0;
            }
            if (s->rcap - s->rlen < READ_CHUNK) {
                size_t cap = s->rcap ? s->rcap * 2 : READ_CHUNK * 2;
                char *b = realloc(s->rbuf, cap);
                if (!b)
                    return ENOMEM;
                s->rbuf = b;
                s->rcap = cap;
            }
        }
        ssize_t n = recv(s->w.fd, s->rbuf + s->rlen, s->rcap - s->rlen, 0);
        if (n > 0) {
            s->rlen += (size_t)n;
            if ((size_t)n < READ_CHUNK)
                return 0;       /* most likely drained: let epoll say */
            continue;
        }
        if (n == 0) {
            s->eof = true;
            return 1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return errno;
    }
}

void seda__io_tcp_recv_progress(struct tcp_op *r)
{
    seda_io_tcp_t *s = r->s;
    for (;;) {
        if (r->mode != SEDA_IO_RECV_ALL && seda__io_tcp_take(r, false)) {
            seda__io_tcp_end(r, SEDA_IO_OK, NULL);
            return;
        }
        if (s->eof) {
            seda__io_tcp_take(r, true);
            /* LuaSocket's recvall: "*a" succeeds when it read something
             * before the close, else it is closed (with "" partial). */
            if (r->mode == SEDA_IO_RECV_ALL && r->outlen > 0)
                seda__io_tcp_end(r, SEDA_IO_OK, NULL);
            else
                seda__io_tcp_end(r, SEDA_IO_CLOSED, "closed");
            return;
        }
        size_t before = s->rlen - s->rpos;
        int rc = fill(s);
        if (rc > 1) {
            seda__io_tcp_take(r, true);
            seda__io_tcp_end(r, seda__io_tcp_errno_status(rc), strerror(rc));
            return;
        }
        if (rc == 0 && s->rlen - s->rpos == before) {
            seda__io_watch_set(s->loop, &s->w, EPOLLIN);
            return;             /* wait for more */
        }
    }
}
