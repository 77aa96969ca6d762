/* tests/emu_cuda90.h - what the sm_90a kernels (the forward's and the
   backward's) use beyond tests/emu_cuda.h (which includes this file before
   flashattn_cuda.cuh; see its first comment): the >>hopper-ptx wrappers,
   wgmma, and the host's tensor maps and launches. Shared memory is
   emu_cuda.h's fa__bwd_smem; a shared-memory address is an offset into it. */
#ifndef FLASHATTN_TESTS_EMU_CUDA90_H
#define FLASHATTN_TESTS_EMU_CUDA90_H

#include <cudaTypedefs.h> /* CUtensorMap (a 128-byte blob: emu_map below lives in it) */
#include <chrono>
#include <functional>
#include <cstdio>
#include <type_traits>

#define FA__SM90A 1 /* the header's sm_90a device code, compiled for the CPU */
#define __CUDA_ARCH_FEAT_SM90_ALL 1 /* (so the header's own test gives the same) */
#ifdef __grid_constant__
#undef __grid_constant__
#endif
#define __grid_constant__
#define fa__smem90b fa__bwd_smem /* the kernels' extern shared arrays */
#define fa__smem90 fa__bwd_smem
#ifndef FLASHATTN_TRACE
#define FLASHATTN_TRACE(ev, tile, it) ((void)0)
#endif

static inline unsigned char *emu_sm(uint32_t addr) { return fa__bwd_smem + addr; }
/* the 128-byte swizzle of TMA and wgmma: address bits 4-6 ^= bits 7-9 */
static inline uint32_t emu_swz(uint32_t addr) { return addr ^ (((addr >> 7) & 7u) << 4); }

/* ---- mbarriers: arrivals and transaction bytes pending, the phase ------- */
struct emu_mbar {
    int count, pending;
    long tx;
    unsigned phase; /* parity of the phase in progress */
};
static emu_mbar emu_mbars[sizeof fa__bwd_smem / 8];
static inline void emu_mbar_update(uint32_t bar, int arrivals, long bytes) {
    emu_mbar &m = emu_mbars[bar / 8];
    m.pending -= arrivals;
    m.tx += bytes;
    if (m.pending == 0 && m.tx == 0) { /* the phase completes; the next begins */
        m.phase ^= 1u;
        m.pending = m.count;
    }
}
static inline void fa__mbar_init(uint32_t bar, uint32_t count) {
    emu_mbars[bar / 8] = emu_mbar{(int)count, (int)count, 0, 0};
}
static inline void fa__mbar_expect_tx(uint32_t bar, uint32_t bytes) { emu_mbar_update(bar, 1, (long)bytes); }
static inline void fa__mbar_arrive(uint32_t bar) { emu_mbar_update(bar, 1, 0); }
static inline void fa__mbar_inval(uint32_t bar) { emu_mbars[bar / 8] = emu_mbar{}; }
static inline void fa__mbar_arrive_n(uint32_t bar, uint32_t n) { emu_mbar_update(bar, (int)n, 0); }
/* the phase of this parity has completed: the one in progress has the other */
/* TMA and bulk loads land when a thread waits on their barrier (below), so
   shared memory read before that wait holds what was there before */
struct emu_load {
    uint32_t bar;
    long bytes;
    std::function<void()> copy;
};
static std::vector<emu_load> emu_loads;
static inline void emu_land(uint32_t bar) {
    for (size_t i = 0; i < emu_loads.size();)
        if (emu_loads[i].bar == bar) {
            emu_loads[i].copy();
            emu_mbar_update(bar, 0, -emu_loads[i].bytes);
            emu_loads.erase(emu_loads.begin() + (long)i);
        } else {
            i++;
        }
}
static inline void fa__mbar_wait(uint32_t bar, uint32_t parity) {
    emu_wait_until(
        [&] {
            emu_land(bar);
            return emu_mbars[bar / 8].phase != (parity & 1u);
        },
        "mbarrier at", bar);
}

