/* Prints the layout of the shim's own ABI declarations (compared with nccl.h's by 09-abi.t). */
#include "nccl_abi.h"
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
