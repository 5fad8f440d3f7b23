/* SPDX-License-Identifier: MIT */
/*
 * cli_term.c -- text made safe for an operator's terminal: the one
 * escaping function every writer of seda-lua's text views uses (the
 * REPL's helpers through C.printable, `dlq DATA_DIR list`, `dlq --control
 * SOCK list`, stderr of the CLI tools).  What it shows comes from
 * envelopes, handlers and HTTP clients: an id, a header, a payload or an
 * error message must not retitle the window (ESC ] 0 ; ... BEL), clear
 * the screen (ESC [ 2 J), move the cursor or fake lines (CR).
 *
 * Rules, byte by byte over the text:
 *   - the C0 controls (0x00-0x1f) and DEL (0x7f) become \xNN, except
 *     newline and tab when the caller keeps lines (CLI_TERM_LINES);
 *   - a C1 control (U+0080-U+009F, which some terminals obey as ESC
 *     sequences: U+009B is CSI) becomes \xc2\xNN;
 *   - a byte >= 0x80 that does not start a valid UTF-8 sequence becomes
 *     \xNN (a terminal in a legacy 8-bit mode reads 0x9b as CSI too);
 *   - everything else (printable ASCII, valid UTF-8) passes unchanged.
 * Backslashes are left alone: the result is for eyes, not for parsing.
 * No state; any thread.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

size_t cli_term_escape(const char *text, size_t n, int flags, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)text;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c >= 0x20 && c < 0x7f) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        if ((c == '\n' || c == '\t') && (flags & CLI_TERM_LINES)) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        size_t len = c >= 0x80 ? cli_json_utf8_len(s + i, n - i) : 0;
        if (len > 0 && !(c == 0xc2 && s[i + 1] < 0xa0)) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
            continue;
        }
        /* A control (C0, DEL, or C1 in UTF-8) or an invalid byte: all
         * its bytes as \xNN (a C1 control is two). */
        size_t k = len > 0 ? len : 1;
        for (size_t j = 0; j < k; j++) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[s[i + j] >> 4];
            out[o++] = hex[s[i + j] & 15];
        }
        i += k;
    }
    return o;
}

void cli_term_put(FILE *f, const char *s, size_t n, int flags)
{
    char buf[4 * 256];
    while (n > 0) {
        /* Cut where no UTF-8 sequence is split: at most 256 bytes, fewer
         * when the cut would fall inside a sequence's continuation. */
        size_t k = n < 256 ? n : 256;
        if (k < n)
            while (k > 252 && ((unsigned char)s[k] & 0xc0) == 0x80)
                k--;
        fwrite(buf, 1, cli_term_escape(s, k, flags, buf), f);
        s += k;
        n -= k;
    }
}