/* ---- tensor maps and copies ---------------------------------------------- */
struct emu_map {
    const unsigned char *base;
    int64_t dim[4];    /* cols, rows, heads, batches */
    int64_t stride[3]; /* bytes: row, head, batch */
    int box_rows;
};
static_assert(sizeof(emu_map) <= sizeof(CUtensorMap), "the map's record fits the blob");
/* the header's signature (its own asks the driver to encode the map) */
static int fa__tma_map(CUtensorMap *m, const void *base, int bf16, int cols, int64_t rows, int heads,
                       int64_t batches, int64_t s_seq, int64_t s_head, int64_t s_batch, int box_rows) {
    (void)bf16;
    emu_map e = {(const unsigned char *)base, {cols, rows, heads, batches}, {s_seq * 2, s_head * 2, s_batch * 2},
                 box_rows};
    if (s_seq % 8 || s_head % 8 || s_batch % 8) return 1; /* (TMA: 16-byte strides) */
    memset(m, 0, sizeof *m);
    memcpy(m, &e, sizeof e);
    return 0;
}
/* f(global element or null outside the tensor, its shared-memory element)
   for each element of the box at (col, row, head, batch): 64 columns x
   box_rows rows, 128 bytes a row in shared memory at smem, swizzled */
template <class F>
static inline void emu_box(const emu_map &m, uint32_t smem, int col, int row, int head, int batch, F f) {
    for (int r = 0; r < m.box_rows; r++)
        for (int c = 0; c < 64; c++) {
            const int64_t rr = (int64_t)row + r, cc = (int64_t)col + c;
            const bool in = rr >= 0 && rr < m.dim[1] && cc >= 0 && cc < m.dim[0] && head < m.dim[2] && batch < m.dim[3];
            unsigned char *g =
                in ? (unsigned char *)m.base + batch * m.stride[2] + head * m.stride[1] + rr * m.stride[0] + 2 * cc
                   : nullptr;
            f(g, emu_sm(emu_swz(smem + 128u * r + 2u * c)));
        }
}
/* a box into shared memory, zeros outside the tensor */
static inline void fa__tma_load(uint32_t dst, const CUtensorMap *map, int col, int row, int head, int batch,
                                uint32_t bar) {
    emu_map m;
    memcpy(&m, map, sizeof m);
    emu_loads.push_back({bar, (long)m.box_rows * 128, [=] {
                             emu_box(m, dst, col, row, head, batch, [](unsigned char *g, unsigned char *s) {
                                 if (g) memcpy(s, g, 2);
                                 else memset(s, 0, 2);
                             });
                         }});
}
static inline void fa__bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    emu_loads.push_back({bar, (long)bytes, [=] { memcpy(emu_sm(dst), src, bytes); }});
}
/* Stores (TMA and bulk) read shared memory when their thread waits for its
   bulk groups (fa__bulk_wait), so a buffer rewritten before that wait
   stores the new values; a CTA that ends with a store not waited for
   aborts (emu_cta_end). */
static std::vector<std::function<void()>> emu_stores[640];
/* fa__tma_load's inverse, clipped to the tensor (the forward's epilogue) */
static inline void fa__tma_store(const CUtensorMap *map, uint32_t src, int col, int row, int head, int batch,
                                 bool issue) {
    if (!issue) return;
    emu_map m;
    memcpy(&m, map, sizeof m);
    emu_stores[threadIdx.x].push_back([=] {
        emu_box(m, src, col, row, head, batch, [](unsigned char *g, unsigned char *s) {
            if (g) memcpy(g, s, 2);
        });
    });
}
template <bool ADD> static inline void fa__bulk_store(float *dst, uint32_t src, uint32_t bytes) {
    emu_stores[threadIdx.x].push_back([=] {
        const float *s = (const float *)emu_sm(src);
        for (uint32_t i = 0; i < bytes / 4; i++) dst[i] = ADD ? dst[i] + s[i] : s[i];
    });
}
static inline void fa__bulk_commit(void) {}
template <bool READ> static inline void fa__bulk_wait(void) {
    for (auto &f : emu_stores[threadIdx.x]) f();
    emu_stores[threadIdx.x].clear();
}

