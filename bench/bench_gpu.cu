/* bench/bench_gpu.cu - time fa_forward_cuda alone on the FlashAttention-3
   paper's grid (batch * seqlen = 16k tokens, hidden 2048 = heads * head_dim,
   head dims 64 / 128 / 256, causal and not, seqlen 512 .. 16k), bf16, random
   inputs. TFLOP/s with FLOPs = 4 sq sk d heads batch (halved for causal);
   CUDA events, warm-up, median of the timed runs; two input sets alternate.
   The side-by-side with PyTorch SDPA is bench/vs_torch.py.
   Build and run: make bench-gpu (or make build/bench_gpu && build/bench_gpu [reps] [quick]) */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
    } while (0)

/* random bf16 in [-1, 1), a hash of the index (fast, no host round trip) */
__global__ void fill_random(uint16_t *x, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 0x9E3779B1u ^ seed;
        h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
        float f = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
        __nv_bfloat16 b = __float2bfloat16(f);
        memcpy(&x[i], &b, 2);
    }
}

int main(int argc, char **argv)
{
    const int dims[] = {64, 128, 256}, lens[] = {512, 1024, 2048, 4096, 8192, 16384};
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    const int quick = argc > 2 && strcmp(argv[2], "quick") == 0; /* seqlen 2k and 8k only */
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("flashattn fa_forward_cuda, bf16, %s, %d timed runs (median)\n", prop.name, reps);
    printf("| head dim | causal | seqlen | batch x heads | ms | TFLOP/s |\n| --- | --- | --- | --- | --- | --- |\n");
    const size_t n = (size_t)16384 * 2048; /* elements per tensor, every configuration */
    uint16_t *buf[2][4];
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < 4; t++) {
            CK(cudaMalloc(&buf[s][t], n * 2));
            fill_random<<<1024, 256>>>(buf[s][t], n, 1234u + 17u * (uint32_t)(4 * s + t));
        }
    float *lse;
    CK(cudaMalloc(&lse, 16384 * 32 * 4));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int di = 0; di < 3; di++)
        for (int causal = 0; causal < 2; causal++)
            for (int li = 0; li < 6; li++) {
                const int d = dims[di], sl = lens[li], heads = 2048 / d, batch = 16384 / sl;
                if (quick && sl != 2048 && sl != 8192) continue;
                fa_problem p;
                memset(&p, 0, sizeof p);
                p.batch = batch; p.seqlen_q = p.seqlen_k = sl; p.heads_q = heads; p.head_dim = d; p.causal = causal;
                std::vector<float> ms;
                for (int it = 0; it < reps + 3; it++) {
                    fa_tensor t[4];
                    for (int j = 0; j < 4; j++) {
                        memset(&t[j], 0, sizeof t[j]);
                        t[j].data = buf[it & 1][j]; t[j].dtype = FA_BF16;
                    }
                    CK(cudaEventRecord(e0));
                    fa_status st = fa_forward_cuda(&p, t[0], t[1], t[2], t[3], lse, NULL, 0, NULL);
                    CK(cudaEventRecord(e1));
                    if (st != FA_OK) break;
                    CK(cudaEventSynchronize(e1));
                    float m;
                    CK(cudaEventElapsedTime(&m, e0, e1));
                    if (it >= 3) ms.push_back(m); /* 3 warm-up runs */
                }
                if (ms.size() < (size_t)reps) { /* e.g. a head dim not compiled in */
                    printf("| %d | %s | %d | %d x %d | - | %s |\n", d, causal ? "yes" : "no", sl, batch, heads,
                           fa_last_error());
                    continue;
                }
                std::sort(ms.begin(), ms.end());
                double med = ms[ms.size() / 2];
                double flops = 4.0 * sl * (double)sl * d * heads * batch * (causal ? 0.5 : 1.0);
                printf("| %d | %s | %d | %d x %d | %.3f | %.1f |\n", d, causal ? "yes" : "no", sl, batch, heads, med,
                       flops / med * 1e-9);
            }
    return 0;
}
