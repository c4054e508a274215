# SPDX-License-Identifier: MIT
# One non-recursive Makefile for the whole tree. `make` builds everything,
# `make demo` runs the main job, `make check` every test, `make bench` the
# benchmarks. CFLAGS stays the user's; project flags go in with override.

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
# The mover reads /etc/mover.conf: the example goes there for the system
# prefixes, under PREFIX otherwise (pass it with --config).
SYSCONFDIR ?= $(if $(filter /usr /usr/local,$(PREFIX)),/etc,$(PREFIX)/etc)
B ?= build

# The release, written once: MVC_VERSION_* in libclient/mvc.h.
VERSION := $(shell sed -n 's/^\#define MVC_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9][0-9]*\).*/\2/p' libclient/mvc.h | paste -sd. -)
MAN_DATE ?= $(shell git log -1 --format=%cs 2>/dev/null || date +%F)
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
# LIBFABRIC=PREFIX builds against another libfabric (its headers first, its
# library by rpath): tests/with-libfabric.sh runs make check that way.
ifneq ($(LIBFABRIC),)
override CFLAGS += -I$(LIBFABRIC)/include
FABRIC_LIBS = -L$(LIBFABRIC)/lib -Wl,-rpath,$(LIBFABRIC)/lib -lfabric
else
FABRIC_LIBS = $(shell pkg-config --libs libfabric 2>/dev/null || echo -lfabric)
endif
HWLOC_LIBS = $(shell pkg-config --libs hwloc 2>/dev/null || echo -lhwloc)
URING_LIBS = $(shell pkg-config --libs liburing 2>/dev/null || echo -luring)
# etcd (mover --etcd): its JSON gateway over libcurl, parsed with json-c.
ETCD_LIBS = $(shell pkg-config --libs libcurl json-c 2>/dev/null || echo -lcurl -ljson-c)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lm -lrt)

DEPS_STAMP := $(B)/.deps-ok

SHMRING_SRC := shmring/shmring.c
CLIENT_SRC := libclient/client.c libclient/batch.c libclient/arena.c libclient/events.c \
	libclient/rejoin.c libclient/memory.c libclient/names.c libclient/bind.c
MOVER_SRC := mover/main.c mover/config.c mover/log.c mover/control.c mover/msg_check.c \
	mover/registry.c mover/fabric.c mover/topo.c mover/cpus_held.c \
	mover/validate.c mover/stats.c mover/trace.c mover/gpu.c mover/liveness.c mover/wake.c \
	mover/access.c mover/quota.c mover/etcd.c mover/cluster.c mover/cluster_keys.c \
	mover/names.c \
	mover/shard.c mover/take.c mover/list.c mover/gpu_path.c mover/gpu_calib.c mover/land.c \
	mover/post.c mover/hold.c mover/queue.c mover/retry.c mover/complete.c mover/batch.c mover/idle.c mover/heartbeat.c \
	mover/samehost.c \
	mover/shm_lock.c mover/samehost_owner.c mover/samehost_ask.c
MVBENCH_SRC := tools/mvbench.c tools/bench/harness.c tools/bench/procs.c tools/bench/books.c \
	tools/bench/direct.c tools/bench/rows_bw.c tools/bench/rows_scatter.c \
	tools/bench/rows_lat.c tools/bench/lat_direct.c tools/bench/rows_fair.c tools/bench/rows_reg.c \
	tools/bench/rows_ext.c tools/bench/hops.c
TOOLS := mvkv mvbench mvtrace mvreplay mvstat mvgpubench
TESTS := test_shmring test_shmring_errors test_shmring_procs test_validate test_config test_queue test_client test_mover test_faults test_shards test_lists test_hostile \
	test_trace test_replay test_gpu test_gpu_guard test_gpu_chunks test_tenants test_fair test_weights test_stopped_peer test_liveness test_reconnect test_samehost \
	test_samehost_peers test_huge test_shm_restart
SCRIPTS := tests/two_hosts.sh tests/liveness.sh tests/slow_link.sh tests/stat_tool.sh tests/operate.sh \
	tests/cluster.sh tests/fleet.sh
TEST_HELPERS := shmring_peer soak_client soak_sum fleet_host gpu_writer
BENCHES := shmring_bench mvhostbench

