/* Where the shim finds glibc's dlsym, and its own mapping: shim/nccl/loader.c. */
#ifndef NCCLSHIM_LOADER_H
#define NCCLSHIM_LOADER_H

typedef void *(*dlsym_fn_t)(void *, const char *);

/*
 * dlsym is called by sanitizer runtimes (and other preloaded libraries) before
 * they, or the shim, are initialised; the code on that path must not be
 * instrumented, or a sanitizer build of the shim crashes every process.
 */
#define SHIM_EARLY __attribute__((no_sanitize("address", "undefined")))

/*
 * The version glibc gave the symbols it has had since its port to this
 * architecture began (getenv, and dlsym before 2.34 moved it into libc):
 * each port starts at its own, so a version written for x86_64 is absent on
 * aarch64.  A new architecture needs its own here (see `objdump -T` of its
 * libc.so.6), not a guess.
 */
#if defined(__x86_64__)
#define SHIM_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define SHIM_GLIBC_BASE "GLIBC_2.17"
#else
#error "ncclshim: SHIM_GLIBC_BASE (shim/nccl/loader.h) needs this architecture's first glibc symbol version"
#endif

/* glibc's dlsym, found with dlvsym so that the shim's own interposer is skipped. */
SHIM_EARLY dlsym_fn_t shim_real_dlsym(void);

/* glibc's `name` at SHIM_GLIBC_BASE, next after the shim (NULL if absent). */
SHIM_EARLY void *shim_glibc_sym(const char *name);

/* Load address of libncclshim.so (to recognise lookups that found the shim itself). */
const void *shim_self_base(void);

#endif
