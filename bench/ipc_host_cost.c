/*
 * Host time of each call an ipc broadcast makes (issue 36): the driver calls
 * (shim/nccl/cuda.h's table, through cuGetProcAddress as the shim loads
 * them), a futex wake with nobody waiting, and the clock.  Each is called
 * N times in runs of RUN, the stream synchronised between runs (outside the
 * timing: a full work queue would block the call), and reported as the
 * median of the runs' means, in nanoseconds per call.
 *
 *     cc -O2 -I. -Ishim/ipc -Ishim/base -Ishim/nccl -Ishim/rendezvous -o build/ipc_host_cost \
 *        bench/ipc_host_cost.c -ldl
 *     build/ipc_host_cost [N]
 */
#define _GNU_SOURCE
/* The shim's copy kernel (its PTX, copy_ptx), to time its launch. */
#include "ipc_kernel.c"

#include <dlfcn.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef CUresult (*getproc_t)(const char *, void **, int, unsigned long long, int *);
static getproc_t getproc;

static void *fn(const char *name)
{
    void *f = NULL;
    int st = 0;
    if (getproc(name, &f, 12000, 0, &st) != CUDA_SUCCESS || !f) {
        fprintf(stderr, "no %s\n", name);
        exit(2);
    }
    return f;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { RUN = 100, MAXRUNS = 1000 };
static CUresult (*sync_stream)(CUstream);
static CUstream S;

#define MEASURE(label, call)                                                                 \
    do {                                                                                     \
        static double runs[MAXRUNS];                                                         \
        int nruns = n / RUN;                                                                 \
        for (int r_ = 0; r_ < nruns; r_++) {                                                 \
            sync_stream(S);                                                                  \
            double t0_ = now_ns();                                                           \
            for (int i_ = 0; i_ < RUN; i_++)                                                 \
                if ((call) != 0) {                                                           \
                    fprintf(stderr, "%s failed\n", label);                                   \
                    exit(1);                                                                 \
                }                                                                            \
            runs[r_] = (now_ns() - t0_) / RUN;                                               \
        }                                                                                    \
        sync_stream(S);                                                                      \
        qsort(runs, (size_t)nruns, sizeof(double), cmp);                                     \
        printf("%-52s %8.0f ns\n", label, runs[nruns / 2]);                                   \
    } while (0)

/* ipc_kernel.c's error path (unused here). */
const char *shim_cuda_error(const char *fn, CUresult r, char *buf, size_t len)
{
    snprintf(buf, len, "%s: %d", fn, r);
    return buf;
}

static _Atomic unsigned word;
static int futex_wake(void)
{
    syscall(SYS_futex, (unsigned *)&word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    return 0;
}

static int clock_read(void)
{
    struct timespec ts;
    return clock_gettime(CLOCK_MONOTONIC, &ts);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    if (n / RUN > MAXRUNS)
        n = MAXRUNS * RUN;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "no libcuda.so.1\n");
        return 2;
    }
    getproc = (getproc_t)dlsym(h, "cuGetProcAddress_v2");
    CUresult (*init)(unsigned) = fn("cuInit");
    CUresult (*dev_get)(CUdevice *, int) = fn("cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = fn("cuDevicePrimaryCtxRetain");
    CUresult (*ctx_set)(CUcontext) = fn("cuCtxSetCurrent");
    CUresult (*ctx_get)(CUcontext *) = fn("cuCtxGetCurrent");
    CUresult (*stream_create)(CUstream *, unsigned) = fn("cuStreamCreate");
    CUresult (*capturing)(CUstream, int *) = fn("cuStreamIsCapturing");
    CUresult (*stream_id)(CUstream, unsigned long long *) = fn("cuStreamGetId");
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = fn("cuMemAlloc");
    CUresult (*attr)(void *, int, CUdeviceptr) = fn("cuPointerGetAttribute");
    CUresult (*host_reg)(void *, size_t, unsigned) = fn("cuMemHostRegister");
    CUresult (*host_dev)(CUdeviceptr *, void *, unsigned) = fn("cuMemHostGetDevicePointer");
    CUresult (*wait64)(CUstream, CUdeviceptr, uint64_t, unsigned) = fn("cuStreamWaitValue64");
    CUresult (*write64)(CUstream, CUdeviceptr, uint64_t, unsigned) = fn("cuStreamWriteValue64");
    CUresult (*batch)(CUstream, unsigned, CUstreamBatchMemOpParams *, unsigned) = fn("cuStreamBatchMemOp");
    CUresult (*copy)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = fn("cuMemcpyDtoDAsync");
    sync_stream = fn("cuStreamSynchronize");
    CUresult (*copy_any)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = fn("cuMemcpyAsync");
    cuMemcpyBatchAsync_12080_t copy_batch = NULL;
    {
        int st_ = 0;
        void *f_ = NULL;
        if (getproc("cuMemcpyBatchAsync", &f_, 12080, 0, &st_) == CUDA_SUCCESS)
            copy_batch = (cuMemcpyBatchAsync_12080_t)f_;
    }
    CUresult (*mod_load)(CUmodule *, const void *) = fn("cuModuleLoadData");
    CUresult (*mod_fn)(CUfunction *, CUmodule, const char *) = fn("cuModuleGetFunction");
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = fn("cuLaunchKernel");
    CUdevice d;
    CUcontext ctx, cur;
    if (init(0) || dev_get(&d, 0) || retain(&ctx, d) || ctx_set(ctx) || stream_create(&S, CU_STREAM_NON_BLOCKING)) {
        fprintf(stderr, "no device\n");
        return 2;
    }
    CUdeviceptr a, b, flags;
    void *page = aligned_alloc(4096, 4096);
    memset(page, 0, 4096);
    if (mem_alloc(&a, 4096) || mem_alloc(&b, 4096) ||
        host_reg(page, 4096, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) || host_dev(&flags, page, 0)) {
        fprintf(stderr, "set-up failed\n");
        return 2;
    }
    int st;
    unsigned long long id;
    CUmodule mod;
    CUfunction kfn;
    if (mod_load(&mod, copy_ptx) || mod_fn(&kfn, mod, "ncclshim_copy")) {
        fprintf(stderr, "no kernel\n");
        return 2;
    }
    unsigned long long n16 = 4096 / 16, tail = 0;
    void *kparams[] = { &b, &a, &n16, &tail };
    CUmemcpyAttributes cattr = { 1, { 1, 0 }, { 1, 0 }, 1 };
    size_t clen = 4096, cidx = 0, cfail = 0;
    CUstreamBatchMemOpParams ops[4];
    memset(ops, 0, sizeof(ops));
    for (int i = 0; i < 4; i++) {
        ops[i].value.operation = i % 2 ? CU_STREAM_MEM_OP_WAIT_VALUE_64 : CU_STREAM_MEM_OP_WRITE_VALUE_64;
        ops[i].value.address = flags + 64 * (unsigned)(i / 2);
        ops[i].value.value64 = 1;
    }
    printf("host time per call, median of %d runs of %d (ns)\n", n / RUN, RUN);
    MEASURE("clock_gettime", clock_read());
    MEASURE("futex wake, nobody waiting", futex_wake());
    MEASURE("cuCtxGetCurrent", ctx_get(&cur));
    MEASURE("cuStreamIsCapturing", capturing(S, &st));
    MEASURE("cuStreamGetId", stream_id(S, &id));
    MEASURE("cuPointerGetAttribute(BUFFER_ID)", attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, a));
    MEASURE("cuStreamWriteValue64 (host counter)", write64(S, flags, 1, 0));
    MEASURE("cuStreamWaitValue64 (host counter, satisfied)", wait64(S, flags, 1, 0));
    MEASURE("write + wait, two calls", write64(S, flags, 1, 0) | wait64(S, flags + 64, 0, 0));
    MEASURE("cuStreamBatchMemOp, write + wait", batch(S, 2, ops, 0));
    MEASURE("cuStreamBatchMemOp, 2 x (write + wait)", batch(S, 4, ops, 0));
    MEASURE("cuMemcpyDtoDAsync 4 KiB", copy(b, a, 4096, S));
    MEASURE("cuMemcpyAsync 4 KiB", copy_any(b, a, 4096, S));
    if (copy_batch)
        MEASURE("cuMemcpyBatchAsync 4 KiB (ipc_copy's)",
                copy_batch(&b, &a, &clen, 1, &cattr, &cidx, 1, &cfail, S));
    MEASURE("cuLaunchKernel, the copy kernel, 4 KiB (1 block)", launch(kfn, 1, 1, 1, THREADS, 1, 1, 0, S, kparams, NULL));
    MEASURE("wait + copy + write (a root's push, 3 calls)",
            wait64(S, flags, 0, 0) | copy(b, a, 4096, S) | write64(S, flags + 64, 1, 0));
    MEASURE("wait + kernel + write", wait64(S, flags, 0, 0) | launch(kfn, 1, 1, 1, THREADS, 1, 1, 0, S, kparams, NULL) |
                                         write64(S, flags + 64, 1, 0));
    /* The same copy between many allocations in turn (a refit of a tensor a
     * broadcast): the driver's look-ups of pointers it has not seen lately. */
    enum { NALLOC = 20000 };
    static CUdeviceptr many[NALLOC];
    int nmany = 0;
    while (nmany < NALLOC && mem_alloc(&many[nmany], 65536) == CUDA_SUCCESS)
        nmany++;
    if (nmany > 1) {
        int k = 0;
        MEASURE("cuMemcpyDtoDAsync 4 KiB, 20,000 allocations in turn",
                (k = (k + 2) % (nmany - 1), copy(many[k + 1], many[k], 4096, S)));
    }
    return 0;
}
