/*
 * The CUDA driver API, loaded at run time (docs/design.md, "CUDA through the
 * driver API"): dlopen("libcuda.so.1") and cuGetProcAddress, no CUDA runtime
 * and no build-time CUDA, so one build serves CUDA 12 and 13 applications.
 * Own declarations of the few types used.
 */
#ifndef NCCLSHIM_CUDA_H
#define NCCLSHIM_CUDA_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct { char reserved[64]; } CUipcMemHandle;

#define CUDA_SUCCESS 0
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#define CU_STREAM_WAIT_VALUE_GEQ 0x0
#define CU_STREAM_WRITE_VALUE_DEFAULT 0x0
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS 122
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
#define CU_POINTER_ATTRIBUTE_MAPPING_SIZE 18
#define CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR 19
#define CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID 20
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define CU_MEM_LOCATION_TYPE_DEVICE 0x1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 0x3
typedef unsigned long long CUmemGenericAllocationHandle;
/* cuStreamBatchMemOp's operations (CUDA 12's CUstreamBatchMemOpParams:
 * the wait's and the write's members have one layout). */
#define CU_STREAM_MEM_OP_WAIT_VALUE_64 4
#define CU_STREAM_MEM_OP_WRITE_VALUE_64 5
typedef union {
    int operation;
    struct {
        int operation;
        CUdeviceptr address;
        uint64_t value64;
        unsigned int flags;
        CUdeviceptr alias;              /* the driver's */
    } value;
    uint64_t pad[6];
} CUstreamBatchMemOpParams;
_Static_assert(sizeof(CUstreamBatchMemOpParams) == 48, "cuda.h's CUstreamBatchMemOpParams");

/* X(name, params): every driver function the shim uses, by its base name. */
#define SHIM_CUDA_FUNCTIONS(X)                                                                     \
    X(cuCtxGetCurrent, (CUcontext *))                                                              \
    X(cuCtxSetCurrent, (CUcontext))                                                                \
    X(cuCtxGetDevice, (CUdevice *))                                                                \
    X(cuDeviceGetAttribute, (int *, int, CUdevice))                                                \
    X(cuMemAlloc, (CUdeviceptr *, size_t))                                                         \
    X(cuMemFree, (CUdeviceptr))                                                                    \
    X(cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr))                                          \
    X(cuIpcOpenMemHandle, (CUdeviceptr *, CUipcMemHandle, unsigned int))                           \
    X(cuIpcCloseMemHandle, (CUdeviceptr))                                                          \
    X(cuPointerGetAttribute, (void *, int, CUdeviceptr))                                           \
    X(cuMemcpyDtoDAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                             \
    X(cuMemcpyDtoH, (void *, CUdeviceptr, size_t))                                                 \
    X(cuMemcpyHtoD, (CUdeviceptr, const void *, size_t))                                           \
    X(cuStreamWaitValue64, (CUstream, CUdeviceptr, uint64_t, unsigned int))                        \
    X(cuStreamWriteValue64, (CUstream, CUdeviceptr, uint64_t, unsigned int))                       \
    X(cuStreamSynchronize, (CUstream))                                                             \
    X(cuStreamIsCapturing, (CUstream, int *))                                                      \
    X(cuStreamCreate, (CUstream *, unsigned int))                                                  \
    X(cuStreamDestroy, (CUstream))                                                                 \
    X(cuEventCreate, (CUevent *, unsigned int))                                                    \
    X(cuEventDestroy, (CUevent))                                                                   \
    X(cuEventRecord, (CUevent, CUstream))                                                          \
    X(cuStreamWaitEvent, (CUstream, CUevent, unsigned int))                                        \
    X(cuGetErrorString, (CUresult, const char **))                                                 \
    X(cuMemHostRegister, (void *, size_t, unsigned int))                                           \
    X(cuMemHostUnregister, (void *))                                                               \
    X(cuMemHostGetDevicePointer, (CUdeviceptr *, void *, unsigned int))

/* cuMemcpyBatchAsync (CUDA 12.8+), asked for with the 12.8 signature. */
typedef struct {
    int type; /* CU_MEM_LOCATION_TYPE_DEVICE = 1 */
    int id;
} CUmemLocation;
typedef struct {
    int srcAccessOrder;                 /* CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 1 */
    CUmemLocation srcLocHint, dstLocHint;
    unsigned int flags;                 /* CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE = 1 */
} CUmemcpyAttributes;
typedef struct {
    CUmemLocation location;
    int flags;                          /* CUmemAccess_flags */
} CUmemAccessDesc;
typedef struct {
    int type;                           /* CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType, gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;
_Static_assert(sizeof(CUmemAllocationProp) == 32 && sizeof(CUmemAccessDesc) == 12, "cuda.h's layouts");
typedef CUresult (*cuMemcpyBatchAsync_12080_t)(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                               CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                                               size_t *failIdx, CUstream stream);

/* The optional functions, by group (X(name, params) as above). */
#define SHIM_CUDA_OPTIONAL(X)                                                                      \
    X(cuCtxGetStreamPriorityRange, (int *least, int *greatest))                                    \
    X(cuStreamCreateWithPriority, (CUstream *stream, unsigned int flags, int priority))            \
    X(cuStreamGetId, (CUstream stream, unsigned long long *id))                                   \
    X(cuStreamBatchMemOp, (CUstream stream, unsigned count, CUstreamBatchMemOpParams *ops, unsigned flags))
#define SHIM_CUDA_KERNEL(X)                                                                        \
    X(cuModuleLoadData, (CUmodule *module, const void *image))                                     \
    X(cuModuleGetFunction, (CUfunction *fn, CUmodule module, const char *name))                    \
    X(cuModuleUnload, (CUmodule module))                                                           \
    X(cuLaunchKernel, (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                       unsigned bz, unsigned shared, CUstream stream, void **params, void **extra))
#define SHIM_CUDA_VMM(X)                                                                           \
    X(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *h, void *addr))                 \
    X(cuMemRelease, (CUmemGenericAllocationHandle h))                                              \
    X(cuMemExportToShareableHandle, (void *shareable, CUmemGenericAllocationHandle h, int type,   \
                                     unsigned long long flags))                                   \
    X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *h, void *os_handle, int type)) \
    X(cuMemAddressReserve, (CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,        \
                            unsigned long long flags))                                            \
    X(cuMemAddressFree, (CUdeviceptr ptr, size_t size))                                            \
    X(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,     \
                 unsigned long long flags))                                                        \
    X(cuMemUnmap, (CUdeviceptr ptr, size_t size))                                                  \
    X(cuMemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))   \
    X(cuMemCreate, (CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, \
                    unsigned long long flags))                                                     \
    X(cuMemGetAllocationGranularity, (size_t *granularity, const CUmemAllocationProp *prop, int option))
