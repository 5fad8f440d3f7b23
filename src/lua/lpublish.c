/* SPDX-License-Identifier: MIT */
/*
 * lpublish.c -- publishing from Lua (bus:publish, bus:publish_many,
 * seda.publish in handlers).
 *
 * DESIGN
 *   Options are checked before anything is encoded or admitted (misuse
 *   raises, naming the option); payloads are encoded into the caller's
 *   reusable buffer, then handed to the C API, whose refusals come back
 *   as false, reason.  publish_many encodes every payload first, then
 *   admits runs of payloads of one kind in one step each.
 *
 *   A handler's publish into a durable stage waits for its commit as a
 *   suspension (lsuspend.c): the call is suspended before publishing,
 *   the publish is queued for the journal's next group commit
 *   (seda_publish_opts.on_durable) and the coroutine yields; the
 *   journal's committer posts the call when the commit ended, and it
 *   resumes with true or false, reason.  Meanwhile the worker runs other
 *   calls, whose publishes join the same commit.  Where a call cannot be
 *   suspended (the main state, a durable or blocking handler stage, a
 *   coroutine of the handler's own) publish waits for the commit as
 *   before.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ldoor.h"
#include "lworker.h"

/* ---- publishing ---- */

static const char *const publish_keys[] = {
    "headers", "slip", "sender", "timeout", "on_complete", "id",
    "priority", "on_durable", NULL
};

/* Parse the publish options table at oidx into o.  Strings and arrays
 * that o points to are left on the stack above oidx (the caller keeps
 * them there until it has published).  Returns the stack index of the
 * on_complete function, or 0.  Raises on misuse, naming `what`. */
/* The headers option (the table at the top of the stack) as name/value
 * pointers in o; the strings stay anchored on the stack. */
static void parse_headers(lua_State *L, seda_publish_opts *o,
                          const char *what)
{
    int h = lua_gettop(L);
    if (!lua_istable(L, h))
        luaL_error(L, "%s: headers must be a table", what);
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, h)) {
        lua_pop(L, 1);
        n++;
    }
    const char **hv = lua_newuserdatauv(L, sizeof(char *) *
                                        (size_t)(2 * n + 1), 0);
    luaL_checkstack(L, 2 * n + 8, "too many headers");
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, h)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "%s: header keys must be strings", what);
        int t = lua_type(L, -1);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            luaL_error(L, "%s: headers.%s must be a string (got %s)",
                       what, lua_tostring(L, -2), luaL_typename(L, -1));
        size_t kl, vl;
        lua_pushvalue(L, -2);
        lua_pushvalue(L, -2);
        hv[2 * i] = lua_tolstring(L, -2, &kl);
        hv[2 * i + 1] = lua_tolstring(L, -1, &vl);
        if (strlen(hv[2 * i]) != kl || strlen(hv[2 * i + 1]) != vl)
            luaL_error(L, "%s: headers.%s: keys and values may not "
                       "contain NUL bytes", what, hv[2 * i]);
        lua_rotate(L, -4, 2);               /* copies under k, v */
        lua_pop(L, 1);                      /* value; key stays */
        i++;
    }
    o->headers = hv;
    o->nheaders = i;
}

