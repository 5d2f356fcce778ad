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

/* glibc's dlsym, found with dlvsym so that the shim's own interposer is skipped. */
SHIM_EARLY dlsym_fn_t shim_real_dlsym(void);

/* Load address of libncclshim.so (to recognise lookups that found the shim itself). */
const void *shim_self_base(void);

#endif
