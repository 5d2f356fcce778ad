/*
 * Unit tests of shim/ipc/reduce.c (host-side AllReduce arithmetic), against
 * references written independently of its bit manipulation:
 *
 *  - a narrow float format's values are decoded from the format's definition
 *    with double arithmetic (significand times a power of two built by
 *    repeated doubling), and a real number is rounded to the format by
 *    searching the sorted table of its values for the nearest one (ties: the
 *    even encoding);
 *  - where the compiler has _Float16, its conversions are a second reference
 *    for float16;
 *  - integer results are computed on zero-extended 64-bit words and masked.
 *
 * Sanitizers: build with -fsanitize=address,undefined to check for
 * misaligned or out-of-bounds accesses (the buffer tests use odd offsets and
 * exact-size heap blocks).
 */
#include "tap.h"
#include "reduce.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif


/* A diagnostic for the first few mismatches of a check. */
static int ndiag;
static void diag(const char *fmt, ...)
{
    va_list ap;
    if (ndiag++ >= 20)
        return;
    printf("#   ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1dull;
}

#define D_SIGN_TEST 0x8000000000000000ull

static uint32_t fbits(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }
static float bitsf(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static uint64_t dbits(double d) { uint64_t b; memcpy(&b, &d, 8); return b; }
static double bitsd(uint64_t b) { double d; memcpy(&d, &b, 8); return d; }

/* ---- reference narrow formats ------------------------------------------ */

enum { F16, BF16, E4M3, E5M2, NFMT };

struct ref_fmt {
    const char *name;
    ncclDataType_t dtype;
    int ebits, mbits, bias, fn, nbits;
    int nval;               /* positive finite values, sorted */
    double *val;
    uint32_t *enc;
    uint32_t maxenc, infenc; /* infenc: 0 if the format has none */
} F[NFMT] = {
    { "float16", ncclFloat16, 5, 10, 15, 0, 16, 0, 0, 0, 0, 0 },
    { "bfloat16", ncclBfloat16, 8, 7, 127, 0, 16, 0, 0, 0, 0, 0 },
    { "fp8 e4m3", ncclFloat8e4m3, 4, 3, 7, 1, 8, 0, 0, 0, 0, 0 },
    { "fp8 e5m2", ncclFloat8e5m2, 5, 2, 15, 0, 8, 0, 0, 0, 0, 0 },
};

static double pow2(int k)
{
    double r = 1.0;
    for (; k > 0; k--)
        r *= 2.0;
    for (; k < 0; k++)
        r /= 2.0;
    return r;
}

/* The value an encoding stands for, from the format's definition. */
static double ref_decode(const struct ref_fmt *f, uint32_t v)
{
    int sign = v >> (f->nbits - 1) & 1;
    uint32_t emax = (1u << f->ebits) - 1, mmax = (1u << f->mbits) - 1;
    uint32_t e = v >> f->mbits & emax, m = v & mmax;
    double x;
    if (f->fn && e == emax && m == mmax)
        return NAN;
    if (!f->fn && e == emax) {
        if (m)
            return NAN;
        x = INFINITY;
    } else if (e == 0) {
        x = (double)m * pow2(1 - f->bias - f->mbits);
    } else {
        x = (double)(m + (1u << f->mbits)) * pow2((int)e - f->bias - f->mbits);
    }
    return sign ? -x : x;
}

static const struct ref_fmt *cmp_fmt;
static int by_value(const void *a, const void *b)
{
    double x = ref_decode(cmp_fmt, *(const uint32_t *)a), y = ref_decode(cmp_fmt, *(const uint32_t *)b);
    return x < y ? -1 : x > y;
}

static void ref_init(struct ref_fmt *f)
{
    uint32_t npos = 1u << (f->nbits - 1);
    f->enc = malloc(npos * sizeof(uint32_t));
    f->val = malloc(npos * sizeof(double));
    f->nval = 0;
    f->infenc = 0;
    for (uint32_t v = 0; v < npos; v++) {
        double x = ref_decode(f, v);
        if (isinf(x))
            f->infenc = v;
        else if (!isnan(x))
            f->enc[f->nval++] = v;
    }
    cmp_fmt = f;
    qsort(f->enc, (size_t)f->nval, sizeof(uint32_t), by_value);
    for (int i = 0; i < f->nval; i++)
        f->val[i] = ref_decode(f, f->enc[i]);
    f->maxenc = f->enc[f->nval - 1];
}

#define REF_NAN 0xffffffffu

/* Round x to the format: nearest value, ties to the even encoding; beyond the
 * largest value the next one up would be max + ulp (its encoding odd/even as
 * maxenc + 1), and rounding to it overflows: to infinity, E4M3's NaN, or with
 * satfinite the largest finite value.  REF_NAN for a NaN x. */
static uint32_t ref_round(const struct ref_fmt *f, double x, int satfinite)
{
    if (isnan(x))
        return REF_NAN;
    uint32_t s = signbit(x) ? 1u << (f->nbits - 1) : 0;
    double ax = s ? -x : x;
    double max = f->val[f->nval - 1], prev = f->val[f->nval - 2];
    uint32_t over = satfinite ? f->maxenc : f->fn ? 0x7f : f->infenc;
    if (ax > max) {
        if (isinf(ax))
            return s | over;
        double bound = max + (max - prev) / 2;
        if (ax < bound || (ax == bound && !(f->maxenc & 1)))
            return s | f->maxenc;
        return s | over;
    }
    int lo = 0, hi = f->nval - 1;   /* largest index with val <= ax */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (f->val[mid] <= ax)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (f->val[lo] == ax)
        return s | f->enc[lo];
    double twice = 2 * ax, sum = f->val[lo] + f->val[lo + 1];
    if (twice < sum)
        return s | f->enc[lo];
    if (twice > sum)
        return s | f->enc[lo + 1];
    return s | ((f->enc[lo] & 1) ? f->enc[lo + 1] : f->enc[lo]);
}


/* The implementation's conversions, by format. */
static uint32_t impl_from_float(int k, float x, int sat)
{
    switch (k) {
    case F16: return host_float_to_half(x);
    case BF16: return host_float_to_bf16(x);
    case E4M3: return host_float_to_fp8e4m3(x, sat);
    default: return host_float_to_fp8e5m2(x, sat);
    }
}

static float impl_to_float(int k, uint32_t v)
{
    switch (k) {
    case F16: return host_half_to_float((uint16_t)v);
    case BF16: return host_bf16_to_float((uint16_t)v);
    case E4M3: return host_fp8e4m3_to_float((uint8_t)v);
    default: return host_fp8e5m2_to_float((uint8_t)v);
    }
}

/* The format's NaN from a conversion of NaN (cuda_fp16/bf16/fp8 conventions). */
static int conv_nan_ok(int k, uint32_t got, float x)
{
    uint32_t s = (fbits(x) >> 31) << (F[k].nbits - 1);
    switch (k) {
    case E4M3: return got == (s | 0x7f);
    case E5M2: return got == (s | 0x7e | (fbits(x) >> 21 & 3));
    default: return got == 0x7fff;
    }
}

/* One conversion of x compared with the reference; returns 1 if they agree. */
static int check_conv(int k, float x, int sat)
{
    uint32_t got = impl_from_float(k, x, sat), want = ref_round(&F[k], x, sat);
    if (want == REF_NAN ? conv_nan_ok(k, got, x) : got == want)
        return 1;
    diag("%s%s: %a (0x%08x) -> 0x%x, want 0x%x", F[k].name, sat ? " satfinite" : "", x, fbits(x), got, want);
    return 0;
}

static int nsat(int k) { return k == E4M3 || k == E5M2 ? 2 : 1; }

static void test_conversions(void)
{
    for (int k = 0; k < NFMT; k++) {
        const struct ref_fmt *f = &F[k];
        uint32_t nenc = 1u << f->nbits;
        int bad = 0;
        ndiag = 0;
        for (uint32_t v = 0; v < nenc; v++) {
            double want = ref_decode(f, v);
            float got = impl_to_float(k, v);
            if (isnan(want) ? !isnan(got) : ((double)got != want || !!signbit(got) != !!signbit(want))) {
                if (!bad++)
                    diag("0x%x -> %a, want %a", v, got, want);
            }
        }
        ok(!bad, "%s: all %u encodings widen to the value the format defines (subnormals, +-0, +-inf, NaN)", f->name, nenc);

        for (int sat = 0; sat < nsat(k); sat++) {
            bad = 0;
            ndiag = 0;
            for (uint32_t v = 0; v < nenc; v++) {
                double x = ref_decode(f, v);
                if (isnan(x) || (sat && isinf(x)))
                    continue;
                uint32_t back = impl_from_float(k, impl_to_float(k, v), sat);
                if (back != v && !bad++)
                    diag("0x%x -> %a -> 0x%x", v, impl_to_float(k, v), back);
            }
            ok(!bad, "%s%s: every non-NaN encoding survives float -> %s -> float -> %s", f->name,
               sat ? " satfinite" : "", f->name, f->name);
        }

        /* Every rounding boundary: each midpoint between neighbouring values
         * (and between the largest and the overflow step), and the floats
         * just below and above it, both signs. */
        for (int sat = 0; sat < nsat(k); sat++) {
            bad = 0;
            ndiag = 0;
            long checked = 0;
            for (int i = 0; i < f->nval; i++) {
                double a = f->val[i];
                double b = i + 1 < f->nval ? f->val[i + 1] : a + (a - f->val[i - 1]);
                float mid = (float)((a + b) / 2);
                if ((double)mid != (a + b) / 2) {
                    diag("midpoint of %a and %a is not a float", a, b);
                    bad++;
                    continue;
                }
                float xs[3] = { mid, bitsf(fbits(mid) - 1), bitsf(fbits(mid) + 1) };
                for (int j = 0; j < 3; j++) {
                    bad += !check_conv(k, xs[j], sat);
                    bad += !check_conv(k, -xs[j], sat);
                    checked += 2;
                }
            }
            ok(!bad, "%s%s: all %ld midpoints and their float neighbours round to nearest, ties to even",
               f->name, sat ? " satfinite" : "", checked);
        }

        for (int sat = 0; sat < nsat(k); sat++) {
            bad = 0;
            ndiag = 0;
            for (int i = 0; i < 1000000; i++) {
                uint32_t r = (uint32_t)rnd();
                if (i & 1) { /* half the time, a float near the format's range */
                    int e = 127 - f->bias - 12 + (int)(rnd() % (2u * (unsigned)f->bias + 30));
                    e = e < 0 ? 0 : e > 254 ? 254 : e;
                    r = (r & 0x807fffffu) | (uint32_t)e << 23;
                }
                bad += !check_conv(k, bitsf(r), sat);
            }
            float specials[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 3.4028235e38f,
                                 -3.4028235e38f, 1.17549435e-38f, 1.1754942e-38f };
            for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++)
                bad += !check_conv(k, specials[i], sat);
            ok(!bad, "%s%s: 1M random floats (NaN, inf, subnormals included) round as the reference", f->name,
               sat ? " satfinite" : "");
        }
    }

#if defined(__FLT16_MANT_DIG__)
    {
        int bad = 0;
        ndiag = 0;
        for (int i = 0; i < 2000000; i++) {
            uint32_t r = (uint32_t)rnd();
            if (i & 1)
                r = (r & 0x807fffffu) | (uint32_t)(100 + rnd() % 50) << 23;
            float x = bitsf(r);
            if (isnan(x))
                continue;
            _Float16 h = (_Float16)x;
            uint16_t want;
            memcpy(&want, &h, 2);
            uint16_t got = host_float_to_half(x);
            if (got != want) {
                bad++;
                diag("float16 %a -> 0x%04x, _Float16 gives 0x%04x", x, got, want);
            }
        }
        for (uint32_t v = 0; v < 65536; v++) {
            uint16_t hv = (uint16_t)v;
            _Float16 h;
            memcpy(&h, &hv, 2);
            float want = (float)h, got = host_half_to_float(hv);
            if (isnan(want) ? !isnan(got) : fbits(want) != fbits(got)) {
                bad++;
                diag("float16 0x%04x -> %a, _Float16 gives %a", v, got, want);
            }
        }
        ok(!bad, "float16 conversions agree with the compiler's _Float16 (2M random floats, all encodings)");
    }
#else
    ok(1, "# SKIP no _Float16 in this compiler");
#endif
}

/* ---- known values -------------------------------------------------------- */

/* host_reduce on one element of a narrow type, by encodings. */
static uint32_t red1(ncclDataType_t t, ncclRedOp_t op, uint32_t a, uint32_t b)
{
    if (t == ncclFloat16 || t == ncclBfloat16) {
        uint16_t x = (uint16_t)a, y = (uint16_t)b;
        host_reduce(&x, &y, 1, t, op);
        return x;
    }
    uint8_t x = (uint8_t)a, y = (uint8_t)b;
    host_reduce(&x, &y, 1, t, op);
    return x;
}

static uint32_t red1f(ncclRedOp_t op, float a, float b)
{
    host_reduce(&a, &b, 1, ncclFloat32, op);
    return fbits(a);
}

static uint64_t red1d(ncclRedOp_t op, double a, double b)
{
    host_reduce(&a, &b, 1, ncclFloat64, op);
    return dbits(a);
}

static void test_known_values(void)
{
    /* 1 + 1 = 2 in every type. */
    {
        int good = 1;
        int8_t i8a = 1, i8b = 1; host_reduce(&i8a, &i8b, 1, ncclInt8, ncclSum); good &= i8a == 2;
        uint8_t u8a = 1, u8b = 1; host_reduce(&u8a, &u8b, 1, ncclUint8, ncclSum); good &= u8a == 2;
        int32_t i32a = 1, i32b = 1; host_reduce(&i32a, &i32b, 1, ncclInt32, ncclSum); good &= i32a == 2;
        uint32_t u32a = 1, u32b = 1; host_reduce(&u32a, &u32b, 1, ncclUint32, ncclSum); good &= u32a == 2;
        int64_t i64a = 1, i64b = 1; host_reduce(&i64a, &i64b, 1, ncclInt64, ncclSum); good &= i64a == 2;
        uint64_t u64a = 1, u64b = 1; host_reduce(&u64a, &u64b, 1, ncclUint64, ncclSum); good &= u64a == 2;
        good &= red1f(ncclSum, 1.0f, 1.0f) == fbits(2.0f);
        good &= red1d(ncclSum, 1.0, 1.0) == dbits(2.0);
        good &= red1(ncclFloat16, ncclSum, 0x3c00, 0x3c00) == 0x4000;
        good &= red1(ncclBfloat16, ncclSum, 0x3f80, 0x3f80) == 0x4000;
        good &= red1(ncclFloat8e4m3, ncclSum, 0x38, 0x38) == 0x40;
        good &= red1(ncclFloat8e5m2, ncclSum, 0x3c, 0x3c) == 0x40;
        ok(good, "1 + 1 = 2 in all 12 types");
    }

    /* float16 */
    ok(host_float_to_half(65504.0f) == 0x7bff && host_half_to_float(0x7bff) == 65504.0f, "float16: 65504 is the largest, 0x7bff");
    ok(red1(ncclFloat16, ncclSum, 0x7bff, host_float_to_half(8.0f)) == 0x7bff, "float16: 65504 + 8 rounds back to 65504");
    ok(red1(ncclFloat16, ncclSum, 0x7bff, host_float_to_half(16.0f)) == 0x7c00, "float16: 65504 + 16 (the tie at 65520) overflows to inf");
    ok(red1(ncclFloat16, ncclSum, 0xfbff, host_float_to_half(-16.0f)) == 0xfc00, "float16: -65504 - 16 gives -inf");
    ok(host_float_to_half(65519.996f) == 0x7bff && host_float_to_half(65520.0f) == 0x7c00, "float16: 65520 is the overflow threshold");
    ok(host_half_to_float(0x0001) == 5.9604645e-8f && host_float_to_half(5.9604645e-8f) == 0x0001, "float16: smallest subnormal 2^-24");
    ok(red1(ncclFloat16, ncclSum, 0x0001, 0x0001) == 0x0002, "float16: subnormal + subnormal");
    ok(red1(ncclFloat16, ncclSum, 0x03ff, 0x0001) == 0x0400, "float16: largest subnormal + smallest = smallest normal");
    ok(red1(ncclFloat16, ncclProd, 0x0001, 0x3800) == 0x0000, "float16: 2^-24 * 0.5 ties to even: 0");
    ok(red1(ncclFloat16, ncclProd, 0x0003, 0x3800) == 0x0002, "float16: 3*2^-24 * 0.5 ties to even: 2*2^-24");
    ok(red1(ncclFloat16, ncclProd, 0x8001, 0x3800) == 0x8000, "float16: -2^-24 * 0.5 underflows to -0");
    ok(host_float_to_half(1.0f + 1.0f / 2048) == 0x3c00 && host_float_to_half(1.0f + 3.0f / 2048) == 0x3c02,
       "float16: float ties round to even");
    ok(red1(ncclFloat16, ncclSum, 0x3c00, 0x1000) == 0x3c00 && red1(ncclFloat16, ncclSum, 0x3c01, 0x1000) == 0x3c02,
       "float16: 1 + 2^-11 = 1, (1 + 2^-10) + 2^-11 = 1 + 2^-9 (ties to even)");

    /* bfloat16 */
    ok(host_float_to_bf16(bitsf(0x3f808000)) == 0x3f80 && host_float_to_bf16(bitsf(0x3f818000)) == 0x3f82,
       "bfloat16: exact ties round to even (0x3f808000 -> 0x3f80, 0x3f818000 -> 0x3f82)");
    ok(host_float_to_bf16(bitsf(0x3f808001)) == 0x3f81 && host_float_to_bf16(bitsf(0x3f807fff)) == 0x3f80,
       "bfloat16: just above a tie rounds up, just below rounds down");
    ok(red1(ncclBfloat16, ncclSum, 0x3f80, 0x3b80) == 0x3f80 && red1(ncclBfloat16, ncclSum, 0x3f81, 0x3b80) == 0x3f82,
       "bfloat16: 1 + 2^-8 = 1, (1 + 2^-7) + 2^-8 = 1 + 2^-6 (ties to even)");
    ok(host_float_to_bf16(3.4028235e38f) == 0x7f80 && red1(ncclBfloat16, ncclSum, 0x7f7f, 0x7f7f) == 0x7f80,
       "bfloat16: FLT_MAX and max + max round to inf");
    ok(host_bf16_to_float(0x0001) == bitsf(0x00010000) && red1(ncclBfloat16, ncclSum, 0x0001, 0x0001) == 0x0002,
       "bfloat16: subnormals (2^-133) widen exactly and add");

    /* fp8 e4m3 (OCP E4M3FN) */
    ok(host_fp8e4m3_to_float(0x7e) == 448.0f && host_float_to_fp8e4m3(448.0f, 0) == 0x7e, "e4m3: 448 is the largest, 0x7e");
    ok(host_float_to_fp8e4m3(464.0f, 0) == 0x7e, "e4m3: 464 (tie with the NaN slot 480) rounds to even 448");
    ok(host_float_to_fp8e4m3(464.03125f, 0) == 0x7f && host_float_to_fp8e4m3(-1000.0f, 0) == 0xff,
       "e4m3 nosat: beyond 464 -> NaN, sign kept (__NV_NOSAT)");
    ok(host_float_to_fp8e4m3(464.03125f, 1) == 0x7e && host_float_to_fp8e4m3(-1000.0f, 1) == 0xfe,
       "e4m3 satfinite: beyond 464 -> +-448");
    ok(host_float_to_fp8e4m3(INFINITY, 0) == 0x7f && host_float_to_fp8e4m3(-INFINITY, 1) == 0xfe,
       "e4m3: inf -> NaN (nosat), -inf -> -448 (satfinite)");
    ok(isnan(host_fp8e4m3_to_float(0x7f)) && isnan(host_fp8e4m3_to_float(0xff))
       && host_fp8e4m3_to_float(0x78) == 256.0f && host_fp8e4m3_to_float(0x7d) == 416.0f,
       "e4m3: only 0x7f/0xff are NaN, exponent 1111 is otherwise finite");
    ok(host_fp8e4m3_to_float(0x01) == 0.001953125f && host_float_to_fp8e4m3(0.0009765625f, 0) == 0x00
       && host_float_to_fp8e4m3(-0.0009765625f, 0) == 0x80 && host_float_to_fp8e4m3(0.0029296875f, 0) == 0x02
       && host_float_to_fp8e4m3(bitsf(0x3a800001), 0) == 0x01,
       "e4m3: subnormals: 2^-9 smallest, 2^-10 ties to +-0, 1.5*2^-9 ties to 2*2^-9");
    ok(red1(ncclFloat8e4m3, ncclSum, 0x7e, 0x7e) == 0x7e && red1(ncclFloat8e4m3, ncclProd, 0xfe, 0x7e) == 0xfe,
       "e4m3 reduce: 448 + 448 saturates to 448, -448 * 448 to -448 (NCCL's __NV_SATFINITE)");
    ok(red1(ncclFloat8e4m3, ncclSum, 0x7f, 0x38) == 0x7f && red1(ncclFloat8e4m3, ncclSum, 0xff, 0x38) == 0x7f,
       "e4m3 reduce: NaN + 1 = canonical NaN 0x7f");

    /* fp8 e5m2 */
    ok(host_fp8e5m2_to_float(0x7b) == 57344.0f && host_float_to_fp8e5m2(57344.0f, 0) == 0x7b, "e5m2: 57344 is the largest, 0x7b");
    ok(host_float_to_fp8e5m2(61439.996f, 0) == 0x7b && host_float_to_fp8e5m2(61440.0f, 0) == 0x7c,
       "e5m2 nosat: 61440 (tie with 65536) overflows to inf");
    ok(host_float_to_fp8e5m2(61440.0f, 1) == 0x7b && host_float_to_fp8e5m2(-INFINITY, 1) == 0xfb
       && host_float_to_fp8e5m2(INFINITY, 0) == 0x7c, "e5m2: satfinite -> +-57344 (infinities too), nosat keeps inf");
    ok(host_fp8e5m2_to_float(0x01) == 1.5258789e-05f && host_fp8e5m2_to_float(0x7c) == INFINITY
       && isnan(host_fp8e5m2_to_float(0x7d)), "e5m2: 2^-16 smallest subnormal, 0x7c inf, 0x7d NaN");
    ok(host_float_to_fp8e5m2(bitsf(0x7fc00000), 0) == 0x7e && host_float_to_fp8e5m2(bitsf(0xffffffff), 1) == 0xff,
       "e5m2: NaN -> 0x7e | top mantissa bits | sign (cuda_fp8)");
    ok(red1(ncclFloat8e5m2, ncclSum, 0x7c, 0x3c) == 0x7b && red1(ncclFloat8e5m2, ncclMax, 0x7c, 0x3c) == 0x7b
       && red1(ncclFloat8e5m2, ncclSum, 0x7b, 0x7b) == 0x7b,
       "e5m2 reduce: results saturate to 57344, inf operands too (NCCL's __NV_SATFINITE)");

    /* Signed zeros, NaN, infinities. */
    {
        int good = 1;
        good &= red1f(ncclSum, -0.0f, -0.0f) == 0x80000000u && red1f(ncclSum, -0.0f, 0.0f) == 0;
        good &= red1f(ncclMax, -0.0f, 0.0f) == 0 && red1f(ncclMax, 0.0f, -0.0f) == 0;
        good &= red1f(ncclMin, -0.0f, 0.0f) == 0x80000000u && red1f(ncclMin, 0.0f, -0.0f) == 0x80000000u;
        good &= red1f(ncclProd, -0.0f, 5.0f) == 0x80000000u;
        good &= red1d(ncclSum, -0.0, -0.0) == D_SIGN_TEST && red1d(ncclMin, 0.0, -0.0) == D_SIGN_TEST;
        good &= red1d(ncclMax, -0.0, 0.0) == 0;
        good &= red1(ncclFloat16, ncclSum, 0x8000, 0x8000) == 0x8000 && red1(ncclFloat16, ncclSum, 0x8000, 0) == 0;
        good &= red1(ncclFloat16, ncclMax, 0x8000, 0) == 0 && red1(ncclFloat16, ncclMin, 0, 0x8000) == 0x8000;
        good &= red1(ncclBfloat16, ncclMin, 0x0000, 0x8000) == 0x8000 && red1(ncclFloat8e4m3, ncclMax, 0x80, 0) == 0;
        good &= red1(ncclFloat8e5m2, ncclProd, 0x80, 0x3c) == 0x80;
        ok(good, "signed zeros: -0 + -0 = -0, -0 + 0 = 0, max(-0, 0) = 0, min(0, -0) = -0, -0 * x = -0");
    }
    {
        int good = 1;
        good &= red1f(ncclSum, NAN, 1.0f) == 0x7fffffffu && red1f(ncclSum, 1.0f, -NAN) == 0x7fffffffu;
        good &= red1f(ncclSum, INFINITY, -INFINITY) == 0x7fffffffu && red1f(ncclProd, INFINITY, 0.0f) == 0x7fffffffu;
        good &= red1d(ncclSum, INFINITY, -INFINITY) == 0x7fffffffffffffffull;
        good &= red1(ncclFloat16, ncclSum, 0xfe00, 0x3c00) == 0x7fff && red1(ncclFloat16, ncclSum, 0x7c00, 0xfc00) == 0x7fff;
        good &= red1(ncclBfloat16, ncclProd, 0x7f80, 0x0000) == 0x7fff;
        good &= red1(ncclFloat8e5m2, ncclSum, 0x7c, 0xfc) == 0x7f;
        ok(good, "NaN results are the canonical NaN (0x7fffffff, 0x7fff...f, f16/bf16 0x7fff, fp8 0x7f), inf - inf too");
    }
    {
        int good = 1;
        good &= red1f(ncclMax, NAN, 1.0f) == fbits(1.0f) && red1f(ncclMax, 1.0f, NAN) == fbits(1.0f);
        good &= red1f(ncclMin, NAN, -1.0f) == fbits(-1.0f) && red1f(ncclMin, -1.0f, -NAN) == fbits(-1.0f);
        good &= red1f(ncclMax, NAN, -NAN) == 0x7fffffffu;
        good &= red1d(ncclMax, NAN, 2.0) == dbits(2.0) && red1d(ncclMin, 2.0, NAN) == dbits(2.0);
        good &= red1(ncclFloat16, ncclMax, 0x7e00, 0xbc00) == 0xbc00 && red1(ncclFloat16, ncclMin, 0xbc00, 0x7e00) == 0xbc00;
        good &= red1(ncclBfloat16, ncclMax, 0x7fc0, 0x3f80) == 0x3f80 && red1(ncclFloat8e4m3, ncclMax, 0x7f, 0x38) == 0x38;
        good &= red1(ncclFloat8e4m3, ncclMin, 0xff, 0x7f) == 0x7f && red1(ncclFloat8e5m2, ncclMin, 0x3c, 0x7e) == 0x3c;
        good &= red1f(ncclMax, INFINITY, 1.0f) == fbits(INFINITY) && red1f(ncclMin, -INFINITY, NAN) == fbits(-INFINITY);
        ok(good, "max/min: a NaN operand loses to a number (fmaxf/__hmax, as NCCL), both NaN gives NaN");
    }
}

/* ---- every (dtype, op) against the references ---------------------------- */

static const char *tname(ncclDataType_t t)
{
    static const char *names[] = { "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16",
                                   "float32", "float64", "bfloat16", "fp8 e4m3", "fp8 e5m2" };
    return names[t];
}

static const char *op_name[] = { "sum", "prod", "max", "min", "avg" };

static int is_narrow(ncclDataType_t t)
{
    return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
}

static int fmt_of(ncclDataType_t t)
{
    return t == ncclFloat16 ? F16 : t == ncclBfloat16 ? BF16 : t == ncclFloat8e4m3 ? E4M3 : E5M2;
}

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

static int is_signed_int(ncclDataType_t t) { return t == ncclInt8 || t == ncclInt32 || t == ncclInt64; }
static int is_int(ncclDataType_t t) { return t <= ncclUint64; }

static uint64_t get_elt(const unsigned char *p, size_t i, size_t sz)
{
    uint64_t v = 0;
    for (size_t b = 0; b < sz; b++)     /* little-endian host assumed (x86-64, aarch64) */
        v |= (uint64_t)p[i * sz + b] << (8 * b);
    return v;
}

static void put_elt(unsigned char *p, size_t i, size_t sz, uint64_t v)
{
    for (size_t b = 0; b < sz; b++)
        p[i * sz + b] = (unsigned char)(v >> (8 * b));
}

static int64_t sext(uint64_t v, size_t sz)
{
    if (sz == 8)
        return (int64_t)v;
    uint64_t sb = 1ull << (8 * sz - 1);
    return (int64_t)((v ^ sb) - sb);
}

/* fmax/fmin reference on doubles, written from the definition. */
static double ref_max(double a, double b, int want_max)
{
    if (isnan(a))
        return b;
    if (isnan(b))
        return a;
    if (a == b && a == 0)
        return (signbit(a) != 0) == want_max ? b : a;
    return (want_max ? a > b : a < b) ? a : b;
}

static double ref_op_d(double a, double b, ncclRedOp_t op)
{
    switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return ref_max(a, b, 1);
    case ncclMin: return ref_max(a, b, 0);
    default: return a + b;
    }
}

