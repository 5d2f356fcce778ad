# ncclshim-inspect. Included by the top-level Makefile, or standalone:
#   make -f tools/inspect/inspect.mk tools/ncclshim-inspect
#   make -f tools/inspect/inspect.mk fuzz-inspect   (needs clang)
CC ?= cc
CFLAGS ?= -O2 -g -Wall -Wextra -Werror
INSPECT_CFLAGS = -std=c11 -D_DEFAULT_SOURCE
INSPECT_SRCS = tools/inspect/util.c tools/inspect/state.c tools/inspect/read_records.c \
               tools/inspect/read_nccl_log.c tools/inspect/read_input.c tools/inspect/join.c \
               tools/inspect/check.c tools/inspect/print_table.c tools/inspect/print_json.c \
               tools/inspect/print_html.c
INSPECT_HDRS = tools/inspect/inspect.h tools/inspect/report_html.gen.h

# Static jansson so the binary runs on nodes without libjansson installed: the one of
# the compiler's own target (a cross compiler finds Debian's multiarch libjansson-dev:arm64).
INSPECT_JANSSON_A := $(filter /%,$(shell $(CC) -print-file-name=libjansson.a 2>/dev/null))
ifneq ($(INSPECT_JANSSON_A),)
INSPECT_LIBS ?= $(INSPECT_JANSSON_A)
else
INSPECT_LIBS ?= -ljansson
endif

# --html's page, compiled in as two C strings (before and after the data).
tools/inspect/report_html.gen.h: tools/inspect/report.html tools/inspect/html_to_c.awk
	awk -f tools/inspect/html_to_c.awk $< > $@.tmp && mv $@.tmp $@

tools/ncclshim-inspect: $(INSPECT_SRCS) tools/inspect/main.c $(INSPECT_HDRS)
	$(CC) $(CFLAGS) $(INSPECT_CFLAGS) -o $@ $(INSPECT_SRCS) tools/inspect/main.c $(LDFLAGS) $(INSPECT_LIBS)

FUZZ_CC ?= clang
tests/inspect/fuzz_records: tests/inspect/fuzz_records.c $(INSPECT_SRCS) $(INSPECT_HDRS)
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined $(INSPECT_CFLAGS) -Itools/inspect \
	  -o $@ tests/inspect/fuzz_records.c $(INSPECT_SRCS) $(INSPECT_LIBS)

.PHONY: fuzz-inspect
fuzz-inspect: tests/inspect/fuzz_records
