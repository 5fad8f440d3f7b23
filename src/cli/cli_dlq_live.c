/* SPDX-License-Identifier: MIT */
/*
 * cli_dlq_live.c -- `seda-lua dlq --control PATH [list [STAGE]] [--json]`:
 * the dead letters the live buses of a running seda-lua keep
 * (bus:dead_letters()), read through its control socket.
 *
 * The client sends one line of Lua (live_text or live_json, through
 * cli_attach_collect) that the server runs, so a newer client reads an
 * older server; what comes back is made safe for a terminal (text) or
 * valid UTF-8 (JSON) here.  The words after "dlq" are checked in
 * cli_dlq.c, which also holds the journal form (a stopped bus).  Main
 * thread only.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The command sent to the control socket: one line of Lua (the protocol
 * runs a line at a time; no "--" comments, they would swallow the rest),
 * called with the stage name or nil.  It uses only what any seda-lua with
 * bus:dead_letters() has (seda.buses(), bus:stats().name, and json() for
 * --json), so a newer client reads an older server.  It raises, before writing
 * anything, when a stage was asked for and no live bus has it. */
static const char live_pick[] =
    "local sel, found = {}, stage == nil "
    "for _, b in ipairs(seda.buses()) do "
    "  local ok, dl = pcall(b.dead_letters, b, stage) "
    "  if ok and dl then "
    "    local sok, st = pcall(b.stats, b) "
    "    found = true "
    "    sel[#sel + 1] = { sok and type(st) == 'table' and st.name or '?', "
    "                      dl } "
    "  end "
    "end "
    "if not found then "
    "  error(\"no stage '\" .. stage .. \"' in any live bus\", 0) "
    "end ";

static const char live_text[] =
    "(function(stage) "
    "local fmt = string.format "
    "local function f(s) "
    "  s = tostring(s or ''):gsub('[\\t\\r\\n]', ' ') "
    "  return s == '' and '-' or s "
    "end "
    "local function q(s) return (fmt('%q', s):gsub('\\\\\\n', '\\\\n')) end "
    "local function v(x, d) "
    "  local t = type(x) "
    "  if t == 'string' then return q(x) end "
    "  if t ~= 'table' then return tostring(x) end "
    "  if d > 2 then return '{...}' end "
    "  local p, n, ks = {}, #x, {} "
    "  for i = 1, math.min(n, 20) do p[#p + 1] = v(x[i], d + 1) end "
    "  for k in pairs(x) do "
    "    if not (math.type(k) == 'integer' and k >= 1 and k <= n) then "
    "      ks[#ks + 1] = k "
    "    end "
    "  end "
    "  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end) "
    "  for i = 1, math.min(#ks, 20) do "
    "    local k = ks[i] "
    "    p[#p + 1] = (type(k) == 'string' and k:match('^[%a_][%w_]*$') and k "
    "                 or '[' .. v(k, d + 1) .. ']') .. ' = ' .. v(x[k], d + 1) "
    "  end "
    "  return '{' .. table.concat(p, ', ') .. '}' "
    "end "
    "%PICK%"
    "local rows = {} "
    "for _, e in ipairs(sel) do "
    "  for _, d in ipairs(e[2]) do "
    "    local h = d.headers or {} "
    "    local p "
    "    if d.payload ~= nil then p = v(d.payload, 0) "
    "    else "
    "      p = d.payload_preview or '' "
    "    end "
    "    if #p > 100 then p = p:sub(1, 97) .. '...' end "
    "    rows[#rows + 1] = table.concat({ f(e[1]), f(d.stage), f(d.id), "
    "      f(d.reason), f(d.missing or h['x-dead-detail']), "
    "      f(d.attempts), "
    "      f(h['x-dead-at'] or (d.at and os.date('!%Y-%m-%dT%H:%M:%SZ', "
    "                                            math.floor(d.at)))), "
    "      f(d.error), f(p) }, '\\t') .. '\\n' "
    "  end "
    "end "
    "io.write('BUS\\tSTAGE\\tID\\tREASON\\tDETAIL\\tATTEMPTS\\tDEAD_AT\\t"
    "ERROR\\tPAYLOAD\\n', table.concat(rows)) "
    "end)";

