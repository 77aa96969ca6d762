/* bench/sm90_trace/trace_bwd.cu - where the sm_90a backward's units spend their time, the
   deterministic mode beside the default, from the trace points of flashattn_cuda.cuh (events
   40-46, FLASHATTN_TRACE defined below before the header):
     45 / 46 a unit (key block jb, KV head hk) starts / has stored dK, dV   (consumer thread 0)
     43 / 44 before / after the consumers' wait for a free dQ buffer        (deterministic only)
     40 / 41 a dQ writer's spin on the tile's count: before / after         (deterministic only)
     42 the writer's add done in memory and counted                          (deterministic only)
     47 / 48 the unit's K_j, V_j are in (its first wait) / its steps are done (consumer thread 0)
     49 / 50 a step's wait for Q_i, dO_i: before / after                     (consumer thread 0)
     51 / 52 barrier 1 (thread 0 first waits for the last dQ tile's bulk read) (consumer thread 0)
     53 / 54 the step before's dQ tile sent (fence, barrier 2, the bulk add)  (consumer thread 0)
   (the two writers' spins and adds are summed: each writer has half the tiles)
   Per block it sums clock64() intervals (one SM's clock, so no cross-SM comparison) and keeps
   the span of its units on %globaltimer (ns, comparable across SMs). Printed, for each mode:
   the call's time, the blocks' makespan against their summed spans over the SMs (the grid's
   tail), and the shares of the units' time spent in the writer's spins, in its adds' round
   trips and in the consumers' waits; a unit's mean clocks and the shares of its start (up to
   K_j, V_j in: 45-47), its end (dK, dV stored: 48-46) and the gaps between a block's units
   (46 to the next 45); in the deterministic mode (one unit a block) also by
   quarter of the key blocks (jb).
   Build and run (on an H100 / H200):
     nvcc -std=c++17 -O3 -I. -gencode arch=compute_90a,code=sm_90a bench/sm90_trace/trace_bwd.cu -o trace_bwd
     ./trace_bwd D SEQLEN BATCH HEADS CAUSAL [DENSITY]
   DENSITY (a percentage): a random 128 x 128 block mask per (sequence, head) visiting about that
   share of the blocks (seed 1), given to the calls as device lists; the visited blocks a unit are
   printed (a unit's steps: that x 128 / the kernel's query rows a step).
   The trace points are branches and global stores: they perturb the kernel a little, the same
   in both modes. */
#include <cuda_runtime.h>
#define FA_TRB_MAX 65536 /* blocks recorded (the deterministic grid is one block a unit) */
enum { TRB_SPIN, TRB_ADD, TRB_CWAIT, TRB_UNIT, TRB_ADDS, TRB_CWAITS, TRB_UNITS, TRB_KV, TRB_END, TRB_GAP, TRB_QW,
       TRB_B1, TRB_FL, TRB_STEPS, TRB_N };
__device__ long long fa__trb_c[FA_TRB_MAX][TRB_N];       /* clock64 sums and counts */
__device__ long long fa__trb_t0[FA_TRB_MAX][6];          /* pending starts: writers 1, 2, the consumers'
                                                            wait, their unit's start / loop's end, its end,
                                                            a step's wait (49, 51, 53) */
