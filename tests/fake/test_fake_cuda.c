/*
 * The fake libcuda's own test (tests/fake/fake_cuda.c), in TAP.
 *
 *   tests/bin/test_fake_cuda [path of the fake libcuda.so.1]
 *
 * The default path is relative to the repository root (tests/t/14-fake-cuda.t
 * runs it from there).  Forked children report to the parent through their
 * exit status and pipes; only the parent prints TAP lines.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct {
    char reserved[64];
} CUipcMemHandle;

typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct {
    int type, id;
} CUmemLocation;
typedef struct { /* cuda.h 13.0's layout */
    int type, requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    unsigned char allocFlags[8];
} CUmemAllocationProp;
typedef struct {
    CUmemLocation location;
    int flags;
} CUmemAccessDesc;

enum {
    OK = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    INVALID_CONTEXT = 201,
    INVALID_HANDLE = 400,
    NOT_FOUND = 500,
    LAUNCH_TIMEOUT = 702,
    NOT_SUPPORTED = 801,
};
enum { GEQ = 0, EQ = 1, AND = 2, NOR = 3, FLUSH = 1 << 30 };

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDriverGetVersion)(int *);
static CUresult (*cuGetErrorString)(CUresult, const char **);
static CUresult (*cuGetErrorName)(CUresult, const char **);
static CUresult (*cuGetProcAddress_v2)(const char *, void **, int, unsigned long long, int *);
static CUresult (*cuGetProcAddress)(const char *, void **, int, unsigned long long);
static CUresult (*cuCtxGetCurrent)(CUcontext *);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuCtxGetDevice)(CUdevice *);
static CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemFree)(CUdeviceptr);
static CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
static CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
static CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*cuIpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
static CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
static CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
static CUresult (*cuStreamWaitValue64)(CUstream, CUdeviceptr, unsigned long long, unsigned);
static CUresult (*cuStreamWriteValue64)(CUstream, CUdeviceptr, unsigned long long, unsigned);
static CUresult (*cuStreamWaitValue32)(CUstream, CUdeviceptr, unsigned, unsigned);
static CUresult (*cuStreamWriteValue32)(CUstream, CUdeviceptr, unsigned, unsigned);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamDestroy)(CUstream);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuStreamQuery)(CUstream);
static CUresult (*cuStreamIsCapturing)(CUstream, int *);
static CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr);
static int (*fakeCudaStats)(int *, int *);
static int (*fakeCudaWaits)(void);
static int (*fakeCudaVmmStats)(int *, int *, int *, int *);
static CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
static CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                               unsigned long long);
static CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
static CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
static CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
static CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
static CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
static CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
static CUresult (*cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
static CUresult (*cuMemGetAllocationPropertiesFromHandle)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
static CUresult (*cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int, unsigned long long);
static CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);

static void *lib;
static int n_tests, n_failed;

static void ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ok(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%sok %d - ", cond ? "" : "not ", ++n_tests);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (!cond)
        n_failed++;
}

/* is(got, want, description): a CUresult or an int. */
#define is(got, want, ...)                                                  \
    do {                                                                    \
        long long g_ = (long long)(got), w_ = (long long)(want);            \
        ok(g_ == w_, __VA_ARGS__);                                          \
        if (g_ != w_)                                                       \
            printf("#   got %lld, expected %lld (%s)\n", g_, w_, #got);     \
    } while (0)

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int stats_allocs(void)
{
    int a = -1, o = -1;
    fakeCudaStats(&a, &o);
    return a;
}

static int stats_opens(void)
{
    int a = -1, o = -1;
    fakeCudaStats(&a, &o);
    return o;
}

/* How many /dev/shm/fakecuda.<pid>.* exist. */
static int shm_names(pid_t pid)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "fakecuda.%d.", (int)pid);
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

/* A child's verdict: exit status 0, else the number of its first failed check. */
static int child_status(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 1000 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}
#define CHILD_CHECK(n, cond) \
    do {                     \
        if (!(cond))         \
            _exit(n);        \
    } while (0)

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        printf("Bail out! %s is not exported: %s\n", name, dlerror());
        exit(1);
    }
    return p;
}

static void *proc(const char *base)
{
    void *p = NULL;
    int status = -1;
    CUresult rc = cuGetProcAddress_v2(base, &p, 12080, 0, &status);
    if (rc != OK || status != 0 || !p) {
        printf("Bail out! cuGetProcAddress_v2(%s): rc %d status %d\n", base, rc, status);
        exit(1);
    }
    return p;
}

/* ------------------------------------------------------------------ the tests */

static void test_exports(void)
{
    static const char *const names[] = {
        "cuInit", "cuDriverGetVersion", "cuGetErrorString", "cuGetErrorName",
        "cuGetProcAddress", "cuGetProcAddress_v2", "cuCtxGetCurrent", "cuCtxSetCurrent",
        "cuCtxGetDevice", "cuDeviceGetAttribute", "cuMemAlloc", "cuMemAlloc_v2", "cuMemFree",
        "cuMemFree_v2", "cuMemsetD8", "cuMemsetD8_v2", "cuMemsetD8Async", "cuIpcGetMemHandle",
        "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle", "cuMemcpy",
        "cuMemcpyAsync", "cuMemcpyDtoD", "cuMemcpyDtoD_v2", "cuMemcpyDtoDAsync",
        "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyHtoD",
        "cuMemcpyHtoD_v2", "cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2", "cuMemcpyHtoDAsync",
        "cuMemcpyHtoDAsync_v2", "cuStreamWaitValue64", "cuStreamWaitValue64_v2",
        "cuStreamWriteValue64", "cuStreamWriteValue64_v2", "cuStreamWaitValue32",
        "cuStreamWaitValue32_v2", "cuStreamWriteValue32", "cuStreamWriteValue32_v2",
        "cuStreamSynchronize", "cuStreamQuery", "cuStreamCreate", "cuStreamDestroy",
        "cuStreamDestroy_v2", "cuStreamIsCapturing", "cuPointerGetAttribute", "fakeCudaStats",
        "cuMemGetInfo", "cuMemGetInfo_v2", "fakeCudaFreedMapped", "fakeCudaVmmStats",
        "cuMemGetAllocationGranularity", "cuMemCreate", "cuMemRelease", "cuMemAddressReserve",
        "cuMemAddressFree", "cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemRetainAllocationHandle",
        "cuMemGetAllocationPropertiesFromHandle", "cuMemExportToShareableHandle",
        "cuMemImportFromShareableHandle",
    };
    int missing = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!dlsym(lib, names[i])) {
            printf("# not exported: %s\n", names[i]);
            missing++;
        }
    is(missing, 0, "every versioned and plain name is exported (%zu names)",
       sizeof names / sizeof names[0]);
    ok(dlsym(lib, "cuMemAlloc") == dlsym(lib, "cuMemAlloc_v2") &&
           dlsym(lib, "cuStreamWaitValue64") == dlsym(lib, "cuStreamWaitValue64_v2"),
       "a plain name is the same function as its versioned one");
}

