/* SPDX-License-Identifier: MIT */
/*
 * test_wire.c -- cmocka tests for the remote stages' wire format
 * (src/remote/wire.c, docs/wire.md): the stage message, the completion
 * message and the escapes.
 *
 * Every field survives build -> read, in plain NATS headers any client
 * reads; a foreign message gets the defaults; user headers of any bytes
 * but NUL come back unchanged, plain when NATS carries them exactly and
 * no key begins another (cnats 3.4's header map mixes such keys), else in
 * Seda-Header; bad metadata is refused naming the header; every
 * truncation of a completion is refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "core/seda_int.h"
#include "remote/wire.h"
#include "seda_remote.h"

/* rstage.c's matcher of remote.reach patterns (NATS subject rules). */
bool seda__reach_match(const char *pat, const char *subject);

/* Read m back; the test's copy of what it carries. */
static void read_ok(natsMsg *m, struct rw_in *in)
{
    char err[200] = "";
    int rc = seda__rw_msg_read(m, "S:1", in, err, sizeof err);
    if (rc != 0)
        fail_msg("read: %s", err);
}

/* The value of user header key in in, or NULL. */
static const char *in_header(const struct rw_in *in, const char *key)
{
    for (int i = 0; i < in->nh; i++)
        if (strcmp(in->hdr[2 * i], key) == 0)
            return in->hdr[2 * i + 1];
    return NULL;
}

static void test_wire_message_round_trip(void **state)
{
    (void)state;
    static const char *const slip[] = { "enrich", "a.b:c-d_e",
                                        "nats:results.x" };
    static const char payload[] = "bin\0ary\xff";
    struct rw_env e = {
        .id = "NUIDNUIDNUIDNUIDNUID12:42", .origin = "_INBOX.abc.c.0f",
        .sender = "me", .kind = 1, .priority = SEDA_PRIO_LOW,
        .attempts = 3, .rhop = 7, .nslip = 3, .slip = slip,
        .payload = payload, .plen = sizeof payload - 1,
    };
    natsMsg *m = NULL;
    assert_int_equal(seda__rw_msg_new(&m, "seda.S.in", "_INBOX.r", "rid#7",
                                      &e, 0, NULL), 0);
    /* What any NATS client sees: plain headers, the payload as the body. */
    const char *v = NULL;
    assert_int_equal(natsMsgHeader_Get(m, "Seda-Id", &v), NATS_OK);
    assert_string_equal(v, e.id);
    assert_int_equal(natsMsgHeader_Get(m, "Seda-Slip", &v), NATS_OK);
    assert_string_equal(v, "enrich,a.b:c-d_e,nats:results.x");
    assert_int_equal(natsMsgHeader_Get(m, "Seda-Priority", &v), NATS_OK);
    assert_string_equal(v, "low");
    assert_int_equal(natsMsgHeader_Get(m, "Seda-Attempts", &v), NATS_OK);
    assert_string_equal(v, "3");
    assert_int_equal(natsMsgHeader_Get(m, "Content-Type", &v), NATS_OK);
    assert_string_equal(v, "application/x-seda");
    assert_int_equal(natsMsgHeader_Get(m, "Nats-Msg-Id", &v), NATS_OK);
    assert_string_equal(v, "rid#7");
    assert_int_equal(natsMsgHeader_Get(m, "Seda-Header", &v), NATS_NOT_FOUND);
    assert_int_equal(natsMsg_GetDataLength(m), (int)sizeof payload - 1);
    assert_memory_equal(natsMsg_GetData(m), payload, sizeof payload - 1);
    struct rw_in in;
    read_ok(m, &in);
    assert_string_equal(in.env.id, e.id);
    assert_string_equal(in.env.origin, e.origin);
    assert_string_equal(in.env.sender, "me");
    assert_string_equal(in.env.content_type, "application/x-seda");
    assert_int_equal(in.env.priority, SEDA_PRIO_LOW);
    assert_int_equal(in.env.attempts, 3);
    assert_int_equal(in.env.rhop, 7);
    assert_int_equal(in.env.nslip, 3);
    for (int i = 0; i < 3; i++)
        assert_string_equal(in.env.slip[i], slip[i]);
    assert_int_equal(in.nh, 0);
    assert_int_equal(in.env.plen, sizeof payload - 1);
    seda__rw_in_free(&in);
    natsMsg_Destroy(m);
}

