/* bench_cpu.c - flashattn CPU benchmark: speed beside this machine's own
   ceilings and beside the textbook 3-pass attention, all measured in one run.

   Build and run from the repository root (`make bench` does this and saves
   the output under bench/results/):
       cc -O3 -march=native -fopenmp -I. bench/bench_cpu.c -lm -o build/bench_cpu
       ./build/bench_cpu    (--quick: seqlen 1k only; --no-attention: ceilings
                             and decode only; both for smoke tests; --d D,
                             --n N: only that head dim / seqlen; --no-naive:
                             leave out the 3-pass attention)
   `make bench BENCH_ISA=avx2` builds the AVX2 + FMA loops (no AVX-512).

   What it prints, as markdown:
   1. The machine: date (UTC), CPU model, logical CPUs, last-level cache,
      compiler and flags.
   2. Ceilings, 1 thread and all threads: fp32 FMA peak (12 independent
      chains of 8-wide FMAs per thread; AVX2 intrinsics, AVX-512 too where
      compiled for it, else plain C the compiler vectorizes) and memory read
      bandwidth (summing a buffer of at least 8x the last-level cache).
   3. Attention, fp32, batch 1, 8 heads, d 64 and 128, seqlen 1k and 4k:
      forward, causal forward, backward. GFLOP/s with
        FLOPs = 4 * sq * sk * d * heads * batch   (x 0.5 causal, x 2.5 backward),
      the same FLOP count for every implementation, and % of the FMA peak of
      the same thread count. Beside the forward rows: the textbook 3-pass
      attention (S = QK^T materialized per head, row softmax, then PV), plain
      loops in this file, parallel over heads, and flashattn's max abs
      difference from it.
   4. Decode: one query token, batch 1, 32 query heads / 8 KV heads, d 64
      and 128, an f16 KV cache of at least 8x the last-level cache; GB/s of
      K+V read (each byte of the cache counted once) and % of the measured
      read bandwidth; beside each timed call, a read of the same cache (a
      sum of its bytes, the same threads), and the call's rate as % of it.

   5. Goals: forward and causal forward at d 128, 4k, all threads >= 70% of
      the FMA peak, backward >= 45%, decode d 128 >= 75% of the read
      bandwidth, each met or not in this run, against the higher of the
      ceilings measured at the start and again at the end; decode also
      against the read of its cache alternated with it (item 4).

   Every time is the median of several repetitions (3 to 9; 1 for a call
   slower than 4 s) after one warm-up run; inputs are random (never zeros).
   This is a benchmark, not a test: it prints differences, it does not judge
   them (tests/ does). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, gmtime_r */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define BENCH_AVX2 1
#endif
#if defined(__AVX512F__)
#define BENCH_AVX512 1
#endif
#ifndef BENCH_FLAGS
#define BENCH_FLAGS "(flags not recorded)"
#endif

/* ============================================================================
   small utilities
   ============================================================================ */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "bench: out of memory (%zu bytes)\n", bytes); exit(1); }
    return p;
}

static int max_threads(void) {
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}

static void use_threads(int t) {
#ifdef _OPENMP
    omp_set_num_threads(t);
#else
    (void)t;
#endif
}

/* Uniform in [-1, 1): splitmix64 per element, so filling is parallel-safe. */
static float rand_at(uint64_t seed, uint64_t i) {
    uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((z >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static void fill_random(float *x, size_t n, uint64_t seed) {
    int64_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < (int64_t)n; i++) x[i] = rand_at(seed, (uint64_t)i);
}

/* binary32 -> binary16, round to nearest even (the inputs here are normal
   numbers or small enough to take the subnormal branch). */
static uint16_t f32_to_f16(float f) {
    uint32_t x, sign;
    memcpy(&x, &f, 4);
    sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x47800000u) return (uint16_t)(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (x < 0x38800000u) {           /* below 2^-14: subnormal half */
        float a, half = 0.5f;        /* 0.5 + |f|: the FPU rounds |f| to a multiple of 2^-24 */
        uint32_t ab, hb;
        memcpy(&a, &x, 4);
        a += half;
        memcpy(&ab, &a, 4);
        memcpy(&hb, &half, 4);
        return (uint16_t)(sign | (ab - hb));
    }
    x += 0x0fffu + ((x >> 13) & 1u); /* round the 13 dropped bits to nearest even */
    return (uint16_t)(sign | ((x - 0x38000000u) >> 13));
}

static float f16_to_f32(uint16_t h) {
    uint32_t e = (h >> 10) & 31u, m = h & 1023u;
    float v = e == 0 ? ldexpf((float)m, -24)
            : e == 31 ? (m ? NAN : INFINITY)
            : ldexpf((float)(m | 1024u), (int)e - 25);
    return (h & 0x8000u) ? -v : v;
}

/* ============================================================================
   machine description
   ============================================================================ */
/* The model name, with x86's family and model numbers where /proc/cpuinfo
   gives them: the name alone ("AMD EPYC") does not tell a VM's Zen 4 host
   from its Zen 5 one, and results move with it. */
static void cpu_model(char *out, size_t cap) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512], name[256] = "unknown";
    int family = -1, model = -1;
    snprintf(out, cap, "unknown");
    if (!f) return;
    while (fgets(line, sizeof line, f) && line[0] != '\n') { /* (the first CPU's block) */
        char *c = strchr(line, ':');
        if (!c) continue;
        if (strncmp(line, "model name", 10) == 0) {
            c++;
            while (*c == ' ' || *c == '\t') c++;
            c[strcspn(c, "\n")] = 0;
            snprintf(name, sizeof name, "%s", c);
        } else if (strncmp(line, "cpu family", 10) == 0) {
            family = atoi(c + 1);
        } else if (strncmp(line, "model\t", 6) == 0 || strncmp(line, "model :", 7) == 0) {
            model = atoi(c + 1);
        }
    }
    fclose(f);
    if (family >= 0 && model >= 0)
        snprintf(out, cap, "%s (family %d, model %d)", name, family, model);
    else
        snprintf(out, cap, "%s", name);
}