static void test_getproc(void)
{
    static const struct {
        const char *base, *exported;
    } map[] = {
        {"cuMemAlloc", "cuMemAlloc_v2"},
        {"cuMemFree", "cuMemFree_v2"},
        {"cuMemsetD8", "cuMemsetD8_v2"},
        {"cuMemsetD8Async", "cuMemsetD8Async"},
        {"cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2"},
        {"cuIpcGetMemHandle", "cuIpcGetMemHandle"},
        {"cuMemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2"},
        {"cuStreamWaitValue64", "cuStreamWaitValue64_v2"},
        {"cuStreamWriteValue32", "cuStreamWriteValue32_v2"},
        {"cuStreamDestroy", "cuStreamDestroy_v2"},
        {"cuStreamIsCapturing", "cuStreamIsCapturing"},
        {"cuCtxGetCurrent", "cuCtxGetCurrent"},
        {"cuDeviceGetAttribute", "cuDeviceGetAttribute"},
        {"cuMemCreate", "cuMemCreate"},
        {"cuMemMap", "cuMemMap"},
        {"cuMemSetAccess", "cuMemSetAccess"},
        {"cuMemExportToShareableHandle", "cuMemExportToShareableHandle"},
        {"cuMemImportFromShareableHandle", "cuMemImportFromShareableHandle"},
        {"cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        void *p = NULL;
        int status = -1;
        CUresult rc = cuGetProcAddress_v2(map[i].base, &p, 12000, 0, &status);
        if (rc != OK || status != 0 || p != dlsym(lib, map[i].exported)) {
            printf("# %s: rc %d status %d\n", map[i].base, rc, status);
            bad++;
        }
    }
    is(bad, 0, "cuGetProcAddress_v2 maps base names to the versioned functions");

    void *p = (void *)&p;
    int status = -1;
    is(cuGetProcAddress_v2("cuNoSuchFunction", &p, 12080, 0, &status), NOT_FOUND,
       "an unknown name: CUDA_ERROR_NOT_FOUND");
    ok(p == NULL && status == 1, "... with a NULL function and CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND");
    is(cuGetProcAddress_v2("cuMemAlloc_v2", &p, 12080, 0, &status), NOT_FOUND,
       "a versioned name is not a base name");
    is(cuGetProcAddress_v2("cuMemAlloc", &p, 12080, 0, NULL), OK, "symbolStatus is optional");
    is(cuGetProcAddress_v2("cuMemAlloc", &p, 12080, 1ULL << 8, &status), INVALID_VALUE,
       "unknown flags are refused");
    is(cuGetProcAddress_v2("cuMemAlloc", &p, 12080, 2, &status), OK,
       "CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM is accepted");

    p = NULL;
    cuGetProcAddress_v2("cuGetProcAddress", &p, 12080, 0, &status);
    ok(p == (void *)cuGetProcAddress_v2, "cuGetProcAddress for CUDA 12 is the 5-argument _v2");
    p = NULL;
    cuGetProcAddress_v2("cuGetProcAddress", &p, 11080, 0, &status);
    ok(p == (void *)cuGetProcAddress, "cuGetProcAddress for CUDA 11 is the 4-argument one");
    p = NULL;
    is(cuGetProcAddress("cuStreamWaitValue64", &p, 11080, 0), OK, "the old cuGetProcAddress works");
    ok(p == dlsym(lib, "cuStreamWaitValue64_v2"), "... and finds the same function");
    is(cuGetProcAddress("cuNope", &p, 11080, 0), NOT_FOUND, "... and fails alike");
}

static void test_basics(void)
{
    is(cuInit(0), OK, "cuInit(0)");
    is(cuInit(1), INVALID_VALUE, "cuInit with flags fails");
    int v = 0;
    is(cuDriverGetVersion(&v), OK, "cuDriverGetVersion");
    is(v, 12080, "driver version 12080");
    const char *s = NULL;
    CUresult rc = cuGetErrorString(LAUNCH_TIMEOUT, &s);
    ok(rc == OK && s && strstr(s, "timed out"), "cuGetErrorString(702): %s", s ? s : "(null)");
    s = NULL;
    rc = cuGetErrorName(INVALID_HANDLE, &s);
    ok(rc == OK && s && strcmp(s, "CUDA_ERROR_INVALID_HANDLE") == 0, "cuGetErrorName(400): %s",
       s ? s : "(null)");
    ok(cuGetErrorName(900, &s) == OK && strcmp(s, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED") == 0,
       "cuGetErrorName(900)");
    s = "x";
    ok(cuGetErrorString(12345, &s) == INVALID_VALUE && s == NULL, "an unknown code: invalid value, NULL");
}

static void test_context(void)
{
    CUcontext c = NULL;
    ok(cuCtxGetCurrent(&c) == OK && c != NULL, "a current context");
    CUdevice d = -1;
    unsetenv("FAKE_CUDA_DEVICE");
    ok(cuCtxGetDevice(&d) == OK && d == 0, "device 0 by default");
    setenv("FAKE_CUDA_DEVICE", "3", 1);
    ok(cuCtxGetDevice(&d) == OK && d == 3, "FAKE_CUDA_DEVICE=3: device 3");
    unsetenv("FAKE_CUDA_DEVICE");

    setenv("FAKE_CUDA_NO_CONTEXT", "1", 1);
    CUcontext c2 = c;
    ok(cuCtxGetCurrent(&c2) == OK && c2 == NULL, "FAKE_CUDA_NO_CONTEXT=1: cuCtxGetCurrent gives NULL");
    is(cuCtxGetDevice(&d), INVALID_CONTEXT, "FAKE_CUDA_NO_CONTEXT=1: cuCtxGetDevice fails");
    CUdeviceptr p = 0;
    is(cuMemAlloc(&p, 64), INVALID_CONTEXT, "FAKE_CUDA_NO_CONTEXT=1: cuMemAlloc fails");
    unsetenv("FAKE_CUDA_NO_CONTEXT");

    is(cuCtxSetCurrent(NULL), OK, "cuCtxSetCurrent(NULL)");
    ok(cuCtxGetCurrent(&c2) == OK && c2 == NULL, "... then no current context");
    is(cuCtxGetDevice(&d), INVALID_CONTEXT, "... and cuCtxGetDevice fails");
    is(cuCtxSetCurrent((CUcontext)(void *)&d), INVALID_CONTEXT, "a foreign context is refused");
    is(cuCtxSetCurrent(c), OK, "cuCtxSetCurrent(the context)");
    ok(cuCtxGetCurrent(&c2) == OK && c2 == c, "... makes it current again");

    int a = -1;
    ok(cuDeviceGetAttribute(&a, 122, 0) == OK && a == 1, "CAN_USE_64_BIT_STREAM_MEM_OPS: 1");
    setenv("FAKE_CUDA_NO_MEMOPS", "1", 1);
    ok(cuDeviceGetAttribute(&a, 122, 0) == OK && a == 0, "FAKE_CUDA_NO_MEMOPS=1: 0");
    unsetenv("FAKE_CUDA_NO_MEMOPS");
    ok(cuDeviceGetAttribute(&a, 1, 0) == OK && a == 0, "another attribute: 0");
}

static void test_memory(void)
{
    pid_t me = getpid();
    int before = shm_names(me);
    CUdeviceptr p = 0;
    is(cuMemAlloc(&p, 4096 + 3), OK, "cuMemAlloc");
    ok(p != 0, "a non-NULL device pointer");
    is(stats_allocs(), 1, "fakeCudaStats: 1 allocation");
    is(shm_names(me), before + 1, "its shared memory object exists");
    unsigned char *h = (unsigned char *)(uintptr_t)p;
    int zero = 1;
    for (size_t i = 0; i < 4099; i++)
        zero &= h[i] == 0;
    ok(zero, "the memory is zero-filled");

    is(cuMemsetD8(p, 0xab, 100), OK, "cuMemsetD8");
    ok(h[0] == 0xab && h[99] == 0xab && h[100] == 0, "... set 100 bytes");
    is(cuMemsetD8Async(p + 200, 0xcd, 10, NULL), OK, "cuMemsetD8Async");
    ok(h[200] == 0xcd && h[209] == 0xcd && h[210] == 0, "... done when it returns");

    char src[32], dst[32];
    for (int i = 0; i < 32; i++)
        src[i] = (char)i;
    memset(dst, 0, sizeof dst);
    is(cuMemcpyHtoD(p + 1000, src, 32), OK, "cuMemcpyHtoD");
    is(cuMemcpyDtoD(p + 2000, p + 1000, 32), OK, "cuMemcpyDtoD");
    is(cuMemcpyDtoH(dst, p + 2000, 32), OK, "cuMemcpyDtoH");
    ok(memcmp(src, dst, 32) == 0, "the bytes went host -> device -> device -> host");
    memset(dst, 0, sizeof dst);
    is(cuMemcpyHtoDAsync(p + 3000, src, 32, NULL), OK, "cuMemcpyHtoDAsync");
    is(cuMemcpyDtoDAsync(p + 3100, p + 3000, 32, NULL), OK, "cuMemcpyDtoDAsync");
    is(cuMemcpyAsync(p + 3200, p + 3100, 32, NULL), OK, "cuMemcpyAsync");
    is(cuMemcpyDtoHAsync(dst, p + 3200, 32, NULL), OK, "cuMemcpyDtoHAsync");
    ok(memcmp(src, dst, 32) == 0, "the async copies are done when they return");
    is(cuMemcpyDtoD(p + 1001, p + 1000, 31), OK, "an overlapping copy");
    ok(h[1001] == 0 && h[1002] == 1 && h[1031] == 30, "... moves as memmove");
    int host_buf[4] = {1, 2, 3, 4}, host_dst[4] = {0};
    is(cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)host_dst, (CUdeviceptr)(uintptr_t)host_buf,
                         sizeof host_buf, NULL),
       OK, "host pointers are device pointers");
    ok(host_dst[3] == 4, "... copied");

    /* What the shim asks of a buffer before exporting it. */
    CUdeviceptr start = 0, start2 = 0;
    size_t size = 0;
    unsigned long long id = 0, id2 = 0;
    is(cuPointerGetAttribute(&start, 11, p + 1234), OK, "cuPointerGetAttribute(RANGE_START_ADDR) of an inner pointer");
    is(cuPointerGetAttribute(&size, 12, p + 1234), OK, "cuPointerGetAttribute(RANGE_SIZE)");
    is(cuPointerGetAttribute(&id, 7, p + 1234), OK, "cuPointerGetAttribute(BUFFER_ID)");
    ok(start == p && size == 4099 && id != 0, "... the allocation's start and size, and an ID");
    CUdeviceptr q = 0;
    is(cuMemAlloc(&q, 64), OK, "a second allocation");
    ok(cuPointerGetAttribute(&start2, 11, q) == OK && start2 == q && cuPointerGetAttribute(&id2, 7, q) == OK &&
           id2 != id,
       "... has its own start and another ID");
    cuMemFree(q);
    is(cuPointerGetAttribute(&start, 11, (CUdeviceptr)(uintptr_t)host_buf), INVALID_VALUE,
       "cuPointerGetAttribute of host memory fails");
    is(cuPointerGetAttribute(&start, 99, p), INVALID_VALUE, "an attribute the fake lacks fails");

    is(cuMemFree(p + 8), INVALID_VALUE, "cuMemFree of an inner pointer fails");
    is(cuMemFree(p), OK, "cuMemFree");
    is(stats_allocs(), 0, "fakeCudaStats: no allocation");
    is(shm_names(me), before, "its shared memory object is gone");
    is(cuMemFree(p), INVALID_VALUE, "a second cuMemFree fails");
    is(cuMemAlloc(&p, 0), INVALID_VALUE, "cuMemAlloc of 0 bytes fails");
    is(cuMemAlloc(NULL, 8), INVALID_VALUE, "cuMemAlloc without a pointer fails");
}