/* Expected acc OP in for one element of any type, as raw bits. */
static uint64_t ref_elt(ncclDataType_t t, ncclRedOp_t op, uint64_t a, uint64_t b)
{
    size_t sz = type_size(t);
    if (is_int(t)) {
        uint64_t mask = sz == 8 ? ~0ull : (1ull << (8 * sz)) - 1;
        switch (op) {
        case ncclProd: return (a * b) & mask;
        case ncclMax: case ncclMin: {
            int a_lt_b = is_signed_int(t) ? sext(a, sz) < sext(b, sz) : a < b;
            return (op == ncclMax) == a_lt_b ? b : a;
        }
        default: return (a + b) & mask;
        }
    }
    if (is_narrow(t)) {
        const struct ref_fmt *f = &F[fmt_of(t)];
        int sat = t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
        uint32_t r = ref_round(f, ref_op_d(ref_decode(f, (uint32_t)a), ref_decode(f, (uint32_t)b), op), sat);
        return r == REF_NAN ? (f->nbits == 16 ? 0x7fff : 0x7f) : r;
    }
    if (t == ncclFloat32) {
        /* float + float and float * float rounded once to double, then to
         * float: the double rounding cannot differ (53 >= 2*24 + 2). */
        float r = (float)ref_op_d(bitsf((uint32_t)a), bitsf((uint32_t)b), op);
        return isnan(r) ? 0x7fffffffu : fbits(r);
    }
    double r = ref_op_d(bitsd(a), bitsd(b), op);
    return isnan(r) ? 0x7fffffffffffffffull : dbits(r);
}

