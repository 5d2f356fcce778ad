# Test programs and the list of TAP tests `make test` runs (included by the Makefile).
TEST_CFLAGS := -std=gnu11 $(WARN) $(SHIM_INC) -Ipolicy $(UTHASH_INC) $(CFLAGS)

tests-bin: tests/bin/client_linked tests/bin/client_dlopen tests/bin/client_dlopen_old tests/bin/test_policy \
           tests/bin/dl_lookup tests/fake/test_fake

# Linked against fake "a" like torch is against libnccl (found through its rpath).
tests/bin/client_linked: tests/clients/nccl_client.c tests/clients/check.h shim/nccl/nccl_api.def tests/fake/a/libnccl.so.2
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Ltests/fake/a -l:libnccl.so.2 -Wl,-rpath,'$$ORIGIN/../fake/a' -ldl -lpthread

tests/bin/client_dlopen: tests/clients/nccl_client.c tests/clients/check.h shim/nccl/nccl_api.def
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -DNO_LINK -o $@ $< -ldl -lpthread

tests/bin/client_dlopen_old: tests/bin/client_dlopen
	cp $< $@

tests/bin/dl_lookup: tests/clients/dl_lookup.c
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< -ldl

tests/bin/test_policy: tests/unit/test_policy.c policy/classify.c policy/pattern.c $(wildcard policy/*.h)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_policy.c policy/classify.c policy/pattern.c

TESTS := $(sort $(wildcard tests/t/*.t)) tests/inspect/test_inspect.sh
# prove's jobs: one per core (`make test TEST_JOBS=1` runs them one by one).
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# How many times slower than the plain build each slow run is, on a quiet machine: every
# bound and product timeout a test sets is multiplied by it, and by the load (tests/tap.sh,
# tap_scale; tests/tap.py, scaled).  A run that is slower still only needs SHIM_TEST_SLOW
# raised (`make test-aarch64 SHIM_TEST_SLOW_AARCH64=8`), never a test edited.
SHIM_TEST_SLOW_ASAN ?= 2
SHIM_TEST_SLOW_VALGRIND ?= 10
SHIM_TEST_SLOW_AARCH64 ?= 4

tests-bin: tests/bin/fork_client
tests/bin/fork_client: tests/clients/fork_client.c
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Ltests/fake/a -l:libnccl.so.2 -Wl,-rpath,'$$ORIGIN/../fake/a'

# One rank of the multi-process rendezvous tests (tests/t/13-rendezvous.t).
tests-bin: tests/bin/rank_client
tests/bin/rank_client: tests/clients/rank_client.c tests/clients/client_util.h tests/clients/test_bound.h shim/nccl/nccl_config.def shim/ipc/reduce.c shim/ipc/reduce.h shim/nccl/nccl_api.def tests/fake/a/libnccl.so.2
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< shim/ipc/reduce.c -Ltests/fake/a -l:libnccl.so.2 -Wl,-rpath,'$$ORIGIN/../fake/a' -ldl -lpthread

# Many ranks of one communicator, a thread each (tests/t/30-rv-scale.t, bench/rv_scale.py).
tests-bin: tests/bin/many_ranks
tests/bin/many_ranks: tests/clients/many_ranks.c tests/clients/client_util.h shim/nccl/nccl_api.def tests/fake/a/libnccl.so.2
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Ltests/fake/a -l:libnccl.so.2 -Wl,-rpath,'$$ORIGIN/../fake/a' -lpthread

# Synthetic ranks beside one real rank per host (bench/rv_scale.py --synthetic-grid): linked
# with the shim's own wire, frame reader, mark, leader-name, host-identity, clock and fabric code,
# and built with the rest so that a tree carried to a machine without a compiler has it.
tests-bin: tests/bin/rv_synth_ranks
RV_SYNTH_SRCS := bench/rv_synth_ranks.c shim/rendezvous/rv_wire.c shim/rendezvous/rv_reader.c shim/rendezvous/uid_mark.c \
                 shim/rendezvous/rv_leader_name.c shim/base/host_id.c shim/base/clock.c shim/evidence/fabric_probe.c
tests/bin/rv_synth_ranks: $(RV_SYNTH_SRCS) tests/clients/unhex.h $(SHIM_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $(RV_SYNTH_SRCS) $(POLICY_SRCS) -lpthread

tests-bin: tests/bin/rv_frame
tests/bin/rv_frame: tests/clients/rv_frame.c tests/clients/unhex.h shim/rendezvous/rv_wire.c shim/rendezvous/uid_mark.c $(SHIM_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/clients/rv_frame.c shim/rendezvous/rv_wire.c shim/rendezvous/uid_mark.c

tests-bin: tests/bin/test_wire
tests/bin/test_wire: tests/unit/test_wire.c tests/unit/wire_same.h shim/rendezvous/rv_wire.c shim/rendezvous/rv_wire.h $(wildcard policy/*.h)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_wire.c shim/rendezvous/rv_wire.c

tests-bin: tests/bin/test_decide
tests/bin/test_decide: tests/unit/test_decide.c $(POLICY_SRCS) $(wildcard policy/*.h)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_decide.c $(POLICY_SRCS)

# The fake libcuda's own test (tests/t/14-fake-cuda.t).
tests-bin: tests/bin/test_fake_cuda
tests/bin/test_fake_cuda: tests/fake/test_fake_cuda.c tests/fake/cuda/libcuda.so.1
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< -ldl -lpthread

tests-bin: tests/bin/test_reduce
tests/bin/test_reduce: tests/unit/test_reduce.c shim/ipc/reduce.c shim/ipc/reduce.h shim/nccl/nccl_abi.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_reduce.c shim/ipc/reduce.c

# NCCL 2.29/2.30's functions and one of a later release (tests/t/19-identity.t):
# linked against the fake NCCL 2.30.7, and the dlopen build.
tests-bin: tests/bin/newer_linked tests/bin/newer_dlopen
tests/bin/newer_linked: tests/clients/newer_client.c tests/clients/check.h shim/nccl/nccl_api.def shim/nccl/nccl_abi.h tests/fake/new/libnccl.so.2
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Ltests/fake/new -l:libnccl.so.2 -Wl,-rpath,'$$ORIGIN/../fake/new' -ldl -lpthread
tests/bin/newer_dlopen: tests/clients/newer_client.c tests/clients/check.h shim/nccl/nccl_api.def shim/nccl/nccl_abi.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -DNO_LINK -o $@ $< -ldl -lpthread

# fork() while threads create communicators (tests/t/25-hostile-fork.t).
tests-bin: tests/bin/fork_threads
tests/bin/fork_threads: tests/clients/fork_threads.c tests/clients/test_bound.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Ltests/fake/a -l:libnccl.so.2 -Wl,-rpath,'$$ORIGIN/../fake/a' -lpthread

# A process leaving with a communicator alive through _exit or a signal (tests/t/26-hostile-leave.t).
tests-bin: tests/bin/leave_client
tests/bin/leave_client: tests/clients/leave_client.c tests/clients/client_util.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ $< -Ltests/fake/a -l:libnccl.so.2 -Wl,-rpath,'$$ORIGIN/../fake/a'

# The ipc transport's VMM messages (tests/t/31-vmm-wire.t).
tests-bin: tests/bin/test_vmm_wire
tests/bin/test_vmm_wire: tests/unit/test_vmm_wire.c shim/ipc/ipc_vmm_wire.c shim/ipc/ipc_vmm_wire.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_vmm_wire.c shim/ipc/ipc_vmm_wire.c

# glibc's symbols by this architecture's versions (tests/t/32-glibc-lookup.t).
tests-bin: tests/bin/test_loader
tests/bin/test_loader: tests/unit/test_loader.c shim/nccl/loader.c shim/nccl/loader.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_loader.c shim/nccl/loader.c -ldl

# auto across hosts: the fabric's policy and the shim's sysfs probe (tests/t/34-fabric-auto.t).
tests-bin: tests/bin/test_fabric
tests/bin/test_fabric: tests/unit/test_fabric.c $(POLICY_SRCS) shim/evidence/fabric_probe.c shim/evidence/fabric_probe.h $(wildcard policy/*.h)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_fabric.c $(POLICY_SRCS) shim/evidence/fabric_probe.c -lpthread

# ncclConfig_t by its field table (tests/t/36-config.t).
tests-bin: tests/bin/test_config
tests/bin/test_config: tests/unit/test_config.c shim/nccl/nccl_config.c shim/nccl/nccl_config.h shim/nccl/nccl_config.def shim/nccl/nccl_abi.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_config.c shim/nccl/nccl_config.c

# The replays of the RL stacks (tests/t/37-stacks.t, tests/replay/): native stand-ins the
# harness copies into a fake site-packages, each where a stack's library lies (a linked one
# finds libnccl through its rpath there, under nvidia/nccl/lib, as torch's and CuPy's do).
# No sibling calls: a stand-in's call into NCCL must return into it (the shim names the
# caller by the return address), as a real binding's does.
REPLAY_BIN := tests/bin/replay
REPLAY_CFLAGS := $(TEST_CFLAGS) -fno-optimize-sibling-calls -Itests/clients -Itests/replay/stubs -shared -fPIC
REPLAY_HDRS := tests/replay/stubs/store.h tests/clients/client_util.h shim/nccl/nccl_api.def shim/nccl/nccl_abi.h
tests-bin: $(REPLAY_BIN)/native.so $(REPLAY_BIN)/torch.so $(REPLAY_BIN)/cupy.so $(REPLAY_BIN)/nccl4py.so \
           $(REPLAY_BIN)/m2n.so
$(REPLAY_BIN)/native.so: tests/replay/stubs/native.c
	@mkdir -p $(@D)
	$(CC) $(REPLAY_CFLAGS) -o $@ $<
$(REPLAY_BIN)/nccl4py.so: tests/replay/stubs/nccl4py.c $(REPLAY_HDRS)
	@mkdir -p $(@D)
	$(CC) $(REPLAY_CFLAGS) -o $@ $< -ldl
# torch/lib/libtorch_replay.so, nccl/m2n/libnccl_m2n.so: two levels below site-packages.
$(REPLAY_BIN)/torch.so $(REPLAY_BIN)/m2n.so: $(REPLAY_BIN)/%.so: tests/replay/stubs/%.c $(REPLAY_HDRS) tests/fake/a/libnccl.so.2
	@mkdir -p $(@D)
	$(CC) $(REPLAY_CFLAGS) -o $@ $< -Ltests/fake/a -l:libnccl.so.2 -Wl,-rpath,'$$ORIGIN/../../nvidia/nccl/lib'
# cupy_backends/cuda/libs/nccl.so: three levels below.
$(REPLAY_BIN)/cupy.so: tests/replay/stubs/cupy.c $(REPLAY_HDRS) tests/fake/a/libnccl.so.2
	@mkdir -p $(@D)
	$(CC) $(REPLAY_CFLAGS) -o $@ $< -Ltests/fake/a -l:libnccl.so.2 -Wl,-rpath,'$$ORIGIN/../../../nvidia/nccl/lib'

# The shared pages' futex words with wake marks (tests/t/41-futex.t runs it).
tests-bin: tests/bin/test_futex
tests/bin/test_futex: tests/unit/test_futex.c shim/ipc/ipc_futex.c shim/ipc/ipc_futex.h tests/unit/tap.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_futex.c shim/ipc/ipc_futex.c -ldl -lpthread

# The host identity, NCCL's, from its parts (tests/t/38-host-identity.t runs it).
tests-bin: tests/bin/test_host_id
tests/bin/test_host_id: tests/unit/test_host_id.c shim/base/host_id.c shim/base/host_id.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_host_id.c shim/base/host_id.c

# The rendezvous's chaos harness, a long run (tests/rv/chaos.py; a short one is
# tests/t/45-rv-chaos.t): random faults at random moments on 4 hosts x 4 rank
# processes and on a tree of leaders, herds of 128 x 4, 256 x 4 and 1024 x 1
# ranks released at once, root stalls.  About 10 minutes on 2 cores;
# CHAOS_SEED=n repeats a run, CHAOS_TRIALS=n sets the random trials.
CHAOS_TRIALS ?= 48
CHAOS_SEED ?=
CHAOS := $(PYTHON) tests/rv/chaos.py $(if $(CHAOS_SEED),--seed $(CHAOS_SEED))
.PHONY: chaos
chaos: all
	$(CHAOS) --trials $(CHAOS_TRIALS) --hosts 4 --per 4 --timeout-ms 3000
	$(CHAOS) --trials $(CHAOS_TRIALS) --hosts 6 --per 2 --timeout-ms 2000 --fault-env fanout=2
	$(CHAOS) --trials 3 --fault none --hosts 128 --per 4 --timeout-ms 30000 --want socket
	$(CHAOS) --trials 2 --fault none --hosts 256 --per 4 --threads --timeout-ms 30000 --want socket
	$(CHAOS) --trials 2 --fault none --hosts 1024 --per 1 --timeout-ms 30000 --want socket
	$(CHAOS) --trials 5 --fault stop-root --hosts 32 --per 4 --timeout-ms 5000 --stall 2 --want socket
	$(CHAOS) --trials 3 --fault none --hosts 16 --per 2 --timeout-ms 5000 \
	    --fault-env root-stall=2000,leader-hello=300 --want socket

# The rendezvous protocol's state tables (tests/t/45-rv-states.t runs it).
tests-bin: tests/bin/test_rv_states
tests/bin/test_rv_states: tests/unit/test_rv_states.c shim/rendezvous/rv_states.c shim/rendezvous/rv_states.h \
                          shim/rendezvous/rv_session.h tests/unit/tap.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_rv_states.c shim/rendezvous/rv_states.c

# The root's interned texts of its ranks (tests/t/45-rv-texts.t runs it).
tests-bin: tests/bin/test_rv_texts
tests/bin/test_rv_texts: tests/unit/test_rv_texts.c shim/rendezvous/rv_texts.c shim/rendezvous/rv_texts.h \
                         shim/rendezvous/rv_wire.c shim/rendezvous/rv_wire.h policy/facts.h tests/unit/tap.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -o $@ tests/unit/test_rv_texts.c shim/rendezvous/rv_texts.c shim/rendezvous/rv_wire.c
