/* Compiled against a real nccl.h: each function of nccl_api.def that this
 * release has (its version groups up to NCCL_VERSION_CODE) must have exactly
 * the type the table declares (a mismatch is a compile error). */
#include <nccl.h>
#define NCCL_API_SINCE(v) ((v) <= NCCL_VERSION_CODE)
#define SAME(ret, name, params) \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&name), ret(*) params), #name " differs from nccl.h");
#define NCCL_PLAIN(ret, name, params, args) SAME(ret, name, params)
#define NCCL_VOID(name, params, args) SAME(void, name, params)
#define NCCL_COMM(ret, name, params, args) SAME(ret, name, params)
#define NCCL_DATA(name, op, params, args, count, dtype) SAME(ncclResult_t, name, params)
#define NCCL_LIFE(ret, name, params, args) SAME(ret, name, params)
#define NCCL_COMM_DEV(ret, name, params, args) /* declared in nccl_device/, C++ only */
typedef struct CUstream_st *cudaStream_t_;
#include "nccl_api.def"
int main(void) { return 0; }
