/* SPDX-License-Identifier: MIT */
/*
 * io.c -- config `io` (WORKLOAD.md, "The bus meets the network"): a stage
 * whose Lua handler makes one HTTP GET to an upstream that answers after
 * 5 ms, against two anchors measured in the same run: the same handler
 * with LuaSocket (blocking), and OpenResty's cosocket to the same
 * upstream driven by wrk.
 *
 * DESIGN
 *   - Servers: Debian's nginx, started by this program on 127.0.0.1 and
 *     a free port each, from a config generated in a directory of the
 *     run's temporary directory (pid, error log and temp paths inside it,
 *     access log off, `daemon off`, a master and its workers; stopped
 *     with SIGQUIT and waited for, SIGKILL after 10 s).
 *       upstream  worker_processes 1, the echo module (load_module from
 *                 /usr/lib/nginx/modules), one location:
 *                 `echo_sleep 0.005; echo ok;` (a chunked "ok\n").
 *       front     OpenResty's Lua module (ndk first, then ngx_http_lua),
 *                 worker_processes 2 (as many as the bus's workers), one
 *                 location whose content_by_lua_block does the GET on a
 *                 cosocket (ngx.socket.tcp, kept alive in its pool); the
 *                 GET function is defined by init_by_lua_block.
 *     The packages (nginx, libnginx-mod-http-echo, libnginx-mod-http-lua,
 *     libnginx-mod-http-ndk, wrk, lua-socket) are installed through
 *     scripts/deps.sh when one is missing, as the tests install their
 *     tools; when that fails the config prints why and is skipped.
 *     Each answers one GET before any trial (else the config stops,
 *     printing the answer and the end of the server's error log).
 *   - The upstream alone first: `wrk -t1 -c256 -d3s` (--quick -d1s;
 *     variant "upstream_wrk"), so the rows can be read against what it
 *     can serve.
 *   - seda_http and luasocket: a fresh Lua bus per trial, `workers = 2`,
 *     one stage `io` (concurrency 256, capacity 512, policy block) whose
 *     handler (a file) does one GET and acks:
 *       seda_http  seda.http.request{ url = ..., timeout = 10 }
 *       luasocket  a raw socket.tcp() GET (LuaSocket, blocking), the
 *                  connection kept alive per worker state, the response
 *                  read with the same Lua function the front uses
 *                  (status line, headers, chunked or sized body).
 *     One producer (this thread) publishes unpaced for the window (5 s;
 *     --quick 1 s) with at most 256 envelopes in flight (a semaphore
 *     taken before each publish and given back by the envelope's done
 *     callback): the same 256 outstanding requests wrk keeps with -c256.
 *     p50_us..max_us run from publish to the done callback (completion,
 *     latency_from "publish_to_complete"; the 8-byte timestamp in the
 *     payload); request_p50_us.. are the GET alone, timed inside the
 *     handler around the call (latency_from_request "handler").  requests
 *     = completions within the window, throughput_eps = requests / window
 *     (as wrk counts); the envelopes still in flight then are completed
 *     (shutdown) and their latencies kept.  handler_concurrency_peak is
 *     the most GETs that were in progress at once (2 when the call holds
 *     its worker, up to 256 when it suspends).
 *   - openresty: `wrk -t1 -c256 -d5s` (--quick -d1s) against the front,
 *     with a wrk script whose done() prints requests, duration, errors
 *     and the latency percentiles (p99.9 included, which --latency does
 *     not print); errors = wrk's connect, read, write and timeout errors,
 *     status_other = the answers it counts as not 2xx/3xx.
 *   - Trials interleaved: luasocket, seda_http, openresty, three rounds
 *     (--quick: one).
 *   - Counts by status class come from the handlers (a C module preloaded
 *     as `benchio`: atomic counters, the peak, the request latencies);
 *     errors = GETs that returned no status (nil, err) plus envelopes not
 *     completed by an ack; first_error says what the first failure was.
 *
 * Row fields (config "io"; handler "lua", "none" for upstream_wrk):
 * variant ("upstream_wrk", "seda_http", "luasocket", "openresty"),
 * trial, requests, window_ms, throughput_eps, p50_us, p99_us, p999_us,
 * max_us, latency_from, errors, upstream (what answers and how), server
 * (its versions), client (what makes the GET, with its version); wrk
 * rows: status_other, connections, duration_s (openresty: workers, its
 * nginx workers); bus rows: status_2xx .. status_5xx, workers,
 * concurrency, capacity, in_flight_max, published, completed_total,
 * drain_tail_ms, drained, request_p50_us, request_p99_us,
 * request_p999_us, request_max_us, latency_from_request,
 * handler_concurrency_peak, and when there was one, first_error,
 * publish_errors and publish_error; seda_http and openresty rows:
 * x_luasocket, their rate over the same round's luasocket rate.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "../tests/remote/natsd.h"
#include "families.h"
#include "harness.h"
#include "seda_lua.h"

#define IO_WORKERS 2
#define IO_CONC 256
#define IO_CAP 512
#define IO_INFLIGHT 256
#define IO_WRK_CONNS 256
#define IO_SLEEP "0.005"
#define IO_MODDIR "/usr/lib/nginx/modules"
#define IO_LAT_CAP (4u << 20)           /* samples per array (16 MiB) */