SHMRING_LIB := $(B)/libshmring.a
CLIENT_LIB := $(B)/libmvc.a
CLIENT_SO := $(B)/libmvc.so
BINS := $(B)/bin/mover $(addprefix $(B)/bin/,$(TOOLS) $(BENCHES))
TEST_BINS := $(addprefix $(B)/tests/,$(TESTS) $(TEST_HELPERS))

# Man pages: man/*.N with the release and date filled in; one page per call
# family of libmvc, and a .so page for each other call of the family.
MAN_SRC := $(wildcard man/*.[1-8])
MAN_PAGES := $(MAN_SRC:man/%=$(B)/man/%)
MAN_LINKS := mvc_connect_opts:mvc_connect mvc_disconnect:mvc_connect \
	mvc_connect_error:mvc_connect mvc_error:mvc_connect mvc_info:mvc_connect \
	mvc_register_fd:mvc_alloc mvc_free:mvc_alloc mvc_alloc_huge:mvc_alloc \
	mvc_mem_info:mvc_alloc mvc_region_blob:mvc_address \
	mvc_peer_remove:mvc_peer_add mvc_import:mvc_peer_add mvc_unimport:mvc_peer_add \
	mvc_writev:mvc_write mvc_write_imm:mvc_write mvc_abort:mvc_submit \
	mvc_submit_paged:mvc_submit mvc_inflight:mvc_submit mvc_wait:mvc_poll \
	mvc_event_fd:mvc_poll mvc_arm:mvc_poll mvc_shard_bytes:mvc_latency \
	mvc_shard_descs:mvc_latency mvc_unpublish:mvc_publish mvc_lookup:mvc_publish \
	mvc_write_paged_objs:mvc_write_paged mvc_submit_paged_objs:mvc_write_paged \
	mvc_array_take:mvc_write_paged
MAN_LINK_PAGES := $(foreach l,$(MAN_LINKS),$(B)/man/$(firstword $(subst :, ,$(l))).3)

.PHONY: soak-fleet all man demo check check-unit check-tsan check-scripts check-fuzz check-python check-soak soak fuzz fuzz-seeds \
	bench replay install clean format deps
all: $(SHMRING_LIB) $(CLIENT_LIB) $(CLIENT_SO) $(BINS) $(TEST_BINS) man

man: $(MAN_PAGES) $(MAN_LINK_PAGES)

$(B)/man/%: man/% libclient/mvc.h
	@mkdir -p $(@D)
	sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@DATE@|$(MAN_DATE)|g' $< > $@

$(MAN_LINK_PAGES): Makefile
	@mkdir -p $(@D)
	@for l in $(MAN_LINKS); do [ "$(B)/man/$${l%%:*}.3" = "$@" ] && echo ".so man3/$${l#*:}.3" > $@; done; true

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
	$(CC) $(LDFLAGS) -o $@ $^ $(FABRIC_LIBS) $(HWLOC_LIBS) $(URING_LIBS) $(ETCD_LIBS) $(LDLIBS)

$(B)/bin/mvgpubench: $(B)/tools/mvgpubench.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/bin/mvstat: $(B)/tools/mvstat.o $(B)/tools/mvstat_mem.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/bin/mvkv: $(B)/tools/mvkv.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Trace tools: the reader they share is tools/trace_read.h (header-only).
$(B)/bin/mvtrace: $(B)/tools/mvtrace.o $(B)/tools/trace_import.o $(B)/tools/import_parse.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -lm $(LDLIBS)

$(B)/bin/mvreplay: $(B)/tools/mvreplay.o $(B)/tools/replay_issue.o $(B)/tools/replay_recv.o \
	$(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -lm $(LDLIBS)

# mvbench is tools/mvbench.c (its command line) and its parts in tools/bench/;
# the direct baseline opens endpoints with the mover's own fabric code.
$(B)/bin/mvbench: $(MVBENCH_SRC:%.c=$(B)/%.o) $(B)/mover/fabric.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(FABRIC_LIBS) $(LDLIBS)

$(B)/bin/mvhostbench: $(B)/tools/mvhostbench.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -pthread $(LDLIBS)

$(B)/bin/shmring_bench: $(B)/tools/shmring_bench.o $(SHMRING_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(if $(wildcard /usr/include/dpdk/rte_ring.h),$(shell pkg-config --libs libdpdk 2>/dev/null))

# The ring's suites: one process, what it refuses, two processes or threads.
$(B)/tests/test_shmring $(B)/tests/test_shmring_errors $(B)/tests/test_shmring_procs: \
		$(B)/tests/%: $(B)/tests/%.o $(B)/tests/shmring_util.o $(SHMRING_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# test_config drives the mover's settings and log (config.c, log.c) alone.
$(B)/tests/test_config: $(B)/tests/test_config.o $(B)/mover/config.o $(B)/mover/log.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) -lm $(LDLIBS)

# test_queue drives a client's queue of ops (shard_int.h, queue.c) alone.
$(B)/tests/test_queue: $(B)/tests/test_queue.o $(B)/mover/queue.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(B)/tests/test_validate: $(B)/tests/test_validate.o $(B)/mover/validate.o $(B)/mover/msg_check.o \
	$(B)/mover/cluster_keys.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(ETCD_LIBS) $(LDLIBS)

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

# test_gpu_guard is also a raw libfabric peer (bad landing headers), with the mover's fabric code.
$(B)/tests/test_gpu_guard: $(B)/tests/test_gpu_guard.o $(B)/mover/fabric.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(FABRIC_LIBS) $(LDLIBS)

$(B)/tests/test_mover $(B)/tests/test_faults $(B)/tests/test_shards $(B)/tests/test_gpu $(B)/tests/test_gpu_chunks: $(B)/tests/%: $(B)/tests/%.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# test_liveness is also a raw libfabric peer that sends garbage.
$(B)/tests/test_liveness: $(B)/tests/test_liveness.o $(B)/mover/fabric.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(FABRIC_LIBS) $(LDLIBS)

$(B)/tests/test_samehost: $(B)/tests/test_samehost.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(B)/tests/test_samehost_peers: $(B)/tests/test_samehost_peers.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(B)/tests/test_huge: $(B)/tests/test_huge.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# test_tenants is also a raw libfabric peer, with the mover's fabric code.
$(B)/tests/test_tenants: $(B)/tests/test_tenants.o $(B)/mover/fabric.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(FABRIC_LIBS) $(LDLIBS)

$(B)/tests/test_reconnect: $(B)/tests/test_reconnect.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(B)/tests/test_shm_restart: $(B)/tests/test_shm_restart.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

$(B)/tests/test_fair $(B)/tests/test_weights $(B)/tests/test_stopped_peer: $(B)/tests/%: $(B)/tests/%.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# test_trace and test_replay run the built mvtrace, mvreplay and mover (the
# check-unit rule builds all).
$(B)/tests/test_trace $(B)/tests/test_replay: $(B)/tests/%: $(B)/tests/%.o $(B)/tests/trace_util.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) -lm $(LDLIBS)

$(B)/tests/soak_client: $(B)/tests/soak_client.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/tests/soak_sum: $(B)/tests/soak_sum.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# A GPU client that test_gpu_chunks runs as another uid: the public API only.
$(B)/tests/gpu_writer: $(B)/tests/gpu_writer.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# One host of tests/fleet.sh: the public API only.
$(B)/tests/fleet_host: $(B)/tests/fleet_host.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/tests/shmring_peer: $(B)/tests/shmring_peer.o $(SHMRING_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The DPDK comparison compiles in only where Debian's dpdk-dev is installed.
$(B)/tools/shmring_bench.o: override CFLAGS += $(if $(wildcard /usr/include/dpdk/rte_ring.h),-DHAVE_DPDK $(shell pkg-config --cflags libdpdk 2>/dev/null) -Wno-missing-prototypes -Wno-shadow)

demo: all
	MV_BUILD=$(B) tools/demo.sh

# check builds what its suites need on every core first (the daemon, tools
# and tests, the fuzz harnesses, the TSan ring test: about 2 minutes one
# file at a time on two cores), then runs the suites one after another
# whatever -j was given: they time things, and share the machine's cores.
NPROC := $(shell nproc 2>/dev/null || echo 2)
check:
	@$(MAKE) --no-print-directory -j$(NPROC) all $(FUZZ_BINS)
	@if [ "$(SANITIZE)" != thread ]; then \
		$(MAKE) --no-print-directory -j$(NPROC) B=$(B)/tsan SANITIZE=thread $(B)/tsan/tests/test_shmring_procs; fi
	@$(MAKE) --no-print-directory -j1 check-unit check-scripts check-python check-tsan check-fuzz \
		check-soak

# The soak (tests/soak.sh): clients on two movers under faults, every batch
# reported once and every page checked. check runs it for 60 s, `make soak`
# for SOAK_SECONDS (600).
SOAK_SECONDS ?= 600
check-soak: all
	@echo "== tests/soak.sh 60"; MV_BUILD=$(B) tests/soak.sh 60

soak: all
	MV_BUILD=$(B) tests/soak.sh $(SOAK_SECONDS)

# The fleet test's long version (check runs the short one): more rounds,
# larger slices, a longer lease; never part of check.
soak-fleet: all
	MV_BUILD=$(B) FLEET_ROUNDS=$${FLEET_ROUNDS:-100} FLEET_SLICE=$${FLEET_SLICE:-1048576} \
		FLEET_TTL=$${FLEET_TTL:-5} tests/fleet.sh


# Each suite says how long it took: check has a budget of ~10 minutes on
# two cores, and this says where it goes.
check-unit: all
	@set -e; for t in $(TESTS); do echo "== $$t"; s=$$(date +%s); \
		MV_BUILD=$(B) $(B)/tests/$$t; echo "== $$t: $$(( $$(date +%s) - s )) s"; done

check-scripts: all
	@set -e; for t in $(SCRIPTS); do echo "== $$t"; s=$$(date +%s); \
		MV_BUILD=$(B) $$t; echo "== $$t: $$(( $$(date +%s) - s )) s"; done

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
	$(MAKE) --no-print-directory B=$(B)/tsan SANITIZE=thread $(B)/tsan/tests/test_shmring_procs && \
	MV_BUILD=$(B)/tsan CK_RUN_SUITE=threads TSAN_OPTIONS=halt_on_error=1 $(B)/tsan/tests/test_shmring_procs

# libFuzzer harnesses (tests/fuzz/, one per input surface), built with Debian's
# clang into $(B)/fuzz/ together with the sources each one drives. `make fuzz`
# runs each for FUZZ_SECONDS on one core and prints executions, exec/s and
# coverage; check runs the committed corpora and crash inputs, then each
# harness for FUZZ_CHECK_SECONDS.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CHECK_SECONDS ?= 3
FUZZERS := fuzz_ctlmsg fuzz_desc fuzz_take fuzz_ring fuzz_blob fuzz_trace fuzz_import fuzz_etcd
FUZZ_CFLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer -std=gnu11 -pthread -Wall -Wextra -Werror -Wno-unused-parameter \
	-D_GNU_SOURCE -Ishmring -Ilibclient -Imover -Itools
FUZZ_SRC_fuzz_ctlmsg := mover/msg_check.c mover/validate.c
FUZZ_SRC_fuzz_desc := mover/validate.c
# The shard's data path links the whole daemon but main.c (the harness logs).
FUZZ_SRC_fuzz_take := $(filter-out mover/main.c,$(MOVER_SRC)) $(SHMRING_SRC)
FUZZ_LIBS_fuzz_take = $(FABRIC_LIBS) $(HWLOC_LIBS) $(URING_LIBS) $(ETCD_LIBS) -ldl
FUZZ_SRC_fuzz_blob := mover/validate.c
FUZZ_SRC_fuzz_ring := shmring/shmring.c
FUZZ_SRC_fuzz_trace :=
FUZZ_SRC_fuzz_import := tools/import_parse.c
# The values under a cluster's prefix in etcd, as the cluster thread parses them.
FUZZ_SRC_fuzz_etcd := mover/cluster_keys.c mover/validate.c
FUZZ_LIBS_fuzz_etcd = $(ETCD_LIBS)
FUZZ_BINS := $(addprefix $(B)/fuzz/,$(FUZZERS))
FUZZ_HDRS := $(wildcard mover/*.h libclient/*.h shmring/*.h tools/*.h tests/fuzz/*.h)

.SECONDEXPANSION:
$(B)/fuzz/%: tests/fuzz/%.c $$(FUZZ_SRC_%) $(FUZZ_HDRS) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_SRC_$*) $(FUZZ_LIBS_$*) -lm

fuzz: $(FUZZ_BINS)
	tests/fuzz/run.sh $(B) $(FUZZ_SECONDS) $(FUZZERS)

# The seed corpora, regenerated from real inputs when a format changes (the
# output is committed): a mover on shm hands out real blobs.
$(B)/fuzz/seeds: $(B)/tests/fuzz/seeds.o $(B)/tools/import_parse.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -lm $(LDLIBS)
$(B)/tests/fuzz/seeds.o: override CFLAGS += -Itools

fuzz-seeds: $(B)/fuzz/seeds $(B)/bin/mover
	MV_BUILD=$(B) tests/fuzz/make_seeds.sh

check-fuzz: $(FUZZ_BINS)
	FUZZ_REPLAY=1 tests/fuzz/run.sh $(B) $(FUZZ_CHECK_SECONDS) $(FUZZERS)

# The C side of the Python binding's submission benchmark: loaded by
# libclient/python/bench/bench_submit.py, which hands it libmvc's functions.
$(B)/libmvc_pybench.so: libclient/python/bench/paged_submit.c libclient/mvc.h | $(DEPS_STAMP)
	$(CC) $(CFLAGS) $(LDFLAGS) -shared -o $@ $<

# mvbench --quick here; BENCH_FULL=1 for the full run (take figures on a
# machine with a core per busy thread: 2 x shards + 1).
bench: all $(B)/libmvc_pybench.so
	@sh tools/install-deps bench || echo "bench: no ucx-utils; mvbench says which baselines are absent"
	$(B)/bin/shmring_bench
	$(B)/bin/mvhostbench $(if $(filter 1,$(BENCH_FULL)),,--rounds 500)
	$(B)/bin/mvbench --provider tcp,shm,samehost $(if $(filter 1,$(BENCH_FULL)),,--quick) --csv $(B)/mvbench.csv
	tools/mvplot.sh $(B)/mvbench.csv $(B)/mvbench.png
	$(B)/bin/mvgpubench $(if $(filter 1,$(BENCH_FULL)),,-q)
	MV_BUILD=$(B) $(PYTHON) libclient/python/bench/bench_submit.py

# The public LLM traces (../shared/traces, or TRACES=DIR) replayed through
# two movers on shm and tcp; REPLAY_* variables in the script set the sizes.
replay: all
	MV_BUILD=$(B) tools/replay_traces.sh $(TRACES)

# Headers, libraries, mvc.pc, binaries, man pages, the systemd units, the
# sysusers.d line for the mover's user, and the example /etc/mover.conf
# (never over one that is there: then it goes beside it as mover.conf.dist),
# and the Python package, where Debian's python3 looks under PREFIX.
PYTHON_SITE = $(PREFIX)/lib/python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages

install: all
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(BINDIR) \
		$(addprefix $(DESTDIR)$(MANDIR)/man,1 3 5 8) $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(SYSCONFDIR)
	install -m 644 libclient/mvc.h shmring/shmring.h shmring/shmring_layout.h \
		$(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(SHMRING_LIB) $(CLIENT_LIB) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(CLIENT_SO) $(DESTDIR)$(LIBDIR)/libmvc.so.1
	ln -sf libmvc.so.1 $(DESTDIR)$(LIBDIR)/libmvc.so
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
		-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
		libclient/mvc.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/mvc.pc
	install -m 755 $(BINS) $(DESTDIR)$(BINDIR)/
	for n in 1 3 5 8; do for p in $(B)/man/*.$$n; do \
		install -m 644 $$p $(DESTDIR)$(MANDIR)/man$$n/ || exit 1; done; done
	for u in mover mover-metrics; do \
		sed -e 's|@BINDIR@|$(BINDIR)|g' dist/$$u.service.in > $(DESTDIR)$(UNITDIR)/$$u.service || exit 1; done
	install -m 644 dist/mover.sysusers $(DESTDIR)$(SYSUSERSDIR)/mover.conf
	if [ -e $(DESTDIR)$(SYSCONFDIR)/mover.conf ]; then \
		install -m 644 dist/mover.conf $(DESTDIR)$(SYSCONFDIR)/mover.conf.dist; \
		echo "install: kept $(DESTDIR)$(SYSCONFDIR)/mover.conf; the example is mover.conf.dist"; \
	else install -m 644 dist/mover.conf $(DESTDIR)$(SYSCONFDIR)/mover.conf; fi
	install -d $(DESTDIR)$(PYTHON_SITE)/mover
	install -m 644 libclient/python/mover/*.py libclient/python/mover/py.typed \
		$(DESTDIR)$(PYTHON_SITE)/mover/

format:
	clang-format -i $(wildcard */*.c */*.h tools/bench/*.c tools/bench/*.h)

clean:
	rm -rf $(B)

-include $(shell find $(B) -name '*.d' 2>/dev/null)