static void test_ipc(void)
{
    CUdeviceptr p = 0, q = 0;
    cuMemAlloc(&p, 1 << 16);
    unsigned char *h = (unsigned char *)(uintptr_t)p;
    for (int i = 0; i < 256; i++)
        h[i] = (unsigned char)i;
    CUipcMemHandle handle;
    is(cuIpcGetMemHandle(&handle, p + 16), INVALID_VALUE, "cuIpcGetMemHandle of an inner pointer fails");
    is(cuIpcGetMemHandle(&handle, p), OK, "cuIpcGetMemHandle");
    is(cuIpcOpenMemHandle(&q, handle, 1), INVALID_VALUE, "opening in the process that made it fails");
    is(stats_opens(), 0, "... and opens nothing");
    CUipcMemHandle junk;
    memset(&junk, 7, sizeof junk);

    /* The child opens the handle, checks what the parent wrote, writes its
     * own, and closes. */
    pid_t pid = fork();
    if (pid == 0) {
        CHILD_CHECK(2, stats_allocs() == 0); /* the parent's allocation is not the child's */
        CUdeviceptr c = 0, c2 = 0;
        CHILD_CHECK(3, cuIpcOpenMemHandle(&c, handle, 1) == OK);
        CHILD_CHECK(4, c != 0);
        unsigned char *m = (unsigned char *)(uintptr_t)c;
        for (int i = 0; i < 256; i++)
            CHILD_CHECK(5, m[i] == (unsigned char)i);
        CHILD_CHECK(6, stats_opens() == 1);
        CHILD_CHECK(7, cuIpcOpenMemHandle(&c2, handle, 0) == OK && c2 == c); /* refcounted */
        CHILD_CHECK(8, stats_opens() == 2);
        CHILD_CHECK(9, cuMemsetD8(c + 1000, 0x5a, 24) == OK);
        m[(1 << 16) - 1] = 0x77;
        CHILD_CHECK(10, cuIpcCloseMemHandle(c) == OK);
        CHILD_CHECK(11, stats_opens() == 1);
        CHILD_CHECK(12, m[1000] == 0x5a); /* still mapped: one reference left */
        CHILD_CHECK(13, cuIpcCloseMemHandle(c2) == OK);
        CHILD_CHECK(14, stats_opens() == 0);
        CHILD_CHECK(15, cuIpcCloseMemHandle(c) == INVALID_VALUE);
        CHILD_CHECK(16, cuIpcOpenMemHandle(&c, junk, 0) == INVALID_VALUE);
        CHILD_CHECK(17, cuIpcOpenMemHandle(&c, handle, 4) == INVALID_VALUE);
        CHILD_CHECK(18, cuMemFree(p) == INVALID_VALUE); /* not the child's to free */
        _exit(0);
    }
    is(child_status(pid), 0, "a child opens the parent's handle, reads, writes, closes (refcounted)");
    ok(h[1000] == 0x5a && h[1023] == 0x5a && h[(1 << 16) - 1] == 0x77, "the parent sees the child's writes");
    is(cuIpcCloseMemHandle(p), INVALID_VALUE, "cuIpcCloseMemHandle of an allocation fails");
    is(stats_allocs(), 1, "the child's exit left the parent's allocation alone");

    /* Parent and child both hold it: the child's close leaves the parent's view. */
    is(cuMemFree(p), OK, "cuMemFree");
    pid = fork();
    if (pid == 0) {
        CUdeviceptr c = 0;
        _exit(cuIpcOpenMemHandle(&c, handle, 1) == INVALID_HANDLE ? 0 : 2);
    }
    is(child_status(pid), 0, "opening the handle of freed memory: CUDA_ERROR_INVALID_HANDLE");
}

/* Memory freed while another process maps it stays allocated until that
 * process closes it, and is counted (fakeCudaFreedMapped); cuMemGetInfo
 * says what the process's allocations take, those included. */
static void test_freed_mapped(void)
{
    CUresult (*get_info)(size_t *, size_t *) = sym("cuMemGetInfo_v2");
    int (*freed_mapped)(void) = sym("fakeCudaFreedMapped");
    size_t free0 = 0, total = 0, free1 = 0, free2 = 0;
    is(get_info(&free0, &total), OK, "cuMemGetInfo");
    ok(total > 0 && free0 <= total, "cuMemGetInfo: %zu of %zu bytes free", free0, total);
    CUdeviceptr p = 0;
    cuMemAlloc(&p, 1 << 20);
    get_info(&free1, &total);
    is((long long)(free0 - free1), 1 << 20, "an allocation takes its size from cuMemGetInfo's free bytes");
    CUipcMemHandle handle;
    cuIpcGetMemHandle(&handle, p);
    int to_child[2], to_parent[2];
    if (pipe(to_child) != 0 || pipe(to_parent) != 0) {
        ok(0, "pipe");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        CUdeviceptr c = 0;
        char b = 0;
        CHILD_CHECK(2, cuIpcOpenMemHandle(&c, handle, 1) == OK);
        CHILD_CHECK(3, write(to_parent[1], "o", 1) == 1);
        CHILD_CHECK(4, read(to_child[0], &b, 1) == 1); /* the parent freed it */
        CHILD_CHECK(5, cuIpcCloseMemHandle(c) == OK);
        CHILD_CHECK(6, write(to_parent[1], "c", 1) == 1);
        _exit(0);
    }
    char b = 0;
    ok(read(to_parent[0], &b, 1) == 1 && b == 'o', "the child has opened it");
    is(freed_mapped(), 0, "fakeCudaFreedMapped: 0 before");
    is(cuMemFree(p), OK, "cuMemFree of memory another process maps succeeds");
    is(freed_mapped(), 1, "... and is counted (fakeCudaFreedMapped)");
    get_info(&free2, &total);
    is((long long)(free0 - free2), 1 << 20, "... and the memory stays allocated while mapped");
    is(stats_allocs(), 0, "... though it is no allocation of the process any more");
    ok(write(to_child[1], "f", 1) == 1 && read(to_parent[0], &b, 1) == 1 && b == 'c', "the child closed it");
    get_info(&free2, &total);
    is((long long)(free0 - free2), 0, "once nobody maps it, it is gone");
    is(child_status(pid), 0, "the child's checks");
    close(to_child[0]);
    close(to_child[1]);
    close(to_parent[0]);
    close(to_parent[1]);
}

/* The child raises a flag the parent waits on: the parent's thread is the one
 * that waits (synchronous streams), and it sees the data written before it. */
static void test_cross_process_wait(void)
{
    CUdeviceptr flag = 0, data = 0;
    cuMemAlloc(&flag, 64);
    cuMemAlloc(&data, 4096);
    CUipcMemHandle hf, hd;
    cuIpcGetMemHandle(&hf, flag);
    cuIpcGetMemHandle(&hd, data);
    int go[2], ready[2];
    if (pipe(go) || pipe(ready)) {
        perror("pipe");
        exit(1);
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(go[1]);
        close(ready[0]);
        CUdeviceptr f = 0, d = 0;
        CHILD_CHECK(2, cuIpcOpenMemHandle(&f, hf, 1) == OK);
        CHILD_CHECK(3, cuIpcOpenMemHandle(&d, hd, 1) == OK);
        CHILD_CHECK(4, write(ready[1], "r", 1) == 1);
        char b;
        CHILD_CHECK(5, read(go[0], &b, 1) == 1); /* the parent is about to wait */
        sleep_ms(50);
        for (int round = 1; round <= 3; round++) {
            memset((void *)(uintptr_t)d, round, 4096);
            CHILD_CHECK(6, cuStreamWriteValue64(NULL, f, (unsigned long long)round * 10, 0) == OK);
            /* the parent acknowledges in the second word of the flag */
            CHILD_CHECK(7, cuStreamWaitValue64(NULL, f + 8, (unsigned long long)round, EQ) == OK);
        }
        CHILD_CHECK(8, cuIpcCloseMemHandle(f) == OK && cuIpcCloseMemHandle(d) == OK);
        _exit(0);
    }
    close(go[0]);
    close(ready[1]);
    char b;
    ok(read(ready[0], &b, 1) == 1, "the child opened the flag and the data");
    long long t0 = now_ms(); /* before the child can start its 50 ms */
    ok(write(go[1], "g", 1) == 1, "the parent tells it to go and waits");
    int good = 1;
    for (int round = 1; round <= 3; round++) {
        CUresult rc = cuStreamWaitValue64(NULL, flag, (unsigned long long)round * 10, GEQ);
        if (rc != OK) {
            printf("# round %d: wait rc %d\n", round, rc);
            good = 0;
            break;
        }
        const unsigned char *m = (const unsigned char *)(uintptr_t)data;
        if (m[0] != round || m[4095] != round) {
            printf("# round %d: data %d %d\n", round, m[0], m[4095]);
            good = 0;
        }
        cuStreamWriteValue64(NULL, flag + 8, (unsigned long long)round, 0);
    }
    long long waited = now_ms() - t0;
    ok(good, "three rounds: the parent's GEQ wait returns once the child's flag is up, with its data");
    ok(waited >= 40, "the first wait blocked until the child wrote (%lld ms)", waited);
    is(child_status(pid), 0, "the child's waits for the acknowledgements returned");
    close(go[1]);
    close(ready[0]);
    cuMemFree(flag);
    cuMemFree(data);
}

struct capture {
    int fd, saved;
    char path[64];
};