/* ---- latency arrays (any thread appends) ---- */

struct lat_arr {
    float *v;
    atomic_size_t n;
};

static void lat_add(struct lat_arr *a, double seconds)
{
    size_t i = atomic_fetch_add_explicit(&a->n, 1, memory_order_relaxed);
    if (a->v && i < IO_LAT_CAP)
        a->v[i] = (float)(seconds * 1e6);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Nearest rank over the samples so far. */
static void lat_get(struct lat_arr *a, struct latency *l)
{
    memset(l, 0, sizeof *l);
    size_t n = atomic_load(&a->n);
    if (n > IO_LAT_CAP) {
        n = IO_LAT_CAP;
        l->truncated = true;
    }
    if (!a->v || n == 0)
        return;
    qsort(a->v, n, sizeof *a->v, cmp_float);
    l->n = n;
    l->p50 = a->v[(size_t)floor(0.5 * (double)(n - 1))];
    l->p99 = a->v[(size_t)floor(0.99 * (double)(n - 1))];
    l->p999 = a->v[(size_t)floor(0.999 * (double)(n - 1))];
    l->max = a->v[n - 1];
}

/* ---- benchio: what the handlers report ---- */

static struct lat_arr g_req;            /* GET durations, in the handler */
static atomic_long g_cur, g_peak;       /* GETs in progress, the most */
static atomic_long g_status[6];         /* by class: [1]..[5]; [0] other */
static atomic_long g_fail;              /* nil, err */
static atomic_flag g_err_taken;
static char g_first_err[160];

static void benchio_reset(void)
{
    atomic_store(&g_req.n, 0);
    atomic_store(&g_cur, 0);
    atomic_store(&g_peak, 0);
    for (int i = 0; i < 6; i++)
        atomic_store(&g_status[i], 0);
    atomic_store(&g_fail, 0);
    atomic_flag_clear(&g_err_taken);
    g_first_err[0] = '\0';
}

/* benchio.enter(): a GET begins. */
static int bio_enter(lua_State *L)
{
    (void)L;
    long n = atomic_fetch_add(&g_cur, 1) + 1;
    long p = atomic_load(&g_peak);
    while (n > p && !atomic_compare_exchange_weak(&g_peak, &p, n)) {
    }
    return 0;
}

/* benchio.req(t0): the GET that began at seda.now() == t0 ended. */
static int bio_req(lua_State *L)
{
    double t0 = luaL_checknumber(L, 1);
    lat_add(&g_req, seda_now() - t0);
    atomic_fetch_sub(&g_cur, 1);
    return 0;
}

/* Keep the first message, made safe for a JSON string. */
static void first_error(const char *msg)
{
    if (atomic_flag_test_and_set(&g_err_taken))
        return;
    size_t i = 0;
    for (; msg && msg[i] && i < sizeof g_first_err - 1; i++) {
        char c = msg[i];
        g_first_err[i] = (c == '"' || c == '\\' || (unsigned char)c < ' ')
                             ? '\'' : c;
    }
    g_first_err[i] = '\0';
}

/* benchio.status(code) or benchio.fail(err). */
static int bio_status(lua_State *L)
{
    lua_Integer s = luaL_checkinteger(L, 1);
    int k = s >= 100 && s < 600 ? (int)(s / 100) : 0;
    atomic_fetch_add(&g_status[k], 1);
    if (k != 2) {
        char m[64];
        snprintf(m, sizeof m, "status %lld", (long long)s);
        first_error(m);
    }
    return 0;
}

static int bio_fail(lua_State *L)
{
    atomic_fetch_add(&g_fail, 1);
    first_error(luaL_optstring(L, 1, "nil"));
    return 0;
}

static int luaopen_benchio(lua_State *L)
{
    static const luaL_Reg f[] = {
        { "enter", bio_enter }, { "req", bio_req },
        { "status", bio_status }, { "fail", bio_fail },
        { NULL, NULL }
    };
    luaL_newlib(L, f);
    return 1;
}

/* ---- the Lua GET both raw clients use ---- */

/* get(sock, host, port) -> status, body | nil, err.  LuaSocket's and
 * OpenResty's cosocket's send/receive are the same calls ("*l" strips the
 * CR).  The upstream answers HTTP/1.1 chunked; a sized body is read too. */
static const char LUA_GET[] =
    "local function get(sock, host, port)\n"
    "  local ok, err = sock:send('GET / HTTP/1.1\\r\\nHost: ' .. host .. ':'\n"
    "                            .. port .. '\\r\\n\\r\\n')\n"
    "  if not ok then return nil, err end\n"
    "  local line, err = sock:receive('*l')\n"
    "  if not line then return nil, err end\n"
    "  local status = tonumber(line:match('^HTTP/%d%.%d (%d%d%d)'))\n"
    "  if not status then return nil, 'bad status line' end\n"
    "  local len, chunked\n"
    "  while true do\n"
    "    local h, err = sock:receive('*l')\n"
    "    if not h then return nil, err end\n"
    "    if h == '' then break end\n"
    "    local k, v = h:match('^([^:]+):%s*(.-)%s*$')\n"
    "    if k then\n"
    "      k = k:lower()\n"
    "      if k == 'content-length' then len = tonumber(v)\n"
    "      elseif k == 'transfer-encoding' and\n"
    "             v:lower():find('chunked', 1, true) then\n"
    "        chunked = true\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  if chunked then\n"
    "    local parts = {}\n"
    "    while true do\n"
    "      local sz, err = sock:receive('*l')\n"
    "      if not sz then return nil, err end\n"
    "      local n = tonumber(sz:match('^%x+'), 16)\n"
    "      if not n then return nil, 'bad chunk size' end\n"
    "      if n == 0 then\n"
    "        repeat\n"
    "          local t, err = sock:receive('*l')\n"
    "          if not t then return nil, err end\n"
    "        until t == ''\n"
    "        break\n"
    "      end\n"
    "      local d, err = sock:receive(n)\n"
    "      if not d then return nil, err end\n"
    "      parts[#parts + 1] = d\n"
    "      local _, err = sock:receive('*l')\n"
    "      if err then return nil, err end\n"
    "    end\n"
    "    return status, table.concat(parts)\n"
    "  end\n"
    "  if len and len > 0 then\n"
    "    local d, err = sock:receive(len)\n"
    "    if not d then return nil, err end\n"
    "    return status, d\n"
    "  end\n"
    "  return status, ''\n"
    "end\n";

/* The handlers (format: the upstream's port). */
static const char H_SEDA_HTTP[] =
    "local seda = require 'seda'\n"
    "local bio = require 'benchio'\n"
    "local request, now = seda.http.request, seda.now\n"
    "local URL = 'http://127.0.0.1:%d/'\n"
    "return function(env)\n"
    "  bio.enter()\n"
    "  local t = now()\n"
    "  local r, err = request{ url = URL, timeout = 10 }\n"
    "  bio.req(t)\n"
    "  if r then bio.status(r.status) else bio.fail(err) end\n"
    "end\n";

static const char H_LUASOCKET_HEAD[] =
    "local seda = require 'seda'\n"
    "local bio = require 'benchio'\n"
    "local socket = require 'socket'\n"
    "local now = seda.now\n"
    "local HOST, PORT = '127.0.0.1', %d\n";

static const char H_LUASOCKET_TAIL[] =
    "local sock  -- this worker state's connection, kept alive\n"
    "return function(env)\n"
    "  bio.enter()\n"
    "  local t = now()\n"
    "  local status, err\n"
    "  for attempt = 1, 2 do  -- a kept connection the server closed: again\n"
    "    if not sock then\n"
    "      sock = socket.tcp()\n"
    "      sock:settimeout(10)\n"
    "      sock:setoption('tcp-nodelay', true)\n"
    "      local ok, e = sock:connect(HOST, PORT)\n"
    "      if not ok then sock:close(); sock = nil; err = e; break end\n"
    "    end\n"
    "    status, err = get(sock, HOST, PORT)\n"
    "    if status then break end\n"
    "    sock:close(); sock = nil\n"
    "  end\n"
    "  bio.req(t)\n"
    "  if status then bio.status(status) else bio.fail(err) end\n"
    "end\n";

static const char IO_CHUNK[] =
    "local seda, hfile, n, cap, conc = ...\n"
    "local bus = seda.bus{ workers = 2 }\n"
    "bus:stage{ name = 'io', capacity = cap, policy = 'block',\n"
    "           concurrency = conc, publish_timeout = 30, handler = hfile }\n"
    "return bus\n";

/* ---- versions and tools ---- */

static void run_line(const char *cmd, char *out, size_t n)
{
    out[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    if (fgets(out, (int)n, p)) {
        size_t l = strlen(out);
        while (l && (out[l - 1] == '\n' || out[l - 1] == '\r'))
            out[--l] = '\0';
        for (size_t i = 0; i < l; i++)
            if (out[i] == '"' || out[i] == '\\')
                out[i] = '\'';
    }
    pclose(p);
}

static void pkg_version(const char *pkg, char *out, size_t n)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "dpkg-query -W -f='${Version}' %s 2>/dev/null",
             pkg);
    run_line(cmd, out, n);
    if (!out[0])
        snprintf(out, n, "?");
}

