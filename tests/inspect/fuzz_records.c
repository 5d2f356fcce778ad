/* libFuzzer harness for ncclshim-inspect's parsers: the input is split into
 * lines, each fed both as a record and as an NCCL log line, then the whole
 * join/check/print pipeline runs on whatever was accepted. Both parsers and
 * every later pass must survive arbitrary bytes without leaking.
 *   make -f tools/inspect/inspect.mk fuzz-inspect
 *   tests/inspect/fuzz_records -max_total_time=60 -close_fd_mask=2 -max_len=4096 */
#include "inspect.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull)
        devnull = fopen("/dev/null", "w");
    inspect_state *st = inspect_new();
    const char *p = (const char *)data, *end = p + size;
    long lineno = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        lineno++;
        inspect_feed_record_line_ex(st, p, len, "fuzz", lineno, nl == NULL);
        inspect_feed_nccl_line(st, p, len);
        p += len + (nl != NULL);
    }
    inspect_group(st);
    inspect_check(st);
    if (devnull) {
        inspect_print_table(st, devnull, 1);
        inspect_print_json(st, devnull);
        inspect_print_html(st, devnull);
    }
    inspect_close(st);
    return 0;
}
