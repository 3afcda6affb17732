# wsync - weight synchronization as small Unix programs.
# `make` builds libwsync and the programs (a release, in BUILD); `make check`
# runs every test; `make check-long` the long ones (crashes, load, valgrind,
# network faults); `make demo` runs the main job. SANITIZE=1 builds with ASan
# and UBSan. The tests run against a test build beside the release, in
# BUILD-test (build/cc-test, build/san-test): only it has the library's
# test-only fault hooks (WSYNC_TEST_CRASH_AT, WSYNC_TEST_FLIP_GET).

CC       ?= cc
PREFIX   ?= /usr/local
PKGS     := libzmq msgpack libxxhash jansson libsodium libzstd
# OpenSSL's headers only: libwsync loads libcrypto when it first signs or
# verifies (lib/digest.c); the benches that time OpenSSL itself link it.
CRYPTO   := libcrypto
SECONDS  ?= 30

ifeq ($(SANITIZE),1)
BUILD    ?= build/san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else
BUILD    ?= build/$(notdir $(CC))
SANFLAGS :=
endif

# A build directory named *-test is a test build: the hooks are compiled in.
TEST_BUILD := $(BUILD:%-test=%)-test
ifneq ($(filter %-test,$(BUILD)),)
HOOKFLAGS := -DWSYNC_TEST_HOOKS
else
HOOKFLAGS :=
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) $(CRYPTO) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm
WFLAGS   := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS   ?= -O2 -g
ALL_CFLAGS = $(WFLAGS) $(CFLAGS) $(SANFLAGS) $(HOOKFLAGS) -D_GNU_SOURCE -fPIC -Ilib $(PKG_CFLAGS)
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

.PHONY: all deps check check-build check-long unit bats demo fuzz bench clean install install-python uninstall FORCE
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

