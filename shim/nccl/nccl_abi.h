/*
 * The parts of NCCL's ABI the shim needs, declared by us.
 *
 * Why not include <nccl.h>: the shim must build where no NCCL header is
 * installed (the GPU containers carry it only inside a Python wheel) and must
 * keep working against every NCCL from 2.18 on, whose headers differ.  These
 * declarations are the stable ABI; tests/test_abi.c checks them against the
 * real nccl.h wherever one is installed.
 */
#ifndef NCCLSHIM_NCCL_ABI_H
#define NCCLSHIM_NCCL_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
typedef struct CUstream_st *cudaStream_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclTimeout = 8,                    /* since 2.30 */
    ncclNumResults = 9
} ncclResult_t;

/* Values up to ncclNumOps are built in; larger ones are made by
 * ncclRedOpCreatePreMulSum.  The enum is int-sized in every NCCL. */
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4,
               ncclNumOps = 5, ncclMaxRedOp = 0x7fffffff } ncclRedOp_t;

typedef enum {
    ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3,
    ncclInt64 = 4, ncclUint64 = 5, ncclFloat16 = 6, ncclFloat32 = 7,
    ncclFloat64 = 8, ncclBfloat16 = 9, ncclFloat8e4m3 = 10, ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/*
 * ncclConfig_t grows with NCCL versions; callers fill `size` and `version`.
 * Its fields are listed once, with the release that added each and the
 * version from which NCCL honours it, in nccl_config.def (laid out here;
 * read by shim/nccl/nccl_config.c).  Layout of NCCL 2.32.3 (120 bytes on
 * LP64; its five fields after graphStreamOrdering from
 * ../shared/nccl-headers/newer-releases.md, no released header); older
 * versions are prefixes (tests/t/09-abi.t checks every header we have).  NCCL copies
 * min(size, its own sizeof) bytes, so a larger config is safe on an older
 * NCCL, and then resets every field whose release is newer than the
 * config's `version`.
 */
#define NCCL_ABI_VERSION 23203          /* the nccl.h this layout is taken from */
#define NCCL_CONFIG_MAGIC 0xcafebeefu
#define NCCL_CONFIG_UNDEF_INT (-2147483647 - 1)
#define NCCL_CONFIG_INT int
#define NCCL_CONFIG_STR const char *
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
#define NCCL_CONFIG_FIELD(name, kind, added, honoured) NCCL_CONFIG_##kind name;
#include "nccl_config.def"
} ncclConfig_t;

typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimatedTime;
} ncclSimInfo_t;

/* Device-API host functions (nccl_device/core.h) that take a communicator.
 * The shim only forwards them; their structures stay opaque here. */
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct { int nRanks, rank, stride; } ncclTeam_t;
/* What NCCL's team functions answer when they cannot compute a team (a
 * communicator without a device runtime): NCCL returns ncclTeam_t{}. */
#define NCCL_TEAM_NONE ((ncclTeam_t){ 0, 0, 0 })

/* NCCL 2.29's ncclCommQueryProperties (nccl_device/core.h): `size`, `magic`
 * and `version` as in ncclConfig_t (NCCL_COMM_PROPERTIES_INITIALIZER);
 * NCCL fills the fields after nvmlDev... multimemSupport for every version
 * and the rest only for a version above 2.29.3.  Layout of 2.30.7. */
#define NCCL_API_MAGIC NCCL_CONFIG_MAGIC
typedef enum { ncclGinTypeNone = 0, ncclGinTypeProxy = 2, ncclGinTypeGdaki = 3, ncclGinTypeGpi = 4 } ncclGinType_t;
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int rank;
    int nRanks;
    int cudaDev;
    int nvmlDev;
    _Bool deviceApiSupport;
    _Bool multimemSupport;
    ncclGinType_t ginType;
    int nLsaTeams;
    _Bool hostRmaSupport;
    ncclGinType_t railedGinType;
} ncclCommProperties_t;
#define NCCL_COMM_PROPERTIES_V2 22904   /* the first version whose properties carry ginType and after */

/* NCCL 2.29: suspend/resume, memory statistics, signals; 2.30: parameters. */
#define NCCL_SUSPEND_MEM 0x01
typedef enum {
    ncclStatGpuMemSuspend = 0,          /* bytes that ncclCommSuspend releases */
    ncclStatGpuMemSuspended = 1,        /* 1 while suspended */
    ncclStatGpuMemPersist = 2,          /* bytes that stay */
    ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;
typedef struct { int opCnt, peer, sigIdx, ctx; } ncclWaitSignalDesc_t;
typedef struct ncclParamHandle *ncclParamHandle_t;

/*
 * NCCL 2.31's per-collective configuration, the trailing argument of the
 * nccl*Config collectives (NULL: the plain collective).  Versioned and
 * append-only like ncclConfig_t: `size`, `magic`, `version` first.  Layout
 * from ../shared/nccl-headers/newer-releases.md (no released header could be
 * had).  Not known from those sources: the value of `magic` (taken to be
 * NCCL_API_MAGIC, as NCCL_CONFIG_INITIALIZER and
 * NCCL_COMM_PROPERTIES_INITIALIZER use), and the config version from which
 * NCCL reads launchCompletionEvent (taken to be 2.32's, with the size
 * holding it); both are one #define here, checked by tests/t/09-abi.t when a
 * 2.31+ header appears.  The shim reads only size, magic, version and
 * launchCompletionEvent (shim/registry/vcomm_config.c); the rest tunes NCCL's
 * kernels and is forwarded untouched.
 */
typedef struct ncclConfigExt ncclConfigExt_t;   /* vendor options: a list the shim never walks */
typedef struct CUevent_st *cudaEvent_t;
#define NCCL_COLLCONFIG_MAGIC NCCL_API_MAGIC
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    ncclConfigExt_t *ext;
    int minCTAs;
    int maxCTAs;
    int nvlsCTAs;
    int cgaClusterSize;
    const char *algSelection;
    int forceAlgSelection;
    int CTAPolicy;
    uint64_t userProfilerTag;
    cudaEvent_t launchCompletionEvent;  /* since 2.32 */
} ncclCollConfig_t;
/* The 2.31 struct: what a config must hold at least to be read at all. */
#define NCCL_COLLCONFIG_SIZE_2_31 offsetof(ncclCollConfig_t, launchCompletionEvent)
/* The first config version that carries launchCompletionEvent (2.32.0). */
#define NCCL_COLLCONFIG_EVENT_VERSION 23200

/* NCCL 2.32's ncclSetEncryption argument: forwarded, never read. */
typedef struct ncclEncryptionConfig ncclEncryptionConfig_t;

#endif