static void capture_stderr(struct capture *c)
{
    snprintf(c->path, sizeof c->path, "/tmp/test_fake_cuda.%d.err", (int)getpid());
    fflush(stderr);
    c->saved = dup(2);
    c->fd = open(c->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    dup2(c->fd, 2);
}

static void end_capture(struct capture *c, char *buf, size_t len)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    ssize_t n = pread(c->fd, buf, len - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    close(c->fd);
    unlink(c->path);
}

static void test_wait_conditions(void)
{
    CUdeviceptr p = 0;
    cuMemAlloc(&p, 64);
    volatile uint64_t *v64 = (volatile uint64_t *)(uintptr_t)p;
    volatile uint32_t *v32 = (volatile uint32_t *)(uintptr_t)(p + 32);
    setenv("FAKE_CUDA_WAIT_TIMEOUT_MS", "100", 1);

    *v64 = 5;
    is(cuStreamWaitValue64(NULL, p, 3, GEQ), OK, "GEQ 3 holds for 5");
    is(cuStreamWaitValue64(NULL, p, 5, GEQ | FLUSH), OK, "GEQ 5 holds for 5 (with FLUSH)");
    is(cuStreamWaitValue64(NULL, p, 5, EQ), OK, "EQ 5 holds for 5");
    is(cuStreamWaitValue64(NULL, p, 4, AND), OK, "AND 4 holds for 5");
    is(cuStreamWaitValue64(NULL, p, ~5ULL, NOR), LAUNCH_TIMEOUT, "NOR ~5 does not hold for 5");
    is(cuStreamWaitValue64(NULL, p, 2, AND), LAUNCH_TIMEOUT, "AND 2 does not hold for 5");
    is(cuStreamWaitValue64(NULL, p, 6, EQ), LAUNCH_TIMEOUT, "EQ 6 does not hold for 5");
    is(cuStreamWaitValue64(NULL, p, 6, NOR), OK, "NOR 6 holds for 5");
    *v64 = ~0ULL;
    is(cuStreamWaitValue64(NULL, p, 2, GEQ), LAUNCH_TIMEOUT, "GEQ is modular: 2^64-1 is below 2");
    *v64 = 1;
    is(cuStreamWaitValue64(NULL, p, ~0ULL, GEQ), OK, "GEQ is modular: 1 is past 2^64-1");

    *v32 = 7;
    is(cuStreamWaitValue32(NULL, p + 32, 7, EQ), OK, "32-bit EQ");
    is(cuStreamWaitValue32(NULL, p + 32, 0xfffffff0u, GEQ), OK, "32-bit GEQ is modular in 32 bits");
    is(cuStreamWaitValue32(NULL, p + 32, 8, GEQ), LAUNCH_TIMEOUT, "32-bit GEQ 8 does not hold for 7");
    is(cuStreamWaitValue32(NULL, p + 32, ~7u, NOR), LAUNCH_TIMEOUT, "32-bit NOR in 32 bits");
    is(cuStreamWriteValue32(NULL, p + 32, 9, 0), OK, "cuStreamWriteValue32");
    is(*v32, 9, "... wrote");
    is(cuStreamWriteValue64(NULL, p, 1ULL << 40, 1), OK, "cuStreamWriteValue64 (no memory barrier)");
    ok(*v64 == 1ULL << 40, "... wrote 64 bits");

    is(cuStreamWaitValue64(NULL, p + 4, 0, GEQ), INVALID_VALUE, "a misaligned 64-bit wait fails");
    is(cuStreamWaitValue64(NULL, p, 0, 1u << 4), INVALID_VALUE, "unknown wait flags fail");
    is(cuStreamWriteValue64(NULL, p, 0, 2), INVALID_VALUE, "unknown write flags fail");
    is(cuStreamWaitValue64(NULL, 0, 0, GEQ), INVALID_VALUE, "a NULL address fails");

    /* The timeout, and its message. */
    *v64 = 3;
    setenv("FAKE_CUDA_WAIT_TIMEOUT_MS", "150", 1);
    struct capture c;
    char err[512];
    capture_stderr(&c);
    long long t0 = now_ms();
    CUresult rc = cuStreamWaitValue64(NULL, p, 9, GEQ);
    long long took = now_ms() - t0;
    end_capture(&c, err, sizeof err);
    is(rc, LAUNCH_TIMEOUT, "a wait that never holds: CUDA_ERROR_LAUNCH_TIMEOUT");
    ok(took >= 150 && took < 5000, "... after FAKE_CUDA_WAIT_TIMEOUT_MS (%lld ms)", took);
    ok(strstr(err, "fake libcuda: cuStreamWaitValue64 timed out: *addr=3, want GEQ 9") != NULL,
       "... and says so on stderr: %.*s", (int)strcspn(err, "\n"), err);
    capture_stderr(&c);
    rc = cuStreamWaitValue32(NULL, p + 32, ~9u, NOR);
    end_capture(&c, err, sizeof err);
    ok(rc == LAUNCH_TIMEOUT && strstr(err, "cuStreamWaitValue32 timed out: *addr=9, want NOR 4294967286"),
       "the 32-bit wait names itself and its condition");

    /* FAKE_CUDA_NO_MEMOPS: the 64-bit memory operations are not supported. */
    setenv("FAKE_CUDA_NO_MEMOPS", "1", 1);
    is(cuStreamWaitValue64(NULL, p, 0, GEQ), NOT_SUPPORTED, "FAKE_CUDA_NO_MEMOPS=1: 64-bit wait not supported");
    is(cuStreamWriteValue64(NULL, p, 0, 0), NOT_SUPPORTED, "FAKE_CUDA_NO_MEMOPS=1: 64-bit write not supported");
    is(cuStreamWriteValue32(NULL, p + 32, 1, 0), OK, "FAKE_CUDA_NO_MEMOPS=1: 32-bit write still works");
    unsetenv("FAKE_CUDA_NO_MEMOPS");
    unsetenv("FAKE_CUDA_WAIT_TIMEOUT_MS");
    cuMemFree(p);
}

/* A thread waits while others allocate and free: the wait holds no lock. */
struct churn {
    int rounds, failures;
};

static void *churn_thread(void *arg)
{
    struct churn *c = arg;
    for (int i = 0; i < c->rounds; i++) {
        CUdeviceptr p = 0;
        CUipcMemHandle h;
        if (cuMemAlloc(&p, 128 + (size_t)i) != OK || cuIpcGetMemHandle(&h, p) != OK ||
            cuMemsetD8(p, 1, 128) != OK || cuMemFree(p) != OK)
            c->failures++;
    }
    return NULL;
}

struct waiter {
    CUdeviceptr flag;
    CUresult rc;
    CUstream stream;
};

static void *wait_thread(void *arg)
{
    struct waiter *w = arg;
    w->rc = cuStreamWaitValue64(w->stream, w->flag, 1, GEQ);
    return NULL;
}

/* The wait on a non-blocking stream: the churn's synchronous memsets are
 * not queued behind it (test_queues). */
static void test_threads(void)
{
    struct waiter w = {0, -1, NULL};
    cuMemAlloc(&w.flag, 8);
    cuStreamCreate(&w.stream, 1);
    pthread_t wt, t[4];
    struct churn c[4];
    pthread_create(&wt, NULL, wait_thread, &w);
    for (int i = 0; i < 4; i++) {
        c[i].rounds = 200;
        c[i].failures = 0;
        pthread_create(&t[i], NULL, churn_thread, &c[i]);
    }
    int failures = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        failures += c[i].failures;
    }
    is(failures, 0, "four threads allocate, make handles and free 200 times each while a thread waits");
    is(stats_allocs(), 1, "only the flag is left");
    cuStreamWriteValue64(NULL, w.flag, 1, 0);
    pthread_join(wt, NULL);
    is(w.rc, OK, "the waiting thread returns once another thread writes its flag");
    cuStreamDestroy(w.stream);
    cuMemFree(w.flag);
}

static int wait_count(void)
{
    return fakeCudaWaits();
}

/* What the driver queues behind a stream wait (fake_cuda.c, "work queues"):
 * a synchronous copy behind a wait on the legacy stream, not behind one on a
 * non-blocking stream; with CUDA_DEVICE_MAX_CONNECTIONS=1, any stream's
 * operation behind any wait. */
static void test_queues(void)
{
    CUstream nb = NULL;
    uint64_t one = 1;
    struct waiter w = {0, -1, NULL};
    cuMemAlloc(&w.flag, 8);
    cuStreamCreate(&nb, 1);
    /* The waits' bound is read when they start, the queued calls' when they
     * are held: long for the waits, short for the calls. */
    setenv("FAKE_CUDA_WAIT_TIMEOUT_MS", "5000", 1);
    pthread_t wt;
    pthread_create(&wt, NULL, wait_thread, &w); /* on NULL: the legacy stream */
    while (wait_count() == 0)
        sched_yield();
    CUdeviceptr other = 0;
    cuMemAlloc(&other, 8);
    setenv("FAKE_CUDA_WAIT_TIMEOUT_MS", "300", 1);
    is(cuMemcpyHtoD(other, &one, 8), LAUNCH_TIMEOUT, "a synchronous copy waits behind a wait on the legacy stream "
       "(then says the driver would hang there)");
    is(cuStreamWriteValue64(nb, w.flag, 1, 0), OK, "a write on a non-blocking stream is not held up, and releases it");
    pthread_join(wt, NULL);
    is(w.rc, OK, "... the legacy stream's wait returns");
    w.stream = nb;
    cuStreamWriteValue64(nb, w.flag, 0, 0);
    setenv("FAKE_CUDA_WAIT_TIMEOUT_MS", "5000", 1);
    pthread_create(&wt, NULL, wait_thread, &w);
    while (wait_count() == 0)
        sched_yield();
    is(cuMemcpyHtoD(other, &one, 8), OK, "a synchronous copy is not held up by a wait on a non-blocking stream");
    setenv("FAKE_CUDA_WAIT_TIMEOUT_MS", "300", 1);
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
    is(cuStreamWriteValue64(NULL, w.flag, 1, 0), LAUNCH_TIMEOUT,
       "CUDA_DEVICE_MAX_CONNECTIONS=1: a stream write waits behind a wait on another stream");
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    *(volatile uint64_t *)(uintptr_t)w.flag = 1; /* a host store (registered host memory): no queue */
    pthread_join(wt, NULL);
    is(w.rc, OK, "... and a store from the host releases the wait");
    unsetenv("FAKE_CUDA_WAIT_TIMEOUT_MS");
    cuStreamDestroy(nb);
    cuMemFree(other);
    cuMemFree(w.flag);
}

