/* bench/fp8_accuracy_gpu.cu - FlashAttention-3's Table 3 on the GPU (issue
   49, item 5): RMSE of O against an fp64 reference for per-tensor FP8, block
   quantization only, Hadamard (incoherent processing) only, block +
   Hadamard, beside our f16 and bf16 forward; fa_quantize_cuda then
   fa_forward_cuda, through the public API.

   Inputs: bench/fp8_accuracy.h's (the same as bench/fp8_accuracy.c's for a
   seed): entries N(0,1) + N(0,100) Bernoulli(0.001) drawn in fp32, the
   reference softmax(Q K^T / sqrt(d)) V in fp64 on the host from those fp32
   inputs (every --stride'th query row). The f16 and bf16 rows round Q, K,
   V to their type and run the whole forward in it (O f16 / bf16). The FP8
   rows give fa_quantize_cuda the inputs rounded to f16 (it reads f16 or
   bf16), per tensor or per block, with or without the Hadamard rotation of
   Q and K (seed 2024), then fa_forward_cuda on the e4m3 tensors with O in
   f16; the kernel also rounds P to e4m3. Non-causal, scale 1/sqrt(d).
   Targets (issue 49): block + Hadamard at most 9.1e-3 and at least 2.6x
   lower than per tensor; the last lines say whether they are met.

   Build: make build/fp8_accuracy_gpu
          (nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I. \
             bench/fp8_accuracy_gpu.cu -o build/fp8_accuracy_gpu)
   Run:   make bench-fp8-accuracy-gpu [FP8_ACC_FLAGS="--seqlen 1024"], or
          build/fp8_accuracy_gpu [--batch B --heads H --seqlen N --dim D --stride S --seed X]
   Prints a markdown table; exits 1 if a variant could not run (today's
   build refuses e4m3 in fa_forward_cuda: its rows then read nan). */
#ifndef FLASHATTN_HEAD_DIMS
#define FLASHATTN_HEAD_DIMS 64, 128, 256
#endif
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"

#include <cuda_runtime.h>
#include <time.h>

#include "fp8_accuracy.h"
#include "../tests/cuda_check.h"

/* One variant (fp8_accuracy.h's numbering) on the GPU; its RMSE, or NaN with
   the reason in why. */
