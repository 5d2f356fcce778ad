#define _GNU_SOURCE
#include "cuda.h"

#include "loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* cuGetProcAddress_v2 (CUDA 12+): the version-correct entry point of a base name. */
typedef CUresult (*getproc_v2_t)(const char *, void **, int, unsigned long long, int *);
/* Asked for the behaviour of CUDA 12.0: the oldest the shim supports. */
#define SHIM_CUDA_VERSION 12000

/* Loaded under g_cuda_lock, read-only once g_cuda_state says CUDA_OK (an
 * acquire load pairs with the release store that publishes it).  While the
 * process has not loaded the driver the state stays CUDA_ABSENT and a later
 * call tries again (the application may load CUDA after its first NCCL call);
 * a driver that lacks something is CUDA_UNUSABLE for good. */
enum { CUDA_ABSENT, CUDA_OK, CUDA_UNUSABLE };
static struct shim_cuda g_cuda;
static atomic_int g_cuda_state;
static char g_cuda_why[256];
static pthread_mutex_t g_cuda_lock = PTHREAD_MUTEX_INITIALIZER;

/* Returns the new state. */
static int cuda_load(void)
{
    /* RTLD_NOLOAD: a CUDA application has loaded the driver already. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        snprintf(g_cuda_why, sizeof(g_cuda_why), "libcuda.so.1 is not loaded in this process (no CUDA application?)");
        return CUDA_ABSENT;
    }
    dlsym_fn_t real_dlsym = shim_real_dlsym();
    getproc_v2_t getproc = (getproc_v2_t)real_dlsym(h, "cuGetProcAddress_v2");
    if (!getproc) {
        snprintf(g_cuda_why, sizeof(g_cuda_why), "libcuda.so.1 has no cuGetProcAddress_v2 (a driver older than CUDA 12)");
        return CUDA_UNUSABLE;
    }
#define X(name, params)                                                                                  \
    {                                                                                                    \
        void *fn = NULL;                                                                                 \
        int status = 0;                                                                                  \
        CUresult r = getproc(#name, &fn, SHIM_CUDA_VERSION, 0, &status);                                 \
        if (r != CUDA_SUCCESS || !fn) {                                                                  \
            snprintf(g_cuda_why, sizeof(g_cuda_why), "cuGetProcAddress(%s) failed: CUresult %d, status %d", \
                     #name, r, status);                                                                  \
            return CUDA_UNUSABLE;                                                                        \
        }                                                                                                \
        memcpy(&g_cuda.name, &fn, sizeof(fn));                                                           \
    }
    SHIM_CUDA_FUNCTIONS(X)
#undef X
    {
        void *fn = NULL;
        int status = 0;
        if (getproc("cuMemcpyBatchAsync", &fn, 12080, 0, &status) == CUDA_SUCCESS && fn)
            memcpy(&g_cuda.cuMemcpyBatchAsync, &fn, sizeof(fn));
        fn = NULL;
        if (getproc("cuCtxGetStreamPriorityRange", &fn, SHIM_CUDA_VERSION, 0, &status) == CUDA_SUCCESS && fn)
            memcpy(&g_cuda.cuCtxGetStreamPriorityRange, &fn, sizeof(fn));
        fn = NULL;
        if (getproc("cuStreamCreateWithPriority", &fn, SHIM_CUDA_VERSION, 0, &status) == CUDA_SUCCESS && fn)
            memcpy(&g_cuda.cuStreamCreateWithPriority, &fn, sizeof(fn));
        fn = NULL;
        if (getproc("cuStreamGetId", &fn, SHIM_CUDA_VERSION, 0, &status) == CUDA_SUCCESS && fn)
            memcpy(&g_cuda.cuStreamGetId, &fn, sizeof(fn));
        void *mod[4] = { NULL, NULL, NULL, NULL };
        const char *names[4] = { "cuModuleLoadData", "cuModuleGetFunction", "cuModuleUnload", "cuLaunchKernel" };
        int all = 1;
        for (int i = 0; i < 4; i++)
            all &= getproc(names[i], &mod[i], SHIM_CUDA_VERSION, 0, &status) == CUDA_SUCCESS && mod[i];
        if (all) {
            memcpy(&g_cuda.cuModuleLoadData, &mod[0], sizeof(void *));
            memcpy(&g_cuda.cuModuleGetFunction, &mod[1], sizeof(void *));
            memcpy(&g_cuda.cuModuleUnload, &mod[2], sizeof(void *));
            memcpy(&g_cuda.cuLaunchKernel, &mod[3], sizeof(void *));
        }
        void *vmm[9] = { NULL };
        const char *vnames[9] = { "cuMemRetainAllocationHandle", "cuMemRelease", "cuMemExportToShareableHandle",
                                  "cuMemImportFromShareableHandle", "cuMemAddressReserve", "cuMemAddressFree",
                                  "cuMemMap", "cuMemUnmap", "cuMemSetAccess" };
        all = 1;
        for (int i = 0; i < 9; i++)
            all &= getproc(vnames[i], &vmm[i], SHIM_CUDA_VERSION, 0, &status) == CUDA_SUCCESS && vmm[i];
        if (all) {
            memcpy(&g_cuda.cuMemRetainAllocationHandle, &vmm[0], sizeof(void *));
            memcpy(&g_cuda.cuMemRelease, &vmm[1], sizeof(void *));
            memcpy(&g_cuda.cuMemExportToShareableHandle, &vmm[2], sizeof(void *));
            memcpy(&g_cuda.cuMemImportFromShareableHandle, &vmm[3], sizeof(void *));
            memcpy(&g_cuda.cuMemAddressReserve, &vmm[4], sizeof(void *));
            memcpy(&g_cuda.cuMemAddressFree, &vmm[5], sizeof(void *));
            memcpy(&g_cuda.cuMemMap, &vmm[6], sizeof(void *));
            memcpy(&g_cuda.cuMemUnmap, &vmm[7], sizeof(void *));
            memcpy(&g_cuda.cuMemSetAccess, &vmm[8], sizeof(void *));
            g_cuda.vmm_ok = 1;
        }
    }
    /* The handle stays open: the functions must outlive this call. */
    return CUDA_OK;
}