/* A random element: raw random bits (NaN, inf, subnormals included), or for
 * floats a value of moderate size so that sums and products stay finite and
 * round in interesting ways. */
static uint64_t rnd_elt(ncclDataType_t t)
{
    size_t sz = type_size(t);
    uint64_t r = rnd();
    if (rnd() % 2 == 0 || is_int(t)) {
        if (is_int(t) && rnd() % 4 == 0)      /* near the wrap-around points */
            r = (rnd() % 2 ? 0 : 1ull << (8 * sz - 1)) + (rnd() % 5) - 2;
        return sz == 8 ? r : r & ((1ull << (8 * sz)) - 1);
    }
    double x = (double)(int64_t)(rnd() % 2001 - 1000) / (double)(1 + rnd() % 64);
    if (is_narrow(t))
        return impl_from_float(fmt_of(t), (float)x, 1);
    if (t == ncclFloat32)
        return fbits((float)x);
    return dbits(x);
}

static void test_all_pairs(void)
{
    const size_t count = 20000;
    for (int ti = 0; ti < ncclNumTypes; ti++) {
        ncclDataType_t t = (ncclDataType_t)ti;
        size_t sz = type_size(t);
        for (int oi = 0; oi < ncclNumOps; oi++) {
            ncclRedOp_t op = (ncclRedOp_t)oi;
            unsigned char *acc = malloc(count * sz), *in = malloc(count * sz);
            for (size_t i = 0; i < count; i++) {
                put_elt(acc, i, sz, rnd_elt(t));
                put_elt(in, i, sz, rnd_elt(t));
            }
            /* Exhaustive for fp8: every pair of encodings. */
            size_t m = count;
            if (sz == 1 && is_narrow(t)) {
                free(acc);
                free(in);
                m = 65536;
                acc = malloc(m);
                in = malloc(m);
                for (size_t i = 0; i < m; i++) {
                    acc[i] = (unsigned char)(i >> 8);
                    in[i] = (unsigned char)i;
                }
            }
            uint64_t *want = malloc(m * sizeof(uint64_t));
            for (size_t i = 0; i < m; i++)
                want[i] = ref_elt(t, op, get_elt(acc, i, sz), get_elt(in, i, sz));
            unsigned char *orig = malloc(m * sz);
            memcpy(orig, acc, m * sz);
            host_reduce(acc, in, m, t, op);
            int bad = 0;
            ndiag = 0;
            for (size_t i = 0; i < m; i++) {
                if (get_elt(acc, i, sz) != want[i]) {
                    bad++;
                    diag("0x%llx %s 0x%llx = 0x%llx, want 0x%llx", (unsigned long long)get_elt(orig, i, sz), op_name[oi],
                         (unsigned long long)get_elt(in, i, sz), (unsigned long long)get_elt(acc, i, sz),
                         (unsigned long long)want[i]);
                }
            }
            ok(!bad, "%s %s: %zu %s pairs match the reference", op_name[oi], tname(t), m, sz == 1 && is_narrow(t) ? "(all)" : "random");
            free(acc);
            free(in);
            free(orig);
            free(want);
        }
    }
}