/* Size of the highest-level cache of cpu0 (Linux sysfs); 32 MiB if unknown. */
static size_t llc_bytes(void) {
    size_t best = 0;
    int best_level = 0, i;
    for (i = 0; i < 8; i++) {
        char path[128], buf[64];
        FILE *f;
        int level = 0;
        size_t size = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (!(f = fopen(path, "r"))) continue;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(path, "r"))) continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            size = (size_t)strtoull(buf, &end, 10);
            if (*end == 'K') size <<= 10;
            else if (*end == 'M') size <<= 20;
        }
        fclose(f);
        if (level > best_level || (level == best_level && size > best)) {
            best_level = level;
            best = size;
        }
    }
    return best ? best : (size_t)32 << 20;
}

static void date_utc(char *out, size_t cap) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%a %b %e %H:%M:%S UTC %Y", &tm);
}

/* The 1/5/15-minute load averages: a busy machine makes every number here low. */
static const char *loadavg(char *out, size_t cap) {
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    snprintf(out, cap, "unknown");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(out, cap, "%.2f %.2f %.2f", a, b, c);
        fclose(f);
    }
    return out;
}

static const char *compiler(void) {
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#elif defined(_MSC_VER)
    return "msvc";
#else
    return "unknown compiler";
#endif
}

/* ============================================================================
   ceiling 1: fp32 FMA peak
   Each thread runs CHAINS independent accumulators, acc = acc * a + b, so
   the FMA units never wait on one chain's latency (latency 4 x 2 units
   needs 8 chains; 12 leaves slack). a < 1 and b small keep values finite.
   ============================================================================ */
enum { CHAINS = 12 };
static volatile float g_sink;

static double fma_avx2_thread(long iters) { /* returns FLOPs done */
#ifdef BENCH_AVX2
    __m256 acc[CHAINS], a = _mm256_set1_ps(0.9999999f), b = _mm256_set1_ps(1e-7f), s;
    long it;
    int c;
    for (c = 0; c < CHAINS; c++) acc[c] = _mm256_set1_ps(1.0f + 0.01f * (float)c);
    for (it = 0; it < iters; it++) {
        acc[0] = _mm256_fmadd_ps(acc[0], a, b);   acc[1] = _mm256_fmadd_ps(acc[1], a, b);
        acc[2] = _mm256_fmadd_ps(acc[2], a, b);   acc[3] = _mm256_fmadd_ps(acc[3], a, b);
        acc[4] = _mm256_fmadd_ps(acc[4], a, b);   acc[5] = _mm256_fmadd_ps(acc[5], a, b);
        acc[6] = _mm256_fmadd_ps(acc[6], a, b);   acc[7] = _mm256_fmadd_ps(acc[7], a, b);
        acc[8] = _mm256_fmadd_ps(acc[8], a, b);   acc[9] = _mm256_fmadd_ps(acc[9], a, b);
        acc[10] = _mm256_fmadd_ps(acc[10], a, b); acc[11] = _mm256_fmadd_ps(acc[11], a, b);
    }
    s = acc[0];
    for (c = 1; c < CHAINS; c++) s = _mm256_add_ps(s, acc[c]);
    g_sink = _mm256_cvtss_f32(s);
#else
    /* Portable: the compiler turns the inner loop into 8-wide vectors (and
       into FMAs where the target has them). */
    float acc[CHAINS][8], s = 0.0f;
    long it;
    int c, l;
    for (c = 0; c < CHAINS; c++)
        for (l = 0; l < 8; l++) acc[c][l] = 1.0f + 0.01f * (float)(c + l);
    for (it = 0; it < iters; it++)
        for (c = 0; c < CHAINS; c++)
            for (l = 0; l < 8; l++) acc[c][l] = acc[c][l] * 0.9999999f + 1e-7f;
    for (c = 0; c < CHAINS; c++)
        for (l = 0; l < 8; l++) s += acc[c][l];
    g_sink = s;
#endif
    return 2.0 * 8.0 * CHAINS * (double)iters;
}

