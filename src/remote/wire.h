/* SPDX-License-Identifier: MIT */
/*
 * wire.h -- how an envelope travels over NATS (docs/wire.md is the
 * reference users read): the stage message, and the completion message
 * sent back to the process that published.  No core state; the stage
 * message is a natsMsg built and read here.
 *
 * THE MESSAGE (on the stage's subject, "seda.<stream>.<stage>")
 *
 *     body              the payload, nothing else (its bytes in the
 *                       stage's format; Content-Type names it)
 *     Nats-Msg-Id       JetStream's dedup id
 *     Seda-Id           the envelope's id across processes
 *     Seda-Attempts     the attempt the publisher was on (decimal;
 *                       absent: 1)
 *     Seda-Priority     high | normal | low (absent: normal)
 *     Seda-Slip         the remaining hops, next first, comma-separated
 *                       (absent: none)
 *     Seda-Sender       (absent: none)
 *     Seda-Origin       the completion subject (absent: nobody waits)
 *     Seda-Hop          remote hops so far, from 1 (absent: 1)
 *     Content-Type      application/x-seda (the Lua codec),
 *                       application/octet-stream (raw bytes), or the
 *                       format's (application/json, application/msgpack)
 *     Seda-Header       a user header NATS cannot carry as it is (see
 *                       seda__rw_key_plain), one value per header
 *     <any other>       a user header, key and value as they are
 *
 *   cnats 3.4's header map confuses a key with a longer one that begins
 *   with it when their hashes meet ("a" and "abc", "tenant" and
 *   "tenantXY": setting one replaces or hides the other, and a received
 *   message folds the second into the first's values).  So a user key
 *   goes plain only when no key already in the message (seda's included)
 *   is a prefix of it or begins with it; the others travel in
 *   Seda-Header.  A foreign message whose own keys collide so is read
 *   with the later one's value folded into the first (documented).
 *
 * THE COMPLETION (version 1; private between seda processes, on the
 * origin's _INBOX subject)
 *
 *     "SDC" 0x01
 *     u8 outcome (enum seda_outcome), u8 kind, u8 flags (2: sender)
 *     str id, str stage (where the itinerary ended), [str sender]
 *     uvarint nheaders, nheaders x (str key, str value)
 *     payload                 the rest
 *
 *   (str = uvarint length + bytes.)  A later version changes the fourth
 *   byte; a decoder refuses versions it does not know, naming them.
 */
#ifndef SEDA_REMOTE_WIRE_H
#define SEDA_REMOTE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nats/nats.h>

#define SEDA_RW_VERSION 1
#define SEDA_RW_MAX_SLIP 4096       /* hops a message may carry */
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

/* An envelope as a stage message carries it (THE MESSAGE above).
 * Building borrows every pointer; reading points the strings into the
 * struct rw_in that holds them and the payload into the message. */
struct rw_env {
    const char *id;             /* required, 1..SEDA_ID_MAX-1 bytes */
    const char *origin;         /* completion subject, or NULL */
    const char *sender;         /* or NULL */
    const char *content_type;   /* building: NULL for the kind's own;
                                   reading: as received, or NULL */
    int kind;                   /* 0..255 */
    int priority;               /* 0..2 (enum seda_priority) */
    int attempts;               /* 1..65535 */
    uint32_t rhop;              /* >= 1 */
    int nslip;
    const char *const *slip;    /* hops, next first: stage names, or
                                   "nats:<subject>" */
    const void *payload;
    size_t plen;
};

/* Build the message of e for subject (reply: its reply subject, or
 * NULL), with Nats-Msg-Id msgid, the envelope's nh user headers hdr
 * (key, value, ... borrowed) and e->payload as its body.  Returns 0 and
 * *out (the caller's), SEDA_EINVAL (a field out of range, a slip entry
 * that is not a stage name nor "nats:<subject>", a string with a NUL),
 * SEDA_ERANGE (a body over 2 GiB) or SEDA_ENOMEM; nothing is left
 * allocated on failure.  Any thread. */
int seda__rw_msg_new(natsMsg **out, const char *subject, const char *reply,
                     const char *msgid, const struct rw_env *e, int nh,
                     const char *const *hdr);

/* A stage message read back. */
struct rw_in {
    struct rw_env env;          /* env.payload points into the message */
    int nh;                     /* user headers */
    const char **hdr;           /* key, value, ... (2 * nh): into strs */
    struct rbuf strs;           /* owned: the strings */
    const char **slip;          /* owned: env.slip's array */
};

/* Read m (borrowed; in's payload points into it, so m must outlive in):
 * the Seda-* headers, the user headers (plain ones as they came, those
 * of Seda-Header unescaped), the body.  A message without Seda-Id (a
 * foreign client's) gets fallback_id, attempts 1, normal priority, no
 * slip.  Returns 0, or -1 with err saying what is wrong ("Seda-Slip:
 * 'a b' is not a stage name").  Free in with seda__rw_in_free whatever it
 * returned.  Never reads outside the message. */
int seda__rw_msg_read(natsMsg *m, const char *fallback_id, struct rw_in *in,
                      char *err, size_t errlen);
void seda__rw_in_free(struct rw_in *in);

/* The Content-Type of a payload kind without a format (0:
 * "application/octet-stream", 1: "application/x-seda"), and back: the
 * kind of a Content-Type, or -1 when it names neither. */
const char *seda__rw_kind_type(int kind);
int seda__rw_type_kind(const char *content_type);

/* A user header NATS carries exactly as it is: its key is a token (RFC
 * 7230: [A-Za-z0-9!#$&'*+.^_`|~-]) not reserved (Nats-*, Seda-*,
 * Content-Type, Status, Description, any case), its value is not empty,
 * holds no control byte and does not begin or end with a blank. */
bool seda__rw_key_plain(const char *key);
bool seda__rw_val_plain(const char *val);

/* A Seda-Header value: "<key>=<value>", each with every byte outside
 * [A-Za-z0-9._~-] as %XX; appended to b with a NUL.  0 or SEDA_ENOMEM.
 * seda__rw_hdr_unpack splits and unescapes one into b (key, NUL, value,
 * NUL; *voff the value's offset): 0, or -1 when it is malformed. */
int seda__rw_hdr_pack(struct rbuf *b, const char *key, const char *val);
int seda__rw_hdr_unpack(struct rbuf *b, const char *packed, size_t *voff);

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

/* Seda-Id, Seda-Sender and Seda-Origin values: '%', control bytes and
 * leading or trailing blanks as %XX, the empty value as a lone "%".
 * Each appends the text and a NUL to b: 0, SEDA_ENOMEM, or (unescape)
 * -1 on a bad %XX or an escaped NUL. */
int seda__rw_val_escape(struct rbuf *b, const char *val);
int seda__rw_val_unescape(struct rbuf *b, const char *nv);

#endif /* SEDA_REMOTE_WIRE_H */
