#!/bin/sh
# make install (into a DESTDIR): seda-lua, seda.so, seda.h, seda_lua.h,
# seda_remote.h, libseda.a, libseda.so (with its soname links),
# libsedalua.a, libsedaremote.a, seda.pc, seda-lua.pc, the seda.test
# module, the man page, docs/reference.md and docs/wire.md land under
# PREFIX (the
# steps docs/c-api.md shows: make install DESTDIR, then cc with
# pkg-config seda and seda-lua); the
# installed seda-lua runs a script, the stock lua5.4 loads the installed
# seda.so (and seda.test) from its default module path layout, `man`
# finds the page, a C program on the core builds with a plain
# `pkg-config --cflags --libs seda` (libseda.so) and runs, and a C
# program with a remote stage builds with `pkg-config seda-lua`.  From a
# clean clone of this commit: the staged tree alone builds a C program
# embedding the Lua host with `pkg-config seda-lua`; make clean needs no
# dependency check, and the flags are read only after scripts/deps.sh
# ran.
. "$(dirname "$0")/lib.sh"

FILES="bin/seda-lua lib/lua/5.4/seda.so include/seda.h include/seda_lua.h
       include/seda_remote.h lib/libseda.a lib/libsedalua.a
       lib/libsedaremote.a lib/pkgconfig/seda.pc lib/pkgconfig/seda-lua.pc
       lib/libseda.so.0.1.0 lib/libseda.so.0 lib/libseda.so
       share/lua/5.4/seda/test.lua share/man/man1/seda-lua.1
       share/doc/seda-lua/reference.md share/doc/seda-lua/wire.md"
R="$D/root"
out=$(make -s ${V:+V=$V} install DESTDIR="$R" PREFIX=/usr/local 2>&1)
check "make install succeeds ($out)" [ $? = 0 ]
for f in $FILES; do
    check "installed $f" [ -s "$R/usr/local/$f" ]
done
check "installed seda-lua is executable" [ -x "$R/usr/local/bin/seda-lua" ]
printf '%s\n' \
    'local seda = require "seda"' \
    'local bus = seda.bus{ workers = 1 }' \
    'bus:stage{ name = "s", handler = function(env) seda.shared:incr("n") end }' \
    'for i = 1, 5 do bus:publish("s", i) end' \
    'assert(bus:wait(10))' \
    'print("n=" .. seda.shared:get("n"))' >"$D/s.lua"
