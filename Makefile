# SPDX-License-Identifier: MIT
# One non-recursive Makefile for the whole tree. `make` builds everything,
# `make demo` runs the main job, `make check` every test, `make bench` the
# benchmarks. CFLAGS stays the user's; project flags go in with override.

PREFIX ?= /usr/local
B ?= build
CC ?= cc
CFLAGS ?= -O2 -g
SANITIZE ?=
# Debian's Python, where install-deps puts numpy, pytest and torch.
PYTHON ?= /usr/bin/python3

override CFLAGS += -std=gnu11 -pthread -fPIC -Wall -Wextra -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Wno-unused-parameter -Wno-format-truncation -D_GNU_SOURCE -Ishmring -Ilibclient -Imover
override LDLIBS += -pthread -ldl
ifneq ($(SANITIZE),)
override CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -O1
override LDFLAGS += -fsanitize=$(SANITIZE)
endif

# CUDA is optional: found at CUDA_HOME or through nvcc on PATH.
CUDA_HOME ?= $(firstword $(wildcard /usr/local/cuda) $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)))
ifneq ($(wildcard $(CUDA_HOME)/include/cuda_runtime.h),)
HAVE_CUDA := 1
override CFLAGS += -DMV_HAVE_CUDA -I$(CUDA_HOME)/include
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart
endif

# Evaluated when a recipe runs, after the deps stamp installed the packages.
FABRIC_LIBS = $(shell pkg-config --libs libfabric 2>/dev/null || echo -lfabric)
HWLOC_LIBS = $(shell pkg-config --libs hwloc 2>/dev/null || echo -lhwloc)
URING_LIBS = $(shell pkg-config --libs liburing 2>/dev/null || echo -luring)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lm -lrt)

DEPS_STAMP := $(B)/.deps-ok

SHMRING_SRC := shmring/shmring.c
CLIENT_SRC := libclient/client.c libclient/batch.c libclient/arena.c libclient/events.c
MOVER_SRC := mover/main.c mover/control.c mover/registry.c mover/fabric.c mover/topo.c \
	mover/validate.c mover/stats.c mover/trace.c mover/gpu.c mover/liveness.c mover/wake.c \
	mover/access.c mover/quota.c \
	mover/shard.c mover/take.c mover/list.c mover/gpu_path.c mover/land.c mover/post.c \
	mover/complete.c mover/batch.c mover/idle.c
MVBENCH_SRC := tools/mvbench.c tools/bench/harness.c tools/bench/procs.c tools/bench/books.c \
	tools/bench/direct.c tools/bench/rows_bw.c tools/bench/rows_scatter.c \
	tools/bench/rows_lat.c
TOOLS := mvkv mvbench mvtrace mvreplay mvstat mvgpubench
TESTS := test_shmring test_validate test_client test_mover test_lists test_hostile test_trace test_gpu \
	test_tenants
SCRIPTS := tests/two_hosts.sh tests/stat_tool.sh
TEST_HELPERS := shmring_peer
BENCHES := shmring_bench

SHMRING_LIB := $(B)/libshmring.a
CLIENT_LIB := $(B)/libmvc.a
CLIENT_SO := $(B)/libmvc.so
BINS := $(B)/bin/mover $(addprefix $(B)/bin/,$(TOOLS) $(BENCHES))
TEST_BINS := $(addprefix $(B)/tests/,$(TESTS) $(TEST_HELPERS))

.PHONY: all demo check check-unit check-tsan check-scripts check-python bench replay install clean format deps
all: $(SHMRING_LIB) $(CLIENT_LIB) $(CLIENT_SO) $(BINS) $(TEST_BINS)

deps: $(DEPS_STAMP)
$(DEPS_STAMP): tools/install-deps
	@mkdir -p $(@D)
	@sh tools/install-deps
	@touch $@

$(B)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(SHMRING_LIB): $(SHMRING_SRC:%.c=$(B)/%.o)
	$(AR) rcs $@ $^

# libmvc carries the ring code inside it: applications link one library.
$(CLIENT_LIB): $(CLIENT_SRC:%.c=$(B)/%.o) $(SHMRING_SRC:%.c=$(B)/%.o)
	$(AR) rcs $@ $^

$(CLIENT_SO): $(CLIENT_SRC:%.c=$(B)/%.o) $(SHMRING_SRC:%.c=$(B)/%.o)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libmvc.so.1 -o $@ $^ $(LDLIBS)

