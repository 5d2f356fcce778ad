/* Prints the layout of NCCL's ABI types: built once with the shim's own
 * declarations (-DABI_AS=<version code>: only what that release has) and once
 * (-DREAL_NCCL_H) with a real nccl.h; 09-abi.t compares, for every header. */
#ifdef REAL_NCCL_H
#include <nccl.h>
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
    F(size) F(magic) F(version) F(blocking) F(cgaClusterSize) F(minCTAs) F(maxCTAs) F(netName) F(splitShare)
#if V >= 22800
    F(trafficClass) F(commName) F(collnetEnable) F(CTAPolicy) F(shrinkShare) F(nvlsCTAs) F(nChannelsPerNetPeer)
    F(nvlinkCentricSched)
#endif
#if V >= 22900
    F(graphUsageMode) F(numRmaCtx)
#endif
#if V >= 23000
    F(maxP2pPeers) F(graphStreamOrdering)
#endif
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
    return 0;
}
