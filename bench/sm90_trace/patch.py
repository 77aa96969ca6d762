#!/usr/bin/env python3
"""bench/sm90_trace/patch.py FILE - writes clock() timestamps into the sm_90a
forward kernel of a COPY of flashattn_cuda.cuh (never the original): the
producer's Q / K / V issues and each consumer warpgroup's phases (tile start,
Q landed, turn requested, turn taken, S ready, P V ready, softmax done,
epilogue start / end; and where the producer hands tiles over, the wait for
the tile's slot (22 before, 19 after), the end of epilogue_begin (20) and L
stored (21)), lane 0 of warps 0, 4, 8 (and 12) of blocks 0 and 1, into
__device__ fa__tr_buf. In a key block the trace waits for P V before the
softmax, where ptxas 13.0 puts that wait in the untraced kernel (SASS
"D1 D0 E"); each event is a branch, which ptxas does not schedule across.
Usage (the copies beside trace.cu, which includes "flashattn.h"):
  cp flashattn.h flashattn_cuda.cuh bench/sm90_trace/ && python3 bench/sm90_trace/patch.py bench/sm90_trace/flashattn_cuda.cuh
  nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a bench/sm90_trace/trace.cu -o trace
  ./trace D SEQLEN BATCH HEADS CAUSAL > tr.txt; python3 bench/sm90_trace/phases.py tr.txt
  python3 bench/sm90_trace/segments.py tr.txt   (where the producer hands tiles over: d 64's long rows)
The timestamps' global stores perturb the kernel a little (about 2% here).
Where the producer hands the tiles over (HANDOFF, the persistent three-warpgroup
kernel) the consumers wait for the tile's slot and Q before their tile start,
so "Q landed" (event 11) there marks the end of the tile's own set-up; the
producer's event 1 is its slot's publication, right before the Q copy."""
import re
import sys
s = open(sys.argv[1]).read()
def rep(old, new, cnt=1):
    global s
    assert s.count(old) == cnt, (old[:90], s.count(old))
    s = s.replace(old, new)
maps = re.search(r"typedef struct fa__tma_maps \{[^}]*\} fa__tma_maps;", s).group(0)
rep(maps, maps + """
__device__ int4 fa__tr_buf[8 * 8192];
#define FA__TR(ev, k, it) do { if ((threadIdx.x & 127) == 0 && blockIdx.x < 2 && tr_i < 8192) { \\
    fa__tr_buf[(blockIdx.x * 4 + (threadIdx.x >> 7)) * 8192 + tr_i] = make_int4((ev), (k), (it), (int)clock()); tr_i++; } } while (0)
""")
tid = "    const int tid = threadIdx.x + (FA__SM90_WARPSPEC ? 0 : 128), warp = tid / 32, lane = tid % 32;\n"
rep(tid, tid + "    int tr_i = 0, tr_k = 0; /* tr_k: the producer's tile, for copy_q / copy_kv */\n    FA__TR(0, 0, 0);\n")
# (slot_free: publish's, and the flat walk's flat_tile, which publishes its own slots)
rep("        if (q_uses >= QB) fa__mbar_wait(q_empty(q_uses), q_phase(q_uses - QB));\n",
    "        if (q_uses >= QB) fa__mbar_wait(q_empty(q_uses), q_phase(q_uses - QB));\n        FA__TR(1, tr_k, 0);\n")
rep("                const int a = u * WG, hb = fa__fastdiv_q(wk.m, a), r0 = a - hb * m_blocks;\n",
    "                tr_k = k;\n                const int a = u * WG, hb = fa__fastdiv_q(wk.m, a), r0 = a - hb * m_blocks;\n")
rep("        if (r >= STAGES) fa__mbar_wait(k_empty(s), use);\n",
    "        if (r >= STAGES) fa__mbar_wait(k_empty(s), use);\n        FA__TR(2, tr_k, n - x.n_begin);\n")
rep("        if (r >= STAGES) fa__mbar_wait(v_empty(s), use);\n",
    "        if (r >= STAGES) fa__mbar_wait(v_empty(s), use);\n        FA__TR(3, tr_k, n - x.n_begin);\n")