$(B)/bin/mover: $(MOVER_SRC:%.c=$(B)/%.o) $(SHMRING_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(FABRIC_LIBS) $(HWLOC_LIBS) $(URING_LIBS) $(LDLIBS)

$(B)/bin/mvgpubench: $(B)/tools/mvgpubench.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/bin/mvstat: $(B)/tools/mvstat.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/bin/mvkv: $(B)/tools/mvkv.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Trace tools: the reader they share is tools/trace_read.h (header-only).
$(B)/bin/mvtrace: $(B)/tools/mvtrace.o $(B)/tools/trace_import.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -lm $(LDLIBS)

$(B)/bin/mvreplay: $(B)/tools/mvreplay.o $(B)/tools/replay_recv.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -lm $(LDLIBS)

# mvbench is tools/mvbench.c (its command line) and its parts in tools/bench/;
# the direct baseline opens endpoints with the mover's own fabric code.
$(B)/bin/mvbench: $(MVBENCH_SRC:%.c=$(B)/%.o) $(B)/mover/fabric.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(FABRIC_LIBS) $(LDLIBS)

$(B)/bin/shmring_bench: $(B)/shmring/shmring_bench.o $(SHMRING_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(if $(wildcard /usr/include/dpdk/rte_ring.h),$(shell pkg-config --libs libdpdk 2>/dev/null))

$(B)/tests/test_shmring: $(B)/tests/test_shmring.o $(SHMRING_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(B)/tests/test_validate: $(B)/tests/test_validate.o $(B)/mover/validate.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# test_client compiles libclient's sources in, to drive its static placement.
$(B)/tests/test_client: $(B)/tests/test_client.o $(SHMRING_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# test_lists compiles libclient's sources in too, to act as a hostile client.
$(B)/tests/test_lists: $(B)/tests/test_lists.o $(SHMRING_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# test_hostile too: it rewrites what its own rings hold before it submits.
$(B)/tests/test_hostile: $(B)/tests/test_hostile.o $(SHMRING_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(B)/tests/test_gpu: $(B)/tests/test_gpu.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(B)/tests/test_mover: $(B)/tests/test_mover.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# test_tenants is also a raw libfabric peer, with the mover's fabric code.
$(B)/tests/test_tenants: $(B)/tests/test_tenants.o $(B)/mover/fabric.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(FABRIC_LIBS) $(LDLIBS)

# test_trace runs the built mvtrace, mvreplay and mover (the check-unit rule builds all).
$(B)/tests/test_trace: $(B)/tests/test_trace.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) -lm $(LDLIBS)

$(B)/tests/shmring_peer: $(B)/tests/shmring_peer.o $(SHMRING_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The DPDK comparison compiles in only where Debian's dpdk-dev is installed.
$(B)/shmring/shmring_bench.o: override CFLAGS += $(if $(wildcard /usr/include/dpdk/rte_ring.h),-DHAVE_DPDK $(shell pkg-config --cflags libdpdk 2>/dev/null) -Wno-missing-prototypes -Wno-shadow)

demo: all
	MV_BUILD=$(B) tools/demo.sh

check: check-unit check-scripts check-python check-tsan

check-unit: all
	@set -e; for t in $(TESTS); do echo "== $$t"; MV_BUILD=$(B) $(B)/tests/$$t; done

check-scripts: all
	@set -e; for t in $(SCRIPTS); do echo "== $$t"; MV_BUILD=$(B) $$t; done

# The Python binding's tests (libclient/python/tests), against this build's
# libmvc.so and movers. pytest exits non-zero on a failure and when it finds
# no tests. A sanitizer's libmvc.so cannot be loaded into Python.
check-python: all
	@if [ -n "$(SANITIZE)" ]; then \
		echo "check-python: skipped: SANITIZE=$(SANITIZE) builds a libmvc.so $(PYTHON) cannot load"; \
		exit 0; fi; \
	echo "== libclient/python/tests"; \
	MV_BUILD=$(B) $(PYTHON) -m pytest -q -p no:cacheprovider libclient/python/tests

# The threaded ring test under ThreadSanitizer, in its own build tree.
check-tsan:
	@if [ "$(SANITIZE)" = thread ]; then echo "check-tsan: already a TSan build"; exit 0; fi; \
	$(MAKE) --no-print-directory B=$(B)/tsan SANITIZE=thread $(B)/tsan/tests/test_shmring && \
	MV_BUILD=$(B)/tsan CK_RUN_SUITE=threads TSAN_OPTIONS=halt_on_error=1 $(B)/tsan/tests/test_shmring

# The C side of the Python binding's submission benchmark: loaded by
# libclient/python/bench/bench_submit.py, which hands it libmvc's functions.
$(B)/libmvc_pybench.so: libclient/python/bench/paged_submit.c libclient/mvc.h | $(DEPS_STAMP)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -o $@ $<

# mvbench --quick here; BENCH_FULL=1 for the full run (take figures on a
# machine with a core per busy thread: 2 x shards + 1).
bench: all $(B)/libmvc_pybench.so
	$(B)/bin/shmring_bench
	$(B)/bin/mvbench --provider tcp,shm $(if $(filter 1,$(BENCH_FULL)),,--quick) --csv $(B)/mvbench.csv
	tools/mvplot.sh $(B)/mvbench.csv $(B)/mvbench.png
	$(B)/bin/mvgpubench $(if $(filter 1,$(BENCH_FULL)),,-q)
	MV_BUILD=$(B) $(PYTHON) libclient/python/bench/bench_submit.py

# The public LLM traces (../shared/traces, or TRACES=DIR) replayed through
# two movers on shm and tcp; REPLAY_* variables in the script set the sizes.
replay: all
	MV_BUILD=$(B) tools/replay_traces.sh $(TRACES)

# The Python package goes where Debian's python3 looks under PREFIX.
PYTHON_SITE = $(PREFIX)/lib/python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 libclient/mvc.h shmring/shmring.h shmring/shmring_layout.h \
		$(DESTDIR)$(PREFIX)/include/
	install -m 644 $(SHMRING_LIB) $(CLIENT_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(CLIENT_SO) $(DESTDIR)$(PREFIX)/lib/libmvc.so.1
	ln -sf libmvc.so.1 $(DESTDIR)$(PREFIX)/lib/libmvc.so
	sed -e 's|@PREFIX@|$(PREFIX)|g' libclient/mvc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/mvc.pc
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PYTHON_SITE)/mover
	install -m 644 libclient/python/mover/*.py libclient/python/mover/py.typed \
		$(DESTDIR)$(PYTHON_SITE)/mover/

format:
	clang-format -i $(wildcard */*.c */*.h tools/bench/*.c tools/bench/*.h)

clean:
	rm -rf $(B)

-include $(shell find $(B) -name '*.d' 2>/dev/null)