/* ---- average -------------------------------------------------------------- */

/* Expected avg of nranks buffers: the stepwise sum (the reference for
 * ncclSum), then the division. */
static uint64_t ref_avg(ncclDataType_t t, const uint64_t *x, int nranks)
{
    size_t sz = type_size(t);
    uint64_t acc = x[0];
    for (int r = 1; r < nranks; r++)
        acc = ref_elt(t, ncclSum, acc, x[r]);
    if (is_int(t)) {
        uint64_t mask = sz == 8 ? ~0ull : (1ull << (8 * sz)) - 1;
        if (is_signed_int(t))
            return (uint64_t)(sext(acc, sz) / nranks) & mask;
        return acc / (uint64_t)nranks;
    }
    if (is_narrow(t)) {
        const struct ref_fmt *f = &F[fmt_of(t)];
        uint32_t r = ref_round(f, ref_decode(f, (uint32_t)acc) / nranks, t == ncclFloat8e4m3 || t == ncclFloat8e5m2);
        return r == REF_NAN ? (f->nbits == 16 ? 0x7fff : 0x7f) : r;
    }
    if (t == ncclFloat32) {
        float r = (float)((double)bitsf((uint32_t)acc) / nranks);  /* double rounding harmless, as above */
        return isnan(r) ? 0x7fffffffu : fbits(r);
    }
    double r = bitsd(acc) / nranks;
    return isnan(r) ? 0x7fffffffffffffffull : dbits(r);
}

