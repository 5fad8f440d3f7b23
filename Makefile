# seda-lua -- GNU Make build.
#
#   make            library, seda-lua, seda.so, examples   (build/release)
#   make test       build and run every test (cmocka + Lua scripts), after
#                   make layers (the include direction between layers)
#   make asan       the same under AddressSanitizer + UBSan (+ LeakSanitizer)
#   make tsan       the same under ThreadSanitizer
#   make bench      build and run the benchmark suite
#   make fuzz       run the payload-decoder fuzzer for FUZZ_SECONDS
#   make run        build and run examples/pipeline.lua
#   make install    seda-lua, seda.so, seda.h, libseda.a under PREFIX
#                   (/usr/local; DESTDIR for staging); make uninstall
#   make clean
#
# Dependencies come from pkg-config; scripts/deps.sh installs the Debian
# packages when pkg-config cannot find them.

PKG_CONFIG ?= pkg-config
LUA_PC     ?= lua5.4
V          ?= release

DEPS_OK := $(shell sh scripts/deps.sh >&2 && echo ok)
ifneq ($(DEPS_OK),ok)
$(error scripts/deps.sh could not install the build dependencies)
endif

LUA_CFLAGS    := $(shell $(PKG_CONFIG) --cflags $(LUA_PC))
LUA_LIBS      := $(shell $(PKG_CONFIG) --libs $(LUA_PC))
CMOCKA_CFLAGS := $(shell $(PKG_CONFIG) --cflags cmocka)
CMOCKA_LIBS   := $(shell $(PKG_CONFIG) --libs cmocka)

CC      ?= cc
WARN    := -Wall -Wextra -Wshadow -Wundef -Wstrict-prototypes \
           -Wmissing-prototypes -Wwrite-strings
BASE    := -std=c11 -D_POSIX_C_SOURCE=200809L -D_GNU_SOURCE -pthread \
           -fPIC -MMD -MP -Iinclude -Isrc $(WARN) $(LUA_CFLAGS) \
           $(shell $(PKG_CONFIG) --cflags sqlite3)
ifeq ($(CI),true)
BASE    += -Werror
endif

ifeq ($(V),release)
OPT     := -O2 -g
else ifeq ($(V),debug)
OPT     := -O0 -g -DSEDA_DEBUG
else ifeq ($(V),asan)
OPT     := -O1 -g -fno-omit-frame-pointer -DSEDA_DEBUG \
           -fsanitize=address,undefined -fno-sanitize-recover=all
else ifeq ($(V),tsan)
OPT     := -O1 -g -fno-omit-frame-pointer -DSEDA_DEBUG -fsanitize=thread
else
$(error unknown variant V=$(V))
endif

CFLAGS  += $(BASE) $(OPT)
LDFLAGS += -pthread $(filter -fsanitize=%,$(OPT))
LDLIBS  += -lm

B       := build/$(V)

# The layers (see src/*/README.md and `make layers`): core <- durable <-
# lua <- cli.  libseda.a is core + durable (the C API); libsedalua.a the
# Lua binding; seda-lua the program.
CORE_SRC    := $(wildcard src/core/*.c)
DURABLE_SRC := $(wildcard src/durable/*.c)
LUA_SRC     := $(wildcard src/lua/*.c)
CLI_SRC     := $(filter-out src/cli/main.c,$(wildcard src/cli/*.c))
CORE_OBJ    := $(CORE_SRC:src/%.c=$(B)/src/%.o) $(DURABLE_SRC:src/%.c=$(B)/src/%.o)
LUA_OBJ     := $(LUA_SRC:src/%.c=$(B)/src/%.o)
CLI_OBJ     := $(CLI_SRC:src/%.c=$(B)/src/%.o)
READLINE_LIBS := $(shell $(PKG_CONFIG) --libs readline)
LIBSEDA  := $(B)/libseda.a
LIBSLUA  := $(B)/libsedalua.a

TEST_SRC := $(wildcard tests/*/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(B)/tests/%)
SEDA_LUA := $(B)/seda-lua
SEDA_SO  := $(B)/seda.so

