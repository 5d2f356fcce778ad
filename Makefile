# ncclshim: a preloaded NCCL shim.  `make` builds the library and the tools;
# `make test` runs everything that needs no GPU (what CI runs); `make test-gpu`
# runs the GPU tests; `make demo` shows it working.  See README.md.

CC ?= cc
PREFIX ?= /usr/local
PYTHON ?= python3
CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Werror
# uthash from Debian (uthash-dev) or a copy in .deps/include (GPU machine).
UTHASH_INC := $(if $(wildcard /usr/include/uthash.h),,-I.deps/include)
# Before compiling anything, check what the goals need (tools/bootstrap.sh: as root with apt
# it installs the missing packages, saying so in one line); otherwise stop with one line
# naming the command to run, instead of a wall of "uthash.h: No such file" from every file.
# Only the top-level make checks: sub-makes (test-asan's) run after it.
BOOTSTRAP_all := build
BOOTSTRAP_test := test
BOOTSTRAP_test-asan := test
BOOTSTRAP_test-valgrind := test valgrind
BOOTSTRAP_demo := demo
BOOTSTRAP_fuzz := build fuzz
BOOTSTRAP_fuzz-long := build fuzz
BOOTSTRAP_wheel := wheel
BOOTSTRAP_test-aarch64 := test cross-aarch64
BOOTSTRAP_wheel-aarch64 := wheel cross-aarch64
BOOTSTRAP_bench := build
BOOTSTRAP_install := build
# A tree built and carried to a GPU host that cannot install packages (air-gapped clusters):
# `make demo` or `make install` then compiles nothing, so no compiler or header is checked,
# only what the goal itself runs.  `make -q all` says whether anything would be compiled
# with the same command-line variables (BUILD=...); it builds nothing, and checks nothing
# itself (NCCLSHIM_BOOTSTRAP=off).
BOOTSTRAP_RUN_ONLY := demo install
ifneq ($(MAKECMDGOALS),)
ifeq ($(filter-out $(BOOTSTRAP_RUN_ONLY),$(MAKECMDGOALS))$(MAKELEVEL),0)
BOOTSTRAP_BUILT := $(shell $(MAKE) -q --no-print-directory $(MAKEOVERRIDES) NCCLSHIM_BOOTSTRAP=off all > /dev/null 2>&1 && echo yes)
endif
endif
ifeq ($(BOOTSTRAP_BUILT),yes)
BOOTSTRAP_demo := demo-built
BOOTSTRAP_install :=
endif
BOOTSTRAP_FOR := $(sort $(foreach g,$(or $(MAKECMDGOALS),all),$(BOOTSTRAP_$(g))))
# (nor a dry run, `make -n`: it must not install anything)
ifeq ($(MAKELEVEL)$(if $(BOOTSTRAP_FOR),,none)$(findstring n,$(firstword -$(MAKEFLAGS))),0)
BOOTSTRAP_FAIL := $(shell NCCLSHIM_BOOTSTRAP='$(NCCLSHIM_BOOTSTRAP)' CC='$(CC)' BOOTSTRAP_CPPFLAGS='$(UTHASH_INC)' tools/bootstrap.sh --stdout $(BOOTSTRAP_FOR))
$(if $(BOOTSTRAP_FAIL),$(error $(BOOTSTRAP_FAIL)))
endif
# shim/ by concern, each folder calling only the ones below it (docs/design.md, "Layers"):
# interpose -> comm -> action -> registry -> evidence, ipc, rendezvous -> nccl -> base.
SHIM_DIRS := shim/interpose shim/comm shim/action shim/registry shim/evidence shim/ipc shim/rendezvous shim/nccl shim/base
SHIM_INC := -I. $(addprefix -I,$(SHIM_DIRS))
SHIM_CFLAGS := -std=gnu11 -fPIC -fvisibility=hidden $(WARN) $(SHIM_INC) $(UTHASH_INC) $(CFLAGS)
# libc, libdl and pthreads only: the real NCCL and CUDA are found at run time.
SHIM_LDLIBS := -ldl -lpthread