static void test_avg(void)
{
    /* Known values. */
    {
        int32_t a[3] = { -7, 7, -8 }, b[3] = { 0, 0, 0 }, c[3] = { 0, 0, 0 };
        host_reduce(a, b, 3, ncclInt32, ncclAvg);
        host_reduce(a, c, 3, ncclInt32, ncclAvg);
        host_reduce_finish_avg(a, 3, ncclInt32, 3);
        ok(a[0] == -2 && a[1] == 2 && a[2] == -2, "avg int32: -7/3 = -2, 7/3 = 2, -8/3 = -2 (truncated toward zero)");
    }
    {
        int8_t a = 100, b = 100;
        host_reduce(&a, &b, 1, ncclInt8, ncclAvg);
        host_reduce_finish_avg(&a, 1, ncclInt8, 2);
        uint8_t u = 250, v = 10;
        host_reduce(&u, &v, 1, ncclUint8, ncclSum);
        host_reduce_finish_avg(&u, 1, ncclUint8, 2);
        ok(a == -28 && u == 2, "avg int8 100,100 = -28 and uint8 250,10 = 2 (the wrapped sum is divided, as NCCL does)");
    }
    {
        int64_t a = INT64_MIN, b = 0;
        host_reduce(&a, &b, 1, ncclInt64, ncclAvg);
        host_reduce_finish_avg(&a, 1, ncclInt64, 2);
        uint64_t u = UINT64_MAX, v = 0;
        host_reduce(&u, &v, 1, ncclUint64, ncclAvg);
        host_reduce_finish_avg(&u, 1, ncclUint64, 2);
        uint32_t w = 4000000000u, z = 0;
        host_reduce(&w, &z, 1, ncclUint32, ncclAvg);
        host_reduce_finish_avg(&w, 1, ncclUint32, 2);
        ok(a == INT64_MIN / 2 && u == UINT64_MAX / 2 && w == 2000000000u, "avg int64/uint64/uint32 extremes");
    }
    {
        float f[2] = { 1.0f, 7.0f }, g[2] = { 2.0f, 0.0f }, h[2] = { 4.0f, 0.0f };
        host_reduce(f, g, 2, ncclFloat32, ncclAvg);
        host_reduce(f, h, 2, ncclFloat32, ncclAvg);
        host_reduce_finish_avg(f, 2, ncclFloat32, 3);
        double d = 1.0, e = 2.0;
        host_reduce(&d, &e, 1, ncclFloat64, ncclAvg);
        host_reduce_finish_avg(&d, 1, ncclFloat64, 2);
        ok(f[0] == 7.0f / 3.0f && f[1] == 7.0f / 3.0f && d == 1.5, "avg float32 (1+2+4)/3 = 7/3 correctly rounded, float64 1.5");
    }
    {
        uint16_t h = 0x3c00, h2 = 0x4000;   /* 1, 2 */
        host_reduce(&h, &h2, 1, ncclFloat16, ncclAvg);
        host_reduce_finish_avg(&h, 1, ncclFloat16, 2);
        uint8_t e = 0x7e, e2 = 0x7e;        /* 448 + 448 saturates, / 2 = 224 */
        host_reduce(&e, &e2, 1, ncclFloat8e4m3, ncclAvg);
        host_reduce_finish_avg(&e, 1, ncclFloat8e4m3, 2);
        uint16_t b = 0x3f80, b2 = 0x3f80, b3 = 0x3f81;   /* (1 + 1 + (1+2^-7)) / 3 */
        host_reduce(&b, &b2, 1, ncclBfloat16, ncclAvg);
        host_reduce(&b, &b3, 1, ncclBfloat16, ncclAvg);
        host_reduce_finish_avg(&b, 1, ncclBfloat16, 3);
        ok(h == 0x3e00 && e == host_float_to_fp8e4m3(224.0f, 0) && b == 0x3f80,
           "avg float16 (1+2)/2 = 1.5, e4m3 (448+448)/2 = 224 after saturation, bfloat16 (1+1+(1+2^-7))/3 = 1 (2 + 1.0078125 rounds to 3)");
    }
    {
        int32_t a[2] = { 5, -5 };
        float f = 3.0f;
        host_reduce_finish_avg(a, 2, ncclInt32, 0);
        host_reduce_finish_avg(&f, 1, ncclFloat32, -1);
        host_reduce_finish_avg(a, 2, ncclInt32, 1);
        ok(a[0] == 5 && a[1] == -5 && f == 3.0f, "avg with nranks 0, -1 or 1 leaves the buffer unchanged");
    }

    /* Every type, random data, 1..8 ranks. */
    const size_t count = 4000;
    for (int ti = 0; ti < ncclNumTypes; ti++) {
        ncclDataType_t t = (ncclDataType_t)ti;
        size_t sz = type_size(t);
        int bad = 0;
        ndiag = 0;
        for (int nranks = 1; nranks <= 8; nranks++) {
            unsigned char *acc = malloc(count * sz), *in = malloc(count * sz);
            uint64_t *x = malloc(count * (size_t)nranks * sizeof(uint64_t));
            for (size_t i = 0; i < count * (size_t)nranks; i++)
                x[i] = rnd_elt(t);
            for (size_t i = 0; i < count; i++)
                put_elt(acc, i, sz, x[i * (size_t)nranks]);
            for (int r = 1; r < nranks; r++) {
                for (size_t i = 0; i < count; i++)
                    put_elt(in, i, sz, x[i * (size_t)nranks + (size_t)r]);
                host_reduce(acc, in, count, t, ncclAvg);
            }
            host_reduce_finish_avg(acc, count, t, nranks);
            for (size_t i = 0; i < count; i++) {
                uint64_t want = ref_avg(t, &x[i * (size_t)nranks], nranks);
                if (get_elt(acc, i, sz) != want) {
                    bad++;
                    diag("%s avg of %d ranks, element %zu: 0x%llx, want 0x%llx", tname(t), nranks, i,
                         (unsigned long long)get_elt(acc, i, sz), (unsigned long long)want);
                }
            }
            free(acc);
            free(in);
            free(x);
        }
        ok(!bad, "avg %s: 1..8 ranks of random data match the reference (stepwise sum, then / nranks)", tname(t));
    }
}

