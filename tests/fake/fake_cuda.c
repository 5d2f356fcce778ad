/*
 * A fake libcuda.so.1 for the CPU tests: only what the shim asks of the
 * driver so far (the current device).  FAKE_CUDA_DEVICE sets it (default 0);
 * FAKE_CUDA_NO_CONTEXT=1 makes cuCtxGetDevice fail as without a context.
 */
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_CONTEXT 201

__attribute__((visibility("default"))) CUresult cuInit(unsigned int flags)
{
    (void)flags;
    return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuCtxGetDevice(CUdevice *device)
{
    const char *no = getenv("FAKE_CUDA_NO_CONTEXT");
    if (no && *no == '1')
        return CUDA_ERROR_INVALID_CONTEXT;
    const char *d = getenv("FAKE_CUDA_DEVICE");
    *device = d ? atoi(d) : 0;
    return CUDA_SUCCESS;
}