/* ---- fences, registers, barriers, plain shared-memory accesses ----------- */
static inline void fa__wgmma_fence(void) {}
template <int N> static inline void fa__fence_regs(float (&)[N]) {}
template <int N> static inline void fa__setmaxnreg_inc(void) {}
template <int N> static inline void fa__setmaxnreg_dec(void) {}
static inline void fa__fence_async_shared(void) {}
static inline void fa__fence_async_global(void) {}
static inline void fa__fence_mbar_init(void) {}
/* (a poll of another thread's counter: let the others run first) */
static inline int fa__ld_acquire(const int *p) {
    emu_yield();
    return *p;
}
static inline void fa__red_release_add(int *p, int v) { *p += v; }
struct emu_nbar {
    int arrived = 0;
    unsigned gen = 0;
};
static emu_nbar emu_nbars[16];
static inline void emu_named(int id, int threads, bool wait) {
    emu_nbar &b = emu_nbars[id];
    const unsigned gen = b.gen;
    if (++b.arrived == threads) {
        b.arrived = 0;
        b.gen++;
    } else if (wait) {
        emu_wait_until([&] { return b.gen != gen; }, "named barrier", (unsigned)id);
    }
}
static inline void fa__named_sync(int id, int threads) { emu_named(id, threads, true); }
static inline void fa__named_arrive(int id, int threads) { emu_named(id, threads, false); }
static inline void fa__st_shared32(uint32_t addr, uint32_t v) { memcpy(emu_sm(addr), &v, 4); }
static inline void fa__st_shared_f4(uint32_t addr, float x, float y, float z, float w) {
    const float v[4] = {x, y, z, w};
    memcpy(emu_sm(addr), v, 16);
}
static inline uint32_t fa__ld_shared32(uint32_t addr) {
    uint32_t v;
    memcpy(&v, emu_sm(addr), 4);
    return v;
}
static inline uint4 fa__ld_shared128(uint32_t addr) {
    uint4 v;
    memcpy(&v, emu_sm(addr), 16);
    return v;
}

/* ---- wgmma m64nNk16 (16-bit) and m64nNk32 (e4m3) -------------------------
   Asynchronous as on the GPU: an issued product is only recorded (with
   each thread's accumulator and A-fragment arrays); the commits group
   them, and wgmma.wait_group N (a warpgroup-collective here) computes
   every product of the groups but the newest N. So a product reads its
   shared-memory operands and A registers, and writes its accumulators,
   when the kernel waits for it: a kernel that reads an accumulator, or
   overwrites an operand (a stage released, P repacked), before that wait
   computes with the wrong values, as on the GPU.
   The warpgroup's first thread reads both operands into fp32 arrays and
   computes all 64 x N sums into the threads' accumulators. Descriptor:
   start, leading (LBO) and stride (SBO) byte offsets, 128-byte swizzle (or
   the 64-byte one, layout type 2, K-major only). K-major element (r, k):
   row r of 128 bytes (64), 8-row groups SBO apart. MN-major element (mn,
   k), 16-bit only: mn along the row, 64-element blocks LBO apart, k the
   row, 8-row groups SBO apart. */
static inline uint32_t emu_desc_addr(uint64_t desc, int mn_major, int mn, int k, int esz = 2) {
    const uint32_t start = (uint32_t)(desc & 0x3FFFu) << 4, lbo = (uint32_t)((desc >> 16) & 0x3FFFu) << 4,
                   sbo = (uint32_t)((desc >> 32) & 0x3FFFu) << 4;
    if ((desc >> 62) == 2) { /* the 64-byte swizzle (FP8's Vt at 64-key blocks), K-major: 64-byte rows */
        const uint32_t a = start + (uint32_t)(mn / 8) * sbo + (uint32_t)(mn % 8) * 64 + (uint32_t)(esz * k);
        return a ^ (((a >> 7) & 3u) << 4);
    }
    const uint32_t a = mn_major ? start + (uint32_t)(mn / 64) * lbo + (uint32_t)(k / 8) * sbo + (uint32_t)(k % 8) * 128 +
                                      2u * (uint32_t)(mn % 64)
                                : start + (uint32_t)(mn / 8) * sbo + (uint32_t)(mn % 8) * 128 + (uint32_t)(esz * k);
    return emu_swz(a);
}
/* TY's 16-bit type (0 f16, 1 bf16), for emu_cuda.h's emu_lo / emu_hi */
template <int TY> using emu_t16 = typename std::conditional<TY == 1, __nv_bfloat16, __half>::type;
/* element value of type TY (2: e4m3) at a shared-memory address */
static inline float emu_elem(int ty, uint32_t addr) {
    if (ty == 2) return fa__e4m3_to_f32(*emu_sm(addr));
    uint16_t u;
    memcpy(&u, emu_sm(addr), 2);
    return ty == 1 ? emu_lo(__nv_bfloat16(), u) : emu_lo(__half(), u);
}
/* A from registers: the mma.sync A fragment of warp m / 16 (16-bit: lane
   4 (m % 8) + (k % 8) / 2, register (m % 16) / 8 + 2 (k / 8), half k % 2;
   e4m3: lane 4 (m % 8) + (k % 16) / 4, register (m % 16) / 8 + 2 (k / 16),
   byte k % 4) */
