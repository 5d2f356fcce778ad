# The fuzzers (libFuzzer; needs clang).  Included by the top-level Makefile, and
# works alone too:  make -f tests/fuzz/fuzz.mk fuzz-short [BUILD=dir] [FUZZ_SECONDS=n]
#
#   fuzz-short   builds tests/bin/fuzz_wire, fuzz_rules and fuzz_vmm, runs each
#                FUZZ_SECONDS (20) seconds; fails if a fuzzer finds anything
#   fuzz-long    the same, 600 seconds each
#   fuzz-run-wire, fuzz-run-rules, fuzz-run-vmm   one fuzzer alone
#
# A fuzzer runs on a copy of its seeds (tests/fuzz/corpus/<name> copied to
# $(BUILD)/fuzz-corpus/<name>), so new inputs never land in the git tree; its
# output goes to $(BUILD)/fuzz-<name>.log, a crashing input to
# $(BUILD)/fuzz-artifacts/<name>-crash-*.  Each run prints libFuzzer's
# "#N DONE" line (N: inputs executed).

BUILD ?= build
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 20
FUZZ_CFLAGS := -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -Ishim/nccl -Ishim/rendezvous -Ishim/ipc -Ipolicy
FUZZ_TARGETS := wire rules vmm
FUZZ_RULES_SRCS := tests/fuzz/fuzz_rules.c $(POLICY_SRCS)

.PHONY: fuzz-short fuzz-long $(addprefix fuzz-run-,$(FUZZ_TARGETS))

fuzz-short: $(addprefix fuzz-run-,$(FUZZ_TARGETS))

# A target-specific value reaches the fuzz-run-* prerequisites too.
fuzz-long: FUZZ_SECONDS = 600
fuzz-long: $(addprefix fuzz-run-,$(FUZZ_TARGETS))

tests/bin/fuzz_wire: tests/fuzz/fuzz_wire.c tests/unit/wire_same.h shim/rendezvous/rv_wire.c shim/rendezvous/rv_wire.h $(wildcard policy/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_wire.c shim/rendezvous/rv_wire.c

tests/bin/fuzz_vmm: tests/fuzz/fuzz_vmm.c shim/ipc/ipc_vmm_wire.c shim/ipc/ipc_vmm_wire.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_vmm.c shim/ipc/ipc_vmm_wire.c

tests/bin/fuzz_rules: $(FUZZ_RULES_SRCS) $(wildcard policy/*.h)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(FUZZ_RULES_SRCS)

# $(1): the fuzzer's name.  ($$ and $$$$: expanded once by $(call), once by make
# when the recipe runs, the rest by the shell.)
define FUZZ_RUN
fuzz-run-$(1): tests/bin/fuzz_$(1)
	@rm -rf $(BUILD)/fuzz-corpus/$(1) && mkdir -p $(BUILD)/fuzz-corpus/$(1) $(BUILD)/fuzz-artifacts
	@if [ -d tests/fuzz/corpus/$(1) ]; then cp -R tests/fuzz/corpus/$(1)/. $(BUILD)/fuzz-corpus/$(1)/; fi
	@echo "fuzz_$(1): $$(FUZZ_SECONDS) s on $(BUILD)/fuzz-corpus/$(1) (log: $(BUILD)/fuzz-$(1).log)"
	@log=$(BUILD)/fuzz-$(1).log; \
	UBSAN_OPTIONS=print_stacktrace=1 tests/bin/fuzz_$(1) -max_total_time=$$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz-artifacts/$(1)- $(BUILD)/fuzz-corpus/$(1) >$$$$log 2>&1; \
	status=$$$$?; \
	if [ $$$$status -ne 0 ]; then \
	    tail -n 80 $$$$log; echo "fuzz_$(1): FAILED (exit $$$$status), see $$$$log and $(BUILD)/fuzz-artifacts/"; exit 1; \
	fi; \
	done=$$$$(grep -E '^#[0-9]+[[:space:]]+DONE' $$$$log | tail -n 1); \
	if [ -z "$$$$done" ]; then tail -n 20 $$$$log; echo "fuzz_$(1): no DONE line in $$$$log"; exit 1; fi; \
	echo "fuzz_$(1): $$$$done"
endef
$(foreach f,$(FUZZ_TARGETS),$(eval $(call FUZZ_RUN,$(f))))
