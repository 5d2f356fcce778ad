/*
 * Host-side reductions (shim/ipc/reduce.h): what NCCL's reduce_kernel.h computes,
 * element by element, on host memory.
 *
 * Where the choices come from (NCCL src/device/reduce_kernel.h, enqueue.cc):
 *  - Sum/Prod: plain + and *; half and bf16 use __hadd/__hmul on sm_80+
 *    (correctly rounded per step), fp8 converts both operands to half, uses
 *    __hadd/__hmul/__hmax/__hmin and converts back with the __nv_fp8_e4m3 /
 *    __nv_fp8_e5m2 constructors, which round with __NV_SATFINITE.
 *  - Max/Min: integers compare (signed or unsigned); float/double use
 *    fmaxf/fminf/fmax/fmin, half/bf16/fp8 __hmax/__hmin: a NaN operand loses
 *    to a number.
 *  - Avg: integers sum, then divide by nranks truncating toward zero
 *    (FuncSumPostDiv works on |x| and negates).  Floats: see reduce.h.
 *
 * The narrow float types are combined in double.  Their values and the
 * results of +, * and / by nranks are normal doubles (the smallest, a product
 * of two bf16 subnormals, is about 2^-266), so the host's FTZ/DAZ mode cannot
 * touch them.  Products of two narrow values and sums of two
 * half or fp8 values are exact in double; a bf16 sum or a quotient is rounded
 * once to 53 bits first, which cannot change the final rounding to <= 11 bits
 * (53 >= 2p+2).  So each step yields the correctly rounded result, which is
 * what __hadd/__hmul return (and what "widen to float, combine, round back"
 * returns too, float having 24 >= 2p+2 bits for p <= 11).
 */
#include "reduce.h"

#include <stdio.h>
#include <string.h>

/* 1: fp8 results saturate like NCCL's kernels (__NV_SATFINITE).
 * 0: __NV_NOSAT (E4M3 overflow -> NaN, E5M2 overflow -> infinity). */
#ifndef REDUCE_FP8_SATFINITE
#define REDUCE_FP8_SATFINITE 1
#endif

/* The per-element helpers are forced inline so that the element loops are
 * specialized for a constant format and op (2-3x faster for the narrow types
 * than calls through a format pointer). */
#define INLINE static inline __attribute__((always_inline))

/* ---- the narrow float formats ---------------------------------------- */

struct small_fmt {
    unsigned ebits, mbits;
    int bias;
    int fn;              /* E4M3FN: no infinities, only S.1111.111 is NaN */
    uint32_t maxfinite;  /* magnitude bits of the largest finite value */
    uint32_t inf;        /* magnitude bits of infinity (IEEE-like formats) */
};

static const struct small_fmt FMT_F16 = { 5, 10, 15, 0, 0x7bff, 0x7c00 };
static const struct small_fmt FMT_BF16 = { 8, 7, 127, 0, 0x7f7f, 0x7f80 };
static const struct small_fmt FMT_E4M3 = { 4, 3, 7, 1, 0x7e, 0 };
static const struct small_fmt FMT_E5M2 = { 5, 2, 15, 0, 0x7b, 0x7c };

#define D_SIGN 0x8000000000000000ull
#define D_INF 0x7ff0000000000000ull
#define D_CANON_NAN 0x7fffffffffffffffull
#define F_CANON_NAN 0x7fffffffu

/* A value from its bits and back, without aliasing: one pair for double
 * (uint64_t) and one for float (uint32_t). */
#define BIT_CASTS(T, U, P)                                                                                     \
    static T P##_from_bits(U b)                                                                                \
    {                                                                                                          \
        T v;                                                                                                   \
        memcpy(&v, &b, sizeof v);                                                                              \
        return v;                                                                                              \
    }                                                                                                          \
    static U P##_bits(T v)                                                                                     \
    {                                                                                                          \
        U b;                                                                                                   \
        memcpy(&b, &v, sizeof b);                                                                              \
        return b;                                                                                              \
    }

BIT_CASTS(double, uint64_t, d)
BIT_CASTS(float, uint32_t, f)