const struct shim_cuda *shim_cuda(char *why, size_t whylen)
{
    int state = atomic_load_explicit(&g_cuda_state, memory_order_acquire);
    if (state == CUDA_ABSENT) {
        pthread_mutex_lock(&g_cuda_lock);
        state = atomic_load_explicit(&g_cuda_state, memory_order_relaxed);
        if (state == CUDA_ABSENT) {
            state = cuda_load();
            atomic_store_explicit(&g_cuda_state, state, memory_order_release);
        }
        pthread_mutex_unlock(&g_cuda_lock);
    }
    if (state != CUDA_OK && why) {
        pthread_mutex_lock(&g_cuda_lock);
        snprintf(why, whylen, "%s", g_cuda_why);
        pthread_mutex_unlock(&g_cuda_lock);
    }
    return state == CUDA_OK ? &g_cuda : NULL;
}

int shim_cuda_current_device(void)
{
    const struct shim_cuda *cu = shim_cuda(NULL, 0);
    CUdevice dev = -1;
    /* No current context is an error: unknown, as without CUDA. */
    if (!cu || cu->cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

const char *shim_cuda_error(const char *fn, CUresult r, char *buf, size_t len)
{
    const char *s = NULL;
    if (atomic_load_explicit(&g_cuda_state, memory_order_acquire) == CUDA_OK && g_cuda.cuGetErrorString)
        g_cuda.cuGetErrorString(r, &s);
    snprintf(buf, len, "%s: CUresult %d (%s)", fn, r, s ? s : "unknown");
    return buf;
}

/* Whether before_fork got g_cuda_lock: only the forking thread touches it,
 * between its prepare and parent handlers. */
static int g_cuda_locked_for_fork;

void shim_cuda_lock_for_fork(void)
{
    /* Bounded: g_cuda_lock is held across dlopen, which waits for the
     * loader's lock; a fork from a constructor inside another thread's dlopen
     * would otherwise deadlock here.  After the bound the fork goes on, as it
     * did before the shim took this lock. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    g_cuda_locked_for_fork = pthread_mutex_timedlock(&g_cuda_lock, &until) == 0;
}

void shim_cuda_unlock_after_fork(void)
{
    if (g_cuda_locked_for_fork)
        pthread_mutex_unlock(&g_cuda_lock);
    g_cuda_locked_for_fork = 0;
}

void shim_cuda_after_fork_child(void)
{
    /* The state is published only once loaded: a reset lock is enough. */
    g_cuda_locked_for_fork = 0;
    pthread_mutex_init(&g_cuda_lock, NULL);
}
