/* bench/micro/cpu_f16_int.c - the AVX2 decode's dot pass (4 query rows x 3 keys, d 128, K f16 in L1)
   with K widened by vcvtph2ps against an integer widening (sign-extend, shift by 13, mask: K x 2^-112,
   the 2^112 to be folded into Q), which might have left the FMA pipes to the FMAs [cpu-decode-avx2].
   Result on the 2-core dev VM (Zen 4 host, 2026-12-08): 24 against 44 TSC ticks a key, the integer
   form 1.8x slower; not pursued. x86-64 only, not part of make:
     cc -O3 -mavx2 -mfma -mf16c -mno-avx512f bench/micro/cpu_f16_int.c -o /tmp/f16int && /tmp/f16int */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <x86intrin.h>
#define D 128
static float Q[4][D] __attribute__((aligned(64)));
static uint16_t K[64][D] __attribute__((aligned(64)));
static inline __m256 cvt_hw(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 cvt_int(const uint16_t *p)
{
    __m256i x = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)p));
    x = _mm256_and_si256(_mm256_slli_epi32(x, 13), _mm256_set1_epi32((int)0x8fffe000u));
    return _mm256_castsi256_ps(x);
}
#define DOT(CONV)                                                                                   \
    static float dot_##CONV(int nk3)                                                                \
    {                                                                                               \
        float s = 0;                                                                                \
        for (int c = 0; c < nk3; c++) {                                                             \
            const uint16_t *k0 = K[(3 * c) & 63], *k1 = K[(3 * c + 1) & 63], *k2 = K[(3 * c + 2) & 63]; \
            __m256 a[3][4];                                                                         \
            for (int k = 0; k < 3; k++)                                                             \
                for (int i = 0; i < 4; i++) a[k][i] = _mm256_setzero_ps();                          \
            for (int x = 0; x < D; x += 8) {                                                        \
                __m256 v0 = CONV(k0 + x), v1 = CONV(k1 + x), v2 = CONV(k2 + x);                     \
                for (int i = 0; i < 4; i++) {                                                       \
                    __m256 q = _mm256_load_ps(Q[i] + x);                                            \
                    __asm__("" : "+x"(q));                                                          \
                    a[0][i] = _mm256_fmadd_ps(q, v0, a[0][i]);                                      \
                    a[1][i] = _mm256_fmadd_ps(q, v1, a[1][i]);                                      \
                    a[2][i] = _mm256_fmadd_ps(q, v2, a[2][i]);                                      \
                }                                                                                   \
            }                                                                                       \
            __m256 t = _mm256_add_ps(_mm256_add_ps(a[0][0], a[1][1]), _mm256_add_ps(a[2][2], a[0][3])); \
            t = _mm256_add_ps(t, _mm256_add_ps(_mm256_add_ps(a[1][0], a[2][1]), _mm256_add_ps(a[0][2], a[1][3]))); \
            t = _mm256_add_ps(t, _mm256_add_ps(_mm256_add_ps(a[2][0], a[0][1]), _mm256_add_ps(a[1][2], a[2][3]))); \
            float o[8];                                                                             \
            _mm256_storeu_ps(o, t);                                                                 \
            s += o[0] + o[3];                                                                       \
        }                                                                                           \
        return s;                                                                                   \
    }
DOT(cvt_hw)
DOT(cvt_int)
int main(void)
{
    for (int i = 0; i < 4; i++) for (int x = 0; x < D; x++) Q[i][x] = 0.01f * (float)((i * 7 + x) % 13);
    for (int k = 0; k < 64; k++) for (int x = 0; x < D; x++) K[k][x] = (uint16_t)(0x3c00 + ((k + x) & 255));
    const int N = 200000;
    for (int rep = 0; rep < 5; rep++) {
        uint64_t t0 = __rdtsc(); volatile float s1 = dot_cvt_hw(N); uint64_t t1 = __rdtsc();
        volatile float s2 = dot_cvt_int(N); uint64_t t2 = __rdtsc();
        printf("TSC per key (4 rows, d 128): vcvtph2ps %.1f  int %.1f\n", (double)(t1 - t0) / (3.0 * N), (double)(t2 - t1) / (3.0 * N));
        (void)s1; (void)s2;
    }
}
