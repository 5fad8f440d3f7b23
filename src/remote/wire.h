/* SPDX-License-Identifier: MIT */
/*
 * wire.h -- how an envelope travels over NATS: the message body, the
 * header escaping, and the completion message sent back to the process
 * that published.  Pure functions: no NATS, no core state.
 *
 * THE BODY (version 1, little endian; str = uvarint length + bytes)
 *
 *     "SDR" 0x01              magic and version
 *     u8  flags               1: origin present, 2: sender present
 *     u8  kind                payload kind (0 raw bytes, 1 Lua codec)
 *     u8  priority            enum seda_priority
 *     u16 attempts            the attempt the publisher was on
 *     u32 rhop                remote hops so far, from 1 (dedup ids)
 *     str id                  the envelope's id across processes
 *     [str origin]            subject for the completion message
 *     [str sender]
 *     uvarint nslip, nslip x str   the remaining slip, next hop first
 *     payload                 the rest of the body, verbatim
 *
 * Headers travel as NATS headers, escaped so that any seda header
 * (a string key and value without NUL) survives and cnats 3.4's header
 * map cannot confuse two keys: a key is written as its bytes with every
 * byte outside [A-Za-z0-9._-] as %XX, its first byte escaped too when
 * it begins with "nats-" (any case), and a '~' appended, so no seda key
 * is a prefix of another or of Nats-Msg-Id.  A value is written as its
 * bytes with control bytes, '%', and leading or trailing blanks as %XX
 * (the server trims blanks), and the empty value as a lone "%" (cnats
 * cannot read an empty header value back).
 *
 * THE COMPLETION (version 1)
 *
 *     "SDC" 0x01
 *     u8 outcome (enum seda_outcome), u8 kind, u8 flags (2: sender)
 *     str id, str stage (where the itinerary ended), [str sender]
 *     uvarint nheaders, nheaders x (str key, str value)
 *     payload                 the rest
 *
 * A later version changes the fourth byte; a decoder refuses versions it
 * does not know, naming them.
 */
#ifndef SEDA_REMOTE_WIRE_H
#define SEDA_REMOTE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define SEDA_RW_VERSION 1
#define SEDA_RW_MAX_SLIP 4096       /* hops a body may carry */
#define SEDA_RW_MAX_HEADERS 4096    /* headers a completion may carry */

/* A growable byte buffer (seda__malloc'd). */
struct rbuf {
    unsigned char *p;
    size_t len;
    size_t cap;
};

/* Append n bytes; 0 or SEDA_ENOMEM (nothing appended).  Free with
 * seda__rbuf_free (which accepts an empty buffer). */
int seda__rbuf_put(struct rbuf *b, const void *p, size_t n);
void seda__rbuf_free(struct rbuf *b);

/* An envelope as the body carries it.  Encoding borrows every pointer;
 * decoding points the strings into one owned allocation and the payload
 * into the body. */
struct rw_env {
    const char *id;             /* required, 1..SEDA_ID_MAX-1 bytes */
    const char *origin;         /* completion subject, or NULL */
    const char *sender;         /* or NULL */
    int kind;                   /* 0..255 */
    int priority;               /* 0..2 */
    int attempts;               /* 1..65535 */
    uint32_t rhop;              /* >= 1 */
    int nslip;
    const char *const *slip;    /* stage names, next hop first */
    const void *payload;
    size_t plen;
};

/* Append e's body to b.  Returns 0, SEDA_EINVAL (a field out of range,
 * a string with a NUL, a bad stage name) or SEDA_ENOMEM (b unchanged in
 * length).  Any thread. */
int seda__rw_encode(struct rbuf *b, const struct rw_env *e);

/* Decode a body.  On 0, *mem owns the strings out points to (free it
 * with seda__free), and out->payload points into body.  On -1, err says
 * what is wrong ("truncated", "version 7 unknown", "slip[2]: not a stage
 * name") and nothing is allocated.  Never reads outside body[0..len). */
int seda__rw_decode(const void *body, size_t len, struct rw_env *out,
                    void **mem, char *err, size_t errlen);

/* True when body starts like an envelope body of any version. */
int seda__rw_is_envelope(const void *body, size_t len);

/* A finished itinerary, as the completion message carries it. */
struct rw_done {
    int outcome;                /* enum seda_outcome */
    int kind;
    const char *id;
    const char *stage;
    const char *sender;         /* or NULL */
    int nh;                     /* header pairs */
    const char *const *hdr;     /* key, value, ... (2 * nh) */
    const void *payload;
    size_t plen;
};

/* As seda__rw_encode / seda__rw_decode, for a completion message. */
int seda__rw_done_encode(struct rbuf *b, const struct rw_done *d);
int seda__rw_done_decode(const void *body, size_t len, struct rw_done *out,
                         void **mem, char *err, size_t errlen);

/* Header escaping (see above).  Each appends the escaped text and a NUL
 * to b and returns 0 or SEDA_ENOMEM.  The unescape functions return 0
 * with the text (NUL-terminated) appended, 1 when a key is not a seda
 * header (no trailing '~': Nats-Msg-Id, or a foreign publisher's), or
 * -1 when it is malformed (a bad %XX, an escaped NUL). */
int seda__rw_key_escape(struct rbuf *b, const char *key);
int seda__rw_val_escape(struct rbuf *b, const char *val);
int seda__rw_key_unescape(struct rbuf *b, const char *nk);
int seda__rw_val_unescape(struct rbuf *b, const char *nv);

#endif /* SEDA_REMOTE_WIRE_H */
