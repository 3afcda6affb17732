# wsync - weight synchronization as small Unix programs.
# `make` builds libwsync and the programs; `make check` runs every test;
# `make check-long` the long ones (crashes, load, valgrind, network faults);
# `make demo` runs the main job. SANITIZE=1 builds with ASan and UBSan.

CC       ?= cc
PREFIX   ?= /usr/local
PKGS     := libzmq msgpack libxxhash jansson
SECONDS  ?= 30

ifeq ($(SANITIZE),1)
BUILD    ?= build/san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else
BUILD    ?= build/$(notdir $(CC))
SANFLAGS :=
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm
WFLAGS   := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS   ?= -O2 -g
ALL_CFLAGS = $(WFLAGS) $(CFLAGS) $(SANFLAGS) -D_GNU_SOURCE -fPIC -Ilib $(PKG_CFLAGS)
ALL_LDFLAGS = $(SANFLAGS) $(LDFLAGS)

LIB_SRC  := $(sort $(wildcard lib/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CMD_SRC  := $(sort $(wildcard cmd/wsync-*.c))
PROGS    := $(CMD_SRC:cmd/%.c=$(BUILD)/bin/%)
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
UNITS    := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/unit/%)
QUICK    ?= 0
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCHES  := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
SOMAJOR  := 0
STATIC   := $(BUILD)/libwsync.a
SHARED   := $(BUILD)/libwsync.so.$(SOMAJOR)

.PHONY: all deps check check-long unit bats demo fuzz bench clean FORCE
all: $(STATIC) $(SHARED) $(PROGS)

# Installs the Debian packages wsync needs when run as root; otherwise names them.
deps:
	@scripts/deps install

$(BUILD)/lib/%.o: lib/%.c lib/*.h | deps-ok
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(STATIC): $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

$(SHARED): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libwsync.so.$(SOMAJOR) $(ALL_LDFLAGS) -o $@ $^ $(PKG_LIBS)

$(BUILD)/cmd/cli.o: cmd/cli.c cmd/cli.h lib/wsync.h | deps-ok
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/bin/%: cmd/%.c $(BUILD)/cmd/cli.o $(STATIC) cmd/cli.h lib/*.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/cmd/cli.o $(STATIC) $(PKG_LIBS)

$(BUILD)/unit/%: tests/unit/%.c tests/unit/*.h $(STATIC) lib/*.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Itests/unit $(ALL_LDFLAGS) -o $@ $< $(STATIC) $(PKG_LIBS)

$(BUILD)/bench/%: bench/%.c $(STATIC) lib/*.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(STATIC) $(PKG_LIBS)

# An order-only prerequisite: checks (and as root installs) packages once per build.
.PHONY: deps-ok
deps-ok:
	@scripts/deps check-or-install

check: all $(UNITS)
	@scripts/deps check-or-install fuzz
	@BUILD=$(BUILD) SANITIZE=$(SANITIZE) tests/run

check-long: all
	@scripts/deps check-or-install long
	@BUILD=$(BUILD) SANITIZE=$(SANITIZE) tests/run long

demo: all
	@BUILD=$(BUILD) scripts/demo

bench: all $(BENCHES)
	@BUILD=$(BUILD) QUICK=$(QUICK) bench/run

fuzz:
	@scripts/deps check-or-install fuzz
	@$(MAKE) --no-print-directory -f tests/fuzz/Makefile SECONDS=$(SECONDS)

clean:
	rm -rf build
