/*
 * Host-side reductions for the CUDA IPC transport's small AllReduce: every
 * rank's data is copied to host memory and combined there, element by element,
 * the way NCCL's device code combines it.  Pure C: no CUDA, no NCCL headers,
 * no libm; the 16- and 8-bit float formats are converted by bit manipulation.
 *
 * Semantics (each chosen to give what NCCL's kernels give; see reduce.c):
 *
 *  - Integers wrap around (two's complement; computed unsigned, no UB).
 *    Max/Min compare as signed for ncclInt8/Int32/Int64.
 *  - ncclAvg: host_reduce() with ncclAvg sums; host_reduce_finish_avg() then
 *    divides by nranks.  Integers: the wrapped sum divided, truncated toward
 *    zero (NCCL's ncclDevSumPostDiv).  Floats: the correctly rounded quotient
 *    sum / nranks.  NCCL multiplies by a rounded 1/nranks instead (before or
 *    after the sum, depending on its version), so float averages can differ
 *    from NCCL's by about an ulp (fp8: more, NCCL rounds 1/nranks to fp8).
 *  - Float16, Bfloat16, Float8: every pairwise step is rounded to the type
 *    with round-to-nearest-even, as NCCL's __hadd/__hmul (sm_80+) do.  The step
 *    is computed in double, where it is exact or where rounding twice is
 *    provably harmless, so the result equals the correctly rounded one (and
 *    the "convert to float, combine, round back" path, which is too).
 *  - Float8 results saturate to the largest finite value (+-448 for E4M3,
 *    +-57344 for E5M2, also for E5M2 infinities) because NCCL's fp8 kernels
 *    round through the __nv_fp8_e4m3/e5m2 constructors, which use
 *    __NV_SATFINITE.  REDUCE_FP8_SATFINITE in reduce.c switches to __NV_NOSAT
 *    (overflow -> NaN for E4M3, infinity for E5M2).
 *  - Max/Min with NaN: the other operand is returned, NaN only when both are
 *    NaN (fmaxf/fminf and __hmax/__hmin, which NCCL uses: NaN does NOT
 *    propagate).  +0 counts as greater than -0.
 *  - A NaN result is stored as the canonical positive quiet NaN (0x7fff for
 *    f16/bf16, 0x7f for both fp8, 0x7fffffff, 0x7fffffffffffffff), like the
 *    GPU's; NaN signs and payloads are not carried.
 *  - Float32/Float64 use the host's float arithmetic, so a flush-to-zero /
 *    denormals-are-zero mode set on the calling thread (MXCSR FTZ/DAZ, e.g.
 *    torch.set_flush_denormal(True)) flushes their subnormals.  The 16- and
 *    8-bit types are immune: their values and results are normal doubles.
 *
 * Buffers are host memory, need no alignment, and acc may equal in.
 */
#ifndef NCCLSHIM_REDUCE_H
#define NCCLSHIM_REDUCE_H

#include "nccl_abi.h"

#include <stddef.h>
#include <stdint.h>

/* 0 if (dtype, op) is supported (every built-in op on every type up to
 * ncclFloat8e5m2), else -1 with a reason in why (may be NULL), e.g.
 * "ncclRedOp_t 7 is a PreMulSum or unknown op". */
int host_reduce_supported(ncclDataType_t dtype, ncclRedOp_t op, char *why, size_t whylen);

/* acc[i] = acc[i] OP in[i] for count elements of dtype.  ncclAvg sums (finish
 * with host_reduce_finish_avg).  An unsupported pair leaves acc unchanged. */
void host_reduce(void *acc, const void *in, size_t count, ncclDataType_t dtype, ncclRedOp_t op);

/* For ncclAvg: after summing nranks ranks' inputs into acc with ncclSum (or
 * ncclAvg), acc[i] = acc[i] / nranks.  nranks < 1 leaves acc unchanged. */
void host_reduce_finish_avg(void *acc, size_t count, ncclDataType_t dtype, int nranks);

/* The conversions used above, exported for tests and callers.  Narrowing
 * rounds to nearest, ties to even; NaN gives 0x7fff (f16, bf16: CUDA's
 * canonical NaN), 0x7f|sign (E4M3) or 0x7e|top mantissa bits|sign (E5M2),
 * as cuda_fp16/bf16/fp8 do.  satfinite: 0 = __NV_NOSAT (E4M3 overflow -> NaN,
 * E5M2 overflow -> infinity), 1 = __NV_SATFINITE (overflow and infinities ->
 * largest finite, sign kept).  Widening is exact. */
uint16_t host_float_to_half(float f);
float host_half_to_float(uint16_t h);
uint16_t host_float_to_bf16(float f);
float host_bf16_to_float(uint16_t b);
uint8_t host_float_to_fp8e4m3(float f, int satfinite);
float host_fp8e4m3_to_float(uint8_t v);
uint8_t host_float_to_fp8e5m2(float f, int satfinite);
float host_fp8e5m2_to_float(uint8_t v);

#endif
