#!/bin/sh
# make install (into a DESTDIR): seda-lua, seda.so, seda.h and libseda.a
# land under PREFIX; the installed seda-lua runs a script, and the stock
# lua5.4 loads the installed seda.so from its default module path layout.
. "$(dirname "$0")/lib.sh"

R="$D/root"
out=$(make -s ${V:+V=$V} install DESTDIR="$R" PREFIX=/usr/local 2>&1)
check "make install succeeds ($out)" [ $? = 0 ]
for f in bin/seda-lua lib/lua/5.4/seda.so include/seda.h lib/libseda.a; do
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
fi
out=$(make -s ${V:+V=$V} uninstall DESTDIR="$R" PREFIX=/usr/local 2>&1)
check "make uninstall succeeds ($out)" [ $? = 0 ]
for f in bin/seda-lua lib/lua/5.4/seda.so include/seda.h lib/libseda.a; do
    check "uninstalled $f" [ ! -e "$R/usr/local/$f" ]
done
finish
