// One-shot all-reduce for small messages over IPC-shared buffers (see cuda_ext/README.md).
//
// Every rank runs the same kernel with the same grid. Each block:
//   1. entry barrier: tells every rank (itself included) that it has arrived, by writing this
//      call's epoch into its slot in that rank's flag area, then waits until every rank's block
//      with the same index has written the epoch into this rank's flag area;
//   2. reads its share of every rank's input buffer (16-byte vectors, ranks summed in the fixed
//      order 0..world-1 in fp32, so every rank produces bit-identical output), converts the fp32
//      sums to the output dtype and writes them to this rank's output;
//   3. exit barrier, the same as 1 in the second flag phase, so no rank reuses its input buffer
//      while a peer may still be reading it.
// The epoch grows by one per call (the host counts; 0 is never used), so flags never need a reset.
// Blocks synchronise only with the same-index block of the other ranks: block b of every rank
// reads exactly the vectors block b of the others reads, because the grid is the same everywhere.
//
// Kernels: commprof_oneshot_allreduce_bf16 / _fp16 / _fp32, all with the arguments
//   in_ptrs     device array of `world` u64: rank q's input buffer (IPC-mapped for q != rank)
//   flag_ptrs   device array of `world` u64: rank q's flag area (u32 words)
//   out         this rank's output buffer (must not alias any input buffer)
//   n16         message size in 16-byte vectors (bytes / 16; the host refuses other sizes)
//   world       ranks, 1..8 (1 = the single-rank path: the barrier with itself, a copy)
//   rank        this rank, 0..world-1
//   epoch       this call's epoch, the same on every rank, 1, 2, 3, ...
//   row_words   u32 words per flag row (phase, writer); at least gridDim.x
//   timeout_ns  give up waiting on a barrier after this long (0 = never); the result is then wrong
//   status      this rank's u32 status word: bit 0 entry barrier timed out, bit 1 exit barrier
//               timed out, bit 2 bad arguments; bits are only ever set (sticky until the host
//               zeroes the word), so one read after many calls says whether any went wrong
// Flag area of one rank: slot (phase, writer, block) is u32 word (phase * 8 + writer) * row_words
// + block; the host sizes rows to a multiple of 128 bytes (cuda_ext/oneshot.py, RegionLayout).
//
// No headers: builds unchanged with nvcc and with NVRTC.

typedef unsigned long long u64;
typedef unsigned int u32;

#define COMMPROF_MAX_WORLD 8

