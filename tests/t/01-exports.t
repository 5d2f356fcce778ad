#!/bin/bash
# The exported symbol set is the API: every function of NCCL's nccl.h, its pnccl
# alias, dlsym, getenv, _exit and _Exit, and nothing else.  And the library depends on libc alone.
. "$(dirname "$0")/../tap.sh"

exports=$(nm -D --defined-only "$SHIM_LIB" | awk '{print $3}' | sort)
table=$(cpp -P -I "$ROOT/shim/nccl" -x c - <<'X' | tr -s ' \n' '\n' | grep -v '^$' | sort
#define NCCL_PLAIN(ret, name, params, args) name p##name
#define NCCL_COMM(ret, name, params, args) name p##name
#define NCCL_DATA(name, op, params, args, count, dtype) name p##name
#define NCCL_LIFE(ret, name, params, args) name p##name
#define NCCL_VOID(name, params, args) name p##name
#include "nccl_api.def"
dlsym
getenv
_exit
_Exit
X
)
is "$exports" "$table" "exported symbols are exactly the table's functions, their pnccl aliases, dlsym, getenv, _exit and _Exit"

# Every function NCCL's own header declares is wrapped (where a header is installed).
hdr=""
for h in /usr/local/cuda/include/nccl.h /usr/include/nccl.h; do [ -f "$h" ] && hdr=$h && break; done
if [ -n "$hdr" ]; then
    declared=$(grep -Eo '^(ncclResult_t|const char\*) +nccl[A-Za-z0-9]+\(' "$hdr" | grep -Eo 'nccl[A-Za-z0-9]+\(' | tr -d '(' | sort -u)
    missing=$(comm -23 <(echo "$declared") <(echo "$exports"))
    is "$missing" "" "every function of $hdr is wrapped"
    ok $([ "$(echo "$declared" | wc -l)" -ge 40 ] && echo 0 || echo 1) "the header declares the whole API ($(echo "$declared" | wc -l) functions)"
else
    ok 0 "# SKIP no nccl.h installed"
    ok 0 "# SKIP no nccl.h installed"
fi

# And every function of every newer header we have (../shared/nccl-headers).
HEADERS=${NCCL_HEADERS_DIR:-$ROOT/../shared/nccl-headers}
for h in "$HEADERS"/2.29.7/nccl.h "$HEADERS"/2.30.7/nccl.h; do
    if [ -f "$h" ]; then
        declared=$(grep -Eo '^(ncclResult_t|const char ?\*|void) +nccl[A-Za-z0-9]+\(' "$h" | grep -Eo 'nccl[A-Za-z0-9]+\(' | tr -d '(' | sort -u)
        missing=$(comm -23 <(echo "$declared") <(echo "$exports"))
        [ "$h" = "$HEADERS/2.29.7/nccl.h" ] && missing=$(echo "$missing" | grep -vx ncclResetDebugInit) # gone in 2.30
        is "$missing" "" "every function of NCCL $(basename "$(dirname "$h")")'s nccl.h is wrapped, with its pnccl alias"
    else
        ok 0 "# SKIP $h not found (NCCL_HEADERS_DIR)"
    fi
done

needed=$(readelf -d "$SHIM_LIB" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
[ -n "${SHIM_PRELOAD_EXTRA:-}" ] && needed=$(echo "$needed" | tr ' ' '\n' | grep -Ev 'lib(asan|ubsan|stdc\+\+|m|gcc_s)\.' | grep -v '^$' | tr '\n' ' ')
like "$needed" '^(libc\.so\.6 |libdl\.so\.2 |libpthread\.so\.0 |ld-linux[-a-z0-9_.]*\.so\.[0-9] )+$' "libncclshim.so needs only libc, libdl, pthreads and the dynamic loader (TLS) (got: $needed)"
unlike "$needed" 'nccl|cuda' "no libnccl or CUDA dependency"
soname=$(readelf -d "$SHIM_LIB" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
is "$soname" "libncclshim.so" "soname"
done_testing