struct versions {
    char nginx[64], echo[64], lua_mod[64], ndk[64], wrk[64], luasocket[64],
        curl[64];
};

static void versions_get(struct versions *v)
{
    pkg_version("nginx", v->nginx, sizeof v->nginx);
    pkg_version("libnginx-mod-http-echo", v->echo, sizeof v->echo);
    pkg_version("libnginx-mod-http-lua", v->lua_mod, sizeof v->lua_mod);
    pkg_version("libnginx-mod-http-ndk", v->ndk, sizeof v->ndk);
    pkg_version("wrk", v->wrk, sizeof v->wrk);
    pkg_version("lua-socket", v->luasocket, sizeof v->luasocket);
    run_line("pkg-config --modversion libcurl 2>/dev/null", v->curl,
             sizeof v->curl);
    if (!v->curl[0])
        snprintf(v->curl, sizeof v->curl, "?");
}

static bool have_tools(void)
{
    return access(IO_MODDIR "/ngx_http_echo_module.so", R_OK) == 0 &&
           access(IO_MODDIR "/ngx_http_lua_module.so", R_OK) == 0 &&
           access(IO_MODDIR "/ndk_http_module.so", R_OK) == 0 &&
           system("command -v nginx >/dev/null 2>&1 || "
                  "[ -x /usr/sbin/nginx ]") == 0 &&
           system("command -v wrk >/dev/null 2>&1") == 0 &&
           system("lua5.4 -e 'require \"socket\"' >/dev/null 2>&1 || "
                  "[ -r /usr/share/lua/5.4/socket.lua ]") == 0;
}

