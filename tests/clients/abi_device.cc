/* Compiled (C++, as the device API's headers need) against a real
 * nccl_device.h: each device-API host function of nccl_api.def that this
 * release has must exist with exactly the type the table declares (an
 * overload of another type, or none, is a compile error).  nccl.h's functions
 * are abi_signatures.c's. */
#include <nccl.h>
#include <nccl_device.h>
#define NCCL_API_SINCE(v) ((v) <= NCCL_VERSION_CODE)
#define NCCL_COMM_DEV(ret, name, params, args) (void)static_cast<ret(*) params>(&name);
int main()
{
#include "nccl_api.def"
    return 0;
}