static void test_failure_injection(void)
{
    CUdeviceptr p = 0;
    setenv("FAKE_CUDA_FAIL", "cuMemAlloc", 1);
    is(cuMemAlloc(&p, 8), OUT_OF_MEMORY, "FAKE_CUDA_FAIL=cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY");
    is(stats_allocs(), 0, "... and nothing allocated");
    setenv("FAKE_CUDA_FAIL", "cuMemAllocX,cuMemAllo", 1);
    is(cuMemAlloc(&p, 8), OK, "names match whole");
    CUipcMemHandle h;
    setenv("FAKE_CUDA_FAIL", "cuIpcGetMemHandle,cuStreamWaitValue64", 1);
    is(cuIpcGetMemHandle(&h, p), INVALID_VALUE, "a list: cuIpcGetMemHandle fails");
    is(cuStreamWaitValue64(NULL, p, 0, GEQ), INVALID_VALUE, "a list: cuStreamWaitValue64 fails");
    is(cuStreamWaitValue32(NULL, p, 0, GEQ), OK, "... not cuStreamWaitValue32");
    setenv("FAKE_CUDA_FAIL", "cuMemcpyDtoDAsync=999", 1);
    is(cuMemcpyDtoDAsync(p, p, 8, NULL), 999, "name=code fails with that code");
    setenv("FAKE_CUDA_FAIL", "cuGetProcAddress", 1);
    void *fn = NULL;
    is(cuGetProcAddress_v2("cuMemAlloc", &fn, 12080, 0, NULL), INVALID_VALUE, "cuGetProcAddress can fail too");
    unsetenv("FAKE_CUDA_FAIL");
    is(cuIpcGetMemHandle(&h, p), OK, "without FAKE_CUDA_FAIL it works again (read at each call)");
    cuMemFree(p);
}

static void test_streams(void)
{
    CUstream s = NULL;
    is(cuStreamCreate(&s, 1), OK, "cuStreamCreate");
    ok(s != NULL, "... a handle");
    is(cuStreamSynchronize(s), OK, "cuStreamSynchronize");
    is(cuStreamQuery(s), OK, "cuStreamQuery: done");
    int st = -1;
    unsetenv("FAKE_CUDA_CAPTURING");
    ok(cuStreamIsCapturing(s, &st) == OK && st == 0, "not capturing");
    setenv("FAKE_CUDA_CAPTURING", "1", 1);
    ok(cuStreamIsCapturing(s, &st) == OK && st == 1, "FAKE_CUDA_CAPTURING=1: capturing (active)");
    unsetenv("FAKE_CUDA_CAPTURING");
    is(cuStreamDestroy(s), OK, "cuStreamDestroy");
    is(cuStreamDestroy(s), INVALID_HANDLE, "destroying it again: CUDA_ERROR_INVALID_HANDLE");
}

/* ------------------------------------------------------------------ virtual memory management */

#define MiB ((size_t)1 << 20)
#define GRAN (2 * MiB)

static int vmm_stat(int which)
{
    int v[4] = {-1, -1, -1, -1};
    fakeCudaVmmStats(&v[0], &v[1], &v[2], &v[3]);
    return v[which];
}
#define VMM_HANDLES() vmm_stat(0)
#define VMM_MAPS() vmm_stat(1)
#define VMM_RESERVES() vmm_stat(2)
#define VMM_IMPORTS() vmm_stat(3)

static CUmemAllocationProp vmm_prop(int handle_types)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = 1;                  /* CU_MEM_ALLOCATION_TYPE_PINNED */
    p.requestedHandleTypes = handle_types;
    p.location.type = 1;         /* CU_MEM_LOCATION_TYPE_DEVICE */
    p.location.id = 0;
    return p;
}

static const CUmemAccessDesc RW = {{1, 0}, 3};

/* How many descriptors of the fake's VMM memfds this process holds. */
static int vmm_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len > 0) {
            target[len] = '\0';
            n += strncmp(target, "/memfd:fakecuda.vmm", 19) == 0;
        }
    }
    closedir(d);
    return n;
}

