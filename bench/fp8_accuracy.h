/* bench/fp8_accuracy.h - FlashAttention-3's Table 3 method, the part shared
   by bench/fp8_accuracy.c (the CPU twin) and bench/fp8_accuracy_gpu.cu
   (fa_quantize_cuda + fa_forward_cuda): the flags, the inputs (entries
   N(0,1) + N(0,100) Bernoulli(0.001), drawn once in fp32 from --seed), the
   fp64 reference softmax(Q K^T / sqrt(d)) V on every --stride'th query row
   of every (batch, head) of those fp32 inputs, the RMSE of O over those rows,
   and the table. Include it after flashattn.h (with its implementation). */
#ifndef FLASHATTN_BENCH_FP8_ACCURACY_H
#define FLASHATTN_BENCH_FP8_ACCURACY_H

#include "../tests/test_util.h" /* rng_*, REF_FN */

typedef struct acc_problem {
    int batch, heads, seqlen, dim, stride, split;
    uint64_t seed;
} acc_problem;

/* The variants, in table order: 0 f16, 1 bf16; FP8: 2 per tensor, 3 block,
   4 Hadamard, 5 block + Hadamard. */
enum { ACC_VARIANTS = 6, ACC_HADAMARD_SEED = 2024 };
static const char *const ACC_NAMES[ACC_VARIANTS] = {"f16 (Q, K, V in f16)", "bf16", "FP8 per tensor",
                                                    "FP8 block only", "FP8 Hadamard only", "FP8 block + Hadamard"};
/* FlashAttention-3's Table 3 (its GPU FP8 kernel, P in e4m3 too; its per-tensor baseline keeps softmax in FP16) */
static const char *const ACC_FA3[ACC_VARIANTS] = {"1.9e-4 (FA3 FP16)", "-", "2.4e-2 (baseline FP8)",
                                                  "2.4e-2 (no incoherent)", "9.3e-3 (no block quant)", "9.1e-3"};
REF_FN int acc_per_tensor(int variant) { return variant == 2 || variant == 4; }

/* The quantizer's parameters for tensor `role` (Q, K, V) of an FP8 variant;
   returns how many descales it writes. */
REF_FN int64_t acc_quant(const acc_problem *a, int variant, int role, fa_quant *qp)
{
    int64_t count = 0;
    memset(qp, 0, sizeof *qp);
    qp->role = (fa_quant_role)role; qp->batch = a->batch; qp->seqlen = a->seqlen; qp->heads = a->heads;
    qp->head_dim = a->dim;
    qp->per_tensor = acc_per_tensor(variant);
    qp->hadamard = (variant == 4 || variant == 5) && role != FA_QUANT_V; /* V is never rotated */
    qp->seed = ACC_HADAMARD_SEED;
    fa_quantize_descales(qp, &count);
    return count;
}

/* Flags --batch B --heads H --seqlen N --dim D (default 2 16 4096 128, the
   paper's), --stride S (8), --seed X (1), --split 1 (the CPU twin only: each
   tensor's share of the error). Returns 0, or 2 after a message. */
REF_FN int acc_parse(int argc, char **argv, acc_problem *a)
{
    int x;
    a->batch = 2; a->heads = 16; a->seqlen = 4096; a->dim = 128; a->stride = 8; a->seed = 1; a->split = 0;
    for (x = 1; x + 1 < argc; x += 2) {
        if (!strcmp(argv[x], "--batch")) a->batch = atoi(argv[x + 1]);
        else if (!strcmp(argv[x], "--heads")) a->heads = atoi(argv[x + 1]);
        else if (!strcmp(argv[x], "--seqlen")) a->seqlen = atoi(argv[x + 1]);
        else if (!strcmp(argv[x], "--dim")) a->dim = atoi(argv[x + 1]);
        else if (!strcmp(argv[x], "--stride")) a->stride = atoi(argv[x + 1]);
        else if (!strcmp(argv[x], "--seed")) a->seed = (uint64_t)atoll(argv[x + 1]);
        else if (!strcmp(argv[x], "--split")) a->split = atoi(argv[x + 1]);
        else { fprintf(stderr, "unknown flag %s\n", argv[x]); return 2; }
    }
    if (x < argc) { fprintf(stderr, "flag %s without a value\n", argv[x]); return 2; }
    if (a->batch < 1 || a->heads < 1 || a->seqlen < 1 || a->dim < 1 || a->dim > 256 || a->stride < 1) {
        fprintf(stderr, "bad size\n");
        return 2;
    }
    return 0;
}

REF_FN size_t acc_elems(const acc_problem *a) { return (size_t)a->batch * a->seqlen * a->heads * a->dim; }
REF_FN int acc_rows(const acc_problem *a) { return (a->seqlen + a->stride - 1) / a->stride; }