#ifdef BENCH_AVX512
static double fma_avx512_thread(long iters) {
    __m512 acc[CHAINS], a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-7f), s;
    long it;
    int c;
    for (c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps(1.0f + 0.01f * (float)c);
    for (it = 0; it < iters; it++) {
        acc[0] = _mm512_fmadd_ps(acc[0], a, b);   acc[1] = _mm512_fmadd_ps(acc[1], a, b);
        acc[2] = _mm512_fmadd_ps(acc[2], a, b);   acc[3] = _mm512_fmadd_ps(acc[3], a, b);
        acc[4] = _mm512_fmadd_ps(acc[4], a, b);   acc[5] = _mm512_fmadd_ps(acc[5], a, b);
        acc[6] = _mm512_fmadd_ps(acc[6], a, b);   acc[7] = _mm512_fmadd_ps(acc[7], a, b);
        acc[8] = _mm512_fmadd_ps(acc[8], a, b);   acc[9] = _mm512_fmadd_ps(acc[9], a, b);
        acc[10] = _mm512_fmadd_ps(acc[10], a, b); acc[11] = _mm512_fmadd_ps(acc[11], a, b);
    }
    s = acc[0];
    for (c = 1; c < CHAINS; c++) s = _mm512_add_ps(s, acc[c]);
    g_sink = _mm512_reduce_add_ps(s);
    return 2.0 * 16.0 * CHAINS * (double)iters;
}
#endif

/* GFLOP/s of `threads` threads each running kernel(iters), median of reps. */
static double fma_peak(double (*kernel)(long), int threads, int reps) {
    double t[16], flops = 0.0;
    long iters = 20000000; /* about 0.05-0.2 s per thread on a current core */
    int r;
    for (r = -1; r < reps; r++) {
        double t0 = now_s();
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
        {
            double f = kernel(iters);
#pragma omp master
            flops = f * omp_get_num_threads();
        }
#else
        (void)threads;
        flops = kernel(iters);
#endif
        if (r >= 0) t[r] = now_s() - t0;
    }
    return flops / median(t, reps) * 1e-9;
}

/* ============================================================================
   ceiling 2: memory read bandwidth
   Sum a buffer of 64-bit integers (integer addition is associative, so the
   compiler vectorizes the reduction without any fast-math flag). Each thread
   sums the same static range it first touched, so pages are local.
   ============================================================================ */
#if defined(__GNUC__)
typedef uint64_t u64_alias __attribute__((may_alias)); /* the decode's caches are written as f16 */
#else
typedef uint64_t u64_alias;
#endif
/* One timed sum of n words (seconds). */
static double read_once_s(const void *buf, size_t n, int threads) {
    const u64_alias *x = (const u64_alias *)buf;
    uint64_t sum = 0;
    int64_t i;
    double t0 = now_s();
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : sum)
#endif
    for (i = 0; i < (int64_t)n; i++) sum += x[i];
    t0 = now_s() - t0;
    g_sink = (float)sum;
    (void)threads;
    return t0;
}

static double read_bandwidth(const uint64_t *buf, size_t n, int threads, int reps) {
    double t[16];
    int r;
    read_once_s(buf, n, threads); /* warm-up */
    for (r = 0; r < reps; r++) t[r] = read_once_s(buf, n, threads);
    return (double)n * sizeof *buf / median(t, reps) * 1e-9;
}

/* The decode's K and V caches summed (the same bytes the decode reads, the
   same thread count): the read ceiling timed beside each decode call, so
   that both see the same neighbours on a shared machine. Seconds. */
static double read_caches_s(const void *k, const void *v, size_t bytes_each, int threads) {
    const size_t n = bytes_each / sizeof(uint64_t);
    return read_once_s(k, n, threads) + read_once_s(v, n, threads);
}

/* Both ceilings for each thread count: FMA peak (8-wide, and 16-wide where
   compiled) and read bandwidth over a buffer of bw_bytes. */
static void ceilings(int n_tc, const int *nthr, int all, size_t bw_bytes, double *peak_avx2, double *peak_512,
                     double *peak, double *bw) {
    size_t n = bw_bytes / sizeof(uint64_t);
    uint64_t *buf = (uint64_t *)xmalloc(n * sizeof *buf);
    int64_t j;
    int tc;
#ifdef _OPENMP
#pragma omp parallel for num_threads(all) schedule(static)
#endif
    for (j = 0; j < (int64_t)n; j++) buf[j] = (uint64_t)j * 0x9e3779b97f4a7c15ull;
    (void)all;
    for (tc = 0; tc < n_tc; tc++) {
        peak_avx2[tc] = fma_peak(fma_avx2_thread, nthr[tc], 5);
        peak_512[tc] = 0.0;
#ifdef BENCH_AVX512
        peak_512[tc] = fma_peak(fma_avx512_thread, nthr[tc], 5);
#endif
        peak[tc] = peak_avx2[tc] > peak_512[tc] ? peak_avx2[tc] : peak_512[tc];
        bw[tc] = read_bandwidth(buf, n, nthr[tc], 7);
    }
    free(buf);
}

