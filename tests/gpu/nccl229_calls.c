/*
 * NCCL 2.29's communicator calls for tests/gpu/suspend.py, as an application
 * built against NCCL 2.29 makes them: linked, not looked up.  On the GPU
 * machine's NCCL 2.28 a lookup finds nothing (dlsym answers as it would
 * without the shim), but a linked call binds to the preloaded shim's export,
 * which answers a shim-only (ipc) communicator itself.  Built by suspend.py
 * with `cc -shared -fPIC`; the symbols stay undefined until it is loaded.
 */
#include <stdint.h>

typedef struct ncclComm *ncclComm_t;
extern int ncclCommSuspend(ncclComm_t comm, int flags);
extern int ncclCommResume(ncclComm_t comm);
extern int ncclCommMemStats(ncclComm_t comm, int stat, uint64_t *value);

int call_suspend(ncclComm_t comm, int flags) { return ncclCommSuspend(comm, flags); }
int call_resume(ncclComm_t comm) { return ncclCommResume(comm); }
int call_mem_stats(ncclComm_t comm, int stat, uint64_t *value) { return ncclCommMemStats(comm, stat, value); }
