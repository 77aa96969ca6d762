/* ggml_fa.c - flashattn's CPU forward beside ggml's (llama.cpp's CPU
   flash-attention, ggml_flash_attn_ext) in the same run, on the same inputs.

   ggml is NOT part of this repository and nothing is fetched here: build it
   once, anywhere outside the repository, then point GGML_DIR at it (see
   bench/peers/README.md):
       make bench-peers GGML_SRC=/path/to/ggml GGML_BUILD=/path/to/ggml/build

   Problem: batch 1, 8 heads, d 128, seqlen 4096 (queries = keys), causal and
   not, 2 threads (arguments: [threads] [seqlen] [d]). Q is f32 for both;
   K and V are given to ggml as f16 (what llama.cpp's KV cache holds) and as
   f32, to flashattn as f32 and as f16. Causal for ggml is its f16 mask
   (0 / -inf); flashattn's p.causal. The calls alternate rep by rep (ggml,
   then flashattn), the median of each is reported, with
       GFLOP/s = 4 sq sk d heads / t   (x 0.5 causal)
   and the max |O_flashattn - O_ggml| of the f16 K/V runs. */
#define _POSIX_C_SOURCE 200809L
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include "ggml.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

enum { HEADS = 8, REPS = 5 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((z >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

typedef struct ggml_case {
    struct ggml_context *ctx;
    struct ggml_cgraph *gf;
    struct ggml_tensor *out;
} ggml_case;

/* q [d, n, H], k/v [d, n, H] of type kv, mask [n, n] f16 (causal) or none;
   the output is [d, H, n] (permuted), i.e. flashattn's [n, H, d] layout. */
static void ggml_setup(ggml_case *g, int n, int d, int causal, enum ggml_type kv, const float *Q, const float *K,
                       const float *V)
{
    size_t mem = (size_t)n * HEADS * d * (4 + 2 * 4 + 4) + (size_t)n * n * 2 + ((size_t)64 << 20);
    struct ggml_init_params ip = {mem, NULL, false};
    struct ggml_tensor *q, *k, *v, *mask = NULL;
    int64_t i, j, e = (int64_t)n * HEADS * d;
    g->ctx = ggml_init(ip);
    q = ggml_new_tensor_3d(g->ctx, GGML_TYPE_F32, d, n, HEADS);
    k = ggml_new_tensor_3d(g->ctx, kv, d, n, HEADS);
    v = ggml_new_tensor_3d(g->ctx, kv, d, n, HEADS);
    /* flashattn's [n, H, d] -> ggml's [H][n][d] */
    for (i = 0; i < e; ++i) {
        int64_t c = i % d, h = (i / d) % HEADS, t = i / ((int64_t)d * HEADS), gi = (h * n + t) * d + c;
        ((float *)q->data)[gi] = Q[i];
        if (kv == GGML_TYPE_F16) {
            ((ggml_fp16_t *)k->data)[gi] = ggml_fp32_to_fp16(K[i]);
            ((ggml_fp16_t *)v->data)[gi] = ggml_fp32_to_fp16(V[i]);
        } else {
            ((float *)k->data)[gi] = K[i];
            ((float *)v->data)[gi] = V[i];
        }
    }
    if (causal) {
        mask = ggml_new_tensor_2d(g->ctx, GGML_TYPE_F16, n, n);
        for (i = 0; i < n; ++i)
            for (j = 0; j < n; ++j)
                ((ggml_fp16_t *)mask->data)[i * n + j] = ggml_fp32_to_fp16(j <= i ? 0.0f : -INFINITY);
    }
    g->out = ggml_flash_attn_ext(g->ctx, q, k, v, mask, 1.0f / sqrtf((float)d), 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(g->out, GGML_PREC_F32);
    g->gf = ggml_new_graph(g->ctx);
    ggml_build_forward_expand(g->gf, g->out);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, n = argc > 2 ? atoi(argv[2]) : 4096, d = argc > 3 ? atoi(argv[3]) : 128;
    size_t e = (size_t)n * HEADS * d, i;
    float *Q = (float *)malloc(e * 4), *K = (float *)malloc(e * 4), *V = (float *)malloc(e * 4);
    float *O = (float *)malloc(e * 4);
    uint16_t *K16 = (uint16_t *)malloc(e * 2), *V16 = (uint16_t *)malloc(e * 2);
    uint64_t seed = 7;
    int causal, kvt;
    FILE *la = fopen("/proc/loadavg", "r");
    char load[64] = "unknown";
    if (la) {
        if (!fgets(load, sizeof load, la))
            load[0] = 0;
        load[strcspn(load, "\n")] = 0;
        fclose(la);
    }
    for (i = 0; i < e; ++i) {
        Q[i] = rnd(&seed);
        K[i] = rnd(&seed);
        V[i] = rnd(&seed);
        K16[i] = ggml_fp32_to_fp16(K[i]);
        V16[i] = ggml_fp32_to_fp16(V[i]);
    }
    ggml_cpu_init();
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    printf("# flashattn vs ggml_flash_attn_ext (CPU), same run\n\n");
    printf("batch 1, %d heads, d %d, seqlen %d, %d threads; Q f32; flashattn CPU path: %s; load average at start: %s\n\n",
           HEADS, d, n, threads, fa_cpu_simd_path(), load);
    printf("flashattn is run with f32 K/V and with f16 K/V beside each ggml run; x = ggml time / flashattn time\n"
           "(above 1: flashattn faster); diff = max |O_flashattn(f16 K/V) - O_ggml|.\n\n");
    printf("| causal | ggml K/V | ggml ms | ggml GFLOP/s | flashattn f32 ms | GFLOP/s | x | flashattn f16 ms | GFLOP/s | x | diff |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (causal = 0; causal < 2; ++causal)
        for (kvt = 0; kvt < 2; ++kvt) { /* ggml's K/V: 0 f16, 1 f32 */
            ggml_case g;
            fa_problem p;
            fa_tensor q, k, v, o;
            double tg[REPS], tf[REPS], tf16[REPS], flops = 4.0 * n * (double)n * d * HEADS * (causal ? 0.5 : 1.0);
            double err = 0.0;
            int r;
            ggml_setup(&g, n, d, causal, kvt ? GGML_TYPE_F32 : GGML_TYPE_F16, Q, K, V);
            memset(&p, 0, sizeof p);
            memset(&q, 0, sizeof q);
            p.batch = 1;
            p.seqlen_q = p.seqlen_k = n;
            p.heads_q = HEADS;
            p.head_dim = d;
            p.causal = causal;
            k = v = o = q;
            q.data = Q;
            k.data = K;
            v.data = V;
            o.data = O;
            for (r = -1; r < REPS; ++r) { /* r = -1: warm-up */
                double t0 = now_s();
                fa_tensor k16 = k, v16 = v;
                ggml_graph_compute_with_ctx(g.ctx, g.gf, threads);
                t0 = now_s() - t0;
                if (r >= 0)
                    tg[r] = t0;
                t0 = now_s();
                if (fa_forward(&p, q, k, v, o, NULL, NULL, 0) != FA_OK) {
                    printf("fa_forward failed: %s\n", fa_last_error());
                    return 1;
                }
                t0 = now_s() - t0;
                if (r >= 0)
                    tf[r] = t0;
                k16.data = K16;
                v16.data = V16;
                k16.dtype = v16.dtype = FA_F16;
                t0 = now_s();
                fa_forward(&p, q, k16, v16, o, NULL, NULL, 0);
                t0 = now_s() - t0;
                if (r >= 0)
                    tf16[r] = t0;
            }
            for (i = 0; i < e; ++i) { /* O: the f16-K/V result; ggml's out [d, H, n] is [n, H, d] in memory */
                double diff = fabs((double)O[i] - (double)((const float *)g.out->data)[i]);
                if (!(diff <= err))
                    err = diff;
            }
            qsort(tg, REPS, sizeof *tg, cmp_double);
            qsort(tf, REPS, sizeof *tf, cmp_double);
            qsort(tf16, REPS, sizeof *tf16, cmp_double);
            printf("| %s | %s | %.1f | %.1f | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %.1e |\n",
                   causal ? "yes" : "no", kvt ? "f32" : "f16", 1e3 * tg[REPS / 2], flops / tg[REPS / 2] * 1e-9,
                   1e3 * tf[REPS / 2], flops / tf[REPS / 2] * 1e-9, tg[REPS / 2] / tf[REPS / 2],
                   1e3 * tf16[REPS / 2], flops / tf16[REPS / 2] * 1e-9, tg[REPS / 2] / tf16[REPS / 2], err);
            fflush(stdout);
            ggml_free(g.ctx);
        }
    free(Q); free(K); free(V); free(O); free(K16); free(V16);
    return 0;
}