$(BUILD)/bench/%: bench/%.c bench/*.h $(STATIC) lib/*.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(STATIC) $(PKG_LIBS) \
	    $(shell pkg-config --libs $(CRYPTO) 2>/dev/null)

# An order-only prerequisite: checks (and as root installs) packages once per build.
.PHONY: deps-ok
deps-ok:
	@scripts/deps check-or-install

# The release build as well: a test checks that it holds no test hook.
check: all
	@$(MAKE) --no-print-directory BUILD=$(TEST_BUILD) check-build
	@scripts/deps check-or-install fuzz
	@scripts/deps check-or-install torch || echo "deps: no python3-torch; the PyTorch tests skip"
	@scripts/deps check-or-install python || echo "deps: no pytest or promtool; their tests skip"
	@scripts/deps check-or-install sign || echo "deps: no minisign or signify; their tests skip"
	@BUILD=$(TEST_BUILD) SANITIZE=$(SANITIZE) tests/run

# What the tests run, in the test build (make check runs it as BUILD=$(TEST_BUILD)).
# The side-by-side harness's test runs bench/zmq_raw's floor as well, the
# delta test makes its deltas with bench/delta, and the large-update
# harness's test runs bench/update's programs.
check-build: all $(UNITS) $(BUILD)/bench/zmq_raw $(BUILD)/bench/delta $(BUILD)/bench/mkstep \
    $(BUILD)/bench/floors $(BUILD)/bench/passes

# The crash tests need the hooks: the test build. bench/hosts-fanout (the
# fanout test) makes its model with bench/mkmodel, bench/hosts-delta (the
# slow-link test) its steps with bench/mkstep.
check-long:
	@$(MAKE) --no-print-directory BUILD=$(TEST_BUILD) all $(TEST_BUILD)/bench/mkmodel \
	    $(TEST_BUILD)/bench/mkstep
	@scripts/deps check-or-install long
	@BUILD=$(TEST_BUILD) SANITIZE=$(SANITIZE) tests/run long

demo: all
	@BUILD=$(BUILD) scripts/demo

bench: all $(BENCHES)
	@BUILD=$(BUILD) QUICK=$(QUICK) bench/run

fuzz:
	@scripts/deps check-or-install fuzz
	@$(MAKE) --no-print-directory -f tests/fuzz/Makefile SECONDS=$(SECONDS)

# Where `make install` puts things: PREFIX for a system, DESTDIR for a staging
# tree (a package build), both as in the GNU coding standards.
DESTDIR  ?=
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
INCDIR   ?= $(PREFIX)/include
DATADIR  ?= $(PREFIX)/share
MANDIR   ?= $(DATADIR)/man
PCDIR    ?= $(LIBDIR)/pkgconfig
BASHDIR  ?= $(DATADIR)/bash-completion/completions
ZSHDIR   ?= $(DATADIR)/zsh/vendor-completions
FISHDIR  ?= $(DATADIR)/fish/vendor_completions.d
# Where Debian's python3 looks: /usr/lib/python3/dist-packages for its own
# packages, /usr/local/lib/python3.X/dist-packages (its version) for others.
PYVER    := $(shell /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
# VENV=DIR: a virtual environment's own site-packages instead (python3 -m venv
# --system-site-packages DIR sees Debian's numpy and torch; PEP 668 keeps pip
# out of the system's).
PYDIR    ?= $(if $(VENV),$(shell $(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))'),$(if $(filter /usr,$(PREFIX)),/usr/lib/python3,$(PREFIX)/lib/python$(PYVER))/dist-packages)
VERSION  := $(shell sed -n 's/^\#define WSYNC_VERSION "\(.*\)"/\1/p' lib/wsync.h)
PROGNAMES := $(CMD_SRC:cmd/%.c=%)
MANPAGES := $(sort $(wildcard man/*.[1-8]))
D        := $(DESTDIR)

# Programs, the library (real file, soname link, development link), header,
# pkg-config file, man pages, a completion per program in the directories
# bash-completion, zsh and fish search, and the Python package (python/wsync). Run ldconfig afterwards when installing
# into a system library directory.
# The pkg-config file is written for PREFIX: the shared library needs only
# -lwsync; a static link gets its dependencies from Libs.private (pkg-config
# --static), not from Requires.private, which would add their include paths
# (wsync.h needs none).
install: all install-python
	install -d $(D)$(BINDIR) $(D)$(LIBDIR) $(D)$(INCDIR) $(D)$(PCDIR) \
	    $(D)$(MANDIR)/man1 $(D)$(MANDIR)/man5 $(D)$(MANDIR)/man7 \
	    $(D)$(BASHDIR) $(D)$(ZSHDIR) $(D)$(FISHDIR)
	install -m 755 $(PROGS) $(D)$(BINDIR)
	install -m 755 $(SHARED) $(D)$(LIBDIR)/libwsync.so.$(VERSION)
	ln -sf libwsync.so.$(VERSION) $(D)$(LIBDIR)/libwsync.so.$(SOMAJOR)
	ln -sf libwsync.so.$(SOMAJOR) $(D)$(LIBDIR)/libwsync.so
	install -m 644 $(STATIC) $(D)$(LIBDIR)
	install -m 644 lib/wsync.h $(D)$(INCDIR)
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCDIR)' '' \
	    'Name: libwsync' \
	    'Description: neural-network weights from a trainer to workers: format, hub, clients' \
	    'Version: $(VERSION)' 'Libs: -L$${libdir} -lwsync' \
	    'Libs.private: $(PKG_LIBS)' 'Cflags: -I$${includedir}' >$(D)$(PCDIR)/libwsync.pc
	for m in $(MANPAGES); do \
		install -m 644 $$m $(D)$(MANDIR)/man$${m##*.} || exit 1; done
	install -m 644 completions/wsync.bash $(D)$(BASHDIR)/wsync
	install -m 644 completions/_wsync $(D)$(ZSHDIR)/_wsync
	install -m 644 completions/wsync.fish $(D)$(FISHDIR)/wsync.fish
	for p in $(PROGNAMES); do \
		ln -sf wsync $(D)$(BASHDIR)/$$p && \
		ln -sf wsync.fish $(D)$(FISHDIR)/$$p.fish || exit 1; done

# The Python package alone (python/wsync), copied: nothing is built, nothing
# written into the tree. It finds the programs on PATH and libwsync beside them.
install-python:
	@test -n "$(PYDIR)" || { echo "install-python: no site-packages in $(VENV)" >&2; exit 1; }
	install -d $(D)$(PYDIR)/wsync
	install -m 644 python/wsync/*.py python/wsync/py.typed $(D)$(PYDIR)/wsync

# Removes every file install put in place (directories it shares with others
# stay), and the Python package's directory with the bytecode python3 cached there.
uninstall:
	rm -f $(PROGNAMES:%=$(D)$(BINDIR)/%) \
	    $(D)$(LIBDIR)/libwsync.so.$(VERSION) $(D)$(LIBDIR)/libwsync.so.$(SOMAJOR) \
	    $(D)$(LIBDIR)/libwsync.so $(D)$(LIBDIR)/libwsync.a $(D)$(INCDIR)/wsync.h \
	    $(D)$(PCDIR)/libwsync.pc \
	    $(foreach m,$(MANPAGES),$(D)$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m))) \
	    $(D)$(BASHDIR)/wsync $(PROGNAMES:%=$(D)$(BASHDIR)/%) $(D)$(ZSHDIR)/_wsync \
	    $(D)$(FISHDIR)/wsync.fish $(PROGNAMES:%=$(D)$(FISHDIR)/%.fish)
	rm -rf $(D)$(PYDIR)/wsync

clean:
	rm -rf build