out=$("$R/usr/local/bin/seda-lua" "$D/s.lua" 2>&1)
check "the installed seda-lua runs a script ($out)" contains "$out" "n=5"
# Sanitizer builds of seda.so cannot load into the uninstrumented lua5.4.
if [ -z "${V:-}" ] || [ "${V:-}" = release ]; then
    out=$(LUA_CPATH="$R/usr/local/lib/lua/5.4/?.so" lua5.4 "$D/s.lua" 2>&1)
    check "lua5.4 loads the installed seda.so ($out)" contains "$out" "n=5"
    out=$(LUA_CPATH="$R/usr/local/lib/lua/5.4/?.so" \
          LUA_PATH="$R/usr/local/share/lua/5.4/?.lua" lua5.4 -e '
          local T = require "seda.test"
          local r = T.call(function(env) env.payload = env.payload + 1 end, 41)
          print("seda.test " .. tostring(r.ok) .. " " .. r.payload)' 2>&1)
    check "lua5.4 requires the installed seda.test ($out)" \
        [ "$out" = "seda.test true 42" ]
fi
check "the libseda.so links are libseda.so -> .so.0 -> .so.0.1.0" \
    [ "$(readlink "$R/usr/local/lib/libseda.so")" = libseda.so.0 ] &&
    [ "$(readlink "$R/usr/local/lib/libseda.so.0")" = libseda.so.0.1.0 ]
out=$(readelf -d "$R/usr/local/lib/libseda.so.0.1.0" 2>&1)
check "libseda.so's soname is libseda.so.0" \
    contains "$out" "Library soname: [libseda.so.0]"
check "... and it carries its own dependencies (sqlite3)" \
    contains "$out" "libsqlite3.so"
out=$(MANPATH="$R/usr/local/share/man" man -w seda-lua 2>&1)
check "man seda-lua finds the installed page ($out)" \
    [ "$out" = "$R/usr/local/share/man/man1/seda-lua.1" ]
out=$(MANPATH="$R/usr/local/share/man" MANWIDTH=80 man seda-lua 2>/dev/null)
check "... which renders" contains "$out" "seda-lua - run a staged message bus"

# A C program on the core, built with a plain pkg-config (no --static):
# it links libseda.so, and runs against the staged tree.
cat >"$D/core.c" <<'C'
#include <stdatomic.h>
#include <stdio.h>
#include <seda.h>

static atomic_int seen;

static bool consume(seda_env_t *env, void *ud)
{
    (void)env; (void)ud;
    atomic_fetch_add(&seen, 1);
    return true;
}

int main(void)
{
    seda_bus_t *bus;
    if (seda_bus_new(NULL, &bus) != 0)
        return 1;
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "s";
    seda_stage_t *st;
    char err[256];
    if (seda_stage_add(bus, &so, &st, err, sizeof err) != 0 ||
        seda_stage_consume(st, consume, NULL) < 0)
        return 1;
    for (int i = 0; i < 10; i++)
        if (seda_publish(bus, "s", "x", 1, NULL) != 0)
            return 1;
    int rc = seda_bus_wait_idle(bus, 10);
    printf("core %s seen=%d\n", SEDA_VERSION, atomic_load(&seen));
    seda_bus_free(bus);
    return rc;
}
C
PCP="$R/usr/local/lib/pkgconfig"
flags=$(PKG_CONFIG_PATH="$PCP" pkg-config --cflags --libs seda 2>&1)
check "pkg-config --libs seda is the core alone ($flags)" \
    sh -c "printf '%s' '$flags' | grep -q -- '-lseda' &&
           ! printf '%s' '$flags' | grep -q -- 'lua'"
check "... and seda.pc requires no lua5.4" \
    sh -c "! grep -q lua5.4 '$PCP/seda.pc'"
if [ -z "${V:-}" ] || [ "${V:-}" = release ]; then
    out=$(cc "$D/core.c" -o "$D/core" $flags 2>&1)
    check "a C program builds with a plain pkg-config --libs seda ($out)" \
        [ -x "$D/core" ]
    out=$(readelf -d "$D/core" 2>&1)
    check "... linked to libseda.so.0" contains "$out" "[libseda.so.0]"
    out=$(LD_LIBRARY_PATH="$R/usr/local/lib" "$D/core" 2>&1)
    check "... and runs against the staged tree ($out)" \
        [ "$out" = "core 0.1.0 seen=10" ]
fi
# A C program with a remote stage, built from what was installed: its
# server does not answer, so declaring says "unavailable" and why.
printf '%s\n' \
    '#include <stdio.h>' \
    '#include <seda_remote.h>' \
    'int main(void) {' \
    '    seda_bus_t *b; seda_bus_new(NULL, &b);' \
    '    seda_stage_opts so; seda_stage_opts_init(&so); so.name = "r";' \
    '    seda_remote_opts ro; seda_remote_opts_init(&ro);' \
    '    ro.url = "nats://127.0.0.1:1"; ro.connect_timeout = 0.5;' \
    '    seda_stage_t *st; char err[512];' \
    '    int rc = seda_remote_stage_add(b, &so, &ro, &st, err, sizeof err);' \
    '    printf("%s: %s\n", seda_strerror(rc), err);' \
    '    seda_bus_free(b);' \
    '    return rc == SEDA_EUNAVAIL ? 0 : 1;' \
    '}' >"$D/r.c"
if [ -z "${V:-}" ] || [ "${V:-}" = release ]; then
    out=$(cc "$D/r.c" $(PKG_CONFIG_PATH="$PCP" pkg-config --cflags --libs \
          seda-lua) -o "$D/r" 2>&1 && "$D/r" 2>&1)
    check "a C program with a remote stage builds against the install ($out)" \
        contains "$out" "unavailable: stage 'r': remote: cannot connect"
fi
out=$(make -s ${V:+V=$V} uninstall DESTDIR="$R" PREFIX=/usr/local 2>&1)
check "make uninstall succeeds ($out)" [ $? = 0 ]
for f in $FILES; do
    check "uninstalled $f" [ ! -e "$R/usr/local/$f" ]
done

# ---- from a clean clone ----
ROOT=$(git rev-parse --show-toplevel 2>/dev/null)
if [ -z "$ROOT" ]; then
    echo "skip $NAME: not in a git checkout (the clean-clone part)"
    finish
fi
COMMIT=$(git -C "$ROOT" rev-parse HEAD)
C="$D/clone"
git clone -q "$ROOT" "$C" && git -C "$C" checkout -q "$COMMIT"
check "a clean clone of $COMMIT" [ -f "$C/Makefile" ]
out=$(cd "$C" && make clean 2>&1)
check "make clean in a clone never built ($out)" [ $? = 0 ]
# make clean runs no dependency check: it works with a deps.sh that fails.
cp "$C/scripts/deps.sh" "$D/deps.sh.orig"
printf '#!/bin/sh\necho "deps.sh ran" >&2\nexit 1\n' >"$C/scripts/deps.sh"
out=$(cd "$C" && make clean 2>&1)
check "make clean does not run scripts/deps.sh ($out)" \
    sh -c "[ $? = 0 ] && ! printf '%s' '$out' | grep -q 'deps.sh ran'"
out=$(cd "$C" && make -s 2>&1)
check "a build stops when scripts/deps.sh fails ($out)" \
    contains "$out" "could not install the build dependencies"
check "... leaving no flags file" [ ! -e "$C/build/config.mk" ]
# The flags are read after deps.sh: a pkg-config that works only once
# deps.sh has run (as on a fresh machine, where it installs the packages).
printf '#!/bin/sh\n[ -e "%s" ] || { echo "pkg-config before deps.sh" >&2; exit 1; }\nexec pkg-config "$@"\n' \
    "$D/deps-ran" >"$D/pkg-config"
chmod +x "$D/pkg-config"
printf '#!/bin/sh\ntouch "%s"\nexec sh "%s" "$@"\n' "$D/deps-ran" \
    "$D/deps.sh.orig" >"$C/scripts/deps.sh"
out=$(cd "$C" && make -s -j2 ${V:+V=$V} PKG_CONFIG="$D/pkg-config" \
      install DESTDIR="$D/stage" PREFIX=/usr/local 2>&1)
check "make install from the clean clone ($out)" [ $? = 0 ]
check "... read the flags after scripts/deps.sh ran" \
    grep -q -- "-I/usr/include/lua5.4" "$C/build/config.mk"
# Quiet build lines; V=1 (release) or VERBOSE=1 shows the commands.
touch "$C/src/core/clock.c"
out=$(cd "$C" && make ${V:+V=$V} PKG_CONFIG="$D/pkg-config" 2>&1)
check "a build names each file in one short line ($out)" \
    sh -c "printf '%s' '$out' | grep -q '^  CC *src/core/clock.c\$' &&
           ! printf '%s' '$out' | grep -q -- '-c src/core/clock.c'"
touch "$C/src/core/clock.c"
if [ -z "${V:-}" ] || [ "${V:-}" = release ]; then verbose="V=1"
else verbose="V=$V VERBOSE=1"; fi
out=$(cd "$C" && make $verbose PKG_CONFIG="$D/pkg-config" 2>&1)
check "$verbose shows the commands ($out)" contains "$out" "-c src/core/clock.c"
S="$D/stage/usr/local"
for f in $FILES; do
    check "staged $f" [ -s "$S/$f" ]
done
# A C program embedding the Lua host, built against the staged tree with
# pkg-config alone; it drives callbacks and a timer with the host API.
cat >"$D/host.c" <<'C'
#include <poll.h>
#include <stdio.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <seda_lua.h>

static const char script[] =
    "local seda = require 'seda'\n"
    "BUS = seda.bus{ workers = 1 }\n"
    "BUS:stage{ name = 's', handler = function(env) env.payload = env.payload * 2 end }\n"
    "SUM, TICKED = 0, false\n"
    "for i = 1, 5 do BUS:publish('s', i, { on_complete = function(env)\n"
    "  SUM = SUM + env.payload end }) end\n"
    "seda.timer(0.01, function() TICKED = true end)\n";

int main(void)
{
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    luaL_requiref(L, "seda", luaopen_seda, 0);
    lua_pop(L, 1);
    if (luaL_dostring(L, script) != LUA_OK) {
        fprintf(stderr, "%s\n", lua_tostring(L, -1));
        return 1;
    }
    for (int turn = 0; turn < 2000; turn++) {
        lua_getglobal(L, "SUM");
        lua_getglobal(L, "TICKED");
        int done = lua_tointeger(L, -2) == 30 && lua_toboolean(L, -1);
        lua_pop(L, 2);
        if (done)
            break;
        struct pollfd p = { seda_lua_wakefd(L), POLLIN, 0 };
        double t = seda_lua_next_timer(L);
        poll(&p, 1, t < 0 || t > 0.01 ? 10 : (int)(t * 1000) + 1);
        seda_lua_run_pending(L);
    }
    lua_getglobal(L, "SUM");
    lua_getglobal(L, "TICKED");
    printf("embedded sum=%d ticked=%d\n", (int)lua_tointeger(L, -2),
           lua_toboolean(L, -1));
    luaL_dostring(L, "BUS:shutdown()");
    lua_close(L);
    return 0;
}
C
flags=$(PKG_CONFIG_PATH="$S/lib/pkgconfig" pkg-config --cflags --libs seda-lua 2>&1)
check "pkg-config finds the staged seda-lua.pc ($flags)" \
    sh -c "printf '%s' '$flags' | grep -q 'lib/libsedalua\.a .*lib/libsedaremote\.a .*lib/libseda\.a'"
check "... with its requirements (sqlite3)" contains "$flags" "-lsqlite3"
check "... and libnats (remote stages)" contains "$flags" "-lnats"
check "... and lua5.4" contains "$flags" "-llua5.4"
san=""
case "${V:-release}" in
    asan) san="-fsanitize=address,undefined" ;;
    tsan) san="-fsanitize=thread" ;;
esac
out=$(cc -std=c11 -D_POSIX_C_SOURCE=200809L $san "$D/host.c" -o "$D/host" $flags 2>&1)
check "a C program embedding the Lua host builds from the staged tree ($out)" \
    [ -x "$D/host" ]
out=$("$D/host" 2>&1)
check "... and runs: callbacks and a timer through the host API ($out)" \
    [ "$out" = "embedded sum=30 ticked=1" ]
finish