static inline float emu_frag_a(int ty, const uint32_t *const *a, int m, int k) {
    if (ty == 2) {
        const uint32_t u = a[32 * (m / 16) + 4 * (m % 8) + (k % 16) / 4][(m % 16) / 8 + 2 * (k / 16)];
        return fa__e4m3_to_f32((uint8_t)(u >> (8 * (k % 4))));
    }
    const uint32_t u = a[32 * (m / 16) + 4 * (m % 8) + (k % 8) / 2][(m % 16) / 8 + 2 * (k / 8)];
    if (ty == 1) return k % 2 ? emu_hi(__nv_bfloat16(), u) : emu_lo(__nv_bfloat16(), u);
    return k % 2 ? emu_hi(__half(), u) : emu_lo(__half(), u);
}
/* one issued product: its shape and operands, every thread's arrays */
struct emu_wg_op {
    int n, ty, acc, tr, trb, rs;
    uint64_t a, b;
    float *d[128];
    const uint32_t *ar[128];
};
struct emu_wg_queue {
    std::vector<emu_wg_op> ops;     /* issued, not yet computed: ops[0] is product number `done` */
    std::vector<long> group_end;    /* per commit: the number of products issued before it */
    long done = 0, issued[128] = {}, commits[128] = {};
};
static emu_wg_queue emu_wgq[5];
static inline void emu_wg_compute(const emu_wg_op &o) {
    const int K = o.ty == 2 ? 32 : 16, esz = o.ty == 2 ? 1 : 2;
    static float A[64][32], Bt[256][32]; /* (B by columns: the sums read rows) */
    for (int m = 0; m < 64; m++)
        for (int k = 0; k < K; k++)
            A[m][k] = o.rs ? emu_frag_a(o.ty, o.ar, m, k) : emu_elem(o.ty, emu_desc_addr(o.a, o.tr, m, k, esz));
    const int b_mn = o.ty != 2 && (o.trb || o.rs); /* (16-bit rs: B MN-major; e4m3: K-major) */
    for (int k = 0; k < K; k++)
        for (int col = 0; col < o.n; col++) Bt[col][k] = emu_elem(o.ty, emu_desc_addr(o.b, b_mn, col, k, esz));
    for (int th = 0; th < 128; th++) {
        const int w = th / 32, g = (th % 32) / 4, t = th % 4;
        for (int i = 0; i < o.n / 2; i++) {
            const int row = 16 * w + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
            float sum = o.acc ? o.d[th][i] : 0.f;
            for (int k = 0; k < K; k++) sum += A[row][k] * Bt[col][k];
            o.d[th][i] = sum;
        }
    }
}
/* a thread's part of a product: the same shape from every thread of the warpgroup */
static void emu_wgmma(int ty, int n, float *d, uint64_t a, const uint32_t *a_regs, uint64_t b, int acc, int tr,
                      int trb) {
    const int wg = (int)threadIdx.x / 128, T = (int)threadIdx.x % 128;
    emu_wg_queue &q = emu_wgq[wg];
    const long i = q.issued[T]++ - q.done;
    if ((long)q.ops.size() <= i) {
        emu_wg_op o = {};
        o.n = n; o.ty = ty; o.acc = acc; o.tr = tr; o.trb = trb; o.rs = a_regs != nullptr; o.a = a; o.b = b;
        q.ops.push_back(o);
    }
    emu_wg_op &o = q.ops[(size_t)i];
    if (o.n != n || o.ty != ty || o.acc != acc || o.tr != tr || o.trb != trb || o.rs != (a_regs != nullptr) || o.b != b ||
        (!a_regs && o.a != a)) {
        fprintf(stderr, "emulator: warpgroup %d: thread %d issued another product than thread 0\n", wg, T);
        abort();
    }
    o.d[T] = d;
    o.ar[T] = a_regs;
}
static inline void fa__wgmma_commit(void) {
    emu_wg_queue &q = emu_wgq[threadIdx.x / 128];
    const int T = (int)threadIdx.x % 128;
    if ((long)q.group_end.size() <= q.commits[T]) q.group_end.push_back(q.issued[T]);
    q.commits[T]++;
}
/* every product of the groups committed but the newest N, computed */
template <int N> static inline void fa__wgmma_wait(void) {
    const int wg = (int)threadIdx.x / 128;
    emu_wg_queue &q = emu_wgq[wg];
    emu_wg_bar[wg]->arrive_and_wait(); /* (every thread's part is in) */
    if (threadIdx.x % 128 == 0 && (long)q.group_end.size() > N) {
        const long upto = q.group_end[q.group_end.size() - 1 - N];
        for (; q.done < upto; q.done++) {
            emu_wg_compute(q.ops.front());
            q.ops.erase(q.ops.begin());
        }
    }
    emu_wg_bar[wg]->arrive_and_wait();
}
static void emu_cta_begin(void) {
    for (auto &q : emu_wgq) q = emu_wg_queue();
    emu_loads.clear(); /* (loads no thread waited for: never seen) */
}
static void emu_cta_end(void) {
    for (int wg = 0; wg < 5; wg++)
        if (!emu_wgq[wg].ops.empty()) {
            fprintf(stderr, "emulator: warpgroup %d ended with %zu products not waited for\n", wg,
                    emu_wgq[wg].ops.size());
            abort();
        }
    for (int t = 0; t < 640; t++)
        if (!emu_stores[t].empty()) {
            fprintf(stderr, "emulator: thread %d ended with %zu bulk stores not waited for\n", t,
                    emu_stores[t].size());
            abort();
        }
}
template <int N, int TY> struct fa__wgmma {
    static_assert(TY >= 0 && TY <= 2, "f16, bf16 or e4m3");
    template <int TR = 0, int TRB = TR> static inline void ss(float (&d)[N / 2], uint64_t a, uint64_t b, int acc) {
        emu_wgmma(TY, N, d, a, nullptr, b, acc, TR, TRB);
    }
    static inline void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, int acc) {
        emu_wgmma(TY, N, d, 0, a, b, acc, 0, 1);
    }
};

/* ---- the deterministic kernels' mailbox (the header's is PTX) ------------ */
static inline void fa__bwd_sm90_post(uint32_t mail, int64_t blk, int tile, int jb, int ib, int h, int b) {
    const int32_t v[5] = {tile, jb, ib, h, b};
    memcpy(emu_sm(mail), v, 20);
    memcpy(emu_sm(mail + 24), &blk, 8);
}
static inline void fa__bwd_sm90_fetch(uint32_t mail, int lane, int64_t &blk, int &tile, int &jb, int &ib, int &h,
                                      int &b) {
    (void)lane;
    int32_t v[5];
    memcpy(v, emu_sm(mail), 20);
    memcpy(&blk, emu_sm(mail + 24), 8);
    tile = v[0]; jb = v[1]; ib = v[2]; h = v[3]; b = v[4];
    emu_warp_sync(); /* (every lane has read it before lane 0 gives the buffer back) */
}

/* ---- host: what the launch path asks ------------------------------------- */
template <typename F> static inline cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, F *) {
    memset(a, 0, sizeof *a);
    a->binaryVersion = 90;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaLaunchCooperativeKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t) {
    return cudaErrorNotSupported; /* (the deterministic kernels then walk in one order) */
}

#endif