# policy/ is pure logic: every file of it goes into the library and into the tests of it.
POLICY_SRCS := $(sort $(wildcard policy/*.c))
SHIM_SRCS := $(foreach d,$(SHIM_DIRS),$(sort $(wildcard $(d)/*.c))) $(POLICY_SRCS)
SHIM_HDRS := $(foreach d,$(SHIM_DIRS),$(wildcard $(d)/*.h $(d)/*.def $(d)/*.inc)) $(wildcard policy/*.h)
BUILD ?= build
LIB := $(BUILD)/libncclshim.so
MAP := $(BUILD)/ncclshim.map

.PHONY: all test test-gpu test-asan test-valgrind demo install clean bench fuzz check-exports wheel
# What the build writes outside $(BUILD): `make clean` removes it, and the aarch64 build
# (tools/cross/cross.mk) leaves it out of its copy of the sources.
OUTPUTS := tools/ncclshim-inspect tools/inspect/report_html.gen.h tests/bin tests/fake/a tests/fake/b \
           tests/fake/old tests/fake/new tests/fake/newest tests/fake/cuda tests/fake/test_fake tests/inspect/fuzz_records
all: $(LIB) tools/ncclshim-inspect fake-nccl tests-bin

$(MAP): shim/interpose/exports.map.in shim/nccl/nccl_api.def
	@mkdir -p $(BUILD)
	$(CC) -E -P -x c -I shim/nccl $< | tr -s ' ' > $@

$(LIB): $(SHIM_SRCS) $(SHIM_HDRS) $(MAP)
	@mkdir -p $(BUILD)
	$(CC) $(SHIM_CFLAGS) -shared -Wl,--version-script=$(MAP) -Wl,-z,defs -Wl,-soname,libncclshim.so \
	    -o $@ $(SHIM_SRCS) $(SHIM_LDLIBS) $(LDFLAGS)

-include tools/inspect/inspect.mk
-include tests/fake/fake.mk
-include tests/tests.mk
-include tests/fuzz/fuzz.mk
-include tools/fabric/fabric.mk
-include tools/cross/cross.mk

# One test: `make test TESTS=tests/t/13-rendezvous.t` (or, once built, `prove -v tests/t/13-rendezvous.t`).
# TEST_JOBS (tests/tests.mk): as many at once as the machine has cores.
test: all
	prove -j$(TEST_JOBS) --timer $(TESTS)

# The whole CPU suite with the shim, the fakes and the clients built with
# AddressSanitizer and UBSan (the runtime is preloaded ahead of the shim); its bounds
# stretched by SHIM_TEST_SLOW_ASAN (tests/tests.mk).
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
test-asan:
	$(MAKE) clean
	$(MAKE) all CFLAGS="$(SAN_FLAGS)" LDFLAGS="-fsanitize=address,undefined"
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  SHIM_PRELOAD_EXTRA="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	  SHIM_TEST_SLOW=$(SHIM_TEST_SLOW_ASAN) prove -j$(TEST_JOBS) $(TESTS); status=$$?; $(MAKE) clean; exit $$status

# The C clients and the inspect tool under valgrind (memcheck, leaks).
test-valgrind: all
	SHIM_TEST_SLOW=$(SHIM_TEST_SLOW_VALGRIND) prove -v tests/valgrind/run.sh

# GPU tests: real NCCL and torch on 2 GPUs (skipped, with a reason, without them).
test-gpu: $(LIB) fabric
	NCCL_NVLS_ENABLE=0 prove -v tests/gpu/run.sh tests/gpu/lost.sh

demo: all
	tools/demo.sh

# libFuzzer (clang) on the rendezvous message parser and the policy parser:
# `make fuzz` runs each for FUZZ_SECONDS (20); `make fuzz-long` for 600.
fuzz: fuzz-short

bench: all
	bench/forward_cost.sh 100000
	bench/decision_cost.sh

# A wheel with libncclshim.so and ncclshim-inspect (pip/uv-built images):
# `python -m ncclshim --lib` prints the path for LD_PRELOAD.  Written to $(BUILD)/dist.
NCCLSHIM_VERSION = $(shell sed -n 's/^\#define NCCLSHIM_VERSION "\(.*\)"/\1/p' shim/base/version.h)
wheel: $(LIB) tools/ncclshim-inspect
	$(PYTHON) tools/wheel/build_wheel.py --lib $(LIB) --inspect tools/ncclshim-inspect \
	    --version $(NCCLSHIM_VERSION) --out $(BUILD)/dist

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/doc/ncclshim/history
	install -m 0755 $(LIB) $(DESTDIR)$(PREFIX)/lib/libncclshim.so
	install -m 0755 tools/ncclshim-inspect $(DESTDIR)$(PREFIX)/bin/ncclshim-inspect
	install -m 0644 README.md docs/*.md docs/*.png $(DESTDIR)$(PREFIX)/share/doc/ncclshim/
	install -m 0644 docs/history/*.md $(DESTDIR)$(PREFIX)/share/doc/ncclshim/history/

clean:
	rm -rf $(BUILD) $(OUTPUTS)