static const char IO_PACKAGES[] =
    "nginx libnginx-mod-http-echo libnginx-mod-http-lua "
    "libnginx-mod-http-ndk wrk lua-socket";

/* The tools, installed through scripts/deps.sh when one is missing. */
static bool io_tools(void)
{
    if (have_tools())
        return true;
    if (access("scripts/deps.sh", R_OK) != 0) {
        fprintf(stderr, "bench: io: needs the Debian packages %s (run from "
                "the source tree, or sh scripts/deps.sh %s)\n", IO_PACKAGES,
                IO_PACKAGES);
        return false;
    }
    bench_progress("io: installing %s (scripts/deps.sh)", IO_PACKAGES);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "sh scripts/deps.sh %s >&2", IO_PACKAGES);
    if (system(cmd) != 0 || !have_tools()) {
        fprintf(stderr, "bench: io: skipped: scripts/deps.sh could not "
                "install %s\n", IO_PACKAGES);
        return false;
    }
    return true;
}

/* ---- nginx ---- */

struct ngx {
    pid_t pid;
    int port;
    char dir[400];
};

static const char *nginx_program(void)
{
    if (system("command -v nginx >/dev/null 2>&1") == 0)
        return "nginx";
    return "/usr/sbin/nginx";
}

/* Start nginx with the config made of head (main context: load_module,
 * worker_processes) and http (inside http{}; %s in neither), listening on
 * a free port of 127.0.0.1, its files in g_cfg.tmpdir/name.  Returns
 * false (with a message) when it does not listen within 10 s. */
static bool ngx_start(struct ngx *n, const char *name, const char *head,
                      const char *http, const char *location)
{
    memset(n, 0, sizeof *n);
    snprintf(n->dir, sizeof n->dir, "%s/%s", g_cfg.tmpdir, name);
    if (mkdir(n->dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench: io: mkdir %s: %s\n", n->dir, strerror(errno));
        return false;
    }
    n->port = natsd_free_port();
    size_t cap = strlen(head) + strlen(http) + strlen(location) + 4096;
    char *conf = malloc(cap);
    if (!conf)
        return false;
    const char *d = n->dir;
    snprintf(conf, cap,
             "%s"
             "daemon off;\n"
             "master_process on;\n"
             "pid %s/nginx.pid;\n"
             "error_log %s/error.log warn;\n"
             "events { worker_connections 8192; }\n"
             "http {\n"
             "  access_log off;\n"
             "  client_body_temp_path %s/client_body;\n"
             "  proxy_temp_path %s/proxy;\n"
             "  fastcgi_temp_path %s/fastcgi;\n"
             "  uwsgi_temp_path %s/uwsgi;\n"
             "  scgi_temp_path %s/scgi;\n"
             "  keepalive_requests 10000000;\n"
             "  keepalive_timeout 120s;\n"
             "%s"
             "  server {\n"
             "    listen 127.0.0.1:%d;\n"
             "    location = / {\n%s    }\n"
             "  }\n"
             "}\n",
             head, d, d, d, d, d, d, d, http, n->port, location);
    char path[512], rel[300];
    snprintf(path, sizeof path, "%s/nginx.conf", d);
    snprintf(rel, sizeof rel, "%s/nginx.conf", name);
    char *p = bench_write_file(rel, conf);
    free(conf);
    if (!p)
        return false;
    free(p);
    char elog[512];
    snprintf(elog, sizeof elog, "%s/error.log", d);
    char prefix[420];
    snprintf(prefix, sizeof prefix, "%s/", d);
    const char *prog = nginx_program();
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        execlp(prog, prog, "-p", prefix, "-e", elog, "-c", path,
               (char *)NULL);
        _exit(127);
    }
    if (pid < 0)
        return false;
    n->pid = pid;
    double end = natsd_now() + 10;
    while (!natsd_listening(n->port)) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid || natsd_now() > end) {
            fprintf(stderr, "bench: io: nginx (%s) did not start on port %d; "
                    "%s says:\n", name, n->port, elog);
            char cmd[600];
            snprintf(cmd, sizeof cmd, "tail -n 5 '%s' >&2", elog);
            if (system(cmd) != 0) {
                /* nothing more to say */
            }
            if (natsd_now() > end) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
            }
            n->pid = 0;
            return false;
        }
        natsd_nap();
    }
    return true;
}