/* ============================================================================
   the textbook 3-pass attention (the FlashAttention paper's "Algorithm 0"),
   plain loops.
   Q, K, V, O packed [seq, heads, d] (batch 1). Per head: S = scale Q K^T is
   materialized (N x N floats), softmax row by row in place, then O = P V.
   The product Q K^T runs over K^T (d x N, built per head) so the innermost
   loop is a contiguous a*x+y the compiler vectorizes, as any C programmer's
   i-k-j matrix product would; causal rows stop at the diagonal.
   ============================================================================ */
static void naive_attention(int n, int heads, int d, int causal, const float *Q,
                            const float *K, const float *V, float *O, float *S_all,
                            float *Kt_all, int threads) {
    const float scale = 1.0f / sqrtf((float)d);
    int h;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (h = 0; h < heads; h++) {
        int tid = 0;
        float *S, *Kt;
        int i, j, c;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        S = S_all + (size_t)tid * n * n;
        Kt = Kt_all + (size_t)tid * n * d;
        for (j = 0; j < n; j++)
            for (c = 0; c < d; c++) Kt[(size_t)c * n + j] = K[((size_t)j * heads + h) * d + c];
        for (i = 0; i < n; i++) { /* pass 1: S = scale Q K^T */
            const float *q = Q + ((size_t)i * heads + h) * d;
            float *s = S + (size_t)i * n;
            int jn = causal ? i + 1 : n;
            for (j = 0; j < jn; j++) s[j] = 0.0f;
            for (c = 0; c < d; c++) {
                const float qc = q[c] * scale, *kt = Kt + (size_t)c * n;
                for (j = 0; j < jn; j++) s[j] += qc * kt[j];
            }
        }
        for (i = 0; i < n; i++) { /* pass 2: P = softmax(S), in place */
            float *s = S + (size_t)i * n, m = -INFINITY, l = 0.0f, inv;
            int jn = causal ? i + 1 : n;
            for (j = 0; j < jn; j++) m = s[j] > m ? s[j] : m;
            for (j = 0; j < jn; j++) { s[j] = expf(s[j] - m); l += s[j]; }
            inv = 1.0f / l;
            for (j = 0; j < jn; j++) s[j] *= inv;
        }
        for (i = 0; i < n; i++) { /* pass 3: O = P V */
            const float *s = S + (size_t)i * n;
            float *o = O + ((size_t)i * heads + h) * d;
            int jn = causal ? i + 1 : n;
            for (c = 0; c < d; c++) o[c] = 0.0f;
            for (j = 0; j < jn; j++) {
                const float p = s[j], *v = V + ((size_t)j * heads + h) * d;
                for (c = 0; c < d; c++) o[c] += p * v[c];
            }
        }
    }
}

/* ============================================================================
   timing harness
   ============================================================================ */
typedef struct attn_case {
    fa_problem p;
    fa_tensor q, k, v, o, dout, dq, dk, dv;
    float *lse;
    void *ws;
    size_t ws_bytes;
    int op; /* 0 forward, 1 backward */
} attn_case;

static fa_status run_case(attn_case *c) {
    if (c->op == 0) return fa_forward(&c->p, c->q, c->k, c->v, c->o, c->lse, c->ws, c->ws_bytes);
    return fa_backward(&c->p, c->q, c->k, c->v, c->o, c->dout, c->lse, c->dq, c->dk, c->dv,
                       c->ws, c->ws_bytes);
}

static int g_quick = 0, g_only_d = 0, g_only_n = 0, g_no_naive = 0;

/* The goals at d 128, seqlen 4k, all threads (% of the peak / of the read
   bandwidth measured in the same run): forward and causal forward 70%,
   backward 45%, decode 75%, the decode once against the ceilings and once
   against the read of its own cache alternated with it (g_goal_pct: that
   % measured pair by pair, instead of rate / ceiling). g_goal_rate:
   GFLOP/s (the first three) or GB/s, -1 = not measured in this run. */
enum { N_GOALS = 5 };
static double g_goal_rate[N_GOALS] = {-1, -1, -1, -1, -1}, g_goal_pct[N_GOALS] = {-1, -1, -1, -1, -1};
static const char *const g_goal_name[N_GOALS] = {"forward, d128 4k", "forward causal, d128 4k", "backward, d128 4k",
                                                 "decode, d128 32/8 heads (of the read bandwidth)",
                                                 "decode, d128 32/8 heads (of the read of the same cache, alternated)"};
static const double g_goal_min[N_GOALS] = {70.0, 70.0, 45.0, 75.0, 75.0};

/* Repetitions after the warm-up: as many as fit in ~1.5 s, 3 to 9; a call
   slower than 4 s is timed once more (the reps column says so), which keeps
   the whole run within minutes even when the implementation is slow. */
static int reps_for(double warmup_s) {
    int r = warmup_s > 0.0 ? (int)(1.5 / warmup_s) : 9;
    if (warmup_s > 4.0) return 1;
    if (g_quick) return 3;
    return r < 3 ? 3 : r > 9 ? 9 : r;
}

