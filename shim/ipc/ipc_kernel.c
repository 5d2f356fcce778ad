/*
 * The ipc transport's copy kernel, for hops between two processes on one GPU
 * (colocated RL: trainer and inference engine time-sharing a GPU).
 *
 * Why it exists, and why it is not the default: the issue that asked for it
 * (14) measured a colocated refit at a fifth of the GPU's copy rate and
 * suspected copy engines on IPC-mapped memory of their own GPU.  Measured
 * since (H100 and H200, driver 580, bench/colocated.py): copy engines move
 * that memory at 0.9x a plain in-process copy at 256 MiB, and this kernel,
 * though within 4% of cuMemcpyDtoDAsync in one process (bench/copy_kernel.py),
 * is slower than the copy engines between two processes (0.81x against
 * 0.89-0.90x): while the two processes time-share the GPU, a kernel needs the
 * SMs of its own context, a copy engine does not.  The time had gone to
 * round trips between the two processes (ipc_proto.h, "Receivers run
 * ahead").  So NCCLSHIM_IPC_COPY=auto keeps copy engines; =sm selects this,
 * for GPUs or drivers where a copy engine is slow on such memory.
 *
 * The shim has no CUDA runtime and no build-time CUDA (docs/design.md, "CUDA
 * through the driver API"): the kernel is PTX, compiled by the driver
 * (cuModuleLoadData) once per communicator that has a peer on its own device.
 * PTX of ISA 7.0 for sm_70 is JIT-compiled for any later GPU by any driver
 * since CUDA 11.
 */
#define _GNU_SOURCE
#include "ipc_kernel.h"

#include <stdio.h>
#include <string.h>

/* dst = src for n16 16-byte words, then `tail` (< 16) bytes after them;
 * grid-stride, four words in flight per thread. */
static const char copy_ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    "// dst[i] = src[i] for the n16 16-byte words, then the `tail` bytes after them.\n"
    ".visible .entry ncclshim_copy(\n"
    "	.param .u64 p_dst,\n"
    "	.param .u64 p_src,\n"
    "	.param .u64 p_n16,\n"
    "	.param .u64 p_tail\n"
    ")\n"
    "{\n"
    "	.reg .pred %p<4>;\n"
    "	.reg .b32 %r<8>;\n"
    "	.reg .b32 %a<16>;\n"
    "	.reg .b64 %rd<24>;\n"
    "	.reg .b16 %h<2>;\n"
    "\n"
    "	ld.param.u64 %rd1, [p_dst];\n"
    "	ld.param.u64 %rd2, [p_src];\n"
    "	ld.param.u64 %rd3, [p_n16];\n"
    "	ld.param.u64 %rd4, [p_tail];\n"
    "	cvta.to.global.u64 %rd1, %rd1;\n"
    "	cvta.to.global.u64 %rd2, %rd2;\n"
    "	mov.u32 %r1, %ctaid.x;\n"
    "	mov.u32 %r2, %ntid.x;\n"
    "	mov.u32 %r3, %tid.x;\n"
    "	mov.u32 %r4, %nctaid.x;\n"
    "	mul.wide.u32 %rd5, %r1, %r2;\n"
    "	cvt.u64.u32 %rd6, %r3;\n"
    "	add.u64 %rd5, %rd5, %rd6;          // i: this thread's first word\n"
    "	mul.wide.u32 %rd7, %r4, %r2;       // stride: threads in the grid\n"
    "	shl.b64 %rd8, %rd7, 4;             // stride in bytes\n"
    "	mul.lo.u64 %rd9, %rd7, 3;          // 3 strides\n"
    "	// Four words per thread per round: four loads in flight before the stores.\n"
    "LOOP4:\n"
    "	add.u64 %rd10, %rd5, %rd9;\n"
    "	setp.ge.u64 %p1, %rd10, %rd3;\n"
    "	@%p1 bra LOOP1;\n"
    "	shl.b64 %rd11, %rd5, 4;\n"
    "	add.u64 %rd12, %rd2, %rd11;\n"
    "	add.u64 %rd13, %rd1, %rd11;\n"
    "	add.u64 %rd14, %rd12, %rd8;\n"
    "	add.u64 %rd15, %rd14, %rd8;\n"
    "	add.u64 %rd16, %rd15, %rd8;\n"
    "	ld.global.v4.u32 {%a0, %a1, %a2, %a3}, [%rd12];\n"
    "	ld.global.v4.u32 {%a4, %a5, %a6, %a7}, [%rd14];\n"
    "	ld.global.v4.u32 {%a8, %a9, %a10, %a11}, [%rd15];\n"
    "	ld.global.v4.u32 {%a12, %a13, %a14, %a15}, [%rd16];\n"
    "	add.u64 %rd17, %rd13, %rd8;\n"
    "	add.u64 %rd18, %rd17, %rd8;\n"
    "	add.u64 %rd19, %rd18, %rd8;\n"
    "	st.global.v4.u32 [%rd13], {%a0, %a1, %a2, %a3};\n"
    "	st.global.v4.u32 [%rd17], {%a4, %a5, %a6, %a7};\n"
    "	st.global.v4.u32 [%rd18], {%a8, %a9, %a10, %a11};\n"
    "	st.global.v4.u32 [%rd19], {%a12, %a13, %a14, %a15};\n"
    "	shl.b64 %rd10, %rd7, 2;\n"
    "	add.u64 %rd5, %rd5, %rd10;\n"
    "	bra LOOP4;\n"
    "LOOP1:\n"
    "	setp.ge.u64 %p1, %rd5, %rd3;\n"
    "	@%p1 bra TAIL;\n"
    "	shl.b64 %rd11, %rd5, 4;\n"
    "	add.u64 %rd12, %rd2, %rd11;\n"
    "	add.u64 %rd13, %rd1, %rd11;\n"
    "	ld.global.v4.u32 {%a0, %a1, %a2, %a3}, [%rd12];\n"
    "	st.global.v4.u32 [%rd13], {%a0, %a1, %a2, %a3};\n"
    "	add.u64 %rd5, %rd5, %rd7;\n"
    "	bra LOOP1;\n"
    "TAIL:\n"
    "	// The last bytes (fewer than 16): thread j of the grid copies byte j.\n"
    "	mul.wide.u32 %rd5, %r1, %r2;\n"
    "	add.u64 %rd5, %rd5, %rd6;\n"
    "	setp.ge.u64 %p2, %rd5, %rd4;\n"
    "	@%p2 bra DONE;\n"
    "	shl.b64 %rd11, %rd3, 4;\n"
    "	add.u64 %rd11, %rd11, %rd5;\n"
    "	add.u64 %rd12, %rd2, %rd11;\n"
    "	add.u64 %rd13, %rd1, %rd11;\n"
    "	ld.global.u8 %h0, [%rd12];\n"
    "	st.global.u8 [%rd13], %h0;\n"
    "DONE:\n"
    "	ret;\n"
    "}\n"
    ;

