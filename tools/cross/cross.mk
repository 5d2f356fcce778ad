# aarch64 (Grace hosts) on an x86_64 machine: built with Debian's cross compiler, the CPU
# suite run under qemu-user, and the wheel.  Included by the top-level Makefile; what it
# needs (gcc-aarch64-linux-gnu, qemu-user-static, libjansson-dev:arm64) tools/bootstrap.sh
# installs.  See tools/cross/README.md.
#
#   make test-aarch64    the CPU suite, its programs aarch64's (tools/cross/run_suite.sh)
#   make wheel-aarch64   $(BUILD)/dist/ncclshim-VERSION-py3-none-manylinux_2_N_aarch64.whl
CROSS_TRIPLE := aarch64-linux-gnu
CROSS_CC := $(CROSS_TRIPLE)-gcc
CROSS_DIR := $(BUILD)/cross
# The suite's tree sits where the aarch64 loader expands $$LIB, under CROSS_DIR
# (run_suite.sh says why).
CROSS_ROOT := $(CROSS_DIR)/lib/$(CROSS_TRIPLE)
CROSS_WHEEL := $(CROSS_DIR)/wheel-aarch64
# The aarch64 build's flags (`make test-aarch64 CROSS_CFLAGS=...`; CFLAGS are the host's).
# Return addresses signed (PAC) and branch targets marked (BTI), as Ubuntu 24.04's arm64
# compiler builds by default: the call-site evidence reads return addresses (t/33), and
# both are no-ops on a CPU without them.
CROSS_CFLAGS ?= -O2 -g -mbranch-protection=standard
# The copy builds in its own build/, whatever $(BUILD) is here.
CROSS_MAKE = tools/cross/build_tree.sh $(1) $(BUILD) $(OUTPUTS) -- CC=$(CROSS_CC) BUILD=build 'CFLAGS=$(CROSS_CFLAGS)' $(2)

.PHONY: test-aarch64 wheel-aarch64
test-aarch64: $(LIB)
	$(call CROSS_MAKE,$(CROSS_ROOT),all)
	TEST_JOBS=$(TEST_JOBS) SHIM_TEST_SLOW=$(SHIM_TEST_SLOW_AARCH64) tools/cross/run_suite.sh $(CROSS_DIR) aarch64 $(LIB) $(TESTS)

wheel-aarch64:
	$(call CROSS_MAKE,$(CROSS_WHEEL),build/libncclshim.so tools/ncclshim-inspect)
	$(PYTHON) tools/wheel/build_wheel.py --lib $(CROSS_WHEEL)/build/libncclshim.so \
	    --inspect $(CROSS_WHEEL)/tools/ncclshim-inspect --version $(NCCLSHIM_VERSION) --out $(BUILD)/dist