static int parse_opts(lua_State *L, int oidx, seda_publish_opts *o,
                      bool main, const char *what, int *durable_idx)
{
    seda_publish_opts_init(o);
    *durable_idx = 0;
    if (lua_isnoneornil(L, oidx))
        return 0;
    luaL_checktype(L, oidx, LUA_TTABLE);
    int cb = 0;
    int found = 0;                  /* options given (non-nil), known */

    lua_getfield(L, oidx, "sender");
    if (!lua_isnil(L, -1)) {
        found++;
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: sender must be a string", what);
        o->sender = lua_tostring(L, -1);
    }
    lua_getfield(L, oidx, "timeout");
    if (!lua_isnil(L, -1)) {
        found++;
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0))
            luaL_error(L, "%s: timeout must be a number >= 0", what);
        o->timeout = lua_tonumber(L, -1);
    }
    lua_getfield(L, oidx, "id");
    if (!lua_isnil(L, -1)) {
        found++;
        size_t n;
        const char *id = lua_tolstring(L, -1, &n);
        if (lua_type(L, -1) != LUA_TSTRING || n == 0 || n >= SEDA_ID_MAX ||
            strlen(id) != n)
            luaL_error(L, "%s: id must be a non-empty string of at most %d "
                       "bytes", what, SEDA_ID_MAX - 1);
        o->id = id;
    }
    lua_getfield(L, oidx, "priority");
    if (!lua_isnil(L, -1)) {
        found++;
        const char *p = lua_tostring(L, -1);
        if (lua_type(L, -1) != LUA_TSTRING ||
            (strcmp(p, "high") != 0 && strcmp(p, "normal") != 0 &&
             strcmp(p, "low") != 0))
            luaL_error(L, "%s: priority must be \"high\", \"normal\" or "
                       "\"low\" (got %s)", what,
                       p ? p : luaL_typename(L, -1));
        o->priority = p[0] == 'h' ? SEDA_PRIO_HIGH
                    : p[0] == 'l' ? SEDA_PRIO_LOW : SEDA_PRIO_NORMAL;
    }
    lua_getfield(L, oidx, "on_complete");
    if (!lua_isnil(L, -1)) {
        found++;
        if (!lua_isfunction(L, -1))
            luaL_error(L, "%s: on_complete must be a function", what);
        if (!main)
            luaL_error(L, "%s: on_complete is only available on the main "
                       "state", what);
        cb = lua_gettop(L);
    }
    lua_getfield(L, oidx, "on_durable");
    if (!lua_isnil(L, -1)) {
        found++;
        if (!lua_isfunction(L, -1))
            luaL_error(L, "%s: on_durable must be a function", what);
        if (!main)
            luaL_error(L, "%s: on_durable is only available on the main "
                       "state (a handler's publish into a durable stage "
                       "already waits without holding its worker)", what);
        if (strcmp(what, "publish") != 0)
            luaL_error(L, "%s: on_durable is for bus:publish (one "
                       "envelope a call)", what);
        *durable_idx = lua_gettop(L);
    }
    lua_getfield(L, oidx, "slip");
    if (!lua_isnil(L, -1)) {
        found++;
        int t = lua_gettop(L);
        if (!lua_istable(L, t))
            luaL_error(L, "%s: slip must be an array of stage names", what);
        int n = (int)lua_rawlen(L, t);
        const char **slip = lua_newuserdatauv(L, sizeof(char *) *
                                              (size_t)(n + 1), 0);
        luaL_checkstack(L, n + 4, "slip too long");
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, t, i + 1);
            if (lua_type(L, -1) != LUA_TSTRING ||
                !seda__l_valid_name(lua_tostring(L, -1)))
                luaL_error(L, "%s: slip[%d] is not a valid stage name", what,
                           i + 1);
            if (!seda__l_valid_hop(lua_tostring(L, -1)))
                luaL_error(L, "%s: slip[%d] '%s' has no NATS subject "
                           "(nats:<subject>, tokens separated by single "
                           "dots)",
                           what, i + 1, lua_tostring(L, -1));
            slip[i] = lua_tostring(L, -1);      /* stays on the stack */
        }
        o->slip = n > 0 ? slip : NULL;  /* a slip without hops is none */
        o->nslip = n;
    }
    lua_getfield(L, oidx, "headers");
    if (!lua_isnil(L, -1)) {
        found++;
        parse_headers(L, o, what);
    }
    /* Every key is one of those: a typo is an error, not a silent
     * default.  Counting the keys is enough when they match (no string
     * compares on the publish path); otherwise the check names it. */
    int keys = 0;
    lua_pushnil(L);
    while (lua_next(L, oidx)) {
        lua_pop(L, 1);
        keys++;
    }
    if (keys != found)
        seda__l_check_keys(L, oidx, publish_keys, what);
    return cb;
}

