/* Prints the layout of NCCL's ABI types: built once with the shim's own
 * declarations (-DABI_AS=<version code>: only what that release has) and once
 * (-DREAL_NCCL_H) with a real nccl.h, as C++ with its nccl_device.h where it
 * has one (-DREAL_NCCL_DEVICE); 09-abi.t compares, for every header, and
 * gives both -DDEVICE_TYPES where the device API's types can be compared.
 * ncclConfig_t's fields come from the shim's table (shim/nccl/nccl_config.def):
 * 09-abi.t turns it into config_fields.inc, one `#if added <= V` block each, so
 * that a field the table gives the wrong release, or lacks, shows as a
 * difference (or an error) for some header. */
#ifdef REAL_NCCL_H
#include <nccl.h>
#ifdef REAL_NCCL_DEVICE
#include <nccl_device.h>
#endif
#define V NCCL_VERSION_CODE
#define CONFIG_BYTES sizeof(ncclConfig_t)
#else
#include "nccl_abi.h"
#define V ABI_AS
/* That release's struct: ours up to its last field, padded as the compiler would. */
#define CONFIG_BYTES ((last_end + _Alignof(ncclConfig_t) - 1) / _Alignof(ncclConfig_t) * _Alignof(ncclConfig_t))
#endif
#include <stddef.h>
#include <stdio.h>
static size_t last_end;
#define F(f)                                                                                      \
    printf("ncclConfig_t.%s %zu %zu\n", #f, offsetof(ncclConfig_t, f), sizeof(((ncclConfig_t *)0)->f)); \
    last_end = offsetof(ncclConfig_t, f) + sizeof(((ncclConfig_t *)0)->f);
#define P(T, f) printf(#T ".%s %zu %zu\n", #f, offsetof(T, f), sizeof(((T *)0)->f));
int main(void)
{
    printf("ncclUniqueId %zu\nncclInProgress %d\nncclNumOps %d\n", sizeof(ncclUniqueId), (int)ncclInProgress,
           (int)ncclNumOps);
    printf("ncclFloat64 %d\n", (int)ncclFloat64);
    /* 2.18 declares bfloat16 only where the compiler has CUDA's type (C++);
     * 2.24 added the fp8 types. */
#if V >= 22400
    printf("ncclBfloat16 %d\nncclNumTypes %d\n", (int)ncclBfloat16, (int)ncclNumTypes);
#endif
#if V >= 23000
    printf("ncclTimeout %d\nncclNumResults %d\n", (int)ncclTimeout, (int)ncclNumResults);
#endif
    F(size) F(magic) F(version)
#include "config_fields.inc"
    printf("ncclConfig_t %zu\n", (size_t)CONFIG_BYTES);
#if V >= 22200
    printf("ncclSimInfo_t %zu\n", sizeof(ncclSimInfo_t));
#endif
#if V >= 22900
    printf("ncclWaitSignalDesc_t %zu %zu %zu %zu %zu\n", sizeof(ncclWaitSignalDesc_t),
           offsetof(ncclWaitSignalDesc_t, opCnt), offsetof(ncclWaitSignalDesc_t, peer),
           offsetof(ncclWaitSignalDesc_t, sigIdx), offsetof(ncclWaitSignalDesc_t, ctx));
    printf("ncclCommMemStat_t %d %d %d %d %zu\nNCCL_SUSPEND_MEM %d\n", (int)ncclStatGpuMemSuspend,
           (int)ncclStatGpuMemSuspended, (int)ncclStatGpuMemPersist, (int)ncclStatGpuMemTotal,
           sizeof(ncclCommMemStat_t), NCCL_SUSPEND_MEM);
#endif
    /* The device API's types the shim answers with (nccl_device/core.h). */
#if V >= 22800 && defined(DEVICE_TYPES)
    printf("ncclTeam_t %zu\n", sizeof(ncclTeam_t));
    P(ncclTeam_t, nRanks) P(ncclTeam_t, rank) P(ncclTeam_t, stride)
#endif
#if V >= 22900 && defined(DEVICE_TYPES)
    printf("ncclCommProperties_t %zu\n", sizeof(ncclCommProperties_t));
    P(ncclCommProperties_t, size) P(ncclCommProperties_t, magic) P(ncclCommProperties_t, version)
    P(ncclCommProperties_t, rank) P(ncclCommProperties_t, nRanks) P(ncclCommProperties_t, cudaDev)
    P(ncclCommProperties_t, nvmlDev) P(ncclCommProperties_t, deviceApiSupport)
    P(ncclCommProperties_t, multimemSupport) P(ncclCommProperties_t, ginType) P(ncclCommProperties_t, nLsaTeams)
    P(ncclCommProperties_t, hostRmaSupport) P(ncclCommProperties_t, railedGinType)
    printf("NCCL_API_MAGIC %u\n", (unsigned)NCCL_API_MAGIC);
#endif
    /* 2.31's per-collective config: its layout, and the magic and version
     * NCCL_COLLCONFIG_INITIALIZER gives (the magic is the shim's assumption,
     * nccl_abi.h: this is where a real 2.31+ header proves or refutes it). */
#if V >= 23100
    P(ncclCollConfig_t, size) P(ncclCollConfig_t, magic) P(ncclCollConfig_t, version) P(ncclCollConfig_t, ext)
    P(ncclCollConfig_t, minCTAs) P(ncclCollConfig_t, maxCTAs) P(ncclCollConfig_t, nvlsCTAs)
    P(ncclCollConfig_t, cgaClusterSize) P(ncclCollConfig_t, algSelection) P(ncclCollConfig_t, forceAlgSelection)
    P(ncclCollConfig_t, CTAPolicy) P(ncclCollConfig_t, userProfilerTag)
#ifdef REAL_NCCL_H
    {
        ncclCollConfig_t init = NCCL_COLLCONFIG_INITIALIZER;
        printf("ncclCollConfig_t %zu magic %u\n", sizeof(ncclCollConfig_t), init.magic);
    }
#else
    printf("ncclCollConfig_t %zu magic %u\n", V >= 23200 ? sizeof(ncclCollConfig_t) : NCCL_COLLCONFIG_SIZE_2_31,
           (unsigned)NCCL_COLLCONFIG_MAGIC);
#endif
#endif
#if V >= 23200
    P(ncclCollConfig_t, launchCompletionEvent)
#endif
    return 0;
}