/* --json: the document /dlq.json serves, written in pieces: json() (the
 * REPL's, as attach --json) for every value, so the bytes are JSON's; it
 * ends each value with a newline, which the client removes (a JSON string
 * never holds a raw newline: json() escapes control characters), and it
 * passes bytes >= 0x80 through, which the client makes valid UTF-8 (an
 * invalid byte becomes U+FFFD, as in /dlq.json): a payload_preview holds
 * binary bytes.  An empty list is written as [] (json() would say {}). */
static const char live_json[] =
    "(function(stage) "
    "%PICK%"
    "io.write('{\"version\":') json(seda.version) "
    "io.write(',\"now\":') json(seda.now()) "
    "io.write(',\"buses\":[') "
    "for i, e in ipairs(sel) do "
    "  io.write(i > 1 and ',' or '', '{\"name\":') json(e[1]) "
    "  io.write(',\"dead_letters\":') "
    "  if #e[2] > 0 then json(e[2]) else io.write('[]') end "
    "  io.write('}') "
    "end "
    "io.write(']}') "
    "end)";

/* tmpl with %PICK% replaced by live_pick, then "(ARG)": ARG the stage as
 * a Lua string, or nil.  NULL when out of memory. */
static char *live_command(const char *tmpl, const char *stage)
{
    const char *mark = strstr(tmpl, "%PICK%");
    size_t n = strlen(tmpl) + strlen(live_pick) +
               (stage ? strlen(stage) : 0) + 16;
    char *cmd = malloc(n);
    if (!cmd || !mark) {
        free(cmd);
        return NULL;
    }
    snprintf(cmd, n, "%.*s%s%s(%s%s%s)", (int)(mark - tmpl), tmpl, live_pick,
             mark + 6, stage ? "'" : "", stage ? stage : "nil",
             stage ? "'" : "");
    return cmd;
}

int cli_dlq_live(const char *sock, const char *stage, bool json)
{
    char *cmd = live_command(json ? live_json : live_text, stage);
    if (!cmd) {
        fprintf(stderr, "seda-lua dlq: out of memory\n");
        return 1;
    }
    char *out;
    size_t n;
    bool raised;
    int rc = cli_attach_collect(sock, "seda-lua dlq", cmd, &out, &n, &raised);
    free(cmd);
    if (rc != 0)
        return 1;
    if (raised) {
        /* The command's error (no such stage, or what the server said),
         * without the server's traceback. */
        char *tb = out ? strstr(out, "\nstack traceback:") : NULL;
        if (tb)
            n = (size_t)(tb - out);
        while (n && out[n - 1] == '\n')
            n--;
        fprintf(stderr, "seda-lua dlq: %s: ", sock);
        if (n)
            cli_term_put(stderr, out, n, CLI_TERM_LINES);
        else
            fputs("the command failed", stderr);
        fputc('\n', stderr);
        free(out);
        return 1;
    }
    if (json) {
        const unsigned char *u = (const unsigned char *)out;
        for (size_t i = 0; i < n;) {
            size_t l = u[i] == '\n' ? 1 : cli_json_utf8_len(u + i, n - i);
            if (l == 0)
                fputs("\xef\xbf\xbd", stdout);           /* U+FFFD */
            else if (u[i] != '\n')
                fwrite(u + i, 1, l, stdout);
            i += l ? l : 1;
        }
        putchar('\n');
    } else if (n) {
        /* The text as the server wrote it (tab-separated lines), made
         * safe for a terminal here: whatever the server's version, an
         * id, error or payload reaches the operator escaped. */
        cli_term_put(stdout, out, n, CLI_TERM_LINES);
    }
    free(out);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "seda-lua dlq: writing the output: %s\n",
                strerror(errno));
        return 1;
    }
    return 0;
}