__device__ unsigned long long fa__trb_g[FA_TRB_MAX][2];  /* globaltimer: the unit's start, end */
__device__ int fa__trb_jb[FA_TRB_MAX];
static __device__ __forceinline__ unsigned long long fa__trb_now(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
/* events 40-42 come from the writers' lane 0 (warps 1, 2); 43-46 from every consumer thread, of which
   thread 128 (consumer warpgroup 0's thread 0) records. The forward's events (< 40) are ignored. */
static __device__ __forceinline__ void fa__trb(int ev, int a)
{
    const int blk = blockIdx.x;
    if (ev < 40 || blk >= FA_TRB_MAX || (ev >= 43 && threadIdx.x != 128)) return;
    const long long c = clock64();
    long long *s = fa__trb_c[blk], *t0 = fa__trb_t0[blk];
    unsigned long long *u = (unsigned long long *)s; /* (two writers add to the same sums) */
    const int w = threadIdx.x / 32 == 2; /* writer 2's pending start */
    switch (ev) {
    case 40: t0[2 * w] = c; break;
    case 41: atomicAdd(u + TRB_SPIN, (unsigned long long)(c - t0[2 * w])); t0[2 * w] = c; break;
    case 42: atomicAdd(u + TRB_ADD, (unsigned long long)(c - t0[2 * w])); atomicAdd(u + TRB_ADDS, 1ull); break;
    case 43: t0[1] = c; break;
    case 44: s[TRB_CWAIT] += c - t0[1]; s[TRB_CWAITS]++; break;
    case 45: /* (a persistent block's first unit starts its span) */
        s[TRB_UNIT] -= c; s[TRB_UNITS]++; fa__trb_jb[blk] = a;
        if (t0[4]) s[TRB_GAP] += c - t0[4];
        t0[3] = c;
        if (!fa__trb_g[blk][0]) fa__trb_g[blk][0] = fa__trb_now();
        break;
    case 46: s[TRB_UNIT] += c; s[TRB_END] += c - t0[3]; t0[4] = c; fa__trb_g[blk][1] = fa__trb_now(); break;
    case 47: s[TRB_KV] += c - t0[3]; break;
    case 48: t0[3] = c; break;
    case 49: case 51: case 53: t0[5] = c; break;
    case 50: s[TRB_QW] += c - t0[5]; s[TRB_STEPS]++; break;
    case 52: s[TRB_B1] += c - t0[5]; break;
    case 54: s[TRB_FL] += c - t0[5]; break;
    }
}
#define FLASHATTN_TRACE(ev, a, b) fa__trb((ev), (a))
#ifndef FLASHATTN_HEAD_DIMS /* (make test's compile check builds d 64 alone) */
#define FLASHATTN_HEAD_DIMS 64, 128, 256
#endif
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h" /* (build from the repository root: -I.) */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_bf16.h>

struct trb_host {
    std::vector<long long> c;
    std::vector<unsigned long long> g;
    std::vector<int> jb;
};

static void trb_clear(void)
{
    static std::vector<char> zero(sizeof fa__trb_c); /* (the largest of the three) */
    cudaMemcpyToSymbol(fa__trb_c, zero.data(), sizeof fa__trb_c);
    cudaMemcpyToSymbol(fa__trb_g, zero.data(), sizeof fa__trb_g);
    cudaMemcpyToSymbol(fa__trb_t0, zero.data(), sizeof fa__trb_t0);
}

static trb_host trb_read(void)
{
    trb_host h;
    h.c.resize((size_t)FA_TRB_MAX * TRB_N);
    h.g.resize((size_t)FA_TRB_MAX * 2);
    h.jb.resize(FA_TRB_MAX);
    cudaMemcpyFromSymbol(h.c.data(), fa__trb_c, h.c.size() * sizeof(long long));
    cudaMemcpyFromSymbol(h.g.data(), fa__trb_g, h.g.size() * sizeof(unsigned long long));
    cudaMemcpyFromSymbol(h.jb.data(), fa__trb_jb, h.jb.size() * sizeof(int));
    return h;
}

/* the summary of one recorded call: the tail and the shares, overall and by quarter of jb */
static void trb_report(const char *mode, const trb_host &h, int sms, int key_blocks, bool by_jb)
{
    unsigned long long g0 = ~0ull, g1 = 0;
    double unit_ns = 0, sum[4][TRB_N] = {{0}};
    int blocks = 0;
    for (int b = 0; b < FA_TRB_MAX; b++) {
        const unsigned long long *g = &h.g[2 * (size_t)b];
        if (g[1] == 0) continue; /* (no unit ended in this block) */
        const long long *c = &h.c[(size_t)b * TRB_N];
        const int q = key_blocks > 0 ? 4 * h.jb[b] / key_blocks : 0;
        blocks++;
        g0 = g[0] < g0 ? g[0] : g0;
        g1 = g[1] > g1 ? g[1] : g1;
        unit_ns += (double)(g[1] - g[0]);
        for (int k = 0; k < TRB_N; k++) sum[q < 4 ? q : 3][k] += (double)c[k];
    }
    if (!blocks) { printf("%s: no unit recorded\n", mode); return; }
    double units = 0;
    for (int r = 0; r < 4; r++) units += sum[r][TRB_UNITS];
    const double span = (double)(g1 - g0), ideal = unit_ns / sms;
    printf("%s: %d blocks, %.0f units; makespan %.1f us, summed block spans / %d SMs %.1f us (tail x%.2f)\n",
           mode, blocks, units, span / 1e3, sms, ideal / 1e3, span / ideal);
    double u[TRB_N] = {0};
    for (int k = 0; k < TRB_N; k++)
        for (int r = 0; r < 4; r++) u[k] += sum[r][k];
    printf("%s: a unit %.0f clocks: start (K, V in) %.1f%%, end (dK, dV stored) %.1f%%; between units %.1f%%\n", mode,
           u[TRB_UNIT] / units, 100 * u[TRB_KV] / u[TRB_UNIT], 100 * u[TRB_END] / u[TRB_UNIT],
           100 * u[TRB_GAP] / u[TRB_UNIT]);
    printf("%s: steps %.2f a unit, %.0f clocks a unit's step (its time less start and end, over its steps): "
           "the wait for Q, dO %.0f, barrier 1 %.0f, the dQ tile's send %.0f\n", mode, u[TRB_STEPS] / units,
           (u[TRB_UNIT] - u[TRB_KV] - u[TRB_END]) / u[TRB_STEPS], u[TRB_QW] / u[TRB_STEPS], u[TRB_B1] / u[TRB_STEPS],
           u[TRB_FL] / u[TRB_STEPS]);
    printf("%s:   jb quarter | unit clocks | writer spin | add round trip | consumers wait | adds, waits a unit\n", mode);
    for (int q = by_jb ? 0 : 4; q < 5; q++) {
        double s[TRB_N] = {0};
        for (int k = 0; k < TRB_N; k++)
            for (int r = 0; r < 4; r++) s[k] += q == 4 || r == q ? sum[r][k] : 0;
        if (s[TRB_UNIT] <= 0) continue;
        char name[16];
        snprintf(name, sizeof name, q == 4 ? "all" : "%d/4", q + 1);
        printf("%s:   %10s | %11.3g | %10.1f%% | %13.1f%% | %13.1f%% | %.1f, %.1f\n", mode, name, s[TRB_UNIT],
               100 * s[TRB_SPIN] / s[TRB_UNIT], 100 * s[TRB_ADD] / s[TRB_UNIT], 100 * s[TRB_CWAIT] / s[TRB_UNIT],
               s[TRB_ADDS] / units, s[TRB_CWAITS] / units);
    }
}

/* a device copy of `bytes` bytes at h */
static void *dev_copy(const void *h, size_t bytes)
{
    void *d;
    cudaMalloc(&d, bytes);
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}

static void *dev_random(size_t n, unsigned seed)
{
    std::vector<__nv_bfloat16> h(n);
    srand(seed);
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16((rand() / (float)RAND_MAX) * 2 - 1);
    return dev_copy(h.data(), n * 2);
}

/* A random block mask (each 128 x 128 block visited with probability share; the causal cut
   left to the kernel), its lists on the device: false if the library refused it */
static bool block_mask(fa_problem *p, double share)
{
    const int qb = (p->seqlen_q + 127) / 128, kb = (p->seqlen_k + 127) / 128;
    const size_t masks = (size_t)p->batch * p->heads_q;
    std::vector<uint8_t> bits(masks * qb * kb);
    srand(1);
    long visited = 0;
    for (size_t i = 0; i < bits.size(); i++) {
        const size_t I = i / kb % qb, J = i % kb;
        bits[i] = rand() < share * RAND_MAX;
        visited += bits[i] && (!p->causal || J <= I);
    }
    std::vector<int32_t> cnt(masks * qb), idx(masks * qb * kb);
    if (fa_block_mask_from_bitmap(p, bits.data(), cnt.data(), idx.data(), NULL, NULL) != FA_OK) {
        printf("block mask: %s\n", fa_last_error());
        return false;
    }
    p->block_mask.kv_num_blocks = (const int32_t *)dev_copy(cnt.data(), cnt.size() * 4);
    p->block_mask.kv_indices = (const int32_t *)dev_copy(idx.data(), idx.size() * 4);
    printf("# block mask: %.1f%% of the blocks, %.2f visited a unit (key block x head)\n",
           100.0 * visited / (masks * (p->causal ? qb * (qb + 1) / 2.0 : (double)qb * kb)),
           (double)visited / (masks * kb));
    return true;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s D SEQLEN BATCH HEADS CAUSAL [DENSITY]\n", argv[0]);
        return 2;
    }
    const int d = atoi(argv[1]), sq = atoi(argv[2]), batch = atoi(argv[3]), heads = atoi(argv[4]),
              causal = atoi(argv[5]);
    const size_t n = (size_t)batch * sq * heads * d;
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = batch; p.seqlen_q = sq; p.seqlen_k = sq; p.heads_q = heads; p.heads_kv = heads;
    p.head_dim = d; p.causal = causal;
    if (argc > 6 && !block_mask(&p, atof(argv[6]) / 100)) return 1;
    fa_tensor t[8]; /* q, k, v, o, dout, dq, dk, dv */
    memset(t, 0, sizeof t);
    for (int i = 0; i < 8; i++) {
        t[i].data = i < 5 ? dev_random(n, 1 + i) : dev_random(n, 100 + i);
        t[i].dtype = FA_BF16;
    }
    float *lse;
    cudaMalloc(&lse, (size_t)batch * heads * sq * 4);
    if (fa_forward_cuda(&p, t[0], t[1], t[2], t[3], lse, NULL, 0, 0) != FA_OK) {
        printf("forward: %s\n", fa_last_error());
        return 1;
    }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const double flops = 2.5 * 4.0 * sq * sq * d * heads * batch * (causal ? 0.5 : 1);
    for (int det = 0; det < 2; det++) {
        p.deterministic = det;
        size_t bytes = 0;
        void *ws = NULL;
        if (fa_backward_cuda_workspace_size(&p, &bytes) != FA_OK || (bytes && cudaMalloc(&ws, bytes) != cudaSuccess)) {
            printf("workspace: %s\n", fa_last_error());
            return 1;
        }
        cudaEvent_t a, b;
        cudaEventCreate(&a); cudaEventCreate(&b);
        for (int r = 0; r < 3; r++)
            if (fa_backward_cuda(&p, t[0], t[1], t[2], t[3], t[4], lse, t[5], t[6], t[7], ws, bytes, 0) != FA_OK) {
                printf("backward: %s\n", fa_last_error());
                return 1;
            }
        cudaEventRecord(a);
        for (int r = 0; r < 10; r++) fa_backward_cuda(&p, t[0], t[1], t[2], t[3], t[4], lse, t[5], t[6], t[7], ws, bytes, 0);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        ms /= 10;
        const char *mode = det ? "det" : "default";
        printf("# %s: d %d sq %d batch %d heads %d causal %d: %.3f ms, %.1f TFLOP/s (traced build)\n", mode, d, sq,
               batch, heads, causal, ms, flops / ms / 1e9);
        trb_clear();
        fa_backward_cuda(&p, t[0], t[1], t[2], t[3], t[4], lse, t[5], t[6], t[7], ws, bytes, 0);
        if (cudaDeviceSynchronize() != cudaSuccess) {
            printf("backward: %s\n", cudaGetErrorString(cudaGetLastError()));
            return 1;
        }
        const int bc = d > 128 ? 64 : 128; /* the kernel's key block */
        trb_report(mode, trb_read(), prop.multiProcessorCount, (sq + bc - 1) / bc, det);
        cudaFree(ws);
    }
    return 0;
}
