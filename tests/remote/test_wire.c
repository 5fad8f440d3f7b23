/* SPDX-License-Identifier: MIT */
/*
 * test_wire.c -- cmocka tests for the remote stages' wire format
 * (src/remote/wire.c): the envelope body, the completion message and the
 * header escaping.
 *
 * Every field survives encode -> decode; a version this build does not
 * know is refused by name; every truncation, every single bit flip and
 * random bytes decode to an error or a well-formed envelope, never a
 * crash or a read past the end (ASan checks the reads: each decode gets
 * a heap copy of exactly its length); header keys and values of any
 * bytes but NUL come back unchanged, and escaped keys are prefix-free
 * (cnats 3.4 confuses a key with a longer one it begins).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/seda_int.h"
#include "remote/wire.h"

/* Decode a heap copy of exactly len bytes (so ASan sees any overrun). */
static int decode_copy(const void *p, size_t len, struct rw_env *out,
                       void **mem, char *err, size_t errlen)
{
    void *copy = malloc(len ? len : 1);
    memcpy(copy, p, len);
    int rc = seda__rw_decode(copy, len, out, mem, err, errlen);
    if (rc == 0) {
        /* The payload points into the body: check it, then drop it. */
        assert_true(out->plen <= len);
        out->payload = NULL;
    }
    free(copy);
    return rc;
}

static void encode_sample(struct rbuf *b, const char *payload, size_t plen)
{
    static const char *const slip[] = { "enrich", "a.b:c-d_e", "sink" };
    struct rw_env e = {
        .id = "NUIDNUIDNUIDNUIDNUID12:42", .origin = "_INBOX.abc.c",
        .sender = "me", .kind = 1, .priority = 2, .attempts = 3,
        .rhop = 7, .nslip = 3, .slip = slip, .payload = payload,
        .plen = plen,
    };
    assert_int_equal(seda__rw_encode(b, &e), 0);
}

static void test_wire_envelope_round_trip(void **state)
{
    (void)state;
    struct rbuf b = { 0 };
    static const char payload[] = "bin\0ary\xff";
    encode_sample(&b, payload, sizeof payload);
    struct rw_env d;
    void *mem;
    char err[128];
    assert_int_equal(seda__rw_decode(b.p, b.len, &d, &mem, err, sizeof err),
                     0);
    assert_string_equal(d.id, "NUIDNUIDNUIDNUIDNUID12:42");
    assert_string_equal(d.origin, "_INBOX.abc.c");
    assert_string_equal(d.sender, "me");
    assert_int_equal(d.kind, 1);
    assert_int_equal(d.priority, 2);
    assert_int_equal(d.attempts, 3);
    assert_int_equal(d.rhop, 7);
    assert_int_equal(d.nslip, 3);
    assert_string_equal(d.slip[0], "enrich");
    assert_string_equal(d.slip[1], "a.b:c-d_e");
    assert_string_equal(d.slip[2], "sink");
    assert_int_equal(d.plen, sizeof payload);
    assert_memory_equal(d.payload, payload, sizeof payload);
    seda__free(mem);
    seda__rbuf_free(&b);
}

static void test_wire_envelope_minimal(void **state)
{
    (void)state;
    struct rbuf b = { 0 };
    struct rw_env e = { .id = "x", .attempts = 1, .rhop = 1 };
    assert_int_equal(seda__rw_encode(&b, &e), 0);
    struct rw_env d;
    void *mem;
    char err[128];
    assert_int_equal(seda__rw_decode(b.p, b.len, &d, &mem, err, sizeof err),
                     0);
    assert_string_equal(d.id, "x");
    assert_null(d.origin);
    assert_null(d.sender);
    assert_int_equal(d.nslip, 0);
    assert_null(d.slip);
    assert_int_equal(d.plen, 0);
    seda__free(mem);
    seda__rbuf_free(&b);
}