/* The thread's flush-to-zero mode: MXCSR's FTZ and DAZ on x86, FPCR's FZ
 * (inputs and results, single and double) and FZ16 (half) on aarch64. */
#if defined(__x86_64__) || defined(__i386__)
#define FTZ_NAME "MXCSR FTZ/DAZ"
static unsigned long ftz_on(void)
{
    unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040); /* FTZ (bit 15) | DAZ (bit 6) */
    return csr;
}
static void ftz_restore(unsigned long csr) { _mm_setcsr((unsigned int)csr); }
#elif defined(__aarch64__)
#define FTZ_NAME "FPCR FZ/FZ16"
static unsigned long ftz_on(void)
{
    unsigned long fpcr = __builtin_aarch64_get_fpcr64();
    __builtin_aarch64_set_fpcr64(fpcr | (1ul << 24) | (1ul << 19)); /* FZ | FZ16 */
    return fpcr;
}
static void ftz_restore(unsigned long fpcr) { __builtin_aarch64_set_fpcr64(fpcr); }
#endif

/* The narrow types do not depend on the thread's flush-to-zero mode (the
 * header says so). */
static void test_ftz(void)
{
#ifdef FTZ_NAME
    unsigned long saved = ftz_on();
    /* The mode is on: a subnormal float (2^-140) is flushed in a multiply. */
    volatile float tiny = bitsf(0x00000200), one = 1.0f;
    int flushed = fbits(tiny * one) == 0;
    int good = red1(ncclFloat16, ncclSum, 0x0001, 0x0001) == 0x0002
               && red1(ncclBfloat16, ncclSum, 0x0001, 0x0001) == 0x0002
               && red1(ncclBfloat16, ncclProd, 0x0080, 0x3f00) == 0x0040
               && host_float_to_bf16(bitsf(0x00010000)) == 0x0001 && host_float_to_half(bitsf(0x00000001)) == 0
               && fbits(host_bf16_to_float(0x0001)) == 0x00010000
               && red1(ncclFloat8e4m3, ncclSum, 0x01, 0x01) == 0x02;
    ftz_restore(saved);
    ok(flushed, "%s set: the FPU flushes a subnormal float to zero", FTZ_NAME);
    ok(good, "with %s set, float16/bfloat16/fp8 subnormals still reduce and convert exactly", FTZ_NAME);
#else
    ok(1, "# SKIP no flush-to-zero control known for this architecture");
    ok(1, "# SKIP no flush-to-zero control known for this architecture");
#endif
}

