/* efasim_abi.h: our own declarations of the NCCL network-plugin ABI that EFASim exports.
 *
 * These mirror, field for field and in the same order, NCCL 2.28.9's
 * src/include/plugin/net/net_v11.h (ncclNet_v11_t, ncclNetProperties_v11_t,
 * ncclNetCommConfig_v11_t, ncclNetVDeviceProps_v11_t), src/include/nccl_device/net_device.h
 * (ncclNetDeviceHandle_v7_t == _v11_t), src/include/plugin/nccl_net.h (handle size, pointer
 * kinds, NCCL_NET_MAX_DEVS_PER_NIC, size limits), src/include/nccl_common.h (logger, log levels
 * and subsystems, profiler callback) and nccl.h (ncclResult_t).  Only the names differ (efa_*),
 * so that nothing here can clash with NCCL's headers.  2.28.9 looks for "ncclNetPlugin_v11"
 * first (src/plugin/net.cc: ncclNetVersion[] = {11, 10, 9, 8, 7, 6}; net_v11.cc:
 * getNcclNet_v11 dlsyms "ncclNetPlugin_v11").  The layout checks at the bottom are what an
 * x86_64/aarch64 LP64 compiler gives for NCCL's own structs. */
#ifndef EFASIM_ABI_H
#define EFASIM_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef enum {           /* nccl.h ncclResult_t */
  efa_success = 0,
  efa_unhandled_cuda_error = 1,
  efa_system_error = 2,
  efa_internal_error = 3,
  efa_invalid_argument = 4,
  efa_invalid_usage = 5,
  efa_remote_error = 6,
  efa_in_progress = 7,
} efa_result_t;

typedef enum {           /* nccl_common.h ncclDebugLogLevel */
  EFA_LOG_NONE = 0, EFA_LOG_VERSION = 1, EFA_LOG_WARN = 2, EFA_LOG_INFO = 3, EFA_LOG_ABORT = 4,
  EFA_LOG_TRACE = 5
} efa_log_level_t;

#define EFA_SUBSYS_INIT 0x1UL   /* NCCL_INIT */
#define EFA_SUBSYS_NET  0x10UL  /* NCCL_NET */
#define EFA_SUBSYS_ALL  (~0UL)  /* NCCL_ALL */

typedef void (*efa_logger_t)(efa_log_level_t level, unsigned long flags, const char *file, int line,
                             const char *fmt, ...);
typedef efa_result_t (*efa_prof_cb_t)(void **eHandle, int type, void *pHandle, int64_t pluginId,
                                      void *extData);

#define EFA_NET_HANDLE_MAXSIZE 128         /* NCCL_NET_HANDLE_MAXSIZE */
#define EFA_PTR_HOST 0x1                   /* NCCL_PTR_HOST */
#define EFA_PTR_CUDA 0x2                   /* NCCL_PTR_CUDA */
#define EFA_NET_MAX_REQUESTS 32            /* NCCL_NET_MAX_REQUESTS */
#define EFA_NET_MAX_DEVS_PER_NIC 4         /* NCCL_NET_MAX_DEVS_PER_NIC */
#define EFA_MAX_NET_SIZE_BYTES (1L * 1024 * 1024 * 1024 * 1024) /* NCCL_MAX_NET_SIZE_BYTES */
#define EFA_MAX_COLLNET_SIZE (512L * 1024 * 1024)                /* MAX_COLLNET_SIZE */
#define EFA_NET_DEVICE_HOST 0              /* ncclNetDeviceType NCCL_NET_DEVICE_HOST */
#define EFA_NET_DEVICE_INVALID_VERSION 0   /* NCCL_NET_DEVICE_INVALID_VERSION */

typedef struct {                           /* ncclNetDeviceHandle_v11_t */
  int netDeviceType;                       /* enum, int-sized */
  int netDeviceVersion;
  void *handle;
  size_t size;
  int needsProxyProgress;
} efa_dev_handle_t;

typedef struct {                           /* ncclNetVDeviceProps_v11_t */
  int ndevs;
  int devs[EFA_NET_MAX_DEVS_PER_NIC];
} efa_vdev_props_t;

typedef struct {                           /* ncclNetCommConfig_v11_t */
  int trafficClass;
} efa_comm_config_t;

typedef struct {                           /* ncclNetProperties_v11_t */
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;                               /* Mbps */
  int port;
  float latency;                           /* microseconds */
  int maxComms;
  int maxRecvs;
  int netDeviceType;                       /* ncclNetDeviceType (enum) */
  int netDeviceVersion;
  efa_vdev_props_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
} efa_props_t;

typedef struct efa_net_attr efa_net_attr_t; /* ncclNetAttr_v11_t: we never look inside */

typedef struct {                           /* ncclNet_v11_t, same order */
  const char *name;
  efa_result_t (*init)(void **ctx, uint64_t commId, efa_comm_config_t *config, efa_logger_t logFunction,
                       efa_prof_cb_t profFunction);
  efa_result_t (*devices)(int *ndev);
  efa_result_t (*getProperties)(int dev, efa_props_t *props);
  efa_result_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  efa_result_t (*connect)(void *ctx, int dev, void *handle, void **sendComm, efa_dev_handle_t **sendDevComm);
  efa_result_t (*accept)(void *listenComm, void **recvComm, efa_dev_handle_t **recvDevComm);
  efa_result_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  efa_result_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                              void **mhandle);
  efa_result_t (*deregMr)(void *comm, void *mhandle);
  efa_result_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle, void *phandle,
                        void **request);
  efa_result_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles,
                        void **phandles, void **request);
  efa_result_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request);
  efa_result_t (*test)(void *request, int *done, int *sizes);
  efa_result_t (*closeSend)(void *sendComm);
  efa_result_t (*closeRecv)(void *recvComm);
  efa_result_t (*closeListen)(void *listenComm);
  efa_result_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  efa_result_t (*irecvConsumed)(void *recvComm, int n, void *request);
  efa_result_t (*makeVDevice)(int *d, efa_vdev_props_t *props);
  efa_result_t (*finalize)(void *ctx);
  efa_result_t (*setNetAttr)(void *ctx, efa_net_attr_t *netAttr);
} efa_net_v11_t;

/* The symbol NCCL 2.28.9 dlsyms first. */
#define EFA_NET_PLUGIN_SYMBOL "ncclNetPlugin_v11"

#if defined(__LP64__)
_Static_assert(offsetof(efa_props_t, guid) == 16, "props.guid");
_Static_assert(offsetof(efa_props_t, latency) == 44, "props.latency");
_Static_assert(offsetof(efa_props_t, netDeviceType) == 56, "props.netDeviceType");
_Static_assert(offsetof(efa_props_t, vProps) == 64, "props.vProps");
_Static_assert(offsetof(efa_props_t, maxP2pBytes) == 88, "props.maxP2pBytes");
_Static_assert(offsetof(efa_props_t, maxMultiRequestSize) == 104, "props.maxMultiRequestSize");
_Static_assert(sizeof(efa_props_t) == 112, "props size");
_Static_assert(sizeof(efa_dev_handle_t) == 32, "device handle size");
_Static_assert(sizeof(efa_net_v11_t) == 22 * sizeof(void *), "ncclNet_v11_t has 22 members");
_Static_assert(offsetof(efa_net_v11_t, finalize) == 20 * sizeof(void *), "finalize is member 21");
#endif

#endif
