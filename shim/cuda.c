#define _GNU_SOURCE
#include "cuda.h"

#include "dlsym.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* cuGetProcAddress_v2 (CUDA 12+): the version-correct entry point of a base name. */
typedef CUresult (*getproc_v2_t)(const char *, void **, int, unsigned long long, int *);
/* Asked for the behaviour of CUDA 12.0: the oldest the shim supports. */
#define SHIM_CUDA_VERSION 12000

/* Loaded once under pthread_once; read-only afterwards. */
static struct shim_cuda g_cuda;
static int g_cuda_ok;
static char g_cuda_why[256];
static pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;

static void cuda_load(void)
{
    /* RTLD_NOLOAD: a CUDA application has loaded the driver already. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        snprintf(g_cuda_why, sizeof(g_cuda_why), "libcuda.so.1 is not loaded in this process (no CUDA application?)");
        return;
    }
    dlsym_fn_t real_dlsym = shim_real_dlsym();
    getproc_v2_t getproc = (getproc_v2_t)real_dlsym(h, "cuGetProcAddress_v2");
    if (!getproc) {
        snprintf(g_cuda_why, sizeof(g_cuda_why), "libcuda.so.1 has no cuGetProcAddress_v2 (a driver older than CUDA 12)");
        return;
    }
#define X(name, params)                                                                                  \
    {                                                                                                    \
        void *fn = NULL;                                                                                 \
        int status = 0;                                                                                  \
        CUresult r = getproc(#name, &fn, SHIM_CUDA_VERSION, 0, &status);                                 \
        if (r != CUDA_SUCCESS || !fn) {                                                                  \
            snprintf(g_cuda_why, sizeof(g_cuda_why), "cuGetProcAddress(%s) failed: CUresult %d, status %d", \
                     #name, r, status);                                                                  \
            return;                                                                                      \
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
    }
    /* The handle stays open: the functions must outlive this call. */
    g_cuda_ok = 1;
}

const struct shim_cuda *shim_cuda(char *why, size_t whylen)
{
    pthread_once(&g_cuda_once, cuda_load);
    if (!g_cuda_ok && why)
        snprintf(why, whylen, "%s", g_cuda_why);
    return g_cuda_ok ? &g_cuda : NULL;
}

const char *shim_cuda_error(const char *fn, CUresult r, char *buf, size_t len)
{
    const char *s = NULL;
    if (g_cuda_ok && g_cuda.cuGetErrorString)
        g_cuda.cuGetErrorString(r, &s);
    snprintf(buf, len, "%s: CUresult %d (%s)", fn, r, s ? s : "unknown");
    return buf;
}