static void test_wire_foreign_message_gets_defaults(void **state)
{
    (void)state;
    natsMsg *m = NULL;
    assert_int_equal(natsMsg_Create(&m, "seda.S.in", NULL, "{}", 2),
                     NATS_OK);
    natsMsgHeader_Set(m, "tenant", "acme");
    natsMsgHeader_Set(m, "Nats-Msg-Id", "theirs");
    struct rw_in in;
    read_ok(m, &in);
    assert_string_equal(in.env.id, "theirs");   /* its Nats-Msg-Id */
    assert_null(in.env.origin);
    assert_null(in.env.sender);
    assert_null(in.env.content_type);
    assert_int_equal(in.env.priority, SEDA_PRIO_NORMAL);
    assert_int_equal(in.env.attempts, 1);
    assert_int_equal(in.env.rhop, 1);
    assert_int_equal(in.env.nslip, 0);
    assert_int_equal(in.nh, 1);             /* Nats-* is not a user's */
    assert_string_equal(in_header(&in, "tenant"), "acme");
    assert_int_equal(in.env.plen, 2);
    seda__rw_in_free(&in);
    natsMsg_Destroy(m);
}

/* A foreign message's id: its Seda-Id, else its Nats-Msg-Id when that
 * fits an id, else <stream>:<sequence>. */
static void test_wire_foreign_id_from_nats_msg_id(void **state)
{
    (void)state;
    char big[SEDA_ID_MAX + 8];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    const struct { const char *seda_id, *msg_id, *want; } c[] = {
        { NULL, NULL, "S:1" },
        { NULL, "order-42", "order-42" },
        { "mine", "order-42", "mine" },
        { NULL, "", "S:1" },
        { NULL, big, "S:1" },               /* too long for an id */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        natsMsg *m = NULL;
        assert_int_equal(natsMsg_Create(&m, "seda.S.in", NULL, "{}", 2),
                         NATS_OK);
        if (c[i].seda_id)
            natsMsgHeader_Set(m, "Seda-Id", c[i].seda_id);
        if (c[i].msg_id)
            natsMsgHeader_Set(m, "Nats-Msg-Id", c[i].msg_id);
        struct rw_in in;
        read_ok(m, &in);
        assert_string_equal(in.env.id, c[i].want);
        seda__rw_in_free(&in);
        natsMsg_Destroy(m);
    }
}

/* User headers: plain when NATS carries them exactly and no key clashes
 * in cnats's map, else in Seda-Header; all come back unchanged. */
static void test_wire_user_headers_plain_or_packed(void **state)
{
    (void)state;
    char all[256];
    for (int c = 1; c < 256; c++)
        all[c - 1] = (char)c;
    all[255] = '\0';
    static const char *plain[] = {
        "tenant", "acme", "x-trace", "0af7651916cd43dd8448eb211c80319c",
        "a", "1", "utf8", "h\xc3\xa9llo w\xc3\xb6rld",
    };
    const char *packed[] = {
        "abc", "2",                 /* "a" begins it: cnats would mix them */
        "tenantXY", "3",
        "Seda", "4",                /* a prefix of Seda-Id */
        "Seda-Id", "forged",        /* reserved */
        "content-type", "text/x",
        "with space", "5", "colon:key", "6",
        "empty", "", "lead", " x", "trail", "x\t", "crlf",
        "a\r\nInjected: yes", "bytes", all, "Nats-Expected-Stream", "x",
        "", "empty key",
    };
    size_t np = sizeof plain / sizeof *plain / 2;
    size_t nk = sizeof packed / sizeof *packed / 2;
    const char *hdr[64];
    for (size_t i = 0; i < np; i++)
        hdr[2 * i] = plain[2 * i], hdr[2 * i + 1] = plain[2 * i + 1];
    for (size_t i = 0; i < nk; i++)
        hdr[2 * (np + i)] = packed[2 * i],
        hdr[2 * (np + i) + 1] = packed[2 * i + 1];
    struct rw_env e = { .id = "i", .kind = 0, .attempts = 1, .rhop = 1 };
    natsMsg *m = NULL;
    assert_int_equal(seda__rw_msg_new(&m, "s", NULL, "i", &e,
                                      (int)(np + nk), hdr), 0);
    for (size_t i = 0; i < np; i++) {
        const char *v = NULL;
        assert_int_equal(natsMsgHeader_Get(m, plain[2 * i], &v), NATS_OK);
        assert_string_equal(v, plain[2 * i + 1]);
    }
    const char **vals = NULL;
    int nv = 0;
    assert_int_equal(natsMsgHeader_Values(m, "Seda-Header", &vals, &nv),
                     NATS_OK);
    assert_int_equal(nv, (int)nk);
    for (int i = 0; i < nv; i++)
        for (const char *p = vals[i]; *p; p++)  /* printable, no blanks */
            assert_true(*p > ' ' && *p < 0x7f);
    free((void *)vals);
    struct rw_in in;
    read_ok(m, &in);
    assert_int_equal(in.nh, (int)(np + nk));
    for (size_t i = 0; i < np + nk; i++) {
        const char *got = in_header(&in, hdr[2 * i]);
        if (!got)
            fail_msg("header '%s' lost", hdr[2 * i]);
        assert_string_equal(got, hdr[2 * i + 1]);
    }
    seda__rw_in_free(&in);
    natsMsg_Destroy(m);
}