/* Median seconds of one flashattn call, or -1 on failure (message printed). */
static double time_case(attn_case *c, int *reps_out) {
    double t[16], t0, w;
    int r, reps;
    fa_status s;
    t0 = now_s();
    s = run_case(c);
    w = now_s() - t0;
    if (s != FA_OK) {
        printf("\n> flashattn %s failed: %s: %s\n\n", c->op ? "fa_backward" : "fa_forward",
               fa_status_string(s), fa_last_error());
        return -1.0;
    }
    reps = reps_for(w);
    for (r = 0; r < reps; r++) {
        t0 = now_s();
        run_case(c);
        t[r] = now_s() - t0;
    }
    *reps_out = reps;
    return median(t, reps);
}

static double time_naive(int n, int heads, int d, int causal, const float *Q, const float *K,
                         const float *V, float *O, float *S, float *Kt, int threads) {
    double t[16], t0, w;
    int r, reps;
    t0 = now_s();
    naive_attention(n, heads, d, causal, Q, K, V, O, S, Kt, threads);
    w = now_s() - t0;
    reps = reps_for(w);
    for (r = 0; r < reps; r++) {
        t0 = now_s();
        naive_attention(n, heads, d, causal, Q, K, V, O, S, Kt, threads);
        t[r] = now_s() - t0;
    }
    return median(t, reps);
}

/* ============================================================================
   main
   ============================================================================ */