/*
 * Widen v to a binary format with dmbits mantissa bits and exponent bias
 * dbias, returned as bits.  The caller guarantees that every finite value of
 * the narrow format is normal in the wide one (true for double; for float
 * true for f16 and fp8, not for bf16).
 */
INLINE uint64_t widen(uint32_t v, const struct small_fmt *f, unsigned dmbits, unsigned debits, int dbias)
{
    unsigned mb = f->mbits;
    uint32_t emask = (1u << f->ebits) - 1, mmask = (1u << mb) - 1;
    uint64_t sign = (uint64_t)(v >> (f->ebits + mb) & 1) << (dmbits + debits);
    uint64_t dexpmask = ((1ull << debits) - 1) << dmbits;
    uint32_t e = v >> mb & emask;
    uint64_t m = v & mmask;

    if (f->fn ? (e == emask && m == mmask) : (e == emask && m != 0))   /* NaN: quiet it, keep payload */
        return sign | dexpmask | 1ull << (dmbits - 1) | m << (dmbits - mb);
    if (!f->fn && e == emask)
        return sign | dexpmask;                         /* infinity */
    if (e == 0 && m == 0)
        return sign;                                    /* +-0 */
    int exp;
    if (e == 0) {                                       /* subnormal: normalize */
        exp = 1 - f->bias;
        while (!(m >> mb)) {
            m <<= 1;
            exp--;
        }
        m &= mmask;
    } else {
        exp = (int)e - f->bias;
    }
    return sign | (uint64_t)(exp + dbias) << dmbits | m << (dmbits - mb);
}

INLINE double small_to_double(uint32_t v, const struct small_fmt *f)
{
    return d_from_bits(widen(v, f, 52, 11, 1023));
}

INLINE uint32_t nan_bits(const struct small_fmt *f, uint32_t sign, uint64_t dmant)
{
    if (f == &FMT_E4M3)
        return sign | 0x7f;
    if (f == &FMT_E5M2)     /* cuda_fp8.hpp: 0x7e | top two mantissa bits */
        return sign | 0x7e | (uint32_t)(dmant >> 50 & 3);
    return 0x7fff;          /* cuda_fp16/bf16: canonical NaN, no sign */
}

/*
 * Round sign * sig * 2^(exp - 52) to the narrow format, to nearest, ties to
 * even.  sig has bit 52 set (a normalized 53-bit significand).
 */
INLINE uint32_t round_small(uint32_t sign, int exp, uint64_t sig, const struct small_fmt *f, int satfinite)
{
    unsigned mb = f->mbits;
    int emin = 1 - f->bias;
    unsigned shift = 52 - mb;
    if (exp < emin) {                       /* subnormal in the target */
        unsigned extra = (unsigned)(emin - exp);
        shift = extra > 60 - shift ? 60 : shift + extra;   /* sig < 2^53: rounds to 0 past 54 */
    }
    uint64_t q = sig >> shift, rem = sig & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    /* Normal: (biased exponent - 1) << mb plus q, whose bit mb is the implicit
     * one, so a carry out of the mantissa bumps the exponent.  Subnormal: q,
     * which may have rounded up to 1 << mb, the smallest normal's encoding. */
    uint64_t mag = exp < emin ? q : ((uint64_t)(exp + f->bias - 1) << mb) + q;
    if (mag > f->maxfinite) {
        if (satfinite)
            return sign | f->maxfinite;
        return f->fn ? sign | 0x7f : sign | f->inf;
    }
    return sign | (uint32_t)mag;
}

INLINE uint32_t double_to_small(double x, const struct small_fmt *f, int satfinite)
{
    uint64_t b = d_bits(x), a = b & ~D_SIGN;
    uint32_t sign = (uint32_t)(b >> 63) << (f->ebits + f->mbits);
    if (a > D_INF)
        return nan_bits(f, sign, a);
    if (a == D_INF)
        return satfinite ? sign | f->maxfinite : f->fn ? sign | 0x7f : sign | f->inf;
    if (a < 0x0010000000000000ull)  /* 0 or a double subnormal: far below any format's smallest/2 */
        return sign;
    return round_small(sign, (int)(a >> 52) - 1023, (a & ((1ull << 52) - 1)) | 1ull << 52, f, satfinite);
}