rep("                if (HANDOFF && x.row0 < x.sq) publish(",
    "                tr_k = k;\n                if (HANDOFF && x.row0 < x.sq) publish(")
rep("                const fa__src c = tile_src(x, h, hk, b);\n",
    "                const fa__src c = tile_src(x, h, hk, b);\n                tr_k = k;\n")
rep("""        const int wrow0 = x.row0 + 64 * cw + 16 * (warp % 4); /* this warp's first row */""",
    """        const int wrow0 = x.row0 + 64 * cw + 16 * (warp % 4); /* this warp's first row */\n        FA__TR(10, k, x.n_end - x.n_begin);""")
rep("""                if (!HANDOFF) fa__mbar_wait(q_full(q_uses), q_phase(q_uses));\n                if (FA__SM90_OVERLAP) {""",
    """                if (!HANDOFF) fa__mbar_wait(q_full(q_uses), q_phase(q_uses));\n                FA__TR(11, k, 0);\n                if (FA__SM90_OVERLAP) {""")
# the turn's wait, traced on both sides (the line's two ends: whatever condition the turn has)
rep("auto my_turn = [&]() { ", "auto my_turn = [&]() { FA__TR(18, k, 0); ")
rep("fa__named_sync(1 + cw, 256); };", "fa__named_sync(1 + cw, 256); FA__TR(12, k, 0); };")
rep("""                        fa__wgmma_wait<0>();
                        fa__fence_regs(s_flat);
                        release_k(0);
                        softmax(0, early_mask); /* O~ is still 0: nothing to rescale */""",
"""                        fa__wgmma_wait<0>();
                        fa__fence_regs(s_flat);
                        FA__TR(13, k, 0);
                        release_k(0);
                        softmax(0, early_mask); /* O~ is still 0: nothing to rescale */
                        FA__TR(14, k, 0);""")
rep("""                        fa__wgmma_wait<1>(); /* groups retire in order: S_it is done */
                        fa__fence_regs(s_flat);
                        release_k(it);
                        softmax(it, early_mask);
                        fa__wgmma_wait<0>();
                        fa__fence_regs(o_flat);""",
"""                        fa__wgmma_wait<1>(); /* groups retire in order: S_it is done */
                        fa__fence_regs(s_flat);
                        FA__TR(13, k, it);
                        release_k(it);
                        fa__wgmma_wait<0>(); /* where ptxas puts it (SASS D1 D0 E) */
                        fa__fence_regs(o_flat);
                        FA__TR(15, k, it);
                        softmax(it, early_mask);
                        FA__TR(14, k, it);""")
rep("""                        fa__wgmma_wait<0>();
                        fa__fence_regs(o_flat);
                        release_v(count_w - 1);""",
"""                        fa__wgmma_wait<0>();
                        fa__fence_regs(o_flat);
                        FA__TR(15, k, count);
                        release_v(count_w - 1);""")
rep("""        uint16_t *go = p.o + (p.cu_seqlens_q""", """        FA__TR(16, k, 0);
        uint16_t *go = p.o + (p.cu_seqlens_q""")
rep("""            fa__store_o_rows<BF16>(p, acc_o, inv, go, wrow0, x.sq, g, t);
    }""", """            fa__store_o_rows<BF16>(p, acc_o, inv, go, wrow0, x.sq, g, t);
        FA__TR(17, k, 0);
    }""")
rep("""            fa__mbar_wait(q_full(q_uses), q_phase(q_uses));
            const fa__tile_slot *t = slot(q_uses);""", """            FA__TR(22, k, 0);
            fa__mbar_wait(q_full(q_uses), q_phase(q_uses));
            FA__TR(19, k, 0);
            const fa__tile_slot *t = slot(q_uses);""")
rep("epilogue_begin(); /* l and m are final: the last softmax is done */",
    "epilogue_begin(); /* l and m are final: the last softmax is done */ FA__TR(20, k, 0);")
rep("        if (!LSE_EARLY) store_l();\n", "        if (!LSE_EARLY) store_l();\n        FA__TR(21, k, 0);\n")
open(sys.argv[1],'w').write(s)
