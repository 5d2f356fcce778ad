/*
 * The shim finds glibc's own getenv and dlsym by symbol version
 * (shim/nccl/loader.c), and a symbol version is per architecture: each glibc
 * port starts at its own (x86_64 at GLIBC_2.2.5, aarch64 at GLIBC_2.17), so
 * a version written for one finds nothing on the other.  Run on the host by
 * `make test` and on aarch64 by `make test-aarch64` (tests/t/32-glibc-lookup.t).
 */
#define _GNU_SOURCE
#include "tap.h"
#include "loader.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *object_of(const void *p)
{
    Dl_info info;
    return p && dladdr(p, &info) && info.dli_fname ? info.dli_fname : "(nothing)";
}

/* glibc 2.34 moved dlsym from libdl into libc; either is glibc's. */
static int is_glibc(const void *p)
{
    const char *o = object_of(p);
    return strstr(o, "/libc.so.") != NULL || strstr(o, "/libdl.so.") != NULL;
}

int main(void)
{
    /* (Compared by the object they lie in: under make test-asan, the sanitizer
     * runtime's interceptors come first in the global scope.) */
    void *g = shim_glibc_sym("getenv");
    ok(is_glibc(g), "getenv at %s is glibc's (%s)", SHIM_GLIBC_BASE, object_of(g));
    void *d = shim_glibc_sym("dlsym");
    ok(is_glibc(d), "dlsym at %s is glibc's (%s): the lookup where glibc predates 2.34", SHIM_GLIBC_BASE,
       object_of(d));
    void *x = shim_glibc_sym("_exit");
    ok(is_glibc(x), "_exit at %s is glibc's (%s)", SHIM_GLIBC_BASE, object_of(x));

    dlsym_fn_t real = shim_real_dlsym();
    ok(is_glibc((const void *)real), "shim_real_dlsym is glibc's dlsym (%s)", object_of((const void *)real));
    ok(real && real(RTLD_NEXT, "getenv") == g, "and it looks names up (getenv, next after this program)");

    ok(dlvsym(RTLD_DEFAULT, "getenv", "GLIBC_0.0") == NULL, "a version this glibc lacks finds nothing");
    /* What the shim asked for on every architecture before: x86_64's. */
    void *x86 = dlvsym(RTLD_DEFAULT, "getenv", "GLIBC_2.2.5");
#if defined(__x86_64__)
    ok(x86 != NULL, "x86_64: GLIBC_2.2.5 is this port's first version");
#else
    ok(x86 == NULL, "not x86_64: a lookup at x86_64's GLIBC_2.2.5 finds nothing here");
#endif
    return tap_done();
}