/* Q, K, V [B, N, H, D] f32 (malloc'd): N(0,1) + N(0,100) Bernoulli(0.001). */
REF_FN void acc_inputs(const acc_problem *a, float *in[3])
{
    uint64_t rng = a->seed;
    size_t n = acc_elems(a), i;
    int x;
    for (x = 0; x < 3; x++) {
        in[x] = (float *)malloc(n * sizeof(float));
        for (i = 0; i < n; i++) {
            double e = rng_normal(&rng);
            if (rng_uniform(&rng) < 0.001) e += 10.0 * rng_normal(&rng);
            in[x][i] = (float)e;
        }
    }
}

/* fp64 O for query rows i = 0, stride, 2 stride, ... of every (b, h); the
   inputs are [B, N, H, D] f32. Returns ref [B, H, rows, D] (malloc'd). */
REF_FN double *acc_reference(const acc_problem *a, float *const in[3])
{
    int b, h, i, j, c, rows = acc_rows(a);
    double *s = (double *)malloc((size_t)a->seqlen * sizeof(double)), scale = 1.0 / sqrt((double)a->dim);
    double *ref = (double *)malloc((size_t)a->batch * a->heads * rows * a->dim * sizeof(double));
    for (b = 0; b < a->batch; b++)
        for (h = 0; h < a->heads; h++)
            for (i = 0; i < rows; i++) {
                const float *qi = in[0] + (((size_t)b * a->seqlen + (size_t)i * a->stride) * a->heads + h) * a->dim;
                double m = -INFINITY, l = 0.0, *o = ref + (((size_t)b * a->heads + h) * rows + i) * a->dim;
                for (j = 0; j < a->seqlen; j++) {
                    const float *kj = in[1] + (((size_t)b * a->seqlen + j) * a->heads + h) * a->dim;
                    double dot = 0.0;
                    for (c = 0; c < a->dim; c++) dot += (double)qi[c] * kj[c];
                    s[j] = dot * scale;
                    m = s[j] > m ? s[j] : m;
                }
                for (c = 0; c < a->dim; c++) o[c] = 0.0;
                for (j = 0; j < a->seqlen; j++) {
                    const float *vj = in[2] + (((size_t)b * a->seqlen + j) * a->heads + h) * a->dim;
                    double p = exp(s[j] - m);
                    l += p;
                    for (c = 0; c < a->dim; c++) o[c] += p * vj[c];
                }
                for (c = 0; c < a->dim; c++) o[c] /= l;
            }
    free(s);
    return ref;
}

/* RMSE of o ([B, N, H, D] f32) against ref over the reference's rows. */
REF_FN double acc_rmse(const acc_problem *a, const float *o, const double *ref)
{
    int b, h, i, c, rows = acc_rows(a);
    double se = 0.0;
    size_t n = 0;
    for (b = 0; b < a->batch; b++)
        for (h = 0; h < a->heads; h++)
            for (i = 0; i < rows; i++)
                for (c = 0; c < a->dim; c++) {
                    double want = ref[(((size_t)b * a->heads + h) * rows + i) * a->dim + c];
                    double got = o[(((size_t)b * a->seqlen + (size_t)i * a->stride) * a->heads + h) * a->dim + c];
                    se += (got - want) * (got - want);
                    n++;
                }
    return sqrt(se / (double)n);
}

/* The markdown table: `what` names the path (title), `method` a paragraph
   on how it was measured; err[v] NaN = that variant did not run. */
REF_FN void acc_print_table(const char *what, const char *method, const acc_problem *a, const double *err)
{
    time_t now = time(NULL);
    char date[32];
    int v;
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    printf("# FP8 accuracy, %s, %s\n\n", what, date);
    printf("B%d H%d N%d D%d%s, entries N(0,1) + N(0,100) Bernoulli(0.001), seed %llu; RMSE of O against\n"
           "fp64 over every %d%s query row; FP8 blocks of %d (Q) / %d (K, V) rows; Hadamard seed %d.\n%s\n\n",
           a->batch, a->heads, a->seqlen, a->dim,
           a->batch == 2 && a->heads == 16 && a->seqlen == 4096 && a->dim == 128
               ? " (FlashAttention-3's size)"
               : " (not FlashAttention-3's B2 H16 N4096 D128)",
           (unsigned long long)a->seed, a->stride, a->stride == 1 ? "" : "th", FLASHATTN_FP8_BLOCK_Q,
           FLASHATTN_FP8_BLOCK_K, ACC_HADAMARD_SEED, method);
    printf("| variant | RMSE | FP8 per tensor's RMSE / this | FlashAttention-3 Table 3 (H100 GPU) |\n|---|---|---|---|\n");
    for (v = 0; v < ACC_VARIANTS; v++)
        printf("| %s | %.2e | %.2f | %s |\n", ACC_NAMES[v], err[v], err[2] / err[v], ACC_FA3[v]);
}

#endif /* FLASHATTN_BENCH_FP8_ACCURACY_H */
