# The fake libnccl.so.2 for the CPU tests (see tests/fake/fake_nccl.c).
#
#   make -f tests/fake/fake.mk fake-nccl       a/, b/, old/, new/ and newest/libnccl.so.2
#   make -f tests/fake/fake.mk tests/fake/test_fake
#   make -f tests/fake/fake.mk check-fake      builds both and runs the test
#
# Meant to be included by the top-level Makefile; paths are relative to the
# repository root (the directory make runs in).

CC ?= cc
CFLAGS ?= -O2 -g

FAKE_DIR := tests/fake
FAKE_SRC := $(FAKE_DIR)/fake_nccl.c
FAKE_DEPS := $(FAKE_SRC) shim/nccl/nccl_abi.h shim/nccl/nccl_config.def shim/nccl/nccl_api.def $(FAKE_DIR)/fake.mk
FAKE_CFLAGS := -std=gnu11 -Wall -Wextra -Werror -fPIC -fvisibility=hidden -Ishim/nccl
FAKE_LDFLAGS := -shared -Wl,-soname,libnccl.so.2 -Wl,--no-undefined
FAKE_LIBS := -ldl -lpthread
FAKE_NCCL_LIBS := $(FAKE_DIR)/a/libnccl.so.2 $(FAKE_DIR)/b/libnccl.so.2 \
                  $(FAKE_DIR)/old/libnccl.so.2 $(FAKE_DIR)/new/libnccl.so.2 \
                  $(FAKE_DIR)/newest/libnccl.so.2

.PHONY: fake-nccl check-fake clean-fake

fake-nccl: $(FAKE_NCCL_LIBS)

$(FAKE_DIR)/a/libnccl.so.2: $(FAKE_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(FAKE_CFLAGS) $(FAKE_LDFLAGS) -o $@ $(FAKE_SRC) $(FAKE_LIBS)

$(FAKE_DIR)/b/libnccl.so.2: $(FAKE_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(FAKE_CFLAGS) '-DFAKE_NCCL_NAME="b"' $(FAKE_LDFLAGS) -o $@ $(FAKE_SRC) $(FAKE_LIBS)

$(FAKE_DIR)/old/libnccl.so.2: $(FAKE_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(FAKE_CFLAGS) -DFAKE_NCCL_OLD '-DFAKE_NCCL_NAME="old"' $(FAKE_LDFLAGS) -o $@ $(FAKE_SRC) $(FAKE_LIBS)

$(FAKE_DIR)/new/libnccl.so.2: $(FAKE_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(FAKE_CFLAGS) -DFAKE_NCCL_NEW '-DFAKE_NCCL_NAME="new"' $(FAKE_LDFLAGS) -o $@ $(FAKE_SRC) $(FAKE_LIBS)

$(FAKE_DIR)/newest/libnccl.so.2: $(FAKE_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(FAKE_CFLAGS) -DFAKE_NCCL_NEWEST '-DFAKE_NCCL_NAME="newest"' $(FAKE_LDFLAGS) -o $@ $(FAKE_SRC) $(FAKE_LIBS)

$(FAKE_DIR)/test_fake: $(FAKE_DIR)/test_fake.c shim/nccl/nccl_abi.h shim/nccl/nccl_api.def $(FAKE_DIR)/fake.mk
	$(CC) $(CFLAGS) -std=gnu11 -Wall -Wextra -Werror -Ishim/nccl -o $@ $< -ldl -lpthread

check-fake: fake-nccl $(FAKE_DIR)/test_fake
	$(FAKE_DIR)/test_fake

clean-fake:
	rm -f $(FAKE_NCCL_LIBS) $(FAKE_DIR)/test_fake $(FAKE_DIR)/cuda/libcuda.so.1

# The fake libcuda.so.1 (tests/fake/fake_cuda.c).
FAKE_CUDA_LIB := $(FAKE_DIR)/cuda/libcuda.so.1
fake-nccl: $(FAKE_CUDA_LIB)
$(FAKE_CUDA_LIB): $(FAKE_DIR)/fake_cuda.c $(FAKE_DIR)/fake.mk
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -std=gnu11 -Wall -Wextra -Werror -fPIC -fvisibility=hidden -shared -Wl,-soname,libcuda.so.1 -o $@ $<