static void test_wire_encode_refuses_bad_fields(void **state)
{
    (void)state;
    struct rbuf b = { 0 };
    static const char *const bad_slip[] = { "ok", "no spaces" };
    char long_id[SEDA_ID_MAX + 1];
    memset(long_id, 'i', SEDA_ID_MAX);
    long_id[SEDA_ID_MAX] = '\0';
    struct rw_env cases[] = {
        { .id = "", .attempts = 1, .rhop = 1 },
        { .id = long_id, .attempts = 1, .rhop = 1 },
        { .id = "x", .attempts = 0, .rhop = 1 },
        { .id = "x", .attempts = 1, .rhop = 0 },
        { .id = "x", .attempts = 1, .rhop = 1, .priority = 3 },
        { .id = "x", .attempts = 1, .rhop = 1, .kind = 256 },
        { .id = "x", .attempts = 1, .rhop = 1, .nslip = 2,
          .slip = bad_slip },
        { .id = "x", .attempts = 1, .rhop = 1, .origin = "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(seda__rw_encode(&b, &cases[i]), SEDA_EINVAL);
        assert_int_equal(b.len, 0);
    }
    seda__rbuf_free(&b);
}

static void test_wire_unknown_version_named(void **state)
{
    (void)state;
    struct rbuf b = { 0 };
    encode_sample(&b, "p", 1);
    b.p[3] = 7;
    struct rw_env d;
    void *mem = (void *)1;
    char err[128];
    assert_int_equal(seda__rw_decode(b.p, b.len, &d, &mem, err, sizeof err),
                     -1);
    assert_null(mem);
    assert_non_null(strstr(err, "version 7"));
    assert_int_equal(decode_copy("hello", 5, &d, &mem, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a seda envelope"));
    assert_int_equal(seda__rw_is_envelope("hello", 5), 0);
    seda__rbuf_free(&b);
}

static void test_wire_every_truncation_rejected(void **state)
{
    (void)state;
    struct rbuf b = { 0 };
    encode_sample(&b, "", 0);           /* no payload: every cut is short */
    char err[128];
    for (size_t n = 0; n < b.len; n++) {
        struct rw_env d;
        void *mem = (void *)1;
        int rc = decode_copy(b.p, n, &d, &mem, err, sizeof err);
        if (rc == 0)
            fail_msg("a body cut at %zu of %zu bytes decoded", n, b.len);
        assert_null(mem);
    }
    seda__rbuf_free(&b);
}

static void test_wire_bit_flips_never_crash(void **state)
{
    (void)state;
    struct rbuf b = { 0 };
    encode_sample(&b, "payload", 7);
    char err[128];
    int refused = 0;
    for (size_t i = 0; i < b.len * 8; i++) {
        b.p[i / 8] ^= (unsigned char)(1u << (i % 8));
        struct rw_env d;
        void *mem;
        if (decode_copy(b.p, b.len, &d, &mem, err, sizeof err) == 0) {
            /* Whatever decoded is well-formed. */
            assert_true(strlen(d.id) > 0 && strlen(d.id) < SEDA_ID_MAX);
            for (int k = 0; k < d.nslip; k++)
                assert_true(seda__valid_name(d.slip[k]));
            seda__free(mem);
        } else {
            refused++;
        }
        b.p[i / 8] ^= (unsigned char)(1u << (i % 8));
    }
    assert_true(refused > 0);
    seda__rbuf_free(&b);
}

static void test_wire_random_bytes_never_crash(void **state)
{
    (void)state;
    unsigned seed = 12345;
    unsigned char buf[300];
    char err[128];
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)(rand_r(&seed) % (int)sizeof buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)rand_r(&seed);
        if (round % 2 && n >= 4)
            memcpy(buf, "SDR\x01", 4);  /* get past the magic half the time */
        struct rw_env d;
        void *mem;
        if (decode_copy(buf, n, &d, &mem, err, sizeof err) == 0)
            seda__free(mem);
        struct rw_done c;
        if (round % 2 && n >= 4)
            memcpy(buf, "SDC\x01", 4);
        void *copy = malloc(n ? n : 1);
        memcpy(copy, buf, n);
        if (seda__rw_done_decode(copy, n, &c, &mem, err, sizeof err) == 0)
            seda__free(mem);
        free(copy);
    }
}

static void test_wire_huge_claims_rejected(void **state)
{
    (void)state;
    /* A slip count and a string length far past the body. */
    static const unsigned char body[] = {
        'S', 'D', 'R', 1, 0, 0, 0, 1, 0, 1, 0, 0, 0,
        1, 'x',                                      /* id */
        0xff, 0xff, 0xff, 0xff, 0x0f,                /* nslip */
    };
    struct rw_env d;
    void *mem;
    char err[128];
    assert_int_equal(decode_copy(body, sizeof body, &d, &mem, err,
                                 sizeof err), -1);
    assert_non_null(strstr(err, "slip"));
    static const unsigned char body2[] = {
        'S', 'D', 'R', 1, 0, 0, 0, 1, 0, 1, 0, 0, 0,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 'x',
    };
    assert_int_equal(decode_copy(body2, sizeof body2, &d, &mem, err,
                                 sizeof err), -1);
}

static void test_wire_completion_round_trip(void **state)
{
    (void)state;
    static const char *const hdr[] = { "k", "v", "empty", "", "x-dead", "1" };
    struct rw_done c = {
        .outcome = SEDA_COMPLETED, .kind = 1, .id = "abc:1",
        .stage = "sink", .sender = "s", .nh = 3, .hdr = hdr,
        .payload = "\x01\x02", .plen = 2,
    };
    struct rbuf b = { 0 };
    assert_int_equal(seda__rw_done_encode(&b, &c), 0);
    struct rw_done d;
    void *mem;
    char err[128];
    for (size_t n = 0; n < b.len - 2; n++) {
        void *copy = malloc(n ? n : 1);
        memcpy(copy, b.p, n);
        assert_int_equal(seda__rw_done_decode(copy, n, &d, &mem, err,
                                              sizeof err), -1);
        free(copy);
    }
    assert_int_equal(seda__rw_done_decode(b.p, b.len, &d, &mem, err,
                                          sizeof err), 0);
    assert_int_equal(d.outcome, SEDA_COMPLETED);
    assert_int_equal(d.kind, 1);
    assert_string_equal(d.id, "abc:1");
    assert_string_equal(d.stage, "sink");
    assert_string_equal(d.sender, "s");
    assert_int_equal(d.nh, 3);
    for (int i = 0; i < 6; i++)
        assert_string_equal(d.hdr[i], hdr[i]);
    assert_int_equal(d.plen, 2);
    assert_memory_equal(d.payload, "\x01\x02", 2);
    seda__free(mem);
    seda__rbuf_free(&b);
}

/* Escape then unescape s as a key and as a value. */
static void header_round_trip(const char *s)
{
    struct rbuf e = { 0 }, u = { 0 };
    assert_int_equal(seda__rw_key_escape(&e, s), 0);
    const char *k = (const char *)e.p;
    size_t kl = strlen(k);
    assert_true(kl > 0 && k[kl - 1] == '~');
    for (const char *p = k; *p; p++)    /* a NATS header token */
        assert_true(*p > ' ' && *p < 0x7f && *p != ':');
    assert_int_equal(seda__rw_key_unescape(&u, k), 0);
    assert_string_equal((const char *)u.p, s);
    e.len = u.len = 0;
    assert_int_equal(seda__rw_val_escape(&e, s), 0);
    const char *v = (const char *)e.p;
    assert_true(strlen(v) > 0);
    assert_true(v[0] != ' ' && v[strlen(v) - 1] != ' ');
    for (const char *p = v; *p; p++)
        assert_true((unsigned char)*p >= 0x20 && *p != 0x7f);
    assert_int_equal(seda__rw_val_unescape(&u, v), 0);
    assert_string_equal((const char *)u.p, s);
    seda__rbuf_free(&e);
    seda__rbuf_free(&u);
}

static void test_wire_headers_any_bytes_round_trip(void **state)
{
    (void)state;
    static const char *const samples[] = {
        "", "plain", "with space", " lead", "trail ", "  both  ", "a:b",
        "crlf\r\ninjected: yes", "tab\tin", "percent%41", "tilde~x",
        "Nats-Msg-Id", "nats-expected-stream", "h\xc3\xa9llo", "\x01\x7f",
        "%", "~",
    };
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++)
        header_round_trip(samples[i]);
    char all[256];
    for (int c = 1; c < 256; c++)
        all[c - 1] = (char)c;
    all[255] = '\0';
    header_round_trip(all);
}

