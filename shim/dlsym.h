/* The real dlsym, and facts about the shim's own mapping. */
#ifndef NCCLSHIM_DLSYM_H
#define NCCLSHIM_DLSYM_H

typedef void *(*dlsym_fn_t)(void *, const char *);

/* glibc's dlsym, found with dlvsym so that the shim's own interposer is skipped. */
dlsym_fn_t shim_real_dlsym(void);

/* Load address of libncclshim.so (to recognise lookups that found the shim itself). */
const void *shim_self_base(void);

#endif