__device__ __forceinline__ u64 globaltimer_ns()
{
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// System-scope release store / acquire load: the flags cross GPUs (and processes).
__device__ __forceinline__ void store_release_sys(u32* p, u32 v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ u32 load_acquire_sys(const u32* p)
{
    u32 v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// 16-byte load that skips L1 (.cg): peers' buffers are written outside this kernel.
__device__ __forceinline__ void load16_cg(const unsigned char* p, u32 (&w)[4])
{
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "l"(p));
}

__device__ __forceinline__ void store16(unsigned char* p, const u32 (&w)[4])
{
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 :
                 : "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
}

// ---- dtype conversions (no cuda_bf16.h / cuda_fp16.h, so NVRTC needs no include path) ----

__device__ __forceinline__ float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

// fp32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN.
__device__ __forceinline__ u32 to_bf16(float f)
{
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (u >> 16) | 0x40u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

__device__ __forceinline__ void fp16x2_to_float(u32 w, float& lo, float& hi)
{
    asm("{ .reg .b16 l, h;\n\t"
        "mov.b32 {l, h}, %2;\n\t"
        "cvt.f32.f16 %0, l;\n\t"
        "cvt.f32.f16 %1, h; }"
        : "=f"(lo), "=f"(hi)
        : "r"(w));
}

__device__ __forceinline__ u32 float_to_fp16x2(float lo, float hi)
{
    u32 w;
    asm("{ .reg .b16 l, h;\n\t"
        "cvt.rn.f16.f32 l, %1;\n\t"
        "cvt.rn.f16.f32 h, %2;\n\t"
        "mov.b32 %0, {l, h}; }"
        : "=r"(w)
        : "f"(lo), "f"(hi));
    return w;
}

enum { DT_BF16 = 0, DT_FP16 = 1, DT_FP32 = 2 };

// Add one 16-byte vector of dtype DT into the fp32 accumulators (8 lanes for 16-bit types, 4 for fp32).
template <int DT>
__device__ __forceinline__ void accumulate(const u32 (&w)[4], float (&acc)[8])
{
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (DT == DT_BF16) {
            acc[2 * k] += bf16_lo(w[k]);
            acc[2 * k + 1] += bf16_hi(w[k]);
        } else if (DT == DT_FP16) {
            float lo, hi;
            fp16x2_to_float(w[k], lo, hi);
            acc[2 * k] += lo;
            acc[2 * k + 1] += hi;
        } else {
            acc[k] += __uint_as_float(w[k]);
        }
    }
}

template <int DT>
__device__ __forceinline__ void pack(const float (&acc)[8], u32 (&w)[4])
{
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if (DT == DT_BF16)
            w[k] = to_bf16(acc[2 * k]) | (to_bf16(acc[2 * k + 1]) << 16);
        else if (DT == DT_FP16)
            w[k] = float_to_fp16x2(acc[2 * k], acc[2 * k + 1]);
        else
            w[k] = __float_as_uint(acc[k]);
    }
}

// Block-level barrier across ranks for one phase (0 = entry, 1 = exit). Thread t < world talks to
// rank t: it writes the epoch into this rank's slot in rank t's flag area, then waits for rank t's
// slot in this rank's own flag area. The comparison is on the signed difference so a slot that is
// already ahead (never more than one call, see the header) or wraps around still counts.
__device__ __forceinline__ void cross_rank_barrier(const u64* flag_ptrs, int world, int rank, int phase,
                                                   u32 epoch, u32 row_words, u64 timeout_ns, u32* status)
{
    __syncthreads();  // this block's earlier reads of peers' inputs are complete
    const int t = threadIdx.x;
    if (t < world) {
        const u64 row_mine = (u64)(phase * COMMPROF_MAX_WORLD + rank) * row_words + blockIdx.x;
        const u64 row_theirs = (u64)(phase * COMMPROF_MAX_WORLD + t) * row_words + blockIdx.x;
        u32* peer_slot = (u32*)flag_ptrs[t] + row_mine;
        const u32* own_slot = (const u32*)flag_ptrs[rank] + row_theirs;
        store_release_sys(peer_slot, epoch);
        const u64 start = globaltimer_ns();
        u32 polls = 0;
        while ((int)(load_acquire_sys(own_slot) - epoch) < 0) {
            if (timeout_ns != 0 && (++polls & 63u) == 0 && globaltimer_ns() - start > timeout_ns) {
                atomicOr(status, 1u << phase);
                break;
            }
        }
    }
    __syncthreads();
}

template <int DT, int W>
__device__ __forceinline__ void reduce_vectors(const u64* in_ptrs, unsigned char* out, u64 n16)
{
    const unsigned char* src[W];
#pragma unroll
    for (int q = 0; q < W; ++q)
        src[q] = (const unsigned char*)in_ptrs[q];
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        u32 v[W][4];
#pragma unroll
        for (int q = 0; q < W; ++q)  // all loads issued before any use: W remote reads in flight
            load16_cg(src[q] + 16 * i, v[q]);
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int q = 0; q < W; ++q)
            accumulate<DT>(v[q], acc);
        u32 w[4];
        pack<DT>(acc, w);
        store16(out + 16 * i, w);
    }
}

template <int DT>
__device__ __forceinline__ void oneshot(const u64* in_ptrs, const u64* flag_ptrs, void* out, u64 n16, int world,
                                        int rank, u32 epoch, u32 row_words, u64 timeout_ns, u32* status)
{
    if (world < 1 || world > COMMPROF_MAX_WORLD || rank < 0 || rank >= world || epoch == 0 ||
        blockIdx.x >= row_words) {
        if (threadIdx.x == 0)
            atomicOr(status, 4u);
        return;
    }
    cross_rank_barrier(flag_ptrs, world, rank, 0, epoch, row_words, timeout_ns, status);
    unsigned char* o = (unsigned char*)out;
    switch (world) {
    case 1: reduce_vectors<DT, 1>(in_ptrs, o, n16); break;
    case 2: reduce_vectors<DT, 2>(in_ptrs, o, n16); break;
    case 3: reduce_vectors<DT, 3>(in_ptrs, o, n16); break;
    case 4: reduce_vectors<DT, 4>(in_ptrs, o, n16); break;
    case 5: reduce_vectors<DT, 5>(in_ptrs, o, n16); break;
    case 6: reduce_vectors<DT, 6>(in_ptrs, o, n16); break;
    case 7: reduce_vectors<DT, 7>(in_ptrs, o, n16); break;
    default: reduce_vectors<DT, 8>(in_ptrs, o, n16); break;
    }
    cross_rank_barrier(flag_ptrs, world, rank, 1, epoch, row_words, timeout_ns, status);
}

#define COMMPROF_ONESHOT_KERNEL(NAME, DT)                                                              \
    extern "C" __global__ void __launch_bounds__(512, 1)                                               \
    NAME(const u64* in_ptrs, const u64* flag_ptrs, void* out, u64 n16, int world, int rank, u32 epoch, \
         u32 row_words, u64 timeout_ns, u32* status)                                                   \
    {                                                                                                  \
        oneshot<DT>(in_ptrs, flag_ptrs, out, n16, world, rank, epoch, row_words, timeout_ns, status); \
    }

COMMPROF_ONESHOT_KERNEL(commprof_oneshot_allreduce_bf16, DT_BF16)
COMMPROF_ONESHOT_KERNEL(commprof_oneshot_allreduce_fp16, DT_FP16)
COMMPROF_ONESHOT_KERNEL(commprof_oneshot_allreduce_fp32, DT_FP32)