/* The permissions /proc/self/maps gives the page at p ("rw-s"): 0, or -1. */
static int prot_at(CUdeviceptr p, char perms[8])
{
    strcpy(perms, "?");
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[512];
    int rc = -1;
    while (rc && fgets(line, sizeof line, f)) {
        unsigned long long lo, hi;
        char pr[8];
        if (sscanf(line, "%llx-%llx %7s", &lo, &hi, pr) == 3 && p >= lo && p < hi) {
            snprintf(perms, 8, "%s", pr);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* `pieces` allocations of GRAN bytes mapped back to back at the start of a
 * reservation of `reserve` bytes, readable and writable: 0, or the failing
 * step. */
static int vmm_build(int handle_types, int pieces, size_t reserve, CUdeviceptr *base,
                     CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp prop = vmm_prop(handle_types);
    if (cuMemAddressReserve(base, reserve, 0, 0, 0) != OK)
        return 1;
    for (int i = 0; i < pieces; i++) {
        if (cuMemCreate(&h[i], GRAN, &prop, 0) != OK)
            return 2;
        if (cuMemMap(*base + (CUdeviceptr)i * GRAN, GRAN, 0, h[i], 0) != OK)
            return 3;
    }
    return cuMemSetAccess(*base, (size_t)pieces * GRAN, &RW, 1) != OK ? 4 : 0;
}

/* Its undoing, as PyTorch frees a segment: unmap, release, free the range. */
static int vmm_teardown(int pieces, size_t reserve, CUdeviceptr base, CUmemGenericAllocationHandle *h)
{
    int bad = 0;
    for (int i = 0; i < pieces; i++) {
        bad |= cuMemUnmap(base + (CUdeviceptr)i * GRAN, GRAN) != OK;
        bad |= cuMemRelease(h[i]) != OK;
    }
    bad |= cuMemAddressFree(base, reserve) != OK;
    return bad;
}

static void test_vmm_create(void)
{
    size_t g = 0;
    CUmemAllocationProp prop = vmm_prop(1), bad;
    is(cuMemGetAllocationGranularity(&g, &prop, 0), OK, "cuMemGetAllocationGranularity, minimum");
    is(g, GRAN, "... 2 MiB");
    g = 0;
    ok(cuMemGetAllocationGranularity(&g, &prop, 1) == OK && g == GRAN, "recommended: 2 MiB too");
    bad = prop;
    bad.type = 0;
    is(cuMemGetAllocationGranularity(&g, &bad, 0), INVALID_VALUE, "granularity of an invalid allocation type");
    is(cuMemGetAllocationGranularity(&g, &prop, 2), INVALID_VALUE, "granularity of an unknown option");
    is(cuMemGetAllocationGranularity(NULL, &prop, 0), INVALID_VALUE, "granularity into NULL");

    CUmemGenericAllocationHandle hx = 0, h0 = 0, hq = 0;
    is(cuMemCreate(&hx, GRAN, &prop, 0), OK, "cuMemCreate, POSIX file descriptor handle type");
    CUmemAllocationProp p0 = vmm_prop(0);
    is(cuMemCreate(&h0, 2 * GRAN, &p0, 0), OK, "cuMemCreate, no handle type (vLLM's sleep mode)");
    ok(hx && h0 && hx != h0, "two handles, distinct and non-zero");
    is(VMM_HANDLES(), 2, "fakeCudaVmmStats: 2 handles");
    is(cuMemCreate(&hq, GRAN + 4096, &prop, 0), INVALID_VALUE, "a size not a multiple of the granularity");
    is(cuMemCreate(&hq, 0, &prop, 0), INVALID_VALUE, "size 0");
    is(cuMemCreate(&hq, GRAN, &prop, 1), INVALID_VALUE, "flags");
    is(cuMemCreate(&hq, GRAN, NULL, 0), INVALID_VALUE, "no properties");
    bad = vmm_prop(8);
    is(cuMemCreate(&hq, GRAN, &bad, 0), NOT_SUPPORTED, "the fabric handle type: CUDA_ERROR_NOT_SUPPORTED");
    is(VMM_HANDLES(), 2, "failed creations hold nothing");

    CUmemAllocationProp got;
    memset(&got, 0x55, sizeof got);
    is(cuMemGetAllocationPropertiesFromHandle(&got, hx), OK, "cuMemGetAllocationPropertiesFromHandle");
    ok(got.type == 1 && got.requestedHandleTypes == 1 && got.location.type == 1 && got.location.id == 0 &&
           got.win32HandleMetaData == NULL,
       "... pinned, on device 0, requestedHandleTypes 1 (POSIX FD), as PyTorch's");
    ok(cuMemGetAllocationPropertiesFromHandle(&got, h0) == OK && got.requestedHandleTypes == 0,
       "... requestedHandleTypes 0 of the other");

    int fd = -1;
    is(cuMemExportToShareableHandle(&fd, hx, 1, 0), OK, "cuMemExportToShareableHandle, POSIX FD");
    struct stat st;
    ok(fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == GRAN, "... a descriptor of 2 MiB");
    close(fd);
    fd = -1;
    is(cuMemExportToShareableHandle(&fd, h0, 1, 0), INVALID_VALUE,
       "export of an allocation created without the handle type: CUDA_ERROR_INVALID_VALUE (1)");
    is(fd, -1, "... writes nothing");
    is(cuMemExportToShareableHandle(&fd, hx, 8, 0), INVALID_VALUE, "export as a fabric handle: invalid value");
    is(cuMemExportToShareableHandle(&fd, hx, 1, 1), INVALID_VALUE, "export with flags: invalid value");
    is(cuMemExportToShareableHandle(NULL, hx, 1, 0), INVALID_VALUE, "export into NULL: invalid value");

    is(cuMemRelease(hx), OK, "cuMemRelease");
    is(cuMemRelease(hx), INVALID_VALUE, "... twice: invalid value");
    is(cuMemGetAllocationPropertiesFromHandle(&got, hx), INVALID_VALUE, "a released handle has no properties");
    is(cuMemRelease(h0), OK, "cuMemRelease of the other");
    is(cuMemRelease(12345), INVALID_VALUE, "cuMemRelease of a made-up handle");
    is(VMM_HANDLES(), 0, "no handle left");
    is(vmm_fds(), 0, "no memfd descriptor left in the process");
}

/* Three pieces mapped back to back, as an expandable segment: what
 * cuPointerGetAttribute says, what the mapping rules refuse. */
static void test_vmm_map(void)
{
    CUdeviceptr base = 0, other = 0;
    CUmemGenericAllocationHandle h[3] = {0, 0, 0}, big = 0;
    size_t reserve = 4 * GRAN; /* one piece more than mapped */
    CUmemAllocationProp prop = vmm_prop(1);
    is(cuMemAddressReserve(&base, reserve, 16 * MiB, 0, 0), OK, "cuMemAddressReserve, 16 MiB alignment");
    ok(base && base % (16 * MiB) == 0, "... aligned");
    is(VMM_RESERVES(), 1, "fakeCudaVmmStats: 1 reservation");
    is(cuMemAddressReserve(&other, 4096 * 3 + 1, 0, 0, 0), INVALID_VALUE, "a size not in pages: invalid value");
    is(cuMemAddressReserve(&other, GRAN, 3 * 4096, 0, 0), INVALID_VALUE, "an alignment not a power of 2");
    is(cuMemAddressReserve(&other, GRAN, 0, 0, 1), INVALID_VALUE, "flags: invalid value");
    for (int i = 0; i < 3; i++)
        cuMemCreate(&h[i], GRAN, &prop, 0);
    cuMemCreate(&big, 2 * GRAN, &prop, 0);
    is(cuMemMap(base, GRAN, GRAN, h[0], 0), INVALID_VALUE, "cuMemMap at a non-zero offset: invalid value");
    is(cuMemMap(base + 4096, GRAN, 0, h[0], 0), INVALID_VALUE, "cuMemMap at an unaligned address");
    is(cuMemMap(base, GRAN, 0, h[0], 1), INVALID_VALUE, "cuMemMap with flags");
    is(cuMemMap(base + 3 * GRAN, 2 * GRAN, 0, big, 0), INVALID_VALUE, "cuMemMap past the reservation");
    is(cuMemMap(base, 2 * GRAN, 0, h[0], 0), INVALID_VALUE, "cuMemMap of more than the allocation");
    is(cuMemMap(base, GRAN, 0, 999, 0), INVALID_VALUE, "cuMemMap of a made-up handle");
    int bad = 0;
    for (int i = 0; i < 3; i++)
        bad |= cuMemMap(base + (CUdeviceptr)i * GRAN, GRAN, 0, h[i], 0) != OK;
    is(bad, 0, "cuMemMap of 3 pieces back to back");
    is(VMM_MAPS(), 3, "fakeCudaVmmStats: 3 mappings");
    is(cuMemMap(base + GRAN, GRAN, 0, big, 0), INVALID_VALUE, "cuMemMap over a mapping: invalid value");

    /* Inaccessible until cuMemSetAccess (read from the kernel's map rather
     * than by a fault, which a sanitizer would catch first). */
    char perms[8];
    ok(prot_at(base + GRAN, perms) == 0 && strcmp(perms, "---s") == 0,
       "mapped memory is not accessible before cuMemSetAccess (%s)", perms);
    is(cuMemSetAccess(base, 4 * GRAN, &RW, 1), INVALID_VALUE, "cuMemSetAccess over an unmapped part: invalid");
    CUmemAccessDesc host = {{2, 0}, 3}, prot = {{1, 0}, 7};
    is(cuMemSetAccess(base, 3 * GRAN, &host, 1), NOT_SUPPORTED, "cuMemSetAccess for the host: not supported");
    is(cuMemSetAccess(base, 3 * GRAN, &prot, 1), INVALID_VALUE, "cuMemSetAccess with unknown flags");
    is(cuMemSetAccess(base, 3 * GRAN, &RW, 1), OK, "cuMemSetAccess read-write over the 3 pieces");
    ok(prot_at(base + 2 * GRAN, perms) == 0 && strcmp(perms, "rw-s") == 0, "... and is after (%s)", perms);
    unsigned char *m = (unsigned char *)(uintptr_t)base;
    for (size_t i = 0; i < 3 * GRAN; i += 4096)
        m[i] = (unsigned char)(i / 4096);
    m[3 * GRAN - 1] = 0x42;
    ok(m[GRAN] == (unsigned char)(GRAN / 4096) && m[3 * GRAN - 1] == 0x42, "the 3 pieces read and write as one");

    /* The attributes, as the driver gives them of PyTorch's segments. */
    static const size_t at[] = {0, 5, GRAN - 1, GRAN, GRAN + 12345, 3 * GRAN - 1};
    unsigned long long ids[3] = {0, 0, 0}, blocks[3] = {0, 0, 0};
    int good = 1;
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        CUdeviceptr p = base + at[k], rs = 0, mb = 0;
        size_t rz = 0, mz = 0;
        unsigned long long id = 0, blk = 0;
        int legacy = -1, mapped = -1;
        size_t piece = at[k] / GRAN;
        CUresult r = cuPointerGetAttribute(&rs, 11, p) | cuPointerGetAttribute(&rz, 12, p) |
                     cuPointerGetAttribute(&mb, 19, p) | cuPointerGetAttribute(&mz, 18, p) |
                     cuPointerGetAttribute(&id, 7, p) | cuPointerGetAttribute(&blk, 20, p) |
                     cuPointerGetAttribute(&legacy, 10, p) | cuPointerGetAttribute(&mapped, 13, p);
        if (r != OK || rs != base || rz != reserve || mb != base + piece * GRAN || mz != GRAN || !id || !blk ||
            legacy != 0 || mapped != 1 || (ids[piece] && ids[piece] != id) ||
            (blocks[piece] && blocks[piece] != blk)) {
            printf("# at +%zu: rc %d range %llx+%zu mapping %llx+%zu id %llu block %llu legacy %d\n", at[k], r,
                   rs, rz, mb, mz, id, blk, legacy);
            good = 0;
        }
        ids[piece] = id;
        blocks[piece] = blk;
    }
    ok(good, "attributes at 6 addresses: range = the reservation, mapping = the piece, ids per piece");
    ok(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2], "BUFFER_ID: one per mapping (%llu %llu %llu)",
       ids[0], ids[1], ids[2]);
    ok(blocks[0] < blocks[1] && blocks[1] < blocks[2], "MEMORY_BLOCK_ID: one per allocation, increasing");
    CUdeviceptr rs = 0;
    is(cuPointerGetAttribute(&rs, 11, base + 3 * GRAN), INVALID_VALUE,
       "attributes of reserved address space not mapped: invalid value");
    CUipcMemHandle ih;
    is(cuIpcGetMemHandle(&ih, base), INVALID_VALUE, "cuIpcGetMemHandle of VMM memory fails");

    CUmemGenericAllocationHandle r = 0;
    is(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(base + GRAN + 777)), OK,
       "cuMemRetainAllocationHandle at an inner address");
    is(r, h[1], "... the handle mapped there");
    is(VMM_HANDLES(), 5, "... one more reference");
    is(cuMemRelease(r), OK, "which the caller releases");
    is(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(base + 3 * GRAN)), INVALID_VALUE,
       "retain where nothing is mapped: invalid value");

    is(cuMemUnmap(base, GRAN / 2), INVALID_VALUE, "cuMemUnmap of part of a mapping: invalid value");
    is(cuMemAddressFree(base, reserve), INVALID_VALUE, "cuMemAddressFree of a range still mapped: refused");
    /* Released while mapped: the mapping keeps the memory. */
    is(cuMemRelease(h[2]), OK, "cuMemRelease of a mapped piece");
    ok(m[3 * GRAN - 1] == 0x42, "... its memory stays while mapped");
    is(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(base + 2 * GRAN)), OK, "... and can be retained");
    is(r, h[2], "... with the same handle value");
    cuMemRelease(r);
    is(cuMemUnmap(base + GRAN, 2 * GRAN), OK, "cuMemUnmap of two whole mappings at once");
    is(VMM_MAPS(), 1, "one mapping left");
    ok(cuMemUnmap(base, GRAN) == OK && cuMemRelease(h[0]) == OK && cuMemRelease(h[1]) == OK &&
           cuMemRelease(big) == OK,
       "the rest unmapped and released");
    is(cuMemAddressFree(base, GRAN), INVALID_VALUE, "cuMemAddressFree of another size: invalid value");
    is(cuMemAddressFree(base, reserve), OK, "cuMemAddressFree");
    is(cuMemAddressFree(base, reserve), INVALID_VALUE, "... twice: invalid value");
    ok(VMM_HANDLES() == 0 && VMM_MAPS() == 0 && VMM_RESERVES() == 0 && vmm_fds() == 0,
       "nothing held: handles %d, mappings %d, reservations %d, memfds %d", VMM_HANDLES(), VMM_MAPS(),
       VMM_RESERVES(), vmm_fds());
}