#define SHIM_CUDA_FIELD(name, params) CUresult(*name) params;

struct shim_cuda {
    SHIM_CUDA_FUNCTIONS(SHIM_CUDA_FIELD)
    /* Optional (NULL before CUDA 12.8): copies that may go to a copy engine
     * even within one device, leaving the SMs to the application's kernels. */
    cuMemcpyBatchAsync_12080_t cuMemcpyBatchAsync;
    /* Optional: streams the GPU schedules ahead of the application's
     * kernels; a stream's id (CUDA 12.0+), unique in the context for its
     * life and never reused; several stream waits and writes in one call
     * (shim/ipc/ipc_stream.c, memops).  Each loaded alone. */
    SHIM_CUDA_OPTIONAL(SHIM_CUDA_FIELD)
    /* Optional: the ipc transport's copy kernel (shim/ipc/ipc_kernel.c), for
     * copies between processes on one GPU.  All, or none. */
    SHIM_CUDA_KERNEL(SHIM_CUDA_FIELD)
    /* Optional (CUDA 10.2+): memory of cuMemCreate (PyTorch's expandable
     * segments) shared as file descriptors (shim/ipc/ipc_vmm.c).  All, or
     * none (vmm_ok). */
    int vmm_ok;
    SHIM_CUDA_VMM(SHIM_CUDA_FIELD)
};

/*
 * The driver: NULL (with the reason in `why`) if libcuda.so.1 is not loaded
 * (asked again next time) or lacks a function.  Never loads it where the
 * process has not: a process without CUDA has nothing to move with IPC.
 */
const struct shim_cuda *shim_cuda(char *why, size_t whylen);

/* The current CUDA device of this thread, -1 if unknown (no driver loaded,
 * no current context).  Never loads CUDA. */
int shim_cuda_current_device(void);
/* fork(): no thread of the shim may be inside dlopen when the process forks
 * (the child would inherit the loader's half-changed state: it crashed in
 * its own first dlopen), so the load lock is taken before (bounded wait) and
 * released or reset after (shim_main.c). */
void shim_cuda_lock_for_fork(void);
void shim_cuda_unlock_after_fork(void);
void shim_cuda_after_fork_child(void);

/* "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory" into buf. */
const char *shim_cuda_error(const char *fn, CUresult r, char *buf, size_t len);

#endif