int main(int argc, char **argv) {
    enum { HEADS = 8, DEC_HQ = 32, DEC_HKV = 8 };
    const int dims[2] = {64, 128}, lens[2] = {1024, 4096};
    int nthr[2], n_tc, tc, di, li, i, all;
    double peak_avx2[2], peak_512[2] = {0, 0}, peak[2], bw[2];
    char model[256], date[64], la[64];
    size_t llc = llc_bytes(), bw_bytes;
    double t_start = now_s();
    int no_attention = 0;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) g_quick = 1;
        else if (strcmp(argv[i], "--no-attention") == 0) no_attention = 1;
        else if (strcmp(argv[i], "--no-naive") == 0) g_no_naive = 1;
        else if (strcmp(argv[i], "--d") == 0 && i + 1 < argc) g_only_d = atoi(argv[++i]);
        else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) g_only_n = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--quick] [--no-attention] [--no-naive] [--d D] [--n N]\n", argv[0]);
            return 2;
        }
    }
    all = max_threads();
    nthr[0] = 1;
    nthr[1] = all;
    n_tc = all > 1 ? 2 : 1;
    cpu_model(model, sizeof model);
    date_utc(date, sizeof date);

    printf("# flashattn CPU benchmark\n\n");
    printf("| | |\n| --- | --- |\n");
    printf("| date | %s |\n", date);
    printf("| CPU | %s |\n", model);
    printf("| logical CPUs (threads used) | %d (1 and %d) |\n", all, all);
    printf("| last-level cache | %zu MiB |\n", llc >> 20);
    printf("| compiler | %s, %s |\n", compiler(), BENCH_FLAGS);
    printf("| flashattn | %s |\n", FLASHATTN_VERSION_STRING);
    printf("| load average at start (other processes) | %s |\n", loadavg(la, sizeof la));
    printf("| mode | %s |\n\n", g_quick ? "--quick (seqlen 1k only, 3 repetitions)" : "full");
    fflush(stdout);

    /* ---- ceilings ------------------------------------------------------------- */
    bw_bytes = 8 * llc > ((size_t)256 << 20) ? 8 * llc : ((size_t)256 << 20);
    ceilings(n_tc, nthr, all, bw_bytes, peak_avx2, peak_512, peak, bw);
    printf("## Ceilings of this machine (measured in this run)\n\n");
    printf("fp32 FMA: %d independent chains per thread, %s; read: sum of a %zu MiB buffer.\n\n",
           CHAINS,
#ifdef BENCH_AVX2
           "8-wide AVX2 intrinsics"
#else
           "8-wide portable C (no AVX2/FMA at compile time)"
#endif
#ifdef BENCH_AVX512
           " and 16-wide AVX-512"
#endif
           , bw_bytes >> 20);
    printf("| threads | fp32 FMA 8-wide GFLOP/s | fp32 FMA 16-wide GFLOP/s | peak used for %% | read GB/s |\n");
    printf("| ---: | ---: | ---: | ---: | ---: |\n");
    for (tc = 0; tc < n_tc; tc++) {
        char w16[32];
        if (peak_512[tc] > 0) snprintf(w16, sizeof w16, "%.1f", peak_512[tc]);
        else snprintf(w16, sizeof w16, "n/a");
        printf("| %d | %.1f | %s | %.1f | %.1f |\n", nthr[tc], peak_avx2[tc], w16, peak[tc], bw[tc]);
    }
    printf("\n");
    fflush(stdout);

    /* ---- attention ------------------------------------------------------------ */
    printf("## Attention, fp32, batch 1, %d heads\n\n", HEADS);
    printf("GFLOP/s with FLOPs = 4 sq sk d heads batch (x0.5 causal, x2.5 backward); %% of the FMA\n"
           "peak of the same thread count. naive: the 3-pass attention that materializes S per head\n"
           "(plain loops in bench_cpu.c, heads in parallel). err: max |O_flashattn - O_naive|.\n\n");
    printf("| op | d | seqlen | threads | flashattn ms | GFLOP/s | %% peak | naive ms | naive GFLOP/s | naive %% peak | speedup | err | reps |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    fflush(stdout);
    for (di = 0; di < 2 && !no_attention; di++) {
        for (li = 0; li < 2; li++) {
            int d = dims[di], n = lens[li], op;
            size_t elems = (size_t)n * HEADS * d;
            float *Q, *K, *V, *O, *dO, *dQ, *dK, *dV, *Onaive, *lse, *S, *Kt;
            if ((g_quick && n > 1024) || (g_only_d && d != g_only_d) || (g_only_n && n != g_only_n)) continue;
            Q = (float *)xmalloc(elems * 4); K = (float *)xmalloc(elems * 4);
            V = (float *)xmalloc(elems * 4); O = (float *)xmalloc(elems * 4);
            dO = (float *)xmalloc(elems * 4); dQ = (float *)xmalloc(elems * 4);
            dK = (float *)xmalloc(elems * 4); dV = (float *)xmalloc(elems * 4);
            Onaive = (float *)xmalloc(elems * 4);
            lse = (float *)xmalloc((size_t)HEADS * n * 4);
            S = (float *)xmalloc((size_t)all * n * n * 4);
            Kt = (float *)xmalloc((size_t)all * n * d * 4);
            fill_random(Q, elems, 1 + 10 * (uint64_t)d + (uint64_t)n);
            fill_random(K, elems, 2 + 10 * (uint64_t)d + (uint64_t)n);
            fill_random(V, elems, 3 + 10 * (uint64_t)d + (uint64_t)n);
            fill_random(dO, elems, 4 + 10 * (uint64_t)d + (uint64_t)n);
            memset(O, 0xff, elems * 4); /* NaN until written */
            memset(dQ, 0xff, elems * 4); memset(dK, 0xff, elems * 4); memset(dV, 0xff, elems * 4);
            memset(Onaive, 0xff, elems * 4);
            memset(S, 0, (size_t)all * n * n * 4);
            memset(Kt, 0, (size_t)all * n * d * 4);
            for (op = 0; op < 3; op++) { /* forward, causal forward, backward */
                attn_case c;
                int causal = op == 1;
                const char *name = op == 0 ? "forward" : op == 1 ? "forward causal" : "backward";
                double flops = 4.0 * n * n * d * HEADS * (causal ? 0.5 : 1.0) * (op == 2 ? 2.5 : 1.0);
                fa_status s;
                memset(&c, 0, sizeof c);
                c.p.batch = 1;
                c.p.seqlen_q = c.p.seqlen_k = n;
                c.p.heads_q = HEADS;
                c.p.head_dim = d;
                c.p.causal = causal;
                c.q.data = Q; c.k.data = K; c.v.data = V; c.o.data = O;
                c.dout.data = dO; c.dq.data = dQ; c.dk.data = dK; c.dv.data = dV;
                c.lse = lse;
                c.op = op == 2;
                if (op == 2) { /* backward needs this problem's O and L: one forward first */
                    use_threads(all);
                    s = fa_forward(&c.p, c.q, c.k, c.v, c.o, c.lse, NULL, 0);
                    if (s != FA_OK) {
                        printf("| %s | %d | %d | - | forward failed: %s |\n", name, d, n, fa_last_error());
                        continue;
                    }
                }
                for (tc = 0; tc < n_tc; tc++) {
                    double t, tn = -1.0, err = -1.0;
                    int reps = 0;
                    use_threads(nthr[tc]);
                    s = c.op ? fa_backward_workspace_size(&c.p, &c.ws_bytes)
                             : fa_forward_workspace_size(&c.p, &c.ws_bytes);
                    if (s != FA_OK) {
                        printf("| %s | %d | %d | %d | workspace_size failed: %s |\n", name, d, n,
                               nthr[tc], fa_last_error());
                        continue;
                    }
                    c.ws = xmalloc(c.ws_bytes);
                    memset(c.ws, 0, c.ws_bytes ? c.ws_bytes : 1);
                    t = time_case(&c, &reps);
                    free(c.ws);
                    if (op < 2 && !g_no_naive) {
                        size_t e;
                        tn = time_naive(n, HEADS, d, causal, Q, K, V, Onaive, S, Kt, nthr[tc]);
                        err = 0.0;
                        for (e = 0; e < elems; e++) {
                            double diff = fabs((double)O[e] - (double)Onaive[e]);
                            if (!(diff <= err)) err = diff; /* NaN propagates */
                        }
                    }
                    printf("| %s | %d | %d | %d | ", name, d, n, nthr[tc]);
                    if (t > 0 && d == 128 && n == 4096 && nthr[tc] == all)
                        g_goal_rate[op] = flops / t * 1e-9;
                    if (t > 0) printf("%.2f | %.2f | %.1f%% | ", 1e3 * t, flops / t * 1e-9, 100.0 * flops / t * 1e-9 / peak[tc]);
                    else printf("failed | - | - | ");
                    if (tn > 0) printf("%.2f | %.2f | %.1f%% | ", 1e3 * tn, flops / tn * 1e-9, 100.0 * flops / tn * 1e-9 / peak[tc]);
                    else printf("- | - | - | ");
                    if (tn > 0 && t > 0) printf("%.1fx | %.1e | %d |\n", tn / t, err, reps);
                    else printf("- | - | %d |\n", reps);
                    fflush(stdout);
                }
            }
            free(Q); free(K); free(V); free(O); free(dO); free(dQ); free(dK); free(dV);
            free(Onaive); free(lse); free(S); free(Kt);
        }
    }
    printf("\n");

    /* ---- decode --------------------------------------------------------------- */
    printf("## Decode, f16 KV cache\n\n");
    printf("One query token, batch 1, query heads / KV heads as listed (32 / 8: 4 rows a KV head; 64 / 8:\n"
           "8); the cache is a power of two tokens long, at least 64k, with K+V at least 8x the last-level\n"
           "cache. GB/s of K+V read (every cache byte counted once); %% of the measured read bandwidth of\n"
           "the same thread count. FMA bound: the rate at which the FMA peak of the same thread count would\n"
           "do the call's 4 d FLOPs a query row and cached token (2 d for q k, 2 d for p v) over its 4 d\n"
           "bytes a KV head and token, i.e. the peak x heads_kv / heads_q: with 4 or more rows a KV head\n"
           "it is below the read bandwidth of many machines. err: max |O_decode - O_forward| (fa_forward\n"
           "on the same cache). Read of the cache: each timed call is followed by a sum of the same K and V\n"
           "bytes as 64-bit integers with the same thread count (the read ceiling measured beside the call,\n"
           "under the same neighbours); its median GB/s, and the median over the pairs of its time / the\n"
           "call's.\n\n");
    printf("| d | heads | tokens | K+V MiB | threads | splits | ms | GB/s | %% of read BW | read of the cache GB/s | %% of it | FMA bound GB/s | %% of the lower | err | reps |\n"
           "| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (di = 0; di < 3; di++) {
        static const int shapes[3][3] = {{64, DEC_HQ, DEC_HKV}, {128, DEC_HQ, DEC_HKV}, {128, 2 * DEC_HQ, DEC_HKV}};
        const int d = shapes[di][0], hq = shapes[di][1], hkv = shapes[di][2];
        if (g_only_d && d != g_only_d) continue;
        /* Cache length: a power of two with K+V >= 8x the LLC, at least 64k tokens. */
        int64_t tokens = 65536, e;
        size_t kv_elems, kv_bytes, q_elems = (size_t)hq * d;
        uint16_t *Kc, *Vc, *q16, *o16, *oref16;
        int32_t seqlen;
        fa_problem p;
        fa_tensor q, k, v, none, o;
        while ((size_t)tokens * hkv * d * 2 * 2 < 8 * llc) tokens *= 2;
        if (g_quick) tokens = 65536;
        kv_elems = (size_t)tokens * hkv * d;
        kv_bytes = 2 * kv_elems * sizeof(uint16_t); /* K and V, each read once */
        Kc = (uint16_t *)xmalloc(kv_elems * 2);
        Vc = (uint16_t *)xmalloc(kv_elems * 2);
        q16 = (uint16_t *)xmalloc(q_elems * 2);
        o16 = (uint16_t *)xmalloc(q_elems * 2);
        oref16 = (uint16_t *)xmalloc(q_elems * 2);
#ifdef _OPENMP
#pragma omp parallel for num_threads(all) schedule(static)
#endif
        for (e = 0; e < (int64_t)kv_elems; e++) {
            Kc[e] = f32_to_f16(rand_at(11, (uint64_t)e));
            Vc[e] = f32_to_f16(rand_at(12, (uint64_t)e));
        }
        for (e = 0; e < (int64_t)q_elems; e++) q16[e] = f32_to_f16(rand_at(13, (uint64_t)e));
        seqlen = (int32_t)tokens;
        memset(&p, 0, sizeof p);
        memset(&none, 0, sizeof none);
        p.batch = 1;
        p.seqlen_q = 1;
        p.seqlen_k = (int)tokens;
        p.heads_q = hq;
        p.heads_kv = hkv;
        p.head_dim = d;
        p.seqlens_k = &seqlen;
        memset(&q, 0, sizeof q);
        q.data = q16; q.dtype = FA_F16;
        k = q; k.data = Kc;
        v = q; v.data = Vc;
        o = q; o.data = o16;

        for (tc = 0; tc < n_tc; tc++) {
            double t[16], tr[16], pr[16], t0, w, err = -1.0;
            size_t ws_bytes = 0;
            void *ws;
            int r, reps;
            fa_status s;
            use_threads(nthr[tc]);
            s = fa_decode_workspace_size(&p, &ws_bytes);
            if (s != FA_OK) {
                printf("| %d | %d/%d | | | %d | fa_decode_workspace_size failed: %s |\n", d, hq, hkv, nthr[tc],
                       fa_last_error());
                continue;
            }
            ws = xmalloc(ws_bytes);
            memset(ws, 0, ws_bytes ? ws_bytes : 1);
            t0 = now_s();
            s = fa_decode(&p, q, k, v, none, none, o, NULL, ws, ws_bytes);
            w = now_s() - t0;
            if (s != FA_OK) {
                printf("| %d | %d/%d | | | %d | fa_decode failed: %s: %s |\n", d, hq, hkv, nthr[tc],
                       fa_status_string(s), fa_last_error());
                free(ws);
                continue;
            }
            reps = reps_for(w);
            if (reps < 5 && w <= 4.0) reps = 5;
            for (r = 0; r < reps; r++) {
                t0 = now_s();
                fa_decode(&p, q, k, v, none, none, o, NULL, ws, ws_bytes);
                t[r] = now_s() - t0;
                tr[r] = read_caches_s(Kc, Vc, kv_bytes / 2, nthr[tc]);
                pr[r] = tr[r] / t[r];
            }
            free(ws);
            if (tc == 0) { /* check once against the forward path on the same data */
                fa_problem pf = p;
                fa_tensor oref = o;
                pf.seqlens_k = NULL;
                oref.data = oref16;
                if (fa_forward(&pf, q, k, v, oref, NULL, NULL, 0) == FA_OK) {
                    err = 0.0;
                    for (e = 0; e < (int64_t)q_elems; e++) {
                        double diff = fabs((double)f16_to_f32(o16[e]) - (double)f16_to_f32(oref16[e]));
                        if (!(diff <= err)) err = diff;
                    }
                }
            }
            w = median(t, reps);
            {
                const double rate = (double)kv_bytes / w * 1e-9, fma_bound = peak[tc] * hkv / hq;
                const double read = (double)kv_bytes / median(tr, reps) * 1e-9, pair = median(pr, reps);
                if (d == 128 && hq == DEC_HQ && nthr[tc] == all) {
                    g_goal_rate[3] = g_goal_rate[4] = rate;
                    g_goal_pct[4] = 100.0 * pair;
                }
                printf("| %d | %d/%d | %lld | %.0f | %d | auto | %.2f | %.1f | %.1f%% | %.1f | %.1f%% | %.1f | %.1f%% | ",
                       d, hq, hkv, (long long)tokens, (double)kv_bytes / 1048576.0, nthr[tc], 1e3 * w, rate,
                       100.0 * rate / bw[tc], read, 100.0 * pair, fma_bound,
                       100.0 * rate / (fma_bound < bw[tc] ? fma_bound : bw[tc]));
            }
            if (err >= 0) printf("%.1e | %d |\n", err, reps);
            else printf("- | %d |\n", reps);
            fflush(stdout);
        }
        free(Kc); free(Vc); free(q16); free(o16); free(oref16);
    }
    /* The ceilings once more: a machine busier at the start than at the end
       would inflate every % above; the goals use the higher of the two. */
    {
        double pe8[2] = {0, 0}, pe16[2] = {0, 0}, pe[2] = {0, 0}, bwe[2] = {0, 0};
        int t_all = n_tc - 1;
        ceilings(n_tc, nthr, all, bw_bytes, pe8, pe16, pe, bwe);
        printf("\n## Goals (%d threads)\n\nCeilings again at the end: FMA peak %.1f GFLOP/s, read %.1f GB/s (start: %.1f, %.1f);\n"
               "%% of the higher of the two.\n\n| case | rate | %% | goal | met |\n| --- | ---: | ---: | ---: | --- |\n",
               all, pe[t_all], bwe[t_all], peak[t_all], bw[t_all]);
        const double pk = pe[t_all] > peak[t_all] ? pe[t_all] : peak[t_all]; /* the higher ceilings */
        const double rd = bwe[t_all] > bw[t_all] ? bwe[t_all] : bw[t_all];
        for (i = 0; i < N_GOALS; i++) {
            double pct = g_goal_pct[i] >= 0 ? g_goal_pct[i] : 100.0 * g_goal_rate[i] / (i < 3 ? pk : rd);
            if (g_goal_rate[i] < 0) continue;
            printf("| %s | %.1f %s | %.1f%% | %.0f%% | %s |\n", g_goal_name[i], g_goal_rate[i], i < 3 ? "GFLOP/s" : "GB/s",
                   pct, g_goal_min[i], pct >= g_goal_min[i] ? "yes" : "NO");
        }
        if (g_goal_rate[3] >= 0) { /* what the decode goal asks of the FMA units */
            const double bound = pk * DEC_HKV / DEC_HQ, asked = g_goal_min[3] / 100.0 * rd;
            printf("\nDecode's FMA bound at %d / %d heads: %.1f GB/s (the higher FMA peak x %d / %d); %.0f%% of the\n"
                   "read bandwidth, %.1f GB/s, is %.0f%% of it.\n", DEC_HQ, DEC_HKV, bound, DEC_HKV, DEC_HQ,
                   g_goal_min[3], asked, 100.0 * asked / bound);
        }
    }
    printf("\nTotal benchmark time: %.0f s; load average at the end: %s.\n", now_s() - t_start,
           loadavg(la, sizeof la));
    return 0;
}