static double run_variant(const acc_problem *a, int variant, float *const in[3], const double *ref, float *o,
                          char *why, size_t why_size)
{
    const size_t n = acc_elems(a);
    const int fp8 = variant >= 2;
    const fa_dtype dt = variant == 1 ? FA_BF16 : FA_F16; /* inputs (FP8: what the quantizer reads) and O */
    uint16_t *h = (uint16_t *)malloc(n * sizeof(uint16_t));
    void *d_in[3] = {NULL, NULL, NULL}, *d_e4m3[3] = {NULL, NULL, NULL}, *d_o;
    float *d_ds[3] = {NULL, NULL, NULL};
    fa_problem p;
    fa_tensor t[3], to;
    fa_status st = FA_OK;
    double err = NAN;
    size_t i;
    int x;
    memset(&p, 0, sizeof p);
    p.batch = a->batch; p.seqlen_q = p.seqlen_k = a->seqlen; p.heads_q = a->heads; p.head_dim = a->dim;
    memset(&to, 0, sizeof to);
    for (x = 0; x < 3 && st == FA_OK; x++) {
        for (i = 0; i < n; i++) h[i] = dt == FA_BF16 ? fa__f32_to_bf16(in[x][i]) : fa__f32_to_f16(in[x][i]);
        CK(cudaMalloc(&d_in[x], n * sizeof(uint16_t)));
        CK(cudaMemcpy(d_in[x], h, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
        t[x] = to;
        t[x].data = d_in[x];
        t[x].dtype = dt;
        if (fp8) {
            fa_quant qp;
            fa_tensor e = to;
            int64_t count = acc_quant(a, variant, x, &qp);
            CK(cudaMalloc(&d_e4m3[x], n));
            CK(cudaMalloc((void **)&d_ds[x], (size_t)count * sizeof(float)));
            e.data = d_e4m3[x];
            e.dtype = FA_E4M3;
            if ((st = fa_quantize_cuda(&qp, t[x], e, d_ds[x], NULL)) != FA_OK)
                snprintf(why, why_size, "fa_quantize_cuda: %s", fa_last_error());
            t[x] = e;
        }
    }
    if (st == FA_OK && fp8 && acc_per_tensor(variant)) { /* per tensor: fa_problem takes host floats */
        CK(cudaMemcpy(&p.descale_q, d_ds[0], sizeof(float), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&p.descale_k, d_ds[1], sizeof(float), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&p.descale_v, d_ds[2], sizeof(float), cudaMemcpyDeviceToHost));
    } else if (fp8) {
        p.descale_q_block = d_ds[0]; p.descale_k_block = d_ds[1]; p.descale_v_block = d_ds[2];
    }
    CK(cudaMalloc(&d_o, n * sizeof(uint16_t)));
    to.data = d_o;
    to.dtype = dt;
    if (st == FA_OK && (st = fa_forward_cuda(&p, t[0], t[1], t[2], to, NULL, NULL, 0, NULL)) != FA_OK)
        snprintf(why, why_size, "fa_forward_cuda: %s", fa_last_error());
    if (st == FA_OK) {
        CK(cudaDeviceSynchronize());
        CK(cudaGetLastError());
        CK(cudaMemcpy(h, d_o, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        for (i = 0; i < n; i++) o[i] = dt == FA_BF16 ? fa__bf16_to_f32(h[i]) : fa__f16_to_f32(h[i]);
        err = acc_rmse(a, o, ref);
    }
    for (x = 0; x < 3; x++) {
        CK(cudaFree(d_in[x])); CK(cudaFree(d_e4m3[x])); CK(cudaFree(d_ds[x]));
    }
    CK(cudaFree(d_o));
    free(h);
    return err;
}

int main(int argc, char **argv)
{
    acc_problem a;
    float *in[3], *o;
    double *ref, err[ACC_VARIANTS];
    char why[ACC_VARIANTS][300], what[300];
    cudaDeviceProp prop;
    int x, v, failed = 0, dev;
    if (acc_parse(argc, argv, &a)) return 2;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    acc_inputs(&a, in);
    o = (float *)malloc(acc_elems(&a) * sizeof(float));
    ref = acc_reference(&a, in);
    for (v = 0; v < ACC_VARIANTS; v++) {
        why[v][0] = 0;
        err[v] = run_variant(&a, v, in, ref, o, why[v], sizeof why[v]);
        failed += err[v] != err[v];
    }
    snprintf(what, sizeof what, "GPU (fa_quantize_cuda + fa_forward_cuda), %s", prop.name);
    acc_print_table(what,
                    "f16 / bf16 rows: Q, K, V and O in that type. FP8 rows: the inputs rounded to f16, then "
                    "fa_quantize_cuda, then fa_forward_cuda on e4m3 (P rounded to e4m3 in the kernel), O in f16.",
                    &a, err);
    for (v = 0; v < ACC_VARIANTS; v++)
        if (why[v][0]) printf("\n%s did not run: %s", ACC_NAMES[v], why[v]);
    printf("\n\nTargets (issue 49): block + Hadamard <= 9.1e-3: %s (%.2e); per tensor / block + Hadamard >= 2.6: "
           "%s (%.2f)\n", err[5] <= 9.1e-3 ? "met" : "NOT met", err[5], err[2] / err[5] >= 2.6 ? "met" : "NOT met",
           err[2] / err[5]);
    for (x = 0; x < 3; x++) free(in[x]);
    free(o);
    free(ref);
    return failed ? 1 : 0;
}