/* ---- integer wrap-around ------------------------------------------------- */

static void test_int_wrap(void)
{
    int8_t a8 = 127, b8 = 1;
    host_reduce(&a8, &b8, 1, ncclInt8, ncclSum);
    ok(a8 == -128, "int8: 127 + 1 = -128");
    uint8_t u8 = 255, v8 = 1;
    host_reduce(&u8, &v8, 1, ncclUint8, ncclSum);
    ok(u8 == 0, "uint8: 255 + 1 = 0");
    int32_t a32 = INT32_MAX, b32 = 1;
    host_reduce(&a32, &b32, 1, ncclInt32, ncclSum);
    uint32_t u32 = UINT32_MAX, v32 = 1;
    host_reduce(&u32, &v32, 1, ncclUint32, ncclSum);
    ok(a32 == INT32_MIN && u32 == 0, "int32/uint32: max + 1 wraps");
    int64_t a64 = INT64_MIN, b64 = -1;
    host_reduce(&a64, &b64, 1, ncclInt64, ncclSum);
    uint64_t u64 = 0, v64 = UINT64_MAX;
    host_reduce(&u64, &v64, 1, ncclUint64, ncclSum);
    ok(a64 == INT64_MAX && u64 == UINT64_MAX, "int64: min - 1 = max; uint64: 0 + max = max");
    int8_t p8 = 16, q8 = 16, r8 = -128, s8 = -1;
    host_reduce(&p8, &q8, 1, ncclInt8, ncclProd);
    host_reduce(&r8, &s8, 1, ncclInt8, ncclProd);
    uint8_t pu = 255, qu = 255;
    host_reduce(&pu, &qu, 1, ncclUint8, ncclProd);
    int32_t p32 = 65536, q32 = 65536, r32 = INT32_MIN, s32 = -1;
    host_reduce(&p32, &q32, 1, ncclInt32, ncclProd);
    host_reduce(&r32, &s32, 1, ncclInt32, ncclProd);
    int64_t p64 = INT64_MAX, q64 = INT64_MAX;
    host_reduce(&p64, &q64, 1, ncclInt64, ncclProd);
    ok(p8 == 0 && r8 == -128 && pu == 1 && p32 == 0 && r32 == INT32_MIN && p64 == 1,
       "products wrap: int8 16*16 = 0, -128*-1 = -128, uint8 255*255 = 1, int32 2^16*2^16 = 0, INT32_MIN*-1, int64 max*max = 1");
    int8_t m8 = -1, n8 = 1;
    host_reduce(&m8, &n8, 1, ncclInt8, ncclMax);
    uint8_t mu = 0xff, nu = 1;
    host_reduce(&mu, &nu, 1, ncclUint8, ncclMax);
    int64_t m64 = INT64_MIN, n64 = 0;
    host_reduce(&m64, &n64, 1, ncclInt64, ncclMin);
    uint32_t mu32 = 0x80000000u, nu32 = 1;
    host_reduce(&mu32, &nu32, 1, ncclUint32, ncclMin);
    ok(m8 == 1 && mu == 0xff && m64 == INT64_MIN && mu32 == 1, "max/min compare signed types as signed, unsigned as unsigned");
}

/* ---- buffers: unaligned, count 0, aliasing, bounds ------------------------ */

