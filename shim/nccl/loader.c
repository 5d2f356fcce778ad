/*
 * The shim's own access to the dynamic loader: glibc's dlsym (the shim
 * interposes the exported one, shim/interpose/dlsym.c) and the shim's load address.
 * Below everything that looks a symbol up.
 */
#define _GNU_SOURCE
#include "loader.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* Set once (the same value from any thread that races to set it). */
static _Atomic(dlsym_fn_t) g_real_dlsym;

SHIM_EARLY dlsym_fn_t shim_real_dlsym(void)
{
    dlsym_fn_t f = atomic_load_explicit(&g_real_dlsym, memory_order_acquire);
    if (__builtin_expect(f != NULL, 1))
        return f;
    f = (dlsym_fn_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!f)
        f = (dlsym_fn_t)shim_glibc_sym("dlsym");
    if (!f) {
        /* Without glibc's dlsym nothing can be forwarded: say so and die loudly
         * rather than return wrong symbols. */
        fprintf(stderr, "ncclshim: fatal: cannot find glibc's dlsym (dlvsym GLIBC_2.34 or " SHIM_GLIBC_BASE "): %s; "
                        "remove libncclshim.so from LD_PRELOAD\n", dlerror());
        abort();
    }
    atomic_store_explicit(&g_real_dlsym, f, memory_order_release);
    return f;
}

SHIM_EARLY void *shim_glibc_sym(const char *name)
{
    return dlvsym(RTLD_NEXT, name, SHIM_GLIBC_BASE);
}

const void *shim_self_base(void)
{
    static _Atomic(const void *) base;
    const void *b = atomic_load_explicit(&base, memory_order_acquire);
    if (!b) {
        Dl_info info;
        if (dladdr((void *)shim_self_base, &info) && info.dli_fbase)
            b = info.dli_fbase;
        atomic_store_explicit(&base, b, memory_order_release);
    }
    return b;
}

