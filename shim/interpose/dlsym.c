/*
 * dlsym interposition (docs/design.md, "Interpose dlsym too").  Callers that
 * dlopen a libnccl and look its functions up (vLLM's ctypes pynccl, nccl4py,
 * CuPy) never see the shim's exported symbols, so the shim answers their
 * lookups of NCCL names with the wrapper of the forwarding slot bound to the
 * library they looked in.
 *
 * Every other name goes straight to glibc as a tail call, so that glibc sees
 * the caller's own return address: RTLD_NEXT lookups keep their meaning.
 */
#define _GNU_SOURCE
#include "loader.h"

#include "config.h"
#include "forward.h"
#include "record.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SHIM_EARLY static inline int is_nccl_prefix(const char *name)
{
    return name && ((name[0] == 'n' && name[1] == 'c' && name[2] == 'c' && name[3] == 'l') ||
                    (name[0] == 'p' && name[1] == 'n' && name[2] == 'c' && name[3] == 'c' && name[4] == 'l'));
}

/* A lookup of a wrapped NCCL name: which real library did it find, and which
 * slot serves that library? */
static __attribute__((noinline)) void *dlsym_nccl(void *handle, const char *name, int fn)
{
    dlsym_fn_t real = shim_real_dlsym();
    void *r = real(handle, name);
    if (!r || shim_config()->mode == MODE_OFF)
        return r; /* not found: glibc has set dlerror, exactly as without the shim */
    Dl_info info;
    if (!dladdr(r, &info) || !info.dli_fbase || !info.dli_fname)
        return r;
    if (info.dli_fbase == shim_self_base()) {
        /* The lookup found the shim's own export (RTLD_DEFAULT, a handle of the
         * main program, or RTLD_NEXT from before the shim).  Without the shim it
         * would have found the first real NCCL in the global scope, or nothing. */
        r = real(RTLD_NEXT, name);
        if (!r)
            return NULL; /* dlerror now names the missing symbol */
        if (!dladdr(r, &info) || !info.dli_fbase || !info.dli_fname)
            return r;
    }
    struct shim_slot *slot = shim_slot_for_library(info.dli_fbase, info.dli_fname, "dlsym");
    if (!slot)
        return r; /* every slot taken: the caller gets the real function (reported) */
    return shim_wrapper(slot, (enum fn_index)fn);
}

/* The call to glibc must be a tail call whatever the build flags (a sanitizer
 * or debug build lowers -O): glibc reads the caller's return address to
 * resolve RTLD_NEXT, and it must see our caller's, not ours. */
SHIM_EARLY __attribute__((visibility("default"), optimize("O2", "omit-frame-pointer", "optimize-sibling-calls")))
void *dlsym(void *handle, const char *name)
{
    int fn;
    if (__builtin_expect(!is_nccl_prefix(name), 1) || (fn = shim_fn_lookup(name)) < 0)
        return shim_real_dlsym()(handle, name);
    return dlsym_nccl(handle, name, fn);
}
