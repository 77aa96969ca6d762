/* bench/micro/cpu_f16_pipes.c - does vcvtph2ps (f16 -> f32, 8 lanes) take the FMA pipes? For the
   AVX2 decode, whose f16 K and V are converted before their FMAs ([cpu-decode-avx2]).
   Times, in TSC ticks, blocks of 8 independent FMAs, of 8 conversions (from registers and from
   L1) and of 8 FMAs with 2 or 4 conversions beside them: if the conversions share the FMA
   pipes, the mixes take (8 + c) / 8 of the FMA block's time; if not, the FMA block's.
   Result on the 2-core dev VM (Zen 4 host, 2026-12-06): NOTES [cpu-decode-avx2]. x86-64 only, not
   part of make:
     cc -O2 -mavx2 -mfma -mf16c bench/micro/cpu_f16_pipes.c -o /tmp/f16_pipes && /tmp/f16_pipes */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <x86intrin.h>

#define ITERS 12500000L
#define FMA8 "vfmadd213ps %8,%8,%0\n vfmadd213ps %8,%8,%1\n vfmadd213ps %8,%8,%2\n vfmadd213ps %8,%8,%3\n" \
             "vfmadd213ps %8,%8,%4\n vfmadd213ps %8,%8,%5\n vfmadd213ps %8,%8,%6\n vfmadd213ps %8,%8,%7\n"
/* the conversions write fixed registers (clobbers), so that no result stays live */
#define CVT8(x) "vcvtph2ps " x ",%%ymm12\n vcvtph2ps " x ",%%ymm13\n vcvtph2ps " x ",%%ymm14\n vcvtph2ps " x ",%%ymm15\n" \
                "vcvtph2ps " x ",%%ymm12\n vcvtph2ps " x ",%%ymm13\n vcvtph2ps " x ",%%ymm14\n vcvtph2ps " x ",%%ymm15\n"
#define CVT_REGS "xmm12", "xmm13", "xmm14", "xmm15"
#define FMA8_ARGS "+x"(f0), "+x"(f1), "+x"(f2), "+x"(f3), "+x"(f4), "+x"(f5), "+x"(f6), "+x"(f7)

static double ticks(uint64_t t0) { return (double)(__rdtsc() - t0) / ITERS; }

int main(void)
{
    static uint16_t src[1024] __attribute__((aligned(64)));
    /* (fixed registers ymm0-9, the conversions' ymm12-15 apart: nothing moves to memory between blocks) */
    register __m256 f0 __asm__("ymm0"), f1 __asm__("ymm1"), f2 __asm__("ymm2"), f3 __asm__("ymm3");
    register __m256 f4 __asm__("ymm4"), f5 __asm__("ymm5"), f6 __asm__("ymm6"), f7 __asm__("ymm7");
    register __m256 m __asm__("ymm8") = _mm256_set1_ps(0.999f);
    register __m128i x __asm__("xmm9");
    uint64_t t0;
    long i;
    int k;
    for (k = 0; k < 1024; k++) src[k] = 0x3c00; /* 1.0 */
    f0 = f1 = f2 = f3 = f4 = f5 = f6 = f7 = _mm256_set1_ps(1.0f);
    x = _mm_load_si128((const __m128i *)src);
    double fma, cvt_reg, cvt_mem, mix2, mix4;

    t0 = __rdtsc();
    for (i = 0; i < ITERS; i++) __asm__ volatile(FMA8 : FMA8_ARGS : "x"(m));
    fma = ticks(t0);

    t0 = __rdtsc();
    for (i = 0; i < ITERS; i++)
        __asm__ volatile(CVT8("%0") : : "x"(x) : CVT_REGS);
    cvt_reg = ticks(t0);

    t0 = __rdtsc();
    for (i = 0; i < ITERS; i++) {
        const uint16_t *p = src + (i & 15) * 64;
        __asm__ volatile("vcvtph2ps (%0),%%ymm12\n vcvtph2ps 16(%0),%%ymm13\n vcvtph2ps 32(%0),%%ymm14\n"
                         "vcvtph2ps 48(%0),%%ymm15\n vcvtph2ps 64(%0),%%ymm12\n vcvtph2ps 80(%0),%%ymm13\n"
                         "vcvtph2ps 96(%0),%%ymm14\n vcvtph2ps 112(%0),%%ymm15\n"
                         : : "r"(p) : CVT_REGS, "memory");
    }
    cvt_mem = ticks(t0);

    t0 = __rdtsc();
    for (i = 0; i < ITERS; i++) {
        __asm__ volatile(FMA8 : FMA8_ARGS : "x"(m));
        __asm__ volatile("vcvtph2ps %0,%%ymm14\n vcvtph2ps %0,%%ymm15\n" : : "x"(x) : "xmm14", "xmm15");
    }
    mix2 = ticks(t0);

    t0 = __rdtsc();
    for (i = 0; i < ITERS; i++) {
        __asm__ volatile(FMA8 : FMA8_ARGS : "x"(m));
        __asm__ volatile("vcvtph2ps %0,%%ymm12\n vcvtph2ps %0,%%ymm13\n vcvtph2ps %0,%%ymm14\n"
                         "vcvtph2ps %0,%%ymm15\n" : : "x"(x) : "xmm12", "xmm13", "xmm14", "xmm15");
    }
    mix4 = ticks(t0);

    printf("TSC ticks per block: 8 FMA %.2f | 8 cvt (registers) %.2f | 8 cvt (L1) %.2f | 8 FMA + 2 cvt %.2f "
           "(FMA pipes shared: %.2f) | 8 FMA + 4 cvt %.2f (shared: %.2f)\n",
           fma, cvt_reg, cvt_mem, mix2, fma * 10 / 8, mix4, fma * 12 / 8);
    {
        volatile float sink = f0[0] + f1[0] + f2[0] + f3[0] + f4[0] + f5[0] + f6[0] + f7[0];
        (void)sink;
    }
    return 0;
}