static int send_fds(int sock, const int *fds, int n)
{
    char byte = 'F', cbuf[CMSG_SPACE(sizeof(int) * 8)];
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {0};
    memset(cbuf, 0, sizeof cbuf);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n);
    return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fds(int sock, int *fds, int n)
{
    char byte, cbuf[CMSG_SPACE(sizeof(int) * 8)];
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int) * (size_t)n))
        return -1;
    memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)n);
    return 0;
}

static int put_byte(int sock, char b)
{
    return write(sock, &b, 1) == 1 ? 0 : -1;
}

static char get_byte(int sock)
{
    char b = 0;
    return read(sock, &b, 1) == 1 ? b : 0;
}

static unsigned char vpat(size_t i, int round)
{
    return (unsigned char)(i * 7 + (size_t)round * 13 + 1);
}

/* A segment exported piece by piece as descriptors over a Unix socket, as
 * the shim does: the child maps it contiguous, each side sees the other's
 * writes, and the memory outlives the exporter's unmap and release. */
static void test_vmm_share(void)
{
    enum { N = 3 };
    CUdeviceptr base = 0;
    CUmemGenericAllocationHandle h[N];
    is(vmm_build(1, N, N * GRAN, &base, h), 0, "an exportable segment of 3 pieces");
    unsigned char *m = (unsigned char *)(uintptr_t)base;
    for (size_t i = 0; i < N * GRAN; i++)
        m[i] = vpat(i, 0);
    unsigned long long parent_blocks[N];
    for (int i = 0; i < N; i++)
        cuPointerGetAttribute(&parent_blocks[i], 20, base + (CUdeviceptr)i * GRAN);
    int fds[N], sv[2];
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad |= cuMemExportToShareableHandle(&fds[i], h[i], 1, 0) != OK;
    is(bad, 0, "each piece exported as a descriptor");
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        ok(0, "socketpair: %s", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        alarm(30);
        close(sv[0]);
        for (int i = 0; i < N; i++) /* the parent's exports, inherited: not how the child gets them */
            close(fds[i]);
        int s = sv[1], got[N];
        CHILD_CHECK(2, VMM_HANDLES() == 0 && VMM_MAPS() == 0); /* the parent's are not the child's */
        CHILD_CHECK(3, vmm_fds() == 0);                        /* ... nor their descriptors */
        CHILD_CHECK(4, recv_fds(s, got, N) == 0);
        CUmemGenericAllocationHandle imp[N];
        for (int i = 0; i < N; i++) {
            CHILD_CHECK(5, cuMemImportFromShareableHandle(&imp[i], (void *)(intptr_t)got[i], 1) == OK);
            CHILD_CHECK(6, close(got[i]) == 0); /* the importer keeps its own */
            CUmemAllocationProp pr;
            CHILD_CHECK(7, cuMemGetAllocationPropertiesFromHandle(&pr, imp[i]) == OK &&
                               pr.requestedHandleTypes == 1);
        }
        CHILD_CHECK(8, VMM_IMPORTS() == N && VMM_HANDLES() == N);
        CUdeviceptr cb = 0;
        CHILD_CHECK(9, cuMemAddressReserve(&cb, N * GRAN, 0, 0, 0) == OK);
        for (int i = 0; i < N; i++)
            CHILD_CHECK(10, cuMemMap(cb + (CUdeviceptr)i * GRAN, GRAN, 0, imp[i], 0) == OK);
        CHILD_CHECK(11, cuMemSetAccess(cb, N * GRAN, &RW, 1) == OK);
        unsigned char *c = (unsigned char *)(uintptr_t)cb;
        for (size_t i = 0; i < N * GRAN; i++)
            CHILD_CHECK(12, c[i] == vpat(i, 0));
        unsigned long long blk[N];
        for (int i = 0; i < N; i++) {
            CHILD_CHECK(13, cuPointerGetAttribute(&blk[i], 20, cb + (CUdeviceptr)i * GRAN) == OK);
            CHILD_CHECK(14, blk[i] > parent_blocks[N - 1] && (i == 0 || blk[i] > blk[i - 1]));
        }
        for (size_t i = 0; i < N * GRAN; i++)
            c[i] = vpat(i, 1);
        CHILD_CHECK(15, put_byte(s, 'w') == 0);
        CHILD_CHECK(16, get_byte(s) == 'r'); /* the parent unmapped and released all */
        for (size_t i = 0; i < N * GRAN; i += 1000)
            CHILD_CHECK(17, c[i] == vpat(i, 1));
        for (size_t i = 0; i < N * GRAN; i++)
            c[i] = vpat(i, 2);
        for (size_t i = 0; i < N * GRAN; i += 999)
            CHILD_CHECK(18, c[i] == vpat(i, 2));
        CHILD_CHECK(19, VMM_MAPS() == N && vmm_fds() == N);
        CHILD_CHECK(20, vmm_teardown(N, N * GRAN, cb, imp) == 0);
        CHILD_CHECK(21, VMM_HANDLES() == 0 && VMM_MAPS() == 0 && VMM_RESERVES() == 0 && vmm_fds() == 0);
        CHILD_CHECK(22, VMM_IMPORTS() == N); /* counted in all */
        _exit(0);
    }
    close(sv[1]);
    int s = sv[0];
    is(send_fds(s, fds, N), 0, "the descriptors sent to a child with SCM_RIGHTS");
    for (int i = 0; i < N; i++)
        close(fds[i]);
    char w = get_byte(s);
    ok(w == 'w', "the child imported, mapped contiguous, read the parent's bytes and wrote its own");
    if (w != 'w') { /* it failed: say where, and go no further */
        printf("#   the child's failed check: %d\n", child_status(pid));
        close(s);
        return;
    }
    int same = 1;
    for (size_t i = 0; i < N * GRAN && same; i++)
        same = m[i] == vpat(i, 1);
    ok(same, "the parent sees the child's bytes in its own mapping");
    is(vmm_teardown(N, N * GRAN, base, h), 0, "the exporter unmaps, releases, frees its range");
    ok(VMM_HANDLES() == 0 && VMM_MAPS() == 0 && vmm_fds() == 0, "... and holds nothing more");
    put_byte(s, 'r');
    is(child_status(pid), 0, "the importer's memory outlived that, read and wrote; it let go of all");
    close(s);
    is(VMM_IMPORTS(), 0, "the parent imported nothing");
}

/* Bad descriptors are refused cleanly. */
static void test_vmm_import_bad(void)
{
    CUmemGenericAllocationHandle h = 0;
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    is(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, 1), INVALID_VALUE,
       "import of a descriptor not of an allocation: invalid value");
    close(fd);
    fd = memfd_create("not-fakecuda", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)GRAN) == 0)
        is(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, 1), INVALID_VALUE,
           "import of another memfd of 2 MiB: invalid value");
    if (fd >= 0)
        close(fd);
    is(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)-1, 1), INVALID_VALUE, "import of -1: invalid value");
    is(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)0, 8), NOT_SUPPORTED, "import of a fabric handle");
    is(cuMemImportFromShareableHandle(NULL, (void *)(intptr_t)0, 1), INVALID_VALUE, "import into NULL");
    /* Its own export, imported in the same process: a new handle and block id. */
    CUmemAllocationProp prop = vmm_prop(1);
    CUmemGenericAllocationHandle a = 0, b = 0;
    cuMemCreate(&a, GRAN, &prop, 0);
    fd = -1;
    cuMemExportToShareableHandle(&fd, a, 1, 0);
    is(cuMemImportFromShareableHandle(&b, (void *)(intptr_t)fd, 1), OK, "import of a descriptor of its own");
    close(fd);
    ok(b && b != a && VMM_IMPORTS() == 1 && VMM_HANDLES() == 2, "... a new handle, counted as an import");
    ok(cuMemRelease(a) == OK && cuMemRelease(b) == OK && VMM_HANDLES() == 0 && vmm_fds() == 0,
       "both released, no descriptor left");
}

/* FAKE_CUDA_FAIL reaches the VMM functions. */
static void test_vmm_injection(void)
{
    CUmemAllocationProp prop = vmm_prop(1);
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr p = 0;
    setenv("FAKE_CUDA_FAIL", "cuMemCreate", 1);
    is(cuMemCreate(&h, GRAN, &prop, 0), OUT_OF_MEMORY, "FAKE_CUDA_FAIL=cuMemCreate: out of memory");
    setenv("FAKE_CUDA_FAIL", "cuMemAddressReserve=801,cuMemExportToShareableHandle", 1);
    is(cuMemAddressReserve(&p, GRAN, 0, 0, 0), NOT_SUPPORTED, "FAKE_CUDA_FAIL=cuMemAddressReserve=801");
    unsetenv("FAKE_CUDA_FAIL");
    is(cuMemCreate(&h, GRAN, &prop, 0), OK, "without it, cuMemCreate works");
    int fd = -1;
    setenv("FAKE_CUDA_FAIL", "cuMemExportToShareableHandle", 1);
    is(cuMemExportToShareableHandle(&fd, h, 1, 0), INVALID_VALUE, "FAKE_CUDA_FAIL=cuMemExportToShareableHandle");
    unsetenv("FAKE_CUDA_FAIL");
    is(cuMemRelease(h), OK, "released");
    ok(VMM_HANDLES() == 0 && VMM_RESERVES() == 0 && vmm_fds() == 0, "failed calls hold nothing");
}

