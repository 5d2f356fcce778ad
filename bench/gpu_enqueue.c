/*
 * gpu_enqueue: the cost of one ncclAllReduce enqueue on a real GPU, to compare
 * without and with libncclshim.so preloaded (bench/gpu_enqueue.sh runs both).
 *
 *   gpu_enqueue <libnccl.so.2> [calls=200000] [inplace|outofplace]
 *
 * Links neither libnccl nor libcudart: the CUDA driver API comes from
 * libcuda.so.1 by dlopen, and NCCL is dlopen'ed RTLD_GLOBAL and its functions
 * are looked up with dlsym(RTLD_DEFAULT), so that they resolve through the
 * global scope the way a caller linked against libnccl binds them: with the
 * shim preloaded, to the shim's exported wrappers; without it, to NCCL.  The
 * object that holds ncclAllReduce is printed (dladdr) to show which it was.
 *
 * A one-rank communicator on GPU 0; 1-float all-reduces in batches of 1000 on
 * one stream.  Only the enqueue calls are timed (CLOCK_MONOTONIC around each
 * batch); a stream synchronize after each batch, not timed, keeps the launch
 * queue from filling (a full queue would make enqueues wait for the GPU).
 *   outofplace (default): NCCL enqueues a device-to-device copy of 4 bytes
 *                         (one rank: its all-reduce is a copy), real GPU work.
 *   inplace:              NCCL has nothing to do on one rank and returns early,
 *                         the cheapest call, where the shim's share is largest.
 * Prints: enqueue_ns_per_call <median over batches> <mean over all calls>.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* NCCL's ABI (nccl.h), declared here so that nothing else is needed to build. */
typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef int ncclResult_t;
enum { ncclFloat32 = 7, ncclSum = 0 };

#define BATCH 1000
#define WARMUP_BATCHES 20

static ncclResult_t (*p_ncclGetVersion)(int *);
static ncclResult_t (*p_ncclGetUniqueId)(ncclUniqueId *);
static ncclResult_t (*p_ncclCommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
static ncclResult_t (*p_ncclAllReduce)(const void *, void *, size_t, int, int, ncclComm_t, CUstream);
static ncclResult_t (*p_ncclCommDestroy)(ncclComm_t);
static const char *(*p_ncclGetErrorString)(ncclResult_t);

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned);
static CUresult (*p_cuStreamSynchronize)(CUstream);

static void die(const char *what)
{
    fprintf(stderr, "gpu_enqueue: %s\n", what);
    exit(1);
}

static void *sym(void *handle, const char *name)
{
    void *p = dlsym(handle, name);
    if (!p) {
        fprintf(stderr, "gpu_enqueue: no %s: %s\n", name, dlerror());
        exit(1);
    }
    return p;
}

#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "gpu_enqueue: %s failed: %d\n", #call, (int)r_); exit(1); } } while (0)
#define NCCL(call) do { ncclResult_t r_ = (call); if (r_ != 0) { \
    fprintf(stderr, "gpu_enqueue: %s failed: %d %s\n", #call, r_, p_ncclGetErrorString(r_)); exit(1); } } while (0)

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *object_of(void *p)
{
    Dl_info info;
    return dladdr(p, &info) && info.dli_fname ? info.dli_fname : "?";
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4)
        die("usage: gpu_enqueue <libnccl.so.2> [calls=200000] [inplace|outofplace]");
    long calls = argc > 2 ? strtol(argv[2], NULL, 10) : 200000;
    int inplace = argc > 3 && strcmp(argv[3], "inplace") == 0;
    if (argc > 3 && !inplace && strcmp(argv[3], "outofplace") != 0)
        die("mode must be inplace or outofplace");
    if (calls < BATCH)
        die("calls must be >= 1000");
    long nbatch = calls / BATCH;

    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda)
        die(dlerror());
    p_cuInit = sym(cuda, "cuInit");
    p_cuDeviceGet = sym(cuda, "cuDeviceGet");
    p_cuDevicePrimaryCtxRetain = sym(cuda, "cuDevicePrimaryCtxRetain");
    p_cuCtxSetCurrent = sym(cuda, "cuCtxSetCurrent");
    p_cuMemAlloc = sym(cuda, "cuMemAlloc_v2");
    p_cuStreamCreate = sym(cuda, "cuStreamCreate");
    p_cuStreamSynchronize = sym(cuda, "cuStreamSynchronize");

    /* RTLD_GLOBAL puts NCCL in the global scope, after the preloaded shim. */
    if (!dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL))
        die(dlerror());
    p_ncclGetVersion = sym(RTLD_DEFAULT, "ncclGetVersion");
    p_ncclGetUniqueId = sym(RTLD_DEFAULT, "ncclGetUniqueId");
    p_ncclCommInitRank = sym(RTLD_DEFAULT, "ncclCommInitRank");
    p_ncclAllReduce = sym(RTLD_DEFAULT, "ncclAllReduce");
    p_ncclCommDestroy = sym(RTLD_DEFAULT, "ncclCommDestroy");
    p_ncclGetErrorString = sym(RTLD_DEFAULT, "ncclGetErrorString");
    printf("ncclAllReduce_in %s\n", object_of((void *)p_ncclAllReduce));

    /* The primary context is the one NCCL's runtime calls use on device 0. */
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr buf;
    CUstream stream;
    CU(p_cuInit(0));
    CU(p_cuDeviceGet(&dev, 0));
    CU(p_cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(p_cuCtxSetCurrent(ctx));
    CU(p_cuMemAlloc(&buf, 2 * sizeof(float)));
    CU(p_cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    int version = 0;
    NCCL(p_ncclGetVersion(&version));
    printf("nccl_version %d\n", version);
    ncclUniqueId id;
    ncclComm_t comm;
    NCCL(p_ncclGetUniqueId(&id));
    NCCL(p_ncclCommInitRank(&comm, 1, id, 0));

    const void *send = (const void *)(uintptr_t)buf;
    void *recv = (void *)(uintptr_t)(inplace ? buf : buf + sizeof(float));
    double *per_call = malloc(nbatch * sizeof(double));
    if (!per_call)
        die("out of memory");
    double total = 0;
    for (long b = -WARMUP_BATCHES; b < nbatch; b++) {
        int bad = 0;
        double t0 = now_ns();
        for (int i = 0; i < BATCH; i++)
            bad |= p_ncclAllReduce(send, recv, 1, ncclFloat32, ncclSum, comm, stream);
        double t1 = now_ns();
        if (bad)
            die("an ncclAllReduce failed");
        CU(p_cuStreamSynchronize(stream));
        if (b >= 0) {
            per_call[b] = (t1 - t0) / BATCH;
            total += t1 - t0;
        }
    }
    qsort(per_call, nbatch, sizeof(double), cmp_double);
    double median = nbatch % 2 ? per_call[nbatch / 2] : (per_call[nbatch / 2 - 1] + per_call[nbatch / 2]) / 2;
    printf("mode %s calls %ld batches %ld\n", inplace ? "inplace" : "outofplace", nbatch * BATCH, nbatch);
    printf("enqueue_ns_per_call %.1f %.1f\n", median, total / (nbatch * BATCH));
    NCCL(p_ncclCommDestroy(comm));
    free(per_call);
    return 0;
}
