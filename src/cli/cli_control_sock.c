/* SPDX-License-Identifier: MIT */
/*
 * cli_control_sock.c -- the control socket's file (--control PATH): its
 * address, the listening socket made there (mode 0600; a stale socket
 * nobody listens on replaced, one in use or anything that is not a
 * socket refused) and, at exit, the file removed only if it is still the
 * one made (another process may have replaced it since).
 *
 * The server (cli_control.c) and the client (cli_attach.c) both name the
 * socket through cli_control_sock_addr.  Main thread only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli.h"
#include "seda.h"

int cli_control_sock_addr(struct sockaddr_un *a, const char *path)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a->sun_path) {
        cli_logf(SEDA_LOG_ERROR, "--control: socket path too long (at most %zu "
                 "bytes): %s", sizeof a->sun_path - 1, path);
        return -1;
    }
    strcpy(a->sun_path, path);
    return 0;
}

int cli_control_sock_open(struct cli_control_sock *s, const char *path)
{
    struct sockaddr_un a;
    if (cli_control_sock_addr(&a, path) != 0)
        return -1;
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode)) {
            cli_logf(SEDA_LOG_ERROR, "--control: '%s' exists and is not a "
                     "socket; refusing to replace it", path);
            return -1;
        }
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe < 0) {
            cli_logf(SEDA_LOG_ERROR, "--control: socket: %s",
                     strerror(errno));
            return -1;
        }
        int rc = connect(probe, (struct sockaddr *)&a, sizeof a);
        int e = errno;
        close(probe);
        if (rc == 0) {
            cli_logf(SEDA_LOG_ERROR, "--control: '%s' is in use by a "
                     "running process; refusing to start", path);
            return -1;
        }
        if (e != ECONNREFUSED) {
            cli_logf(SEDA_LOG_ERROR, "--control: '%s' exists and cannot be "
                     "checked (%s); refusing to start", path, strerror(e));
            return -1;
        }
        if (unlink(path) != 0) {        /* stale: nobody listens */
            cli_logf(SEDA_LOG_ERROR, "--control: cannot remove the stale "
                     "socket '%s': %s", path, strerror(errno));
            return -1;
        }
    } else if (errno != ENOENT) {
        cli_logf(SEDA_LOG_ERROR, "--control: '%s': %s", path,
                 strerror(errno));
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        cli_logf(SEDA_LOG_ERROR, "--control: socket: %s", strerror(errno));
        return -1;
    }
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    int e = errno;
    umask(old);
    if (rc != 0) {
        cli_logf(SEDA_LOG_ERROR, "--control: cannot bind '%s': %s",
                 path, strerror(e));
        close(fd);
        return -1;
    }
    if (chmod(path, 0600) != 0 || listen(fd, 16) != 0) {
        cli_logf(SEDA_LOG_ERROR, "--control: '%s': %s", path,
                 strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    if (stat(path, &sb) == 0) {
        s->dev = sb.st_dev;
        s->ino = sb.st_ino;
    }
    s->fd = fd;
    s->path = strdup(path);
    return 0;
}

void cli_control_sock_close(struct cli_control_sock *s)
{
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
        struct stat sb;
        if (s->path && stat(s->path, &sb) == 0 && sb.st_dev == s->dev &&
            sb.st_ino == s->ino)
            unlink(s->path);
    }
    free(s->path);
    s->path = NULL;
}
