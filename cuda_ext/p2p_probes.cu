// Raw GPU-to-GPU link probes for commprof (see cuda_ext/README.md).
//
// Kernels (all extern "C", so they load by name from a cubin or through NVRTC):
//   commprof_p2p_copy  SM-initiated copy. Which pointer lives on the peer decides what is
//                      measured: src on the peer = "read", dst on the peer = "write", both on
//                      the launching GPU = the same-GPU self-test.
//   commprof_pingpong  flag ping-pong between two sides; round-trip latency timed inside the
//                      kernel with %globaltimer.
//   commprof_spin      one thread spins for ns nanoseconds of %globaltimer: queued before a timed
//                      copy so the host's launch of the copy is hidden (its length does not follow
//                      the SM clock, so it needs no calibration).
//
// No headers are included, so the file builds unchanged with nvcc and with NVRTC (cupy).
// Copy-engine bandwidth needs no kernel: the host side uses cudaMemcpyPeerAsync (cuda_ext/probes.py).

typedef unsigned long long u64;
typedef unsigned int u32;

// Device-wide nanosecond clock (same time base on every SM of one GPU).
__device__ __forceinline__ u64 globaltimer_ns()
{
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One 16-byte vector in four 32-bit registers; explicit v4 loads/stores so the copy is 128-bit
// whatever the compiler would infer.
struct Vec4 {
    u32 x, y, z, w;
};

__device__ __forceinline__ Vec4 load16(const unsigned char* p)
{
    Vec4 v;
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void store16(unsigned char* p, const Vec4& v)
{
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
                 :
                 : "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

// Grid-stride copy of nbytes from src to dst. When both pointers are 16-byte aligned the bulk
// moves as 16-byte vectors, four independent vectors in flight per thread per step (keeps enough
// loads outstanding to cover a remote link's latency); the remaining bytes (all of them when the
// pointers are not aligned) move one byte at a time.
extern "C" __global__ void __launch_bounds__(1024)
commprof_p2p_copy(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst, u64 nbytes)
{
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 done = 0;
    if ((((u64)src | (u64)dst) & 15ull) == 0) {
        const u64 n16 = nbytes >> 4;
        u64 i = tid;
        for (; i + 3 * stride < n16; i += 4 * stride) {
            const Vec4 a = load16(src + 16 * i);
            const Vec4 b = load16(src + 16 * (i + stride));
            const Vec4 c = load16(src + 16 * (i + 2 * stride));
            const Vec4 d = load16(src + 16 * (i + 3 * stride));
            store16(dst + 16 * i, a);
            store16(dst + 16 * (i + stride), b);
            store16(dst + 16 * (i + 2 * stride), c);
            store16(dst + 16 * (i + 3 * stride), d);
        }
        for (; i < n16; i += stride)
            store16(dst + 16 * i, load16(src + 16 * i));
        done = n16 << 4;
    }
    for (u64 i = done + tid; i < nbytes; i += stride)
        dst[i] = src[i];
}

// Holds the stream for ns nanoseconds of the device-wide clock. Launch with one block of one thread.
extern "C" __global__ void commprof_spin(u64 ns)
{
    const u64 start = globaltimer_ns();
    while (globaltimer_ns() - start < ns) {
    }
}

// Spin until *flag == want; gives up after timeout_ns (0 = never) and then returns false.
// The clock is read every 64 polls only, so the poll loop stays tight.
__device__ __forceinline__ bool wait_for(volatile u32* flag, u32 want, u64 timeout_ns)
{
    const u64 start = globaltimer_ns();
    u32 polls = 0;
    while (*flag != want) {
        if (timeout_ns != 0 && (++polls & 63u) == 0 && globaltimer_ns() - start > timeout_ns)
            return false;
    }
    return true;
}

// Flag ping-pong. Two sides; thread 0 of each block plays side (first_side + blockIdx.x):
//   side 0: for i = 1..rounds+1: *ping = i, then wait until *pong == i
//   side 1: for i = 1..rounds+1: wait until *ping == i, then *pong = i
// Exchange 1 is an untimed handshake (it absorbs the launch skew between two GPUs); side 0 times
// exchanges 2..rounds+1 with %globaltimer and clock64, so launch overhead is never counted.
//   Two GPUs: launch grid=1, first_side=1 on GPU B and grid=1, first_side=0 on GPU A.
//   One GPU (self-test): launch grid=2, first_side=0: block 0 and block 1 are the two sides.
// Where each flag lives is the host's choice: a side can poll its own memory while the other side
// writes into it remotely (posted writes), or poll the peer's memory (remote reads).
// The host zeroes ping, pong and result[0..4] before the launch.
// result[0] = elapsed ns over the timed round trips, result[1] = elapsed SM cycles (clock64),
// result[2] = round trips timed, result[3] = 1 if side 0 timed out, result[4] = 1 if side 1 did.
extern "C" __global__ void
commprof_pingpong(volatile u32* ping, volatile u32* pong, int rounds, int first_side, u64 timeout_ns, u64* result)
{
    if (threadIdx.x != 0 || rounds < 1)
        return;
    const int side = first_side + (int)blockIdx.x;
    const u32 last = (u32)rounds + 1u;
    if (side == 0) {
        u64 t0 = 0, c0 = 0;
        for (u32 i = 1; i <= last; ++i) {
            if (i == 2) {
                t0 = globaltimer_ns();
                c0 = (u64)clock64();
            }
            *ping = i;
            if (!wait_for(pong, i, timeout_ns)) {
                result[3] = 1;
                return;
            }
        }
        const u64 t1 = globaltimer_ns();
        const u64 c1 = (u64)clock64();
        result[0] = t1 - t0;
        result[1] = c1 - c0;
        result[2] = (u64)rounds;
    } else if (side == 1) {
        for (u32 i = 1; i <= last; ++i) {
            if (!wait_for(ping, i, timeout_ns)) {
                result[4] = 1;
                return;
            }
            *pong = i;
        }
    }
}