static void test_buffers(void)
{
    /* Odd offsets into byte arrays, compared with an aligned run. */
    const size_t count = 257;
    int bad = 0;
    for (int ti = 0; ti < ncclNumTypes; ti++) {
        ncclDataType_t t = (ncclDataType_t)ti;
        size_t sz = type_size(t);
        for (int oi = 0; oi < ncclNumOps; oi++) {
            for (size_t off = 1; off < 8; off += 2) {
                unsigned char *ra = malloc(count * sz + off), *rb = malloc(count * sz + off);
                uint64_t *al = malloc(count * 8), *bl = malloc(count * 8);
                unsigned char *ua = ra + off, *ub = rb + off;
                for (size_t i = 0; i < count; i++) {
                    put_elt(ua, i, sz, rnd_elt(t));
                    put_elt(ub, i, sz, rnd_elt(t));
                }
                memcpy(al, ua, count * sz);
                memcpy(bl, ub, count * sz);
                host_reduce(ua, ub, count, t, (ncclRedOp_t)oi);
                host_reduce(al, bl, count, t, (ncclRedOp_t)oi);
                if (oi == ncclAvg) {
                    host_reduce_finish_avg(ua, count, t, 3);
                    host_reduce_finish_avg(al, count, t, 3);
                }
                if (memcmp(ua, al, count * sz) != 0 || memcmp(ub, bl, count * sz) != 0) {
                    bad++;
                    diag("%s %s at offset %zu differs from the aligned result", tname(t), op_name[oi], off);
                }
                free(ra);
                free(rb);
                free(al);
                free(bl);
            }
        }
    }
    ok(!bad, "unaligned buffers (offsets 1, 3, 5, 7) give the aligned results, every type and op");

    /* count 0 touches nothing, NULL allowed. */
    {
        unsigned char buf[16], in[16];
        memset(buf, 0xab, sizeof buf);
        memset(in, 0x11, sizeof in);
        for (int ti = 0; ti < ncclNumTypes; ti++) {
            for (int oi = 0; oi < ncclNumOps; oi++) {
                host_reduce(NULL, NULL, 0, (ncclDataType_t)ti, (ncclRedOp_t)oi);
                host_reduce(buf, in, 0, (ncclDataType_t)ti, (ncclRedOp_t)oi);
            }
            host_reduce_finish_avg(NULL, 0, (ncclDataType_t)ti, 4);
            host_reduce_finish_avg(buf, 0, (ncclDataType_t)ti, 4);
        }
        int same = 1;
        for (size_t i = 0; i < sizeof buf; i++)
            same &= buf[i] == 0xab;
        ok(same, "count 0: nothing written, NULL buffers accepted");
    }

    /* acc == in */
    {
        float f[3] = { 1.5f, -2.0f, 3.0f };
        uint16_t h[2] = { 0x3c00, 0xc000 };
        int32_t i[2] = { 3, -4 };
        host_reduce(f, f, 3, ncclFloat32, ncclSum);
        host_reduce(h, h, 2, ncclFloat16, ncclProd);
        host_reduce(i, i, 2, ncclInt32, ncclSum);
        ok(f[0] == 3.0f && f[1] == -4.0f && f[2] == 6.0f && h[0] == 0x3c00 && h[1] == 0x4400 && i[0] == 6 && i[1] == -8,
           "acc == in: x OP x in place");
    }

    /* Exact-size heap blocks: an access past count would trip ASan; a write
     * past count is also checked directly. */
    {
        int over = 0;
        for (int ti = 0; ti < ncclNumTypes; ti++) {
            size_t sz = type_size((ncclDataType_t)ti);
            unsigned char *a = malloc(3 * sz + 8), *b = malloc(3 * sz);
            memset(a, 0, 3 * sz + 8);
            memset(b, 0, 3 * sz);
            memset(a + 3 * sz, 0x5a, 8);
            host_reduce(a, b, 3, (ncclDataType_t)ti, ncclSum);
            host_reduce_finish_avg(a, 3, (ncclDataType_t)ti, 2);
            for (size_t k = 0; k < 8; k++)
                over |= a[3 * sz + k] != 0x5a;
            free(a);
            free(b);
        }
        ok(!over, "nothing is written past count elements");
    }
}

/* ---- host_reduce_supported ----------------------------------------------- */

static void test_supported(void)
{
    char why[128];
    int all = 1;
    for (int ti = 0; ti < ncclNumTypes; ti++)
        for (int oi = 0; oi < ncclNumOps; oi++) {
            strcpy(why, "x");
            all &= host_reduce_supported((ncclDataType_t)ti, (ncclRedOp_t)oi, why, sizeof why) == 0 && why[0] == '\0';
        }
    ok(all, "all 12 types x 5 built-in ops are supported, why left empty");

    int ops[] = { 5, 6, 7, 100, 0x7fffffff };
    int rej = 1;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        char want[64];
        snprintf(want, sizeof want, "ncclRedOp_t %d is a PreMulSum or unknown op", ops[i]);
        rej &= host_reduce_supported(ncclFloat32, (ncclRedOp_t)ops[i], why, sizeof why) == -1 && strcmp(why, want) == 0;
    }
    ok(rej, "ops >= ncclNumOps (PreMulSum handles, 0x7fffffff) are rejected: \"ncclRedOp_t 7 is a PreMulSum or unknown op\"");
    ok(host_reduce_supported(ncclInt8, (ncclRedOp_t)-1, why, sizeof why) == -1 && strstr(why, "ncclRedOp_t -1"),
       "a negative op is rejected");

    int types[] = { 12, 13, 255, -1 };
    rej = 1;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        char want[64];
        snprintf(want, sizeof want, "ncclDataType_t %d is unknown", types[i]);
        rej &= host_reduce_supported((ncclDataType_t)types[i], ncclSum, why, sizeof why) == -1 && strcmp(why, want) == 0;
    }
    ok(rej, "datatypes >= ncclNumTypes (12) and negative are rejected with a reason");

    char small[8];
    ok(host_reduce_supported(ncclInt8, (ncclRedOp_t)9, small, sizeof small) == -1 && strlen(small) == 7
       && host_reduce_supported(ncclInt8, (ncclRedOp_t)9, NULL, 0) == -1
       && host_reduce_supported((ncclDataType_t)12, ncclSum, NULL, 5) == -1,
       "why is truncated to whylen and may be NULL");

    float f = 2.0f, g = 3.0f;
    host_reduce(&f, &g, 1, ncclFloat32, (ncclRedOp_t)7);
    host_reduce(&f, &g, 1, (ncclDataType_t)12, ncclSum);
    ok(f == 2.0f, "host_reduce with an unsupported op or type leaves acc unchanged");
}

int main(void)
{
    for (int k = 0; k < NFMT; k++)
        ref_init(&F[k]);
    ok(F[F16].nval == 31744 && F[BF16].nval == 32640 && F[E4M3].nval == 127 && F[E5M2].nval == 124
       && F[F16].val[F[F16].nval - 1] == 65504 && F[E4M3].val[F[E4M3].nval - 1] == 448
       && F[E5M2].val[F[E5M2].nval - 1] == 57344 && F[E4M3].infenc == 0,
       "reference tables: value counts and maxima of the four formats");

    test_conversions();
    test_known_values();
    test_ftz();
    test_int_wrap();
    test_all_pairs();
    test_avg();
    test_buffers();
    test_supported();

    for (int k = 0; k < NFMT; k++) {
        free(F[k].val);
        free(F[k].enc);
    }
    return tap_done();
}