/* Graceful stop (SIGQUIT), SIGKILL after 10 s; then remove its files. */
static void ngx_stop(struct ngx *n)
{
    if (n->pid > 0) {
        kill(n->pid, SIGQUIT);
        double end = natsd_now() + 10;
        int st;
        while (waitpid(n->pid, &st, WNOHANG) == 0) {
            if (natsd_now() > end) {
                kill(n->pid, SIGKILL);
                waitpid(n->pid, &st, 0);
                break;
            }
            natsd_nap();
        }
        n->pid = 0;
    }
    if (n->dir[0]) {
        char cmd[500];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", n->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench: io: could not remove %s\n", n->dir);
        n->dir[0] = '\0';
    }
}

/* One GET on a fresh connection: true when the answer is a 200; else
 * the first line of the answer and the server's error log on stderr. */
static bool ngx_check(const struct ngx *n, const char *name)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_port = htons((uint16_t)n->port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char buf[512] = "";
    ssize_t got = 0;
    static const char req[] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Connection: close\r\n\r\n";
    struct timeval tv = { 10, 0 };
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1))
            got = read(fd, buf, sizeof buf - 1);
        close(fd);
    }
    buf[got > 0 ? got : 0] = '\0';
    if (strncmp(buf, "HTTP/1.1 200", 12) == 0)
        return true;
    fprintf(stderr, "bench: io: nginx (%s) answered a GET with: %.*s\n",
            name, (int)strcspn(buf, "\r\n"), buf);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "tail -n 5 '%s/error.log' >&2", n->dir);
    if (system(cmd) != 0) {
        /* nothing more to say */
    }
    return false;
}

/* ---- wrk ---- */

static const char WRK_SCRIPT[] =
    "done = function(summary, latency, requests)\n"
    "  local e = summary.errors\n"
    "  io.write(string.format('IOBENCH %d %d %d %d %d %d %d %.1f %.1f %.1f"
    " %.1f\\n',\n"
    "    summary.requests, summary.duration, e.connect, e.read, e.write,\n"
    "    e.status, e.timeout, latency:percentile(50), latency:percentile(99),\n"
    "    latency:percentile(99.9), latency.max))\n"
    "end\n";

struct wrk_res {
    bool ok;
    long requests, connect, read, write, status, timeout;
    double duration;            /* s */
    struct latency lat;
};

static bool wrk_run(const char *script, int port, int conns, int secs,
                    struct wrk_res *w)
{
    memset(w, 0, sizeof *w);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "wrk -t1 -c%d -d%ds -s '%s' "
             "http://127.0.0.1:%d/ 2>&1", conns, secs, script, port);
    FILE *p = popen(cmd, "r");
    if (!p)
        return false;
    char line[512];
    while (fgets(line, sizeof line, p)) {
        long dur;
        if (sscanf(line, "IOBENCH %ld %ld %ld %ld %ld %ld %ld %lf %lf %lf %lf",
                   &w->requests, &dur, &w->connect, &w->read, &w->write,
                   &w->status, &w->timeout, &w->lat.p50, &w->lat.p99,
                   &w->lat.p999, &w->lat.max) == 11) {
            w->duration = (double)dur / 1e6;
            w->lat.n = (size_t)w->requests;
            w->ok = true;
        } else if (!strstr(line, "Running") && !strstr(line, "threads and") &&
                   strncmp(line, "  ", 2) != 0 &&
                   !strstr(line, "requests in") &&
                   !strstr(line, "Requests/sec") &&
                   !strstr(line, "Transfer/sec")) {
            fprintf(stderr, "bench: io: wrk: %s", line);
        }
    }
    int rc = pclose(p);
    if (rc != 0 || !w->ok) {
        fprintf(stderr, "bench: io: wrk failed (%s)\n", cmd);
        w->ok = false;
    }
    return w->ok;
}

/* ---- context shared by the rows ---- */