/* From float bits, not through a float-to-double conversion, so that DAZ
 * cannot flush a subnormal float input. */
static uint32_t float_to_small(float x, const struct small_fmt *f, int satfinite)
{
    uint32_t b = f_bits(x), a = b & 0x7fffffffu;
    uint32_t sign = (b >> 31) << (f->ebits + f->mbits);
    if (a > 0x7f800000u)
        return nan_bits(f, sign, (uint64_t)(a & 0x7fffff) << 29);
    if (a == 0x7f800000u)
        return satfinite ? sign | f->maxfinite : f->fn ? sign | 0x7f : sign | f->inf;
    if (a == 0)
        return sign;
    int exp = (int)(a >> 23) - 127;
    uint64_t sig = a & 0x7fffff;
    if (exp == -127) {              /* float subnormal: normalize */
        exp = -126;
        while (!(sig >> 23)) {
            sig <<= 1;
            exp--;
        }
    } else {
        sig |= 1u << 23;
    }
    return round_small(sign, exp, sig << 29, f, satfinite);
}

uint16_t host_float_to_half(float f) { return (uint16_t)float_to_small(f, &FMT_F16, 0); }
uint16_t host_float_to_bf16(float f) { return (uint16_t)float_to_small(f, &FMT_BF16, 0); }
uint8_t host_float_to_fp8e4m3(float f, int satfinite) { return (uint8_t)float_to_small(f, &FMT_E4M3, satfinite); }
uint8_t host_float_to_fp8e5m2(float f, int satfinite) { return (uint8_t)float_to_small(f, &FMT_E5M2, satfinite); }

float host_half_to_float(uint16_t h) { return f_from_bits((uint32_t)widen(h, &FMT_F16, 23, 8, 127)); }
float host_bf16_to_float(uint16_t b) { return f_from_bits((uint32_t)b << 16); }
float host_fp8e4m3_to_float(uint8_t v) { return f_from_bits((uint32_t)widen(v, &FMT_E4M3, 23, 8, 127)); }
float host_fp8e5m2_to_float(uint8_t v) { return f_from_bits((uint32_t)widen(v, &FMT_E5M2, 23, 8, 127)); }

/* ---- element operations ---------------------------------------------- */

/*
 * fmax/fmin semantics: a NaN operand loses; both NaN gives NaN; +0 > -0
 * (equal, or +0 and -0: max prefers the one without a sign).  Then the
 * combination of two elements by `op` (ncclSum and ncclAvg add).  One body
 * for double and float: T the type, P its prefix, BITS its bits, SIGN the
 * sign bit's place.
 */
#define ELEMENT_OPS(T, P, BITS, SIGN)                                                                          \
    INLINE T P##_max(T a, T b)                                                                                 \
    {                                                                                                          \
        if (a != a)                                                                                            \
            return b;                                                                                          \
        if (b != b || a > b)                                                                                   \
            return a;                                                                                          \
        if (a == b)                                                                                            \
            return (BITS(a) >> SIGN) ? b : a;                                                                  \
        return b;                                                                                              \
    }                                                                                                          \
    INLINE T P##_min(T a, T b)                                                                                 \
    {                                                                                                          \
        if (a != a)                                                                                            \
            return b;                                                                                          \
        if (b != b || a < b)                                                                                   \
            return a;                                                                                          \
        if (a == b)                                                                                            \
            return (BITS(a) >> SIGN) ? a : b;                                                                  \
        return b;                                                                                              \
    }                                                                                                          \
    INLINE T P##_combine(T a, T b, ncclRedOp_t op)                                                             \
    {                                                                                                          \
        switch (op) {                                                                                          \
        case ncclProd: return a * b;                                                                           \
        case ncclMax: return P##_max(a, b);                                                                    \
        case ncclMin: return P##_min(a, b);                                                                    \
        default: return a + b;                                                                                 \
        }                                                                                                      \
    }