static void test_wire_keys_prefix_free(void **state)
{
    (void)state;
    static const char *const keys[] = {
        "Seda-Sta", "Seda-Stage", "K-1", "K-10", "Nats-Msg-Id",
        "Nats-Msg-Id-x", "nats-", "a", "ab", "",
    };
    size_t n = sizeof keys / sizeof keys[0];
    char esc[16][64];
    for (size_t i = 0; i < n; i++) {
        struct rbuf e = { 0 };
        assert_int_equal(seda__rw_key_escape(&e, keys[i]), 0);
        snprintf(esc[i], sizeof esc[i], "%s", (const char *)e.p);
        seda__rbuf_free(&e);
    }
    for (size_t i = 0; i < n; i++) {
        /* Nats-Msg-Id (the one unescaped key we send) is no prefix of an
         * escaped key, and no escaped key is a prefix of it. */
        assert_false(strncmp(esc[i], "Nats-Msg-Id", 11) == 0);
        assert_false(strncmp("Nats-Msg-Id", esc[i], strlen(esc[i])) == 0);
        for (size_t j = 0; j < n; j++)
            if (i != j)
                assert_false(strncmp(esc[j], esc[i], strlen(esc[i])) == 0);
    }
    /* Not a seda header, and malformed escapes. */
    struct rbuf u = { 0 };
    assert_int_equal(seda__rw_key_unescape(&u, "Nats-Msg-Id"), 1);
    assert_int_equal(seda__rw_key_unescape(&u, "a%4~"), -1);
    assert_int_equal(seda__rw_key_unescape(&u, "a%00~"), -1);
    assert_int_equal(seda__rw_key_unescape(&u, "a~b~"), -1);
    assert_int_equal(seda__rw_val_unescape(&u, "bad%zz"), -1);
    assert_int_equal(seda__rw_val_unescape(&u, "end%"), -1);
    assert_int_equal(u.len, 0);
    seda__rbuf_free(&u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_envelope_round_trip),
        cmocka_unit_test(test_wire_envelope_minimal),
        cmocka_unit_test(test_wire_encode_refuses_bad_fields),
        cmocka_unit_test(test_wire_unknown_version_named),
        cmocka_unit_test(test_wire_every_truncation_rejected),
        cmocka_unit_test(test_wire_bit_flips_never_crash),
        cmocka_unit_test(test_wire_random_bytes_never_crash),
        cmocka_unit_test(test_wire_huge_claims_rejected),
        cmocka_unit_test(test_wire_completion_round_trip),
        cmocka_unit_test(test_wire_headers_any_bytes_round_trip),
        cmocka_unit_test(test_wire_keys_prefix_free),
    };
    return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}