static void test_wire_build_refuses_bad_fields(void **state)
{
    (void)state;
    static const char *const bad_slip[] = { "ok", "not a name" };
    static const char *const wild[] = { "nats:a.*" };
    struct rw_env good = { .id = "x", .attempts = 1, .rhop = 1 };
    struct rw_env e;
    natsMsg *m = NULL;
#define REFUSED(mod) do { e = good; mod; \
        assert_int_equal(seda__rw_msg_new(&m, "s", NULL, "x", &e, 0, NULL), \
                         SEDA_EINVAL); assert_null(m); } while (0)
    REFUSED(e.id = "");
    REFUSED(e.priority = 3);
    REFUSED(e.attempts = 0);
    REFUSED(e.attempts = 65536);
    REFUSED(e.rhop = 0);
    REFUSED((e.nslip = 2, e.slip = bad_slip));
    REFUSED((e.nslip = 1, e.slip = wild));
    REFUSED(e.kind = 256);
#undef REFUSED
}

/* A foreign message with a bad Seda-* header is refused, naming it. */
static void test_wire_bad_metadata_named(void **state)
{
    (void)state;
    static const char *const cases[][3] = {
        { "Seda-Slip", "ok,not a name", "Seda-Slip" },
        { "Seda-Slip", "a,,b", "Seda-Slip" },
        { "Seda-Priority", "urgent", "Seda-Priority" },
        { "Seda-Attempts", "0", "Seda-Attempts" },
        { "Seda-Attempts", "1x", "Seda-Attempts" },
        { "Seda-Hop", "-1", "Seda-Hop" },
        { "Seda-Id", "bad%zz", "Seda-Id" },
        { "Seda-Sender", "bad%0", "Seda-Sender" },
        { "Seda-Header", "no-equals", "Seda-Header" },
        { "Seda-Header", "k=%00", "Seda-Header" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        natsMsg *m = NULL;
        assert_int_equal(natsMsg_Create(&m, "s", NULL, "x", 1), NATS_OK);
        natsMsgHeader_Set(m, cases[i][0], cases[i][1]);
        struct rw_in in;
        char err[200] = "";
        assert_int_equal(seda__rw_msg_read(m, "S:1", &in, err, sizeof err),
                         -1);
        if (!strstr(err, cases[i][2]))
            fail_msg("%s: %s: error '%s' does not name it", cases[i][0],
                     cases[i][1], err);
        seda__rw_in_free(&in);
        natsMsg_Destroy(m);
    }
}

/* A Seda-Slip of 5000 valid hops is refused for its length, said as such
 * (it was "'<a hop>' is not a stage name"). */
static void test_wire_long_slip_named_for_its_length(void **state)
{
    (void)state;
    size_t n = 5000;
    char *slip = malloc(n * 6 + 1);
    assert_non_null(slip);
    char *w = slip;
    for (size_t i = 0; i < n; i++)
        w += sprintf(w, "%styped", i ? "," : "");
    natsMsg *m = NULL;
    assert_int_equal(natsMsg_Create(&m, "s", NULL, "x", 1), NATS_OK);
    natsMsgHeader_Set(m, "Seda-Slip", slip);
    struct rw_in in;
    char err[200] = "";
    assert_int_equal(seda__rw_msg_read(m, "S:1", &in, err, sizeof err), -1);
    if (!strstr(err, "more than 4096 hops"))
        fail_msg("error '%s' does not name the hop count", err);
    assert_null(strstr(err, "is not a stage name"));
    seda__rw_in_free(&in);
    natsMsg_Destroy(m);
    /* 4096 hops are fine. */
    slip[4096 * 6 - 1] = '\0';
    assert_int_equal(natsMsg_Create(&m, "s", NULL, "x", 1), NATS_OK);
    natsMsgHeader_Set(m, "Seda-Slip", slip);
    assert_int_equal(seda__rw_msg_read(m, "S:1", &in, err, sizeof err), 0);
    seda__rw_in_free(&in);
    natsMsg_Destroy(m);
    free(slip);
}

static void test_wire_content_types(void **state)
{
    (void)state;
    assert_int_equal(seda__rw_type_kind("application/x-seda"), 1);
    assert_int_equal(seda__rw_type_kind("application/octet-stream"), 0);
    assert_int_equal(seda__rw_type_kind("Application/Octet-Stream; x=1"), 0);
    assert_int_equal(seda__rw_type_kind("application/json"), -1);
    assert_int_equal(seda__rw_type_kind(NULL), -1);
    assert_string_equal(seda__rw_kind_type(0), "application/octet-stream");
    assert_string_equal(seda__rw_kind_type(1), "application/x-seda");
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

static void test_wire_values_escape_round_trip(void **state)
{
    (void)state;
    static const char *const samples[] = {
        "", "plain", "with space", " lead", "trail ", "crlf\r\nx: y",
        "percent%41", "h\xc3\xa9llo", "\x01\x7f", "%",
    };
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        struct rbuf e = { 0 }, u = { 0 };
        assert_int_equal(seda__rw_val_escape(&e, samples[i]), 0);
        const char *v = (const char *)e.p;
        assert_true(seda__rw_val_plain(v));
        assert_int_equal(seda__rw_val_unescape(&u, v), 0);
        assert_string_equal((const char *)u.p, samples[i]);
        seda__rbuf_free(&e);
        seda__rbuf_free(&u);
    }
    struct rbuf u = { 0 };
    assert_int_equal(seda__rw_val_unescape(&u, "bad%zz"), -1);
    assert_int_equal(seda__rw_val_unescape(&u, "end%"), -1);
    assert_int_equal(u.len, 0);
    seda__rbuf_free(&u);
}

/* cnats's library state (its message functions need it). */
static int group_setup(void **state)
{
    (void)state;
    return nats_Open(-1) == NATS_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    nats_Close();
    return 0;
}

/* remote.reach: which patterns are valid, and what each matches. */
static void test_wire_reach_patterns(void **state)
{
    (void)state;
    static const char *const good[] = { "a", "results.*", "x.>", "*.b.*",
                                        ">", "a-b_c:d.e" };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        assert_true(seda_remote_reach_valid(good[i]));
    static const char *const bad[] = { "", "a..b", ".a", "a.", "a.>.b",
                                       "a.*x", "a b", "a>", NULL };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(seda_remote_reach_valid(bad[i]));
    assert_true(seda__reach_match("results.*", "results.ok"));
    assert_false(seda__reach_match("results.*", "results.ok.more"));
    assert_false(seda__reach_match("results.*", "results"));
    assert_true(seda__reach_match("x.>", "x.a"));
    assert_true(seda__reach_match("x.>", "x.a.b.c"));
    assert_false(seda__reach_match("x.>", "x"));
    assert_false(seda__reach_match("x.>", "y.a"));
    assert_true(seda__reach_match("*.b.*", "a.b.c"));
    assert_false(seda__reach_match("*.b.*", "a.c.c"));
    assert_true(seda__reach_match("a.b", "a.b"));
    assert_false(seda__reach_match("a.b", "a.bc"));
    assert_false(seda__reach_match("a.bc", "a.b"));
    assert_false(seda__reach_match("a.b", "a.b.c"));
    assert_true(seda__reach_match(">", "anything.at.all"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_message_round_trip),
        cmocka_unit_test(test_wire_foreign_message_gets_defaults),
        cmocka_unit_test(test_wire_foreign_id_from_nats_msg_id),
        cmocka_unit_test(test_wire_user_headers_plain_or_packed),
        cmocka_unit_test(test_wire_build_refuses_bad_fields),
        cmocka_unit_test(test_wire_bad_metadata_named),
        cmocka_unit_test(test_wire_long_slip_named_for_its_length),
        cmocka_unit_test(test_wire_content_types),
        cmocka_unit_test(test_wire_completion_round_trip),
        cmocka_unit_test(test_wire_values_escape_round_trip),
        cmocka_unit_test(test_wire_reach_patterns),
    };
    return cmocka_run_group_tests_name("wire", tests, group_setup,
                                       group_teardown);
}
