-- seda-scm-1.rockspec: `luarocks make` in a checkout builds seda.so (the
-- `seda` module for Lua 5.4) with the project's Makefile and installs it
-- and the Lua modules meant to be required (seda.test) into the rocks
-- tree.  The Makefile finds its dependencies (Lua 5.4, SQLite, libnats,
-- libcurl) with pkg-config, installing the missing Debian packages first
-- (scripts/deps.sh).
--
--   luarocks --lua-version=5.4 make                  (as root: /usr/local)
--   luarocks --lua-version=5.4 --local make          (~/.luarocks)
rockspec_format = "3.0"
package = "seda"
version = "scm-1"
source = {
   -- Built from the checkout it sits in (`luarocks make`); there is no
   -- released archive to fetch.
   url = "git+file://.",
}
description = {
   summary = "A staged (SEDA) message bus in C whose handlers are Lua",
   detailed = [[
Stages are bounded queues drained by one shared pool of worker threads,
each worker with its own Lua state; envelopes follow a routing slip from
stage to stage, with acks, retries, dead letters and back-pressure.
require "seda" gives the bus; require "seda.test" the helpers to test a
handler without one.]],
   license = "MIT",
}
dependencies = {
   "lua >= 5.4, < 5.5",
}
build = {
   type = "make",
   -- The Makefile's own flags (pkg-config, warnings, -O2): LuaRocks'
   -- CFLAGS would replace them, so it passes none.
   build_target = "rock",
   build_variables = {},
   install_target = "install-rock",
   install_variables = {
      ROCK_LIBDIR = "$(LIBDIR)",
      ROCK_LUADIR = "$(LUADIR)",
   },
}
