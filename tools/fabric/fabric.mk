# EFASim: a stand-in for an AWS EFA NIC (an NCCL net plugin with a host-wide queue-pair budget),
# its CLI and its test driver.  Included by the top-level Makefile; see tools/fabric/README.md.
FABRIC_CFLAGS := -std=gnu11 $(WARN) $(CFLAGS)
FABRIC_LIBS := -lpthread -lrt
FABRIC_HDRS := tools/fabric/efasim_abi.h tools/fabric/efasim_state.h
FABRIC_PLUGIN := $(BUILD)/libnccl-net-efasim.so
FABRIC_STAT := $(BUILD)/efasim-stat
FABRIC_TEST := $(BUILD)/efasim-test

.PHONY: fabric
all: fabric
fabric: $(FABRIC_PLUGIN) $(FABRIC_STAT) $(FABRIC_TEST)

$(FABRIC_PLUGIN): tools/fabric/efasim_net.c tools/fabric/efasim_state.c $(FABRIC_HDRS)
	@mkdir -p $(@D)
	$(CC) $(FABRIC_CFLAGS) -fPIC -fvisibility=hidden -shared -Wl,-z,defs -Wl,-soname,libnccl-net-efasim.so \
	    -o $@ tools/fabric/efasim_net.c tools/fabric/efasim_state.c $(FABRIC_LIBS) $(LDFLAGS)

$(FABRIC_STAT): tools/fabric/efasim_stat.c tools/fabric/efasim_state.c $(FABRIC_HDRS)
	@mkdir -p $(@D)
	$(CC) $(FABRIC_CFLAGS) -o $@ tools/fabric/efasim_stat.c tools/fabric/efasim_state.c $(FABRIC_LIBS) $(LDFLAGS)

$(FABRIC_TEST): tests/fabric/efasim_test.c tools/fabric/efasim_state.c $(FABRIC_HDRS)
	@mkdir -p $(@D)
	$(CC) $(FABRIC_CFLAGS) -Itools/fabric -o $@ tests/fabric/efasim_test.c tools/fabric/efasim_state.c \
	    -ldl $(FABRIC_LIBS) $(LDFLAGS)