/* Raises for an id given to a stage that takes none (the runtime says
 * SEDA_EINVAL: see check_id in bus.c). */
static int id_misuse(lua_State *L, const char *to)
{
    return luaL_error(L, "publish: id: stage '%s' is not durable; only "
                      "durable stages take a custom id (generated ids are "
                      "unique within the process)", to);
}

/* ---- a handler's durable publish, suspended until committed ---- */

/* pw.st: whichever of the commit's callback and the yielding call comes
 * second posts the call. */
enum { PW_PENDING, PW_FIRED, PW_ARMED };

/* A userdata on the suspended coroutine's stack, made before the call is
 * suspended (nothing may raise between suspending and yielding; it is
 * collected with the coroutine if the call is dropped at shutdown).  rc
 * is written before st turns FIRED (acq_rel); the call reads it after its
 * post (the mailbox's mutex). */
struct lpubwait {
    atomic_int st;
    int rc;
    struct lcall *call;         /* immutable once queued */
    char why[256];              /* a SEDA_ETYPE refusal's reason */
};

/* on_durable: the journal's committing thread. */
static void pubwait_done(int rc, void *ud)
{
    struct lpubwait *pw = ud;
    struct lcall *c = pw->call;
    pw->rc = rc;
    if (atomic_exchange_explicit(&pw->st, PW_FIRED, memory_order_acq_rel) ==
        PW_ARMED)
        seda__l_suspend_post(c);
}

/* The call resumed: its result.  ctx is the lpubwait's stack index. */
static int publish_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    struct lpubwait *pw = lua_touserdata(L, (int)ctx);
    if (pw->rc == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushboolean(L, 0);
    lua_pushstring(L, pw->rc == SEDA_ETYPE ? pw->why
                                           : seda_strerror(pw->rc));
    return 2;
}

/* Publish with the call c suspended (pw at idx, made before), then yield
 * until the commit ended.  Nothing here may raise. */
static int publish_suspended(lua_State *L, struct lcall *c, int idx,
                             seda_stage_t *st, const void *p, size_t len,
                             seda_publish_opts *o, seda_wbuf *wb)
{
    struct lpubwait *pw = lua_touserdata(L, idx);
    atomic_init(&pw->st, PW_PENDING);
    pw->rc = 0;
    pw->call = c;
    pw->why[0] = '\0';
    o->why = pw->why;
    o->whylen = sizeof pw->why;
    o->on_durable = pubwait_done;
    o->on_durable_ud = pw;
    int rc = seda_stage_publish(st, p, len, o);
    seda__codec_wbuf_trim(wb, SEDA_WBUF_KEEP);
    if (rc) {
        /* Refused before queueing: resume at once with the reason. */
        pw->rc = rc;
        atomic_store_explicit(&pw->st, PW_FIRED, memory_order_release);
    }
    if (atomic_exchange_explicit(&pw->st, PW_ARMED, memory_order_acq_rel) ==
        PW_FIRED)
        seda__l_suspend_post(c);
    return seda__l_suspend_yield(L, c, NULL, NULL, idx, publish_k);
}