ELEMENT_OPS(double, d, d_bits, 63)
ELEMENT_OPS(float, f, f_bits, 31)

INLINE void store_double(unsigned char *p, double r)
{
    uint64_t b = r != r ? D_CANON_NAN : d_bits(r);
    memcpy(p, &b, sizeof b);
}

INLINE void store_float(unsigned char *p, float r)
{
    uint32_t b = r != r ? F_CANON_NAN : f_bits(r);
    memcpy(p, &b, sizeof b);
}

INLINE uint32_t load_small(const unsigned char *p, size_t sz)
{
    if (sz == 1)
        return *p;
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE void store_small(unsigned char *p, size_t sz, double r, const struct small_fmt *f)
{
    int sat = (f == &FMT_E4M3 || f == &FMT_E5M2) ? REDUCE_FP8_SATFINITE : 0;
    uint32_t v = double_to_small(r != r ? d_from_bits(D_CANON_NAN) : r, f, sat);
    if (sz == 1) {
        *p = (unsigned char)v;
    } else {
        uint16_t h = (uint16_t)v;
        memcpy(p, &h, sizeof h);
    }
}

INLINE void reduce_small_op(unsigned char *acc, const unsigned char *in, size_t count, size_t sz,
                            const struct small_fmt *f, ncclRedOp_t op)
{
    for (size_t i = 0; i < count; i++, acc += sz, in += sz) {
        double a = small_to_double(load_small(acc, sz), f), b = small_to_double(load_small(in, sz), f);
        store_small(acc, sz, d_combine(a, b, op), f);
    }
}

INLINE void reduce_small(unsigned char *acc, const unsigned char *in, size_t count, size_t sz,
                         const struct small_fmt *f, ncclRedOp_t op)
{
    switch (op) {
    case ncclProd: reduce_small_op(acc, in, count, sz, f, ncclProd); break;
    case ncclMax: reduce_small_op(acc, in, count, sz, f, ncclMax); break;
    case ncclMin: reduce_small_op(acc, in, count, sz, f, ncclMin); break;
    default: reduce_small_op(acc, in, count, sz, f, ncclSum); break;
    }
}

/* Integers: sum and product in the unsigned type of the same width (wraps,
 * and 1u * promotes uint8_t to unsigned rather than int); max and min in T. */
#define INT_REDUCE(T, UT)                                                             \
    for (size_t i = 0; i < count; i++, a += sizeof(T), b += sizeof(T)) {              \
        T x, y, r;                                                                    \
        UT ux, uy, ur;                                                                \
        memcpy(&x, a, sizeof x);                                                      \
        memcpy(&y, b, sizeof y);                                                      \
        memcpy(&ux, a, sizeof ux);                                                    \
        memcpy(&uy, b, sizeof uy);                                                    \
        switch (op) {                                                                 \
        case ncclProd: ur = (UT)(1u * ux * uy); memcpy(a, &ur, sizeof ur); break;    \
        case ncclMax: r = x > y ? x : y; memcpy(a, &r, sizeof r); break;             \
        case ncclMin: r = x < y ? x : y; memcpy(a, &r, sizeof r); break;             \
        default: ur = (UT)(1u * ux + uy); memcpy(a, &ur, sizeof ur); break;          \
        }                                                                             \
    }

#define FLOAT_REDUCE(T, COMBINE, STORE)                                               \
    for (size_t i = 0; i < count; i++, a += sizeof(T), b += sizeof(T)) {              \
        T x, y;                                                                       \
        memcpy(&x, a, sizeof x);                                                      \
        memcpy(&y, b, sizeof y);                                                      \
        STORE(a, COMBINE(x, y, op));                                                  \
    }

int host_reduce_supported(ncclDataType_t dtype, ncclRedOp_t op, char *why, size_t whylen)
{
    if ((unsigned)op >= (unsigned)ncclNumOps) {
        if (why && whylen)
            snprintf(why, whylen, "ncclRedOp_t %d is a PreMulSum or unknown op", (int)op);
        return -1;
    }
    if ((unsigned)dtype >= (unsigned)ncclNumTypes) {
        if (why && whylen)
            snprintf(why, whylen, "ncclDataType_t %d is unknown", (int)dtype);
        return -1;
    }
    if (why && whylen)
        why[0] = '\0';
    return 0;
}

void host_reduce(void *accp, const void *inp, size_t count, ncclDataType_t dtype, ncclRedOp_t op)
{
    unsigned char *a = accp;
    const unsigned char *b = inp;
    if (count == 0 || host_reduce_supported(dtype, op, NULL, 0) != 0)
        return;
    switch (dtype) {
    case ncclInt8: INT_REDUCE(int8_t, uint8_t) break;
    case ncclUint8: INT_REDUCE(uint8_t, uint8_t) break;
    case ncclInt32: INT_REDUCE(int32_t, uint32_t) break;
    case ncclUint32: INT_REDUCE(uint32_t, uint32_t) break;
    case ncclInt64: INT_REDUCE(int64_t, uint64_t) break;
    case ncclUint64: INT_REDUCE(uint64_t, uint64_t) break;
    case ncclFloat32: FLOAT_REDUCE(float, f_combine, store_float) break;
    case ncclFloat64: FLOAT_REDUCE(double, d_combine, store_double) break;
    case ncclFloat16: reduce_small(a, b, count, 2, &FMT_F16, op); break;
    case ncclBfloat16: reduce_small(a, b, count, 2, &FMT_BF16, op); break;
    case ncclFloat8e4m3: reduce_small(a, b, count, 1, &FMT_E4M3, op); break;
    case ncclFloat8e5m2: reduce_small(a, b, count, 1, &FMT_E5M2, op); break;
    default: break;
    }
}

#define INT_DIV(T, DIVISOR)                                                           \
    for (size_t i = 0; i < count; i++, a += sizeof(T)) {                              \
        T x;                                                                          \
        memcpy(&x, a, sizeof x);                                                      \
        x = (T)(x / (DIVISOR));                                                       \
        memcpy(a, &x, sizeof x);                                                      \
    }

INLINE void div_small(unsigned char *a, size_t count, size_t sz, const struct small_fmt *f, int n)
{
    for (size_t i = 0; i < count; i++, a += sz)
        store_small(a, sz, small_to_double(load_small(a, sz), f) / n, f);
}

void host_reduce_finish_avg(void *accp, size_t count, ncclDataType_t dtype, int nranks)
{
    unsigned char *a = accp;
    if (count == 0 || nranks < 1)
        return;
    /* C division truncates toward zero, as NCCL's FuncSumPostDiv; x / nranks
     * cannot overflow since nranks >= 1. */
    switch (dtype) {
    case ncclInt8: INT_DIV(int8_t, nranks) break;
    case ncclUint8: INT_DIV(uint8_t, nranks) break;
    case ncclInt32: INT_DIV(int32_t, nranks) break;
    case ncclUint32: INT_DIV(uint32_t, (uint32_t)nranks) break;
    case ncclInt64: INT_DIV(int64_t, (int64_t)nranks) break;
    case ncclUint64: INT_DIV(uint64_t, (uint64_t)nranks) break;
    case ncclFloat32:
        /* (float)nranks is exact up to 2^24, so this is the correctly rounded quotient. */
        for (size_t i = 0; i < count; i++, a += sizeof(float)) {
            float x;
            memcpy(&x, a, sizeof x);
            store_float(a, x / (float)nranks);
        }
        break;
    case ncclFloat64:
        for (size_t i = 0; i < count; i++, a += sizeof(double)) {
            double x;
            memcpy(&x, a, sizeof x);
            store_double(a, x / nranks);
        }
        break;
    case ncclFloat16: div_small(a, count, 2, &FMT_F16, nranks); break;
    case ncclBfloat16: div_small(a, count, 2, &FMT_BF16, nranks); break;
    case ncclFloat8e4m3: div_small(a, count, 1, &FMT_E4M3, nranks); break;
    case ncclFloat8e5m2: div_small(a, count, 1, &FMT_E5M2, nranks); break;
    default: break;
    }
}