/* Threads per block; blocks per SM at most (enough loads in flight to
 * reach the memory's rate, measured on H200 and H100). */
enum { THREADS = 512, BLOCKS_PER_SM = 4 };

int ipc_kernel_load(struct ipc_comm *c, char *why, size_t whylen)
{
    const struct shim_cuda *cu = c->cu;
    /* Before the first goto: the fail path reads mod. */
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    int sms = 0;
    if (!cu->cuModuleLoadData) {
        snprintf(why, whylen, "the driver lacks cuModuleLoadData, cuModuleGetFunction, cuModuleUnload or "
                 "cuLaunchKernel");
        goto fail;
    }
    if (cu_check(cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->device),
                 "cuDeviceGetAttribute", why, whylen) != 0)
        goto fail;
    if (cu_check(cu->cuModuleLoadData(&mod, copy_ptx), "cuModuleLoadData", why, whylen) != 0)
        goto fail;
    if (cu_check(cu->cuModuleGetFunction(&fn, mod, "ncclshim_copy"), "cuModuleGetFunction", why, whylen) != 0)
        goto fail;
    c->kern.mod = mod;
    c->kern.fn = fn;
    c->kern.sms = sms > 0 ? sms : 1;
    return 0;
fail:
    if (mod)
        cu->cuModuleUnload(mod);
    snprintf(c->kern.note, sizeof(c->kern.note), "no copy kernel: %s", why);
    return -1;
}

void ipc_kernel_unload(struct ipc_comm *c)
{
    if (c->kern.mod)
        c->cu->cuModuleUnload(c->kern.mod);
    c->kern.mod = NULL;
    c->kern.fn = NULL;
}

int ipc_kernel_usable(const struct ipc_comm *c, int r, CUdeviceptr dst, CUdeviceptr src)
{
    return c->kern.fn && c->peer_dev && c->peer_dev[r] == c->device && !((dst | src) & 15);
}

CUresult ipc_kernel_copy(const struct ipc_comm *c, CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream s)
{
    unsigned long long n16 = len / 16, tail = len % 16;
    unsigned long long per_block = (unsigned long long)THREADS * 4;
    unsigned long long blocks = (n16 + per_block - 1) / per_block;
    unsigned long long cap = (unsigned long long)c->kern.sms * BLOCKS_PER_SM;
    if (blocks > cap)
        blocks = cap;
    if (!blocks)
        blocks = 1; /* the tail alone */
    void *params[] = { &dst, &src, &n16, &tail };
    return c->cu->cuLaunchKernel(c->kern.fn, (unsigned)blocks, 1, 1, THREADS, 1, 1, 0, s, params, NULL);
}
