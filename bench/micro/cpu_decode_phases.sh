#!/bin/sh
# cpu_decode_phases.sh [tokens reps] - where the CPU decode's time goes, one thread, AVX2 flags (CFLAGS to change):
# a copy of flashattn.h with TSC reads around fa__decode_tile_few's three passes (the dot products of all KV heads,
# mask + softmax, P V), and a caller of fa_decode (d 128, 32 / 8 heads, f16 cache, batch 1). Prints GB/s of K + V and
# TSC cycles per (key, KV head): the whole call and each pass. The copy lives in BUILD (default build/decode_phases).
set -e
here=$(cd "$(dirname "$0")" && pwd); out=${BUILD:-build}/decode_phases
mkdir -p "$out"
python3 - "$here/../../flashattn.h" "$out/flashattn.h" <<'PY'
import sys
s = open(sys.argv[1]).read()
def put(before, text, after=False):
    global s
    assert s.count(before) >= 1, before
    s = s.replace(before, before + text if after else text + before, 1)
put('static int fa__decode_tile_few(', '#include <x86intrin.h>\nunsigned long long g_ph[3];\n')
put('''    for (g0 = r0; g0 < r1; g0 += FA__FEW_ROWS) {
        int g1 = r1 - g0 < FA__FEW_ROWS ? r1 : g0 + FA__FEW_ROWS, first = g0 == r0;''', '    unsigned long long t0_ = __rdtsc();\n')
put('''    for (j = 0; j < nh; ++j) {
        int i0 = j * rph + r0, i1 = j * rph + r1;
        fa__score_mask(''', '    unsigned long long t1_ = __rdtsc(); g_ph[0] += t1_ - t0_;\n')
put('    for (j = 0; j < nh; ++j) { /* V rows now in cache', '    unsigned long long t2_ = __rdtsc(); g_ph[1] += t2_ - t1_;\n')
put('    return (nv > nc) | (next_k != NULL) << 1;\n}', '    g_ph[2] += __rdtsc() - t2_;\n')
open(sys.argv[2], 'w').write(s)
PY
cat > "$out/main.c" <<'C'
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
extern unsigned long long g_ph[3];
static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv)
{
    int d = 128, hq = 32, hkv = 8, reps = argc > 2 ? atoi(argv[2]) : 200, r;
    long long tokens = argc > 1 ? atoll(argv[1]) : 256;
    size_t n = (size_t)tokens * hkv * d, nq = (size_t)hq * d, i, wsb = 0;
    unsigned short *K = malloc(n * 2), *V = malloc(n * 2), *q = malloc(nq * 2), *o = malloc(nq * 2);
    int32_t len = (int32_t)tokens;
    fa_problem p;
    fa_tensor tq, tk, tv, to, none;
    void *ws;
    unsigned long long c0, c;
    double t0, t, kh;
    for (i = 0; i < n; i++) { K[i] = 0x3000 + i * 7919 % 1024; V[i] = 0x3000 + i * 104729 % 1024; }
    for (i = 0; i < nq; i++) q[i] = 0x3400 + i % 512;
    memset(&p, 0, sizeof p);
    p.batch = 1; p.seqlen_q = 1; p.seqlen_k = (int)tokens; p.heads_q = hq; p.heads_kv = hkv; p.head_dim = d;
    p.seqlens_k = &len;
    memset(&tq, 0, sizeof tq); tq.data = q; tq.dtype = FA_F16;
    tk = tq; tk.data = K; tv = tq; tv.data = V; to = tq; to.data = o;
    memset(&none, 0, sizeof none);
    fa_decode_workspace_size(&p, &wsb); ws = malloc(wsb ? wsb : 1);
    if (fa_decode(&p, tq, tk, tv, none, none, to, NULL, ws, wsb) != FA_OK) return 1; /* warm-up */
    memset(g_ph, 0, sizeof g_ph);
    c0 = __rdtsc(); t0 = now_s();
    for (r = 0; r < reps; r++) fa_decode(&p, tq, tk, tv, none, none, to, NULL, ws, wsb);
    t = now_s() - t0; c = __rdtsc() - c0; kh = (double)tokens * hkv * reps;
    printf("%lld tokens, 1 thread: %.1f GB/s; TSC cycles a key and KV head: call %.1f, dots %.1f, softmax %.1f, "
           "P V %.1f (TSC %.2f GHz)\n", tokens, 4.0 * n * reps / t / 1e9, c / kh, g_ph[0] / kh, g_ph[1] / kh,
           g_ph[2] / kh, c / t / 1e9);
    return 0;
}
C
cc -O3 ${CFLAGS:--mavx2 -mfma -mno-avx512f -mf16c} -I"$out" "$out/main.c" -lm -o "$out/decode_phases"
"$out/decode_phases" "$@"