EXAMPLES := $(patsubst examples/%.c,$(B)/examples/%,$(wildcard examples/*.c))

ALL := $(LIBSEDA) $(EXAMPLES)
ifneq ($(LUA_SRC),)
ALL += $(LIBSLUA)
endif
ALL += $(SEDA_LUA) $(SEDA_SO)

.PHONY: all test check asan tsan bench fuzz fuzz-quick run install uninstall clean layers
.SECONDARY:
FUZZ_SECONDS ?= 60
all: $(ALL)

$(B)/src/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests $(CMOCKA_CFLAGS) -c $< -o $@

$(B)/examples/%: examples/%.c $(LIBSEDA)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< $(LDFLAGS) $(LIBSEDA) $(shell $(PKG_CONFIG) --libs sqlite3) $(LDLIBS) -o $@

$(B)/bench/%.o: bench/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIBSEDA): $(CORE_OBJ)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

$(LIBSLUA): $(LUA_OBJ)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

$(SEDA_LUA): $(B)/src/cli/main.o $(CLI_OBJ) $(LIBSLUA) $(LIBSEDA)
	$(CC) $(LDFLAGS) -rdynamic $^ $(LUA_LIBS) $(shell $(PKG_CONFIG) --libs sqlite3) $(READLINE_LIBS) $(LDLIBS) -o $@

# lua/seda/cli.lua and pretty.lua are embedded into seda-lua (.incbin in
# src/cli/cli_lua.c).
$(B)/src/cli/cli_lua.o: src/cli/cli_lua.c lua/seda/cli.lua lua/seda/pretty.lua
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DCLI_LUA_FILE='"$(abspath lua/seda/cli.lua)"' \
	    -DCLI_PRETTY_FILE='"$(abspath lua/seda/pretty.lua)"' -c $< -o $@

$(SEDA_SO): $(LUA_OBJ) $(CORE_OBJ)
	$(CC) $(LDFLAGS) -shared $^ $(shell $(PKG_CONFIG) --libs sqlite3) $(LDLIBS) -o $@

$(B)/tests/%: $(B)/tests/%.o $(filter $(LIBSLUA),$(ALL)) $(LIBSEDA)
	$(CC) $(LDFLAGS) $^ $(CMOCKA_LIBS) $(LUA_LIBS) $(shell $(PKG_CONFIG) --libs sqlite3) $(LDLIBS) -o $@

# Run every cmocka binary (each under a 120 s timeout), then the Lua
# scripts; stop at the first failure.
test: layers all $(TEST_BIN)
	@V=$(V) B=$(B) sh scripts/run-tests.sh $(TEST_BIN) $(EXAMPLES)

# The layers depend on each other one way (core <- durable <- lua <- cli):
# fails on an include that runs upward; the self-test plants some.
layers:
	@sh scripts/layers.sh
	@sh scripts/layers.sh --self-test

# The decoder fuzzer: libFuzzer under clang (installed on demand).
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) sh scripts/fuzz.sh

fuzz-quick:
	sh scripts/fuzz.sh --quick

check: test asan tsan

asan:
	$(MAKE) V=asan test

tsan:
	$(MAKE) V=tsan test

run: all
	$(SEDA_LUA) examples/pipeline.lua

# The stock interpreter finds seda.so in $(PREFIX)/lib/lua/5.4 (on its
# default package.cpath for PREFIX=/usr/local).
PREFIX ?= /usr/local
LUA_CMOD_DIR := $(PREFIX)/lib/lua/5.4

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LUA_CMOD_DIR) \
	    $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib
	install -m 0755 $(SEDA_LUA) $(DESTDIR)$(PREFIX)/bin/seda-lua
	install -m 0755 $(SEDA_SO) $(DESTDIR)$(LUA_CMOD_DIR)/seda.so
	install -m 0644 include/seda.h $(DESTDIR)$(PREFIX)/include/seda.h
	install -m 0644 $(LIBSEDA) $(DESTDIR)$(PREFIX)/lib/libseda.a

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/seda-lua $(DESTDIR)$(LUA_CMOD_DIR)/seda.so \
	    $(DESTDIR)$(PREFIX)/include/seda.h $(DESTDIR)$(PREFIX)/lib/libseda.a

clean:
	rm -rf build

-include $(wildcard $(B)/src/*/*.d $(B)/tests/*/*.d $(B)/bench/*.d)

# ---- bench ----
# make bench: build the benchmark program (bench/bench*.c at -O2, linked
# with the release libraries) and run the full suite through bench/run.
# bench/run --help lists the options (--config, --handler, --quick).
# bench/: the driver (bench.c), the harness (harness.c, recorder.c,
# inst.c) and one file per config; codec_loop.c is a standalone tool.
BENCH_SRC := $(filter-out bench/codec_loop.c,$(wildcard bench/*.c))
BENCH_OBJ := $(BENCH_SRC:bench/%.c=$(B)/bench/%.o)
BENCH_BIN := $(B)/bench/seda-bench

$(BENCH_BIN): $(BENCH_OBJ) $(LIBSLUA) $(LIBSEDA)
	$(CC) $(LDFLAGS) $^ $(LUA_LIBS) $(shell $(PKG_CONFIG) --libs sqlite3) $(LDLIBS) -o $@

# bench/run builds $(BENCH_BIN) itself (make -s, output on stderr), so that
# stdout carries nothing but the JSON rows.
bench:
	@V=$(V) BENCH_BIN=$(BENCH_BIN) sh bench/run
