/* Prints the layout of NCCL's ABI types: built once with the shim's own
 * declarations and once (-DREAL_NCCL_H) with the real nccl.h; 09-abi.t compares. */
#ifdef REAL_NCCL_H
#include <nccl.h>
#else
#include "nccl_abi.h"
#endif
#include <stddef.h>
#include <stdio.h>
#define F(f) printf("ncclConfig_t.%s %zu %zu\n", #f, offsetof(ncclConfig_t, f), sizeof(((ncclConfig_t *)0)->f));
int main(void)
{
    printf("ncclUniqueId %zu\nncclConfig_t %zu\nncclSimInfo_t %zu\nncclNumTypes %d\nncclNumOps %d\n",
           sizeof(ncclUniqueId), sizeof(ncclConfig_t), sizeof(ncclSimInfo_t), (int)ncclNumTypes, (int)ncclNumOps);
    F(size) F(magic) F(version) F(blocking) F(cgaClusterSize) F(minCTAs) F(maxCTAs) F(netName) F(splitShare)
    F(trafficClass) F(commName) F(collnetEnable) F(CTAPolicy) F(shrinkShare) F(nvlsCTAs) F(nChannelsPerNetPeer)
    F(nvlinkCentricSched)
    return 0;
}