struct io_ctx {
    struct versions v;
    struct ngx up, front;
    char wrk_script[512];
    char h_seda[512], h_sock[512];
    char upstream[160];         /* what answers */
    char server[200];           /* its versions */
    int trial_s;                /* the window */
};

/* The ratio of a rate to the same round's luasocket rate (the target:
 * seda_http >= 50). */
static void row_ratio(struct row *r, double thr, double sock)
{
    if (sock > 0)
        row_num(r, "x_luasocket", thr / sock, 2);
}

static void row_wrk(struct io_ctx *c, const char *variant, int trial,
                    const struct wrk_res *w, int secs, double sock)
{
    struct row r;
    row_begin(&r, strcmp(variant, "openresty") == 0 ? "lua" : "none", "io");
    row_str(&r, "variant", variant);
    row_int(&r, "trial", trial);
    row_int(&r, "requests", w->requests);
    row_num(&r, "window_ms", w->duration * 1e3, 0);
    double thr = w->duration > 0 ? (double)w->requests / w->duration : 0;
    row_num(&r, "throughput_eps", thr, 0);
    row_latency(&r, &w->lat);
    row_str(&r, "latency_from", "wrk");
    row_ratio(&r, thr, sock);
    row_int(&r, "errors", w->connect + w->read + w->write + w->timeout);
    row_int(&r, "status_other", w->status);
    row_int(&r, "connections", IO_WRK_CONNS);
    row_int(&r, "duration_s", secs);
    row_str(&r, "upstream", c->upstream);
    row_str(&r, "server", c->server);
    char client[300];
    if (strcmp(variant, "openresty") == 0) {
        snprintf(client, sizeof client, "wrk %s -t1 -c%d -> nginx %s "
                 "worker_processes 2 + libnginx-mod-http-lua %s "
                 "(ngx.socket.tcp cosocket, keepalive pool)", c->v.wrk,
                 IO_WRK_CONNS, c->v.nginx, c->v.lua_mod);
        row_str(&r, "client", client);
        row_int(&r, "workers", IO_WORKERS);
    } else {
        snprintf(client, sizeof client, "wrk %s -t1 -c%d", c->v.wrk,
                 IO_WRK_CONNS);
        row_str(&r, "client", client);
    }
    row_end(&r);
    bench_progress("io/%s trial %d: %.0f req/s, p50 %.0f us p99 %.0f us, "
                   "%ld errors, %ld non-2xx/3xx", variant, trial, thr,
                   w->lat.p50, w->lat.p99,
                   w->connect + w->read + w->write + w->timeout, w->status);
}

/* ---- a bus trial ---- */

struct io_trial {
    sem_t window;               /* IO_INFLIGHT permits */
    double deadline;
    atomic_long in_window;      /* completions before deadline */
    atomic_long completed;
    atomic_long not_acked;
    struct lat_arr e2e;         /* publish -> done */
};

static void io_done(seda_env_t *env, int outcome, void *ud)
{
    struct io_trial *t = ud;
    double now = seda_now();
    size_t len;
    const void *p = seda_env_payload(env, &len);
    double ts;
    if (len >= sizeof ts) {
        memcpy(&ts, p, sizeof ts);
        lat_add(&t->e2e, now - ts);
    }
    if (outcome != SEDA_COMPLETED)
        atomic_fetch_add(&t->not_acked, 1);
    else if (now < t->deadline)
        atomic_fetch_add(&t->in_window, 1);
    atomic_fetch_add(&t->completed, 1);
    sem_post(&t->window);
}

/* One trial of ours or of the luasocket anchor; returns its rate (0 when
 * it did not run).  sock: the round's luasocket rate, for seda_http. */
