/* SPDX-License-Identifier: MIT */
/*
 * listen.c -- the listening socket: an address as bus:listen takes it
 * ("PORT", "A.B.C.D:PORT", "[V6]:PORT") bound and listening,
 * non-blocking.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_int.h"

/* Parse "PORT", "A.B.C.D:PORT" or "[V6]:PORT" into ss. */
static int parse_addr(const char *a, struct sockaddr_storage *ss,
                      socklen_t *sl, char *err, size_t errlen)
{
    char host[64] = "127.0.0.1";
    const char *port = a;
    const char *colon = strrchr(a, ':');
    if (a[0] == '[') {
        const char *close = strchr(a, ']');
        if (!close || close[1] != ':' || (size_t)(close - a - 1) >= sizeof host) {
            snprintf(err, errlen, "'%s': expected [IPV6]:PORT", a);
            return -EINVAL;
        }
        memcpy(host, a + 1, (size_t)(close - a - 1));
        host[close - a - 1] = '\0';
        port = close + 2;
    } else if (colon) {
        if ((size_t)(colon - a) >= sizeof host) {
            snprintf(err, errlen, "'%s': the address is too long", a);
            return -EINVAL;
        }
        memcpy(host, a, (size_t)(colon - a));
        host[colon - a] = '\0';
        port = colon + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (!*port || *end || p < 0 || p > 65535) {
        snprintf(err, errlen, "'%s': the port must be a number from 0 to "
                 "65535", a);
        return -EINVAL;
    }
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        *sl = sizeof *v4;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        *sl = sizeof *v6;
    } else {
        snprintf(err, errlen, "'%s' is not a numeric IPv4 or IPv6 address",
                 host);
        return -EINVAL;
    }
    return 0;
}

int seda__http_listen_on(const char *addr, int *port, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int rc = parse_addr(addr, &ss, &sl, err, errlen);
    if (rc)
        return rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return rc;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
        rc = -errno;
        snprintf(err, errlen, "%s: %s", addr, strerror(errno));
        close(fd);
        return rc;
    }
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    getsockname(fd, (struct sockaddr *)&got, &gl);
    *port = ntohs(got.ss_family == AF_INET
                      ? ((struct sockaddr_in *)&got)->sin_port
                      : ((struct sockaddr_in6 *)&got)->sin6_port);
    return fd;
}