/* Threads building and tearing down segments at once: the tables hold. */
static void *vmm_churn(void *arg)
{
    (void)arg;
    for (int k = 0; k < 40; k++) {
        CUdeviceptr base = 0;
        CUmemGenericAllocationHandle h[2];
        if (vmm_build(k % 2, 2, 2 * GRAN, &base, h) != 0)
            return (void *)1;
        unsigned char *m = (unsigned char *)(uintptr_t)base;
        m[0] = m[2 * GRAN - 1] = (unsigned char)k;
        CUmemGenericAllocationHandle r = 0;
        if (cuMemRetainAllocationHandle(&r, m + GRAN) != OK || r != h[1] || cuMemRelease(r) != OK)
            return (void *)2;
        if (vmm_teardown(2, 2 * GRAN, base, h) != 0)
            return (void *)3;
    }
    return NULL;
}

static void test_vmm_threads(void)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, vmm_churn, NULL);
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        pthread_join(t[i], &r);
        bad |= r != NULL;
    }
    is(bad, 0, "4 threads build, touch and tear down 40 segments each");
    ok(VMM_HANDLES() == 0 && VMM_MAPS() == 0 && VMM_RESERVES() == 0 && vmm_fds() == 0,
       "... and leave nothing held");
}

/* The first line of a file ("" if there is none). */
static void first_line(const char *path, char *line, size_t len)
{
    line[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(line, (int)len, f))
            line[0] = '\0';
        fclose(f);
    }
}

/* FAKE_CUDA_LOG counts the VMM objects a process leaves behind. */
static void test_vmm_exit_log(void)
{
    char log[64];
    snprintf(log, sizeof log, "/tmp/test_fake_cuda.vmm.%d.log", (int)getpid());
    unlink(log);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("FAKE_CUDA_LOG", log, 1);
        CUdeviceptr base = 0;
        CUmemGenericAllocationHandle h[1], b = 0;
        CHILD_CHECK(2, vmm_build(1, 1, 2 * GRAN, &base, h) == 0);
        int fd = -1;
        CHILD_CHECK(3, cuMemExportToShareableHandle(&fd, h[0], 1, 0) == OK);
        CHILD_CHECK(4, cuMemImportFromShareableHandle(&b, (void *)(intptr_t)fd, 1) == OK);
        exit(0); /* leaks the handle, its mapping, the range and the import */
    }
    is(child_status(pid), 0, "a child leaks a VMM handle, a mapping, a reservation and an import");
    char line[256], want[256];
    first_line(log, line, sizeof line);
    snprintf(want, sizeof want,
             "%d allocs=0 ipc_opens=0 opened=0 vmm_handles=2 vmm_maps=1 vmm_reserves=1 vmm_imports=1\n",
             (int)pid);
    ok(strcmp(line, want) == 0, "FAKE_CUDA_LOG says so: %.*s", (int)strcspn(line, "\n"), line);
    unlink(log);
}

/* FAKE_CUDA_LOG: a process appends what it still holds when it exits, and
 * the names of its live allocations are unlinked. */
static void test_exit_log(void)
{
    char log[64];
    snprintf(log, sizeof log, "/tmp/test_fake_cuda.%d.log", (int)getpid());
    unlink(log);
    CUdeviceptr mine = 0;
    cuMemAlloc(&mine, 256);
    CUipcMemHandle h;
    cuIpcGetMemHandle(&h, mine);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("FAKE_CUDA_LOG", log, 1);
        CUdeviceptr a = 0, b = 0, o = 0;
        CHILD_CHECK(2, cuMemAlloc(&a, 64) == OK && cuMemAlloc(&b, 64) == OK);
        CHILD_CHECK(3, cuMemFree(b) == OK);
        CHILD_CHECK(4, cuIpcOpenMemHandle(&o, h, 1) == OK);
        exit(0); /* leaks a and o */
    }
    int rc = child_status(pid);
    is(rc, 0, "a child leaks an allocation and an IPC mapping and exits");
    char line[256], want[256];
    first_line(log, line, sizeof line);
    snprintf(want, sizeof want, "%d allocs=1 ipc_opens=1 opened=1 vmm_handles=0 vmm_maps=0 vmm_reserves=0 vmm_imports=0\n", (int)pid);
    ok(strcmp(line, want) == 0, "FAKE_CUDA_LOG has its line: %.*s", (int)strcspn(line, "\n"), line);
    is(shm_names(pid), 0, "its leaked allocation's name was unlinked at exit");
    is(stats_allocs(), 1, "the parent's allocation is still there");
    unlink(log);
    cuMemFree(mine);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "tests/fake/cuda/libcuda.so.1";
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("Bail out! dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    unsetenv("FAKE_CUDA_FAIL");
    unsetenv("FAKE_CUDA_NO_CONTEXT");
    unsetenv("FAKE_CUDA_NO_MEMOPS");
    unsetenv("FAKE_CUDA_CAPTURING");
    unsetenv("FAKE_CUDA_LOG");
    unsetenv("FAKE_CUDA_WAIT_TIMEOUT_MS");
    /* A stuck wait must not hang the test. */
    alarm(120);

    cuGetProcAddress_v2 = sym("cuGetProcAddress_v2");
    cuGetProcAddress = sym("cuGetProcAddress");
    fakeCudaStats = sym("fakeCudaStats");
    fakeCudaWaits = sym("fakeCudaWaits");
    /* Half of the functions through cuGetProcAddress, half by name. */
    cuInit = proc("cuInit");
    cuDriverGetVersion = sym("cuDriverGetVersion");
    cuGetErrorString = proc("cuGetErrorString");
    cuGetErrorName = sym("cuGetErrorName");
    cuCtxGetCurrent = proc("cuCtxGetCurrent");
    cuCtxSetCurrent = sym("cuCtxSetCurrent");
    cuCtxGetDevice = sym("cuCtxGetDevice");
    cuDeviceGetAttribute = proc("cuDeviceGetAttribute");
    cuMemAlloc = proc("cuMemAlloc");
    cuMemFree = sym("cuMemFree_v2");
    cuMemsetD8 = proc("cuMemsetD8");
    cuMemsetD8Async = sym("cuMemsetD8Async");
    cuMemcpyAsync = proc("cuMemcpyAsync");
    cuMemcpyDtoD = sym("cuMemcpyDtoD_v2");
    cuMemcpyDtoDAsync = proc("cuMemcpyDtoDAsync");
    cuMemcpyDtoH = sym("cuMemcpyDtoH_v2");
    cuMemcpyHtoD = proc("cuMemcpyHtoD");
    cuMemcpyDtoHAsync = sym("cuMemcpyDtoHAsync_v2");
    cuMemcpyHtoDAsync = proc("cuMemcpyHtoDAsync");
    cuIpcGetMemHandle = sym("cuIpcGetMemHandle");
    cuIpcOpenMemHandle = proc("cuIpcOpenMemHandle");
    cuIpcCloseMemHandle = sym("cuIpcCloseMemHandle");
    cuStreamWaitValue64 = proc("cuStreamWaitValue64");
    cuStreamWriteValue64 = sym("cuStreamWriteValue64_v2");
    cuStreamWaitValue32 = sym("cuStreamWaitValue32_v2");
    cuStreamWriteValue32 = proc("cuStreamWriteValue32");
    cuStreamCreate = sym("cuStreamCreate");
    cuStreamDestroy = proc("cuStreamDestroy");
    cuStreamSynchronize = sym("cuStreamSynchronize");
    cuStreamQuery = proc("cuStreamQuery");
    cuStreamIsCapturing = sym("cuStreamIsCapturing");
    cuPointerGetAttribute = proc("cuPointerGetAttribute");
    fakeCudaVmmStats = sym("fakeCudaVmmStats");
    cuMemGetAllocationGranularity = proc("cuMemGetAllocationGranularity");
    cuMemCreate = sym("cuMemCreate");
    cuMemRelease = proc("cuMemRelease");
    cuMemAddressReserve = sym("cuMemAddressReserve");
    cuMemAddressFree = proc("cuMemAddressFree");
    cuMemMap = sym("cuMemMap");
    cuMemUnmap = proc("cuMemUnmap");
    cuMemSetAccess = sym("cuMemSetAccess");
    cuMemRetainAllocationHandle = proc("cuMemRetainAllocationHandle");
    cuMemGetAllocationPropertiesFromHandle = sym("cuMemGetAllocationPropertiesFromHandle");
    cuMemExportToShareableHandle = proc("cuMemExportToShareableHandle");
    cuMemImportFromShareableHandle = sym("cuMemImportFromShareableHandle");

    test_exports();
    test_getproc();
    test_basics();
    test_context();
    test_memory();
    test_ipc();
    test_freed_mapped();
    test_cross_process_wait();
    test_wait_conditions();
    test_threads();
    test_queues();
    test_failure_injection();
    test_streams();
    test_exit_log();
    test_vmm_create();
    test_vmm_map();
    test_vmm_share();
    test_vmm_import_bad();
    test_vmm_injection();
    test_vmm_threads();
    test_vmm_exit_log();

    int a = -1, o = -1;
    fakeCudaStats(&a, &o);
    ok(a == 0 && o == 0, "nothing left allocated or open (allocs=%d ipc_opens=%d)", a, o);
    is(shm_names(getpid()), 0, "no /dev/shm/fakecuda.<pid>.* left");
    int vh = -1, vm = -1, vr = -1;
    fakeCudaVmmStats(&vh, &vm, &vr, NULL);
    ok(vh == 0 && vm == 0 && vr == 0 && vmm_fds() == 0,
       "no VMM handle, mapping, reservation or memfd left (%d %d %d)", vh, vm, vr);
    printf("1..%d\n", n_tests);
    return n_failed != 0;
}