static double io_bus_trial(struct io_ctx *c, const char *variant, int trial,
                           struct io_trial *t, double sock)
{
    bool sock_variant = strcmp(variant, "luasocket") == 0;
    benchio_reset();
    atomic_store(&t->e2e.n, 0);
    atomic_store(&t->in_window, 0);
    atomic_store(&t->completed, 0);
    atomic_store(&t->not_acked, 0);
    sem_init(&t->window, 0, IO_INFLIGHT);
    struct inst in;
    if (inst_open(&in, true, IO_CHUNK, sock_variant ? c->h_sock : c->h_seda, 1,
                  IO_CAP, IO_CONC, NULL) != 0) {
        fprintf(stderr, "bench: io: %s: the bus did not start\n", variant);
        sem_destroy(&t->window);
        return 0;
    }
    seda_stage_t *st = in.st[0];
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.done = io_done;
    po.done_ud = t;
    long published = 0, perr = 0;
    int last_err = 0;
    double start = seda_now() + 0.01;
    t->deadline = start + c->trial_s;
    bench_sleep_until(start);
    for (;;) {
        double now = seda_now();
        if (now >= t->deadline)
            break;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        double left = t->deadline - now;
        until.tv_sec += (time_t)left;
        until.tv_nsec += (long)((left - floor(left)) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        if (sem_clockwait(&t->window, CLOCK_MONOTONIC, &until) != 0)
            continue;           /* the window ended (or EINTR) */
        now = seda_now();
        int rc = seda_stage_publish(st, &now, sizeof now, &po);
        if (rc != 0) {
            sem_post(&t->window);
            perr++;
            last_err = rc;
            break;
        }
        published++;
    }
    double pub_end = seda_now();
    int drc = inst_shutdown(&in, 60);
    double end = seda_now();
    long in_window = atomic_load(&t->in_window);
    long completed = atomic_load(&t->completed);
    long not_acked = atomic_load(&t->not_acked);
    long peak = atomic_load(&g_peak);
    inst_close(&in);
    sem_destroy(&t->window);

    struct latency e2e, req;
    lat_get(&t->e2e, &e2e);
    lat_get(&g_req, &req);
    double thr = in_window / (double)c->trial_s;
    long fails = atomic_load(&g_fail);
    struct row r;
    row_begin(&r, "lua", "io");
    row_str(&r, "variant", variant);
    row_int(&r, "trial", trial);
    row_int(&r, "requests", in_window);
    row_num(&r, "window_ms", c->trial_s * 1e3, 0);
    row_num(&r, "throughput_eps", thr, 0);
    row_latency(&r, &e2e);
    row_str(&r, "latency_from", "publish_to_complete");
    if (!sock_variant)
        row_ratio(&r, thr, sock);
    row_int(&r, "errors", fails + not_acked);
    row_int(&r, "status_2xx", atomic_load(&g_status[2]));
    row_int(&r, "status_3xx", atomic_load(&g_status[3]));
    row_int(&r, "status_4xx", atomic_load(&g_status[4]));
    row_int(&r, "status_5xx", atomic_load(&g_status[5]));
    row_str(&r, "upstream", c->upstream);
    row_str(&r, "server", c->server);
    char client[200];
    if (sock_variant)
        snprintf(client, sizeof client, "LuaSocket (lua-socket %s), raw "
                 "socket.tcp() GET, keep-alive per worker state, blocking",
                 c->v.luasocket);
    else
        snprintf(client, sizeof client, "seda.http.request (libcurl %s)",
                 c->v.curl);
    row_str(&r, "client", client);
    row_int(&r, "workers", IO_WORKERS);
    row_int(&r, "concurrency", IO_CONC);
    row_int(&r, "capacity", IO_CAP);
    row_int(&r, "in_flight_max", IO_INFLIGHT);
    row_int(&r, "published", published);
    row_int(&r, "completed_total", completed);
    row_num(&r, "drain_tail_ms", (end - pub_end) * 1e3, 0);
    row_bool(&r, "drained", drc == 0 && completed == published);
    row_num(&r, "request_p50_us", req.p50, 2);
    row_num(&r, "request_p99_us", req.p99, 2);
    row_num(&r, "request_p999_us", req.p999, 2);
    row_num(&r, "request_max_us", req.max, 2);
    row_str(&r, "latency_from_request", "handler");
    row_int(&r, "handler_concurrency_peak", peak);
    if (e2e.truncated || req.truncated)
        row_bool(&r, "samples_truncated", true);
    if (g_first_err[0])
        row_str(&r, "first_error", g_first_err);
    if (perr) {
        row_int(&r, "publish_errors", perr);
        row_str(&r, "publish_error", seda_strerror(last_err));
    }
    row_end(&r);
    bench_progress("io/%s trial %d: %.0f req/s, p50 %.0f us p99 %.0f us "
                   "(GET alone p50 %.0f us), %ld GETs at once at most, "
                   "%ld errors%s", variant, trial, thr, e2e.p50, e2e.p99,
                   req.p50, peak, fails + not_acked,
                   drc == 0 ? "" : ", NOT DRAINED");
    return thr;
}

/* ---- the config ---- */

/* The anchors' rows and ours, interleaved (see DESIGN). */
static void io_rounds(struct io_ctx *c, struct io_trial *t, int rounds)
{
    struct wrk_res w;
    int up_s = g_cfg.quick ? 1 : 3;
    if (wrk_run(c->wrk_script, c->up.port, IO_WRK_CONNS, up_s, &w))
        row_wrk(c, "upstream_wrk", 1, &w, up_s, 0);
    for (int round = 1; round <= rounds; round++) {
        double sock = io_bus_trial(c, "luasocket", round, t, 0);
        io_bus_trial(c, "seda_http", round, t, sock);
        if (wrk_run(c->wrk_script, c->front.port, IO_WRK_CONNS, c->trial_s,
                    &w))
            row_wrk(c, "openresty", round, &w, c->trial_s, sock);
    }
}

/* Start the upstream and the front (OpenResty's module: the same GET on a
 * cosocket).  The front's Lua function is defined by init_by_lua (in the
 * master, before its workers fork), so the workers, which run as nobody,
 * read no file of the run's private directory. */
static bool io_servers(struct io_ctx *c)
{
    if (!ngx_start(&c->up, "io-upstream",
                   "load_module " IO_MODDIR "/ngx_http_echo_module.so;\n"
                   "worker_processes 1;\n", "",
                   "      echo_sleep " IO_SLEEP ";\n      echo ok;\n"))
        return false;
    snprintf(c->upstream, sizeof c->upstream, "http://127.0.0.1:%d/ nginx "
             "echo_sleep " IO_SLEEP "; echo ok; (worker_processes 1)",
             c->up.port);
    snprintf(c->server, sizeof c->server,
             "nginx %s + libnginx-mod-http-echo %s", c->v.nginx, c->v.echo);
    char fhttp[sizeof LUA_GET + 400], floc[1200];
    snprintf(fhttp, sizeof fhttp,
             "  lua_socket_log_errors off;\n"
             "  init_by_lua_block {\n"
             "    package.loaded.iobench_get = (function()\n"
             "%s"
             "    return get end)()\n"
             "  }\n", LUA_GET);
    snprintf(floc, sizeof floc,
             "      content_by_lua_block {\n"
             "        local get = require 'iobench_get'\n"
             "        local sock = ngx.socket.tcp()\n"
             "        sock:settimeout(10000)\n"
             "        local ok, err = sock:connect('127.0.0.1', %d)\n"
             "        if not ok then ngx.status = 502 ngx.say(err) return end\n"
             "        local status, body = get(sock, '127.0.0.1', %d)\n"
             "        if not status then\n"
             "          sock:close() ngx.status = 502 ngx.say(body) return\n"
             "        end\n"
             "        sock:setkeepalive(60000, 512)\n"
             "        ngx.status = status\n"
             "        ngx.print(body)\n"
             "      }\n", c->up.port, c->up.port);
    return ngx_start(&c->front, "io-front",
                     "load_module " IO_MODDIR "/ndk_http_module.so;\n"
                     "load_module " IO_MODDIR "/ngx_http_lua_module.so;\n"
                     "worker_processes 2;\n", fhttp, floc) &&
           ngx_check(&c->up, "io-upstream") &&
           ngx_check(&c->front, "io-front");
}

/* Write the wrk script and the two handlers (paths into c). */
static bool io_files(struct io_ctx *c)
{
    char text[sizeof H_LUASOCKET_HEAD + sizeof LUA_GET +
              sizeof H_LUASOCKET_TAIL + sizeof H_SEDA_HTTP + 64];
    char *paths[3];
    snprintf(text, sizeof text, H_SEDA_HTTP, c->up.port);
    paths[0] = bench_write_file("h_io_http.lua", text);
    int k = snprintf(text, sizeof text, H_LUASOCKET_HEAD, c->up.port);
    snprintf(text + k, sizeof text - (size_t)k, "%s%s", LUA_GET,
             H_LUASOCKET_TAIL);
    paths[1] = bench_write_file("h_io_sock.lua", text);
    paths[2] = bench_write_file("io-wrk.lua", WRK_SCRIPT);
    snprintf(c->h_seda, sizeof c->h_seda, "%s", paths[0] ? paths[0] : "");
    snprintf(c->h_sock, sizeof c->h_sock, "%s", paths[1] ? paths[1] : "");
    snprintf(c->wrk_script, sizeof c->wrk_script, "%s",
             paths[2] ? paths[2] : "");
    for (int i = 0; i < 3; i++)
        free(paths[i]);
    return c->h_seda[0] && c->h_sock[0] && c->wrk_script[0];
}

static void io_cleanup(struct io_ctx *c)
{
    const char *files[] = { c->h_seda, c->h_sock, c->wrk_script };
    for (int i = 0; i < 3; i++)
        if (files[i][0])
            unlink(files[i]);
    ngx_stop(&c->front);
    ngx_stop(&c->up);
}

void bench_io(void)
{
    static bool preloaded;
    static struct io_ctx c;
    static struct io_trial t;
    if (!io_tools())
        return;
    if (!preloaded) {
        if (seda_lua_preload("benchio", luaopen_benchio) != 0) {
            fprintf(stderr, "bench: io: seda_lua_preload failed\n");
            return;
        }
        preloaded = true;
    }
    memset(&c, 0, sizeof c);
    versions_get(&c.v);
    c.trial_s = g_cfg.quick ? 1 : 5;
    g_req.v = malloc(IO_LAT_CAP * sizeof *g_req.v);
    t.e2e.v = malloc(IO_LAT_CAP * sizeof *t.e2e.v);
    if (!g_req.v || !t.e2e.v)
        fprintf(stderr, "bench: io: no memory for the latency arrays\n");
    else if (io_servers(&c) && io_files(&c))
        io_rounds(&c, &t, g_cfg.quick ? 1 : 3);
    io_cleanup(&c);
    free(g_req.v);
    g_req.v = NULL;
    free(t.e2e.v);
    t.e2e.v = NULL;
}