int seda__l_publish(lua_State *L, struct lbus *lb, int first,
                    seda_wbuf *wb, struct ladmit_cache *ac, bool main)
{
    const char *to = luaL_checkstring(L, first);
    int pidx = first + 1, oidx = first + 2;
    lua_settop(L, oidx);
    seda_publish_opts o;
    char why[256];                  /* written on a SEDA_ETYPE refusal */
    why[0] = '\0';
    int duridx;
    int cbidx = parse_opts(L, oidx, &o, main, "publish", &duridx);
    o.why = why;
    o.whylen = sizeof why;
    seda_stage_t *st = seda_bus_stage(lb->bus, to);
    if (!st) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, seda_strerror(seda__l_door_lookup_error(lb->bus)));
        return 2;
    }
    if (duridx && seda_stage_durability(st) == SEDA_MEMORY)
        luaL_error(L, "publish: on_durable: stage '%s' is not durable", to);
    /* The stage's admit rule, before anything is made. */
    struct lstage *ls = seda_stage_userdata(st);
    if (ls && atomic_load_explicit(&ls->has_admit, memory_order_acquire)) {
        char rwhy[256];
        int hidx = 0;
        if (lua_istable(L, oidx) &&
            lua_getfield(L, oidx, "headers") == LUA_TTABLE)
            hidx = lua_gettop(L);
        else if (lua_istable(L, oidx))
            lua_pop(L, 1);
        if (seda__l_admit(L, ls, ac, to, pidx, hidx, o.sender, &o.priority,
                          rwhy, sizeof rwhy) != 0) {
            lua_pushboolean(L, 0);
            lua_pushstring(L, rwhy);
            return 2;
        }
    }

    const void *p;
    size_t len;
    int kind;
    char err[512];
    wb->len = 0;
    if (seda__l_encode_payload(L, pidx, wb, &p, &len, &kind, err,
                               sizeof err) != 0) {
        lua_pushboolean(L, 0);
        /* Over max_payload: the reason word, as for a C publisher. */
        lua_pushstring(L, wb->over == SEDA_WBUF_OVER_LIMIT
                              ? seda_strerror(SEDA_ETOOLARGE) : err);
        return 2;
    }
    o.kind = kind;
    if (!main && seda_stage_durability(st) != SEDA_MEMORY) {
        lua_newuserdatauv(L, sizeof(struct lpubwait), 0);
        int idx = lua_gettop(L);
        struct lcall *c = seda__l_suspend_begin(L);
        if (c)
            return publish_suspended(L, c, idx, st, p, len, &o, wb);
        lua_pop(L, 1);                  /* not suspendable: wait here */
    }
    struct lcb *cb = NULL;
    if (cbidx) {
        cb = seda__l_callback_new(L, cbidx, 1);
        o.done = seda__l_callback_on_done;
        o.done_ud = cb;
    }
    struct lcb *dcb = NULL;
    if (duridx) {
        dcb = seda__l_callback_new(L, duridx, 1);
        dcb->lb = lb;
        o.on_durable = seda__l_callback_on_durable;
        o.on_durable_ud = dcb;
    }
    if (dcb)
        atomic_fetch_add_explicit(&lb->ndurable, 1, memory_order_acq_rel);
    int rc = seda_stage_publish(st, p, len, &o);
    seda__codec_wbuf_trim(wb, SEDA_WBUF_KEEP);
    if (rc) {
        if (cb)
            seda__l_callback_release(L, cb, 1);
        if (dcb) {
            atomic_fetch_sub_explicit(&lb->ndurable, 1,
                                      memory_order_acq_rel);
            seda__l_callback_release(L, dcb, 1);
        }
        if (rc == SEDA_EINVAL && o.id)
            id_misuse(L, to);
        lua_pushboolean(L, 0);
        lua_pushstring(L, rc == SEDA_ETYPE ? why
                                           : seda_strerror(rc));
        if (rc == SEDA_ESHED) {
            /* The stage that sheds: a stage it may reach, or its own. */
            lua_pushstring(L, why[0] ? why : to);
            return 3;
        }
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

int seda__l_publish_many(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    luaL_checkstring(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    seda__l_stage_autostart(L, u->lb);
    seda__l_callback_bound(L, u->lb);
    lua_settop(L, 4);
    seda_publish_opts o;
    char why[256];                  /* written on a SEDA_ETYPE refusal */
    why[0] = '\0';
    int duridx;
    int cbidx = parse_opts(L, 4, &o, true, "publish_many", &duridx);
    o.why = why;
    o.whylen = sizeof why;
    const char *to = lua_tostring(L, 2);
    int n = (int)lua_rawlen(L, 3);
    seda_stage_t *st = seda_bus_stage(u->lb->bus, to);
    struct lstage *ls = st ? seda_stage_userdata(st) : NULL;
    bool admit = ls && atomic_load_explicit(&ls->has_admit,
                                            memory_order_acquire);
    int hidx = 0;
    if (admit && lua_istable(L, 4)) {
        if (lua_getfield(L, 4, "headers") == LUA_TTABLE)
            hidx = lua_gettop(L);
        else
            lua_pop(L, 1);
    }
    /* Admit and encode first, then one admission step per run of
     * payloads of the same kind and priority (the core takes one of each
     * per call).  A payload refused by the rule or that cannot be encoded
     * is the first refusal: those before it go. */
    const void **ps = lua_newuserdatauv(L, sizeof(void *) * (size_t)(n + 1),
                                        0);
    size_t *lens = lua_newuserdatauv(L, sizeof(size_t) * (size_t)(n + 1), 0);
    size_t *offs = lua_newuserdatauv(L, sizeof(size_t) * (size_t)(n + 1), 0);
    int *kinds = lua_newuserdatauv(L, sizeof(int) * (size_t)(n + 1), 0);
    int *prios = lua_newuserdatauv(L, sizeof(int) * (size_t)(n + 1), 0);
    luaL_checkstack(L, n + 8, "publish_many: too many payloads");
    u->wb.len = 0;
    char err[512];
    int nenc = n;                   /* payloads before the first bad one */
    int erridx = 0;                 /* its message on the stack */
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 3, i + 1);               /* stays on the stack */
        prios[i] = o.priority;
        if (admit && seda__l_admit(L, ls, &u->ac, to, lua_gettop(L), hidx,
                                   o.sender, &prios[i], err,
                                   sizeof err) != 0) {
            nenc = i;
            lua_pushstring(L, err);
            erridx = lua_gettop(L);
            break;
        }
        const void *p;
        if (seda__l_encode_payload(L, -1, &u->wb, &p, &lens[i], &kinds[i],
                                   err, sizeof err) != 0) {
            nenc = i;
            if (u->wb.over == SEDA_WBUF_OVER_LIMIT)
                lua_pushstring(L, seda_strerror(SEDA_ETOOLARGE));
            else
                lua_pushfstring(L, "payloads[%d]: %s", i + 1, err);
            erridx = lua_gettop(L);
            break;
        }
        /* wb may move while growing: keep offsets, fix pointers after. */
        offs[i] = kinds[i] == SEDA_KIND_RAW
                      ? (size_t)-1
                      : (size_t)((const unsigned char *)p - u->wb.p);
        ps[i] = p;
    }
    for (int i = 0; i < nenc; i++)
        if (offs[i] != (size_t)-1)
            ps[i] = u->wb.p + offs[i];
    struct lcb *cb = NULL;
    if (cbidx && nenc > 0) {
        /* +1: held until below. */
        cb = seda__l_callback_new(L, cbidx, nenc + 1);
        o.done = seda__l_callback_on_done;
        o.done_ud = cb;
    }
    int done = 0, rc = 0;
    while (done < nenc && rc == 0) {
        int k = done;
        while (k < nenc && kinds[k] == kinds[done] && prios[k] == prios[done])
            k++;
        o.kind = kinds[done];
        o.priority = prios[done];
        done += seda_publish_many(u->lb->bus, to, ps + done, lens + done,
                                  k - done, &o, &rc);
    }
    seda__codec_wbuf_trim(&u->wb, SEDA_WBUF_KEEP);
    if (cb)
        seda__l_callback_release(L, cb, nenc - done + 1);
    if (rc == SEDA_EINVAL && o.id)
        id_misuse(L, to);
    lua_pushinteger(L, done);
    if (rc) {
        lua_pushstring(L, rc == SEDA_ETYPE ? why
                                           : seda_strerror(rc));
        if (rc == SEDA_ESHED) {
            lua_pushstring(L, why[0] ? why : to);
            return 3;
        }
        return 2;
    }
    if (erridx) {
        lua_pushvalue(L, erridx);
        return 2;
    }
    return 1;
}
