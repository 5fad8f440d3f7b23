/* SPDX-License-Identifier: MIT */
/*
 * natsd.h -- a private nats-server for a test: JetStream on, listening on
 * 127.0.0.1 only, on a free port, its store in a temporary directory.
 *
 *   natsd_start(&d, NULL)   a fresh server (new directory, free port)
 *   natsd_stop(&d)          SIGTERM, waits for it (then SIGKILL)
 *   natsd_start(&d, &d)     again on the same port and store (a restart)
 *   natsd_cleanup(&d)       stop if running, remove the directory
 *   natsd_prepare(&d)       a directory and port, not started (set
 *                           d.conf, then natsd_start(&d, &d))
 *
 * The program is $NATS_SERVER, else nats-server on the PATH, else
 * /usr/sbin/nats-server (Debian installs it there).  Waits are bounded:
 * a server that does not listen within 10 s fails the start.
 */
#ifndef SEDA_TESTS_NATSD_H
#define SEDA_TESTS_NATSD_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct natsd {
    pid_t pid;                  /* 0 when not running */
    int port;
    char dir[256];              /* its directory (store in dir/js) */
    char url[64];
    char conf[300];             /* a config file (-c) when set before
                                   natsd_start(&d, &d) */
};

static inline double natsd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void natsd_nap(void)
{
    struct timespec ts = { 0, 20 * 1000 * 1000 };
    nanosleep(&ts, NULL);
}

static inline int natsd_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static inline bool natsd_listening(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static inline const char *natsd_program(void)
{
    const char *env = getenv("NATS_SERVER");
    if (env && *env)
        return env;
    if (system("command -v nats-server >/dev/null 2>&1") == 0)
        return "nats-server";
    return "/usr/sbin/nats-server";
}

static inline bool natsd_prepare(struct natsd *d)
{
    memset(d, 0, sizeof *d);
    snprintf(d->dir, sizeof d->dir, "%s/seda-natsd.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(d->dir)) {
        perror("natsd: mkdtemp");
        return false;
    }
    d->port = natsd_free_port();
    snprintf(d->url, sizeof d->url, "nats://127.0.0.1:%d", d->port);
    return true;
}

/* Start a server: a fresh one (same == NULL), or again on same's port and
 * store.  Returns false (with a message on stderr) when it does not
 * listen within 10 s. */
static inline bool natsd_start(struct natsd *d, const struct natsd *same)
{
    if (!same && !natsd_prepare(d))
        return false;
    char port[16], store[300], log[300];
    snprintf(port, sizeof port, "%d", d->port);
    snprintf(store, sizeof store, "%s/js", d->dir);
    snprintf(log, sizeof log, "%s/log", d->dir);
    const char *prog = natsd_program();
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", 0);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        if (d->conf[0])
            execlp(prog, prog, "-c", d->conf, "-js", "-a", "127.0.0.1",
                   "-p", port, "-sd", store, "-l", log, (char *)NULL);
        else
            execlp(prog, prog, "-js", "-a", "127.0.0.1", "-p", port, "-sd",
                   store, "-l", log, (char *)NULL);
        _exit(127);
    }
    if (pid < 0) {
        perror("natsd: fork");
        return false;
    }
    d->pid = pid;
    double end = natsd_now() + 10;
    while (!natsd_listening(d->port)) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid || natsd_now() > end) {
            fprintf(stderr, "natsd: %s did not start on port %d (see %s)\n",
                    prog, d->port, log);
            if (natsd_now() > end)
                kill(pid, SIGKILL), waitpid(pid, &st, 0);
            d->pid = 0;
            return false;
        }
        natsd_nap();
    }
    return true;
}

/* Stop the server with sig (SIGTERM: it shuts down cleanly; SIGKILL) and
 * wait for it, at most 10 s before SIGKILL. */
static inline void natsd_signal_stop(struct natsd *d, int sig)
{
    if (!d->pid)
        return;
    kill(d->pid, sig);
    double end = natsd_now() + 10;
    int st;
    while (waitpid(d->pid, &st, WNOHANG) == 0) {
        if (natsd_now() > end) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            break;
        }
        natsd_nap();
    }
    d->pid = 0;
}

static inline void natsd_stop(struct natsd *d)
{
    natsd_signal_stop(d, SIGTERM);
}

static inline void natsd_cleanup(struct natsd *d)
{
    natsd_stop(d);
    if (d->dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "natsd: could not remove %s\n", d->dir);
        d->dir[0] = '\0';
    }
}

#endif /* SEDA_TESTS_NATSD_H */
