// kernels/tensor_core.h — the two warp-wide instructions behind a hand-written tensor-core GEMM, and the
// asynchronous copy that feeds them, with one spelling for both flavors:
//
//   mma_m16n8k16_f16_f32(d, a, b, c)   D = A·B + C for one 16×8 tile with K = 16: A (16×16) and B (16×8)
//                                      fp16, C and D fp32.
//                                      PTX mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (sm_80+)
//   ldmatrix_x1/_x2/_x4(r, row)        load one, two or four 8×8 fp16 matrices from shared memory, already
//   ldmatrix_x1/_x2/_x4_trans(r, row)  split into the per-lane pieces mma wants (.trans: transposed).
//                                      PTX ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16 (sm_75+)
//   pack_halves(low, high)             two halves in one 32-bit register, `low` in bits 0..15.
//   cp_async_16(dst, src)              start copying 16 bytes from global memory (src) to shared memory (dst)
//                                      without waiting for them;
//   cp_async_commit()                  close the copies this thread started so far into a group;
//   cp_async_wait<N>()                 wait until at most N of this thread's groups are still in flight.
//                                      PTX cp.async.cg.shared.global / commit_group / wait_group (sm_80+)
//
// mma and ldmatrix are *warp collectives*: no lane owns a row or a column. The 32 lanes each hold a few
// elements of every matrix (a "fragment"), and the instruction needs all 32 at once. All 32 lanes of the
// warp must execute the same call (mma.sync/ldmatrix are `.aligned`); on a GPU anything else is undefined
// behavior, on the CPU backend it stops the program with the kernel, block, thread and call site.
//
// Fragment layout of mma.m16n8k16 (PTX ISA 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16 with floating
// point type"). With g = lane / 4 ("groupID") and t = lane % 4 ("threadID_in_group"), each lane holds:
//
//   A (16×16, row-major), 4 registers     B (16×8, K×N), 2 registers     C and D (16×8, fp32), 4 floats
//               cols 2t, 2t+1                            col g                     col 2t  col 2t+1
//   row g       a[0]=a0,a1  a[2]=a4,a5    rows 2t, 2t+1  b[0]=b0,b1     row g      c0      c1
//   row g+8     a[1]=a2,a3  a[3]=a6,a7    rows 2t+8, +9  b[1]=b2,b3     row g+8    c2      c3
//               (a[2], a[3]: cols +8)
//
// e.g. lane 5 (g=1, t=1) holds A[1][2..3] in a[0], A[9][2..3] in a[1], A[1][10..11] in a[2], A[9][10..11]
// in a[3]; B[2..3][1] in b[0] and B[10..11][1] in b[1]; D[1][2], D[1][3], D[9][2], D[9][3] in d[0..3].
// In every register the lower-numbered element (a0, b0, ...) sits in the low 16 bits.
//
// ldmatrix.m8n8 (PTX ISA 9.7.14.5.15): lane 8m + r passes the address of row r of matrix m (rows need not be
// contiguous; each must be 16-byte aligned: 8 halves). x1 uses lanes 0-7's addresses, x2 lanes 0-15, x4 all
// 32. Then lane l receives, in register m, row l/4, columns 2(l%4) and 2(l%4)+1 of matrix m:
//
//            col 0,1   col 2,3   col 4,5   col 6,7
//   row 0    lane 0    lane 1    lane 2    lane 3
//   row 1    lane 4    lane 5    lane 6    lane 7      .trans: lane l receives column l/4, rows 2(l%4) and
//   ...                                                2(l%4)+1 instead (the matrix transposed)
//   row 7    lane 28   lane 29   lane 30   lane 31
//
// which is exactly the A layout above when the four matrices are A's quarters (top-left, bottom-left,
// top-right, bottom-right), and the B layout when B is stored K-major (row k of B in memory) and loaded with
// .trans.
//
// How the CPU backend emulates them: each lane posts its registers (or row address) with
// cpu_backend::warp_collective and waits. When all 32 lanes have arrived, one combine function rebuilds the
// whole matrices from the fragments (the PTX formulas above), computes D = A·B + C in fp32 (every fp16
// product is exact in fp32; the sums are added in k order, starting from C), and hands every lane its
// fragment of D. A GPU adds in its own order and precision, so compare with tolerances, never bit for bit.
// The CPU backend also stops with a message when a lane of the warp exited or never arrives (divergence), and
// when an ldmatrix row address is not 16-byte aligned. It cannot check that the address is in shared memory.
// In the race build each lane's ldmatrix row is recorded as that lane's 16-byte read (ThreadSanitizer), so a
// missing __syncthreads between a tile's stores and its ldmatrix, or before the next tile overwrites it, is a race.
//
// cp.async is not a collective: each thread copies its own 16 bytes, and the copy lands in shared memory some
// time before that thread's cp_async_wait returns (other threads see it after a __syncthreads that follows the
// wait). On the CPU backend a copy lands as late as the PTX rules allow: its source is read when it is issued, its
// destination holds NaN bytes (0xFF) from then until the thread's cp_async_wait<N> retires its group (all but the
// N most recently committed groups; copies not yet committed stay pending), so a read of a tile whose copy has not
// landed gives NaN, where a GPU would give stale or half-written data. A GPU may also read the source at any time
// until then, so the CPU backend compares the source, when the copy lands, with what it held when the copy was
// issued, and stops with a message when something wrote it in between. Both addresses must be 16-byte aligned; the
// CPU backend stops with a message when not.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/launch.h"

// Two halves in one .f16x2 register: `low` in bits 0..15 (the lower-numbered element), `high` in bits 16..31.
__host__ __device__ inline uint32_t pack_halves(__half low, __half high) {
    return static_cast<uint32_t>(__half_as_ushort(low)) | (static_cast<uint32_t>(__half_as_ushort(high)) << 16);
}

#if defined(CUDA_TEACH_CPU)

#include <bit>
#include <cstdio>
#include <source_location>

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_read16(void* address);  // ThreadSanitizer's own entry point for a 16-byte read
#endif

namespace cpu_backend::tensor_core {

// Where a lane called from, for error messages (the first member of every lane's input).
struct CallSite {
    std::source_location site;
    unsigned warp;  // of the block
    unsigned lane;
};
inline CallSite call_site(std::source_location site) {
    const unsigned linear = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    return {site, linear / 32, linear % 32};
}

struct MmaInput {
    CallSite call;
    uint32_t a[4];
    uint32_t b[2];
    float c[4];
};
struct MmaOutput {
    float d[4];
};

inline float low_half(uint32_t r) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(r)));
}
inline float high_half(uint32_t r) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(r >> 16)));
}

// The hardware waits for all 32 lanes; a lane that exited (or a warp with fewer than 32 threads) can never
// arrive.
inline void require_full_warp(const WarpLaneSlot* lanes, unsigned mask, const char* instruction) {
    if (mask == 0xffffffffu) return;
    const CallSite& call = *static_cast<const CallSite*>(lanes[std::countr_zero(mask)].in);
    char text[512];
    std::snprintf(text, sizeof text,
                  "%s at %s:%u, warp %u: all 32 lanes of the warp must execute it, but only the lanes in 0x%08x "
                  "arrived (the others exited, or the block's last warp is not full)",
                  instruction, call.site.file_name(), static_cast<unsigned>(call.site.line()), call.warp, mask);
    kernel_fault(text);
}

inline void mma_combine(WarpLaneSlot* lanes, unsigned mask) {
    require_full_warp(lanes, mask, "mma_m16n8k16_f16_f32 (mma.sync)");
    float A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; ++lane) {
        const auto& in = *static_cast<const MmaInput*>(lanes[lane].in);
        const int g = lane >> 2, t = lane & 3;
        for (int reg = 0; reg < 4; ++reg) {  // a[reg] holds a(2·reg) (low) and a(2·reg+1) (high)
            const int row = g + 8 * (reg & 1), col = 2 * t + 8 * (reg >> 1);
            A[row][col] = low_half(in.a[reg]);
            A[row][col + 1] = high_half(in.a[reg]);
        }
        for (int reg = 0; reg < 2; ++reg) {  // b[reg] holds b(2·reg) (low) and b(2·reg+1) (high)
            const int k = 2 * t + 8 * reg;
            B[k][g] = low_half(in.b[reg]);
            B[k + 1][g] = high_half(in.b[reg]);
        }
        for (int i = 0; i < 4; ++i) C[g + 8 * (i >> 1)][2 * t + (i & 1)] = in.c[i];
    }
    for (int lane = 0; lane < 32; ++lane) {
        auto& out = *static_cast<MmaOutput*>(lanes[lane].out);
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; ++i) {
            const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
            float sum = C[row][col];
            for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];  // each product is exact in fp32
            out.d[i] = sum;
        }
    }
}

struct LdmatrixInput {
    CallSite call;
    const unsigned char* row;
};
struct LdmatrixOutput {
    uint32_t r[4];
};

template <int kMatrices, bool kTranspose>
void ldmatrix_combine(WarpLaneSlot* lanes, unsigned mask) {
    static const char* const names[2][5] = {{"", "ldmatrix_x1", "ldmatrix_x2", "", "ldmatrix_x4"},
                                            {"", "ldmatrix_x1_trans", "ldmatrix_x2_trans", "", "ldmatrix_x4_trans"}};
    const char* name = names[kTranspose][kMatrices];
    require_full_warp(lanes, mask, name);
    const unsigned char* rows[4][8];
    for (int m = 0; m < kMatrices; ++m) {
        for (int r = 0; r < 8; ++r) {
            const auto& in = *static_cast<const LdmatrixInput*>(lanes[8 * m + r].in);
            const unsigned char* row = in.row;
            if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
                char text[512];
                std::snprintf(text, sizeof text,
                              "%s at %s:%u, warp %u: lane %d passed %p, which is not 16-byte aligned (each "
                              "8-half row of an ldmatrix matrix must start at a multiple of 16 bytes)",
                              name, in.call.site.file_name(), static_cast<unsigned>(in.call.site.line()), in.call.warp,
                              8 * m + r, static_cast<const void*>(row));
                kernel_fault(text);
            }
            rows[m][r] = row;
        }
    }
    for (int lane = 0; lane < 32; ++lane) {
        auto& out = *static_cast<LdmatrixOutput*>(lanes[lane].out);
        for (int m = 0; m < kMatrices; ++m) {
            uint16_t low, high;
            if (!kTranspose) {  // row lane/4, columns 2(lane%4) and 2(lane%4)+1
                std::memcpy(&low, rows[m][lane / 4] + 4 * (lane % 4), 2);
                std::memcpy(&high, rows[m][lane / 4] + 4 * (lane % 4) + 2, 2);
            } else {  // column lane/4, rows 2(lane%4) and 2(lane%4)+1
                std::memcpy(&low, rows[m][2 * (lane % 4)] + 2 * (lane / 4), 2);
                std::memcpy(&high, rows[m][2 * (lane % 4) + 1] + 2 * (lane / 4), 2);
            }
            out.r[m] = static_cast<uint32_t>(low) | (static_cast<uint32_t>(high) << 16);
        }
    }
}

template <int kMatrices, bool kTranspose>
void ldmatrix(uint32_t* r, const void* row, std::source_location site) {
    const LdmatrixInput in{call_site(site), static_cast<const unsigned char*>(row)};
    LdmatrixOutput out{};
    warp_collective(0xffffffffu, &ldmatrix_combine<kMatrices, kTranspose>, &in, &out, site);
    for (int m = 0; m < kMatrices; ++m) r[m] = out.r[m];
#if defined(__SANITIZE_THREAD__)
    // The race build: the combine above read shared memory in the scheduler, which ThreadSanitizer does not watch.
    // Each row is recorded here as read by the lane that named it, in that lane's context: a store by another warp
    // not ordered by a barrier (before or after this read) is then reported as a race, with this line's caller.
    // Recorded after the collective, which orders the warp's own earlier stores before it (as the combine sees them).
    // The counting build (same hook): each lane's row is counted as its 16-byte shared load, 4 quarter-warp phases.
    if (in.call.lane < 8 * kMatrices) __tsan_read16(const_cast<void*>(row));
#endif
}

[[noreturn]] inline void cp_async_misaligned(const void* dst, const void* src, std::source_location site) {
    char text[512];
    std::snprintf(text, sizeof text,
                  "cp_async_16 at %s:%u: the shared destination %p and the global source %p must both be 16-byte "
                  "aligned",
                  site.file_name(), static_cast<unsigned>(site.line()), dst, src);
    kernel_fault(text);
}

[[noreturn]] inline void cp_async_source_changed(const void* src, std::source_location site) {
    char text[640];
    std::snprintf(text, sizeof text,
                  "cp_async_16 at %s:%u: its global source %p was written after the copy was issued and before "
                  "cp_async_wait retired its group. A GPU may read the source at any time until then (cp.async is "
                  "a weak memory operation, ordered only by cp.async.wait_group/wait_all): the copy could carry the "
                  "old bytes, the new ones or a mix. Wait for the group before writing its source",
                  site.file_name(), static_cast<unsigned>(site.line()), src);
    kernel_fault(text);
}

}  // namespace cpu_backend::tensor_core

// `site` is filled in by the compiler: the CPU backend names the caller's line when a warp misuses a
// collective.
inline void mma_m16n8k16_f16_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4],
                                 std::source_location site = std::source_location::current()) {
    cpu_backend::tensor_core::MmaInput in;
    in.call = cpu_backend::tensor_core::call_site(site);
    std::memcpy(in.a, a, sizeof in.a);
    std::memcpy(in.b, b, sizeof in.b);
    std::memcpy(in.c, c, sizeof in.c);  // copied first: d may be the same array as c (accumulate in place)
    cpu_backend::tensor_core::MmaOutput out{};
    cpu_backend::warp_collective(0xffffffffu, &cpu_backend::tensor_core::mma_combine, &in, &out, site);
    for (int i = 0; i < 4; ++i) d[i] = out.d[i];
}

inline void ldmatrix_x1(uint32_t (&r)[1], const void* row,
                        std::source_location site = std::source_location::current()) {
    cpu_backend::tensor_core::ldmatrix<1, false>(r, row, site);
}
inline void ldmatrix_x2(uint32_t (&r)[2], const void* row,
                        std::source_location site = std::source_location::current()) {
    cpu_backend::tensor_core::ldmatrix<2, false>(r, row, site);
}
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row,
                        std::source_location site = std::source_location::current()) {
    cpu_backend::tensor_core::ldmatrix<4, false>(r, row, site);
}
inline void ldmatrix_x1_trans(uint32_t (&r)[1], const void* row,
                              std::source_location site = std::source_location::current()) {
    cpu_backend::tensor_core::ldmatrix<1, true>(r, row, site);
}
inline void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row,
                              std::source_location site = std::source_location::current()) {
    cpu_backend::tensor_core::ldmatrix<2, true>(r, row, site);
}
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row,
                              std::source_location site = std::source_location::current()) {
    cpu_backend::tensor_core::ldmatrix<4, true>(r, row, site);
}

// cp.async on the CPU backend: each CUDA thread's copies wait in a list until its cp_async_wait retires their
// group (see the top of this file).
namespace cpu_backend {
uint64_t block_serial();  // a number of its own for each block a worker runs (scheduler.cpp)
namespace tensor_core {
struct PendingCopy {
    void* destination;
    const void* source;
    unsigned char bytes[16];  // the source, read when the copy was issued
    int group;                // how many groups this thread had committed before it
    std::source_location site;
};
struct AsyncCopies {
    uint64_t block = 0;  // the block whose thread this is (block_serial())
    int committed = 0;
    std::vector<PendingCopy> pending;  // in issue order
};
// The lists are the backend's bookkeeping, not the kernel's memory: the race build hides their reads and writes
// from ThreadSanitizer (the CUDA threads of consecutive blocks share them); the copies' own reads and writes of
// global and shared memory stay visible.
#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
struct BookkeepingScope {
    BookkeepingScope() {
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
    }
    ~BookkeepingScope() {
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    }
};
#else
struct BookkeepingScope {};
#endif
// This CUDA thread's copies (call in a BookkeepingScope). A worker runs one block at a time, so one list per thread
// index; a list left by a thread of an earlier block (which exited with copies in flight) is dropped.
inline AsyncCopies& async_copies_of_this_thread() {
    static thread_local std::array<AsyncCopies, 1024> per_thread;
    AsyncCopies& mine = per_thread[threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)];
    if (const uint64_t block = block_serial(); mine.block != block) {
        mine.block = block;
        mine.committed = 0;
        mine.pending.clear();
    }
    return mine;
}
}  // namespace tensor_core
}  // namespace cpu_backend

inline void cp_async_16(void* shared_dst, const void* global_src,
                        std::source_location site = std::source_location::current()) {
    if (reinterpret_cast<uintptr_t>(shared_dst) % 16 != 0 || reinterpret_cast<uintptr_t>(global_src) % 16 != 0)
        cpu_backend::tensor_core::cp_async_misaligned(shared_dst, global_src, site);
    cpu_backend::tensor_core::PendingCopy copy{shared_dst, global_src, {}, 0, site};
    std::memcpy(copy.bytes, global_src, 16);  // the kernel's read of global memory
#if defined(CUDA_TEACH_COUNTERS)  // the counting build: the poison is the backend's, not a store the GPU makes
    cpu_backend::tensor_core::AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
    std::memset(shared_dst, 0xFF, 16);  // not landed yet: NaN until this thread's wait retires the group
#if defined(CUDA_TEACH_COUNTERS)
    cpu_backend::tensor_core::AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
#endif
    [[maybe_unused]] const cpu_backend::tensor_core::BookkeepingScope bookkeeping;
    auto& copies = cpu_backend::tensor_core::async_copies_of_this_thread();
    copy.group = copies.committed;
    copies.pending.push_back(copy);
}
inline void cp_async_commit() {
    [[maybe_unused]] const cpu_backend::tensor_core::BookkeepingScope bookkeeping;
    ++cpu_backend::tensor_core::async_copies_of_this_thread().committed;
}
// Lands every copy of the groups older than the N most recently committed ones.
template <int N>
inline void cp_async_wait() {
    static_assert(N >= 0, "cp.async.wait_group takes N >= 0");
    cpu_backend::tensor_core::AsyncCopies* copies;
    size_t retired = 0;
    {
        [[maybe_unused]] const cpu_backend::tensor_core::BookkeepingScope bookkeeping;
        copies = &cpu_backend::tensor_core::async_copies_of_this_thread();
        // Groups only grow along the list (issue order), so the copies to land are its first ones.
        const int retire_below = copies->committed - N;
        while (retired < copies->pending.size() && copies->pending[retired].group < retire_below) ++retired;
    }
    for (size_t i = 0; i < retired; ++i) {  // the kernel's shared-memory writes
        const cpu_backend::tensor_core::PendingCopy& copy = copies->pending[i];
        // A GPU may read the source at any time until the wait retires the group (cp.async is a weak memory
        // operation, unordered with the thread's and others' accesses until cp.async.wait_group): a write to it
        // in between is a race whose copy may carry old bytes, new ones or a mix. Landing here, compare.
#if defined(CUDA_TEACH_COUNTERS)  // the counting build: this second look at the source is no access of the kernel
        cpu_backend::tensor_core::AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
#endif
        const bool changed = std::memcmp(copy.source, copy.bytes, 16) != 0;
#if defined(CUDA_TEACH_COUNTERS)
        cpu_backend::tensor_core::AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
        if (changed) cpu_backend::tensor_core::cp_async_source_changed(copy.source, copy.site);
#if defined(CUDA_TEACH_COUNTERS)  // the landing is the LDGSTS's own write, not a shared store (STS): not counted
        cpu_backend::tensor_core::AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
        std::memcpy(copy.destination, copy.bytes, 16);
#if defined(CUDA_TEACH_COUNTERS)
        cpu_backend::tensor_core::AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
#endif
    }
    [[maybe_unused]] const cpu_backend::tensor_core::BookkeepingScope bookkeeping;
    copies->pending.erase(copies->pending.begin(), copies->pending.begin() + std::ptrdiff_t(retired));
}

#elif defined(__CUDACC__)

// The instructions need sm_80 (mma.m16n8k16) and sm_75 (ldmatrix); this project builds for sm_80 and sm_90.
// Compiled for an older GPU they trap at run time rather than break the build of every file that includes
// this.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define TENSOR_CORE_UNSUPPORTED_ARCH 1
#endif

__device__ __forceinline__ void mma_m16n8k16_f16_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                     const float (&c)[4]) {
#if defined(TENSOR_CORE_UNSUPPORTED_ARCH)
    __trap();
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// ldmatrix takes a .shared address (32 bits), not a generic pointer. The "memory" clobber keeps the compiler
// from moving this thread's earlier shared-memory stores past the load.
__device__ __forceinline__ void ldmatrix_x1(uint32_t (&r)[1], const void* row) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
#if defined(TENSOR_CORE_UNSUPPORTED_ARCH)
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(address) : "memory");
#endif
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
#if defined(TENSOR_CORE_UNSUPPORTED_ARCH)
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(address)
                 : "memory");
#endif
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
#if defined(TENSOR_CORE_UNSUPPORTED_ARCH)
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address)
                 : "memory");
#endif
}
__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t (&r)[1], const void* row) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
#if defined(TENSOR_CORE_UNSUPPORTED_ARCH)
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(address) : "memory");
#endif
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
#if defined(TENSOR_CORE_UNSUPPORTED_ARCH)
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(address)
                 : "memory");
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
#if defined(TENSOR_CORE_UNSUPPORTED_ARCH)
    __trap();
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address)
                 : "memory");
#endif
}

// cp.async.cg: 16 bytes, cached in L2 only (the data goes to shared memory; no point keeping it in L1). The
// "memory" clobbers keep the compiler from moving shared-memory reads of the destination above the wait.
__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src) {
    const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
#if defined(TENSOR_CORE_UNSUPPORTED_ARCH)
    __trap();
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" : : "r"(address), "l"(global_src) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(TENSOR_CORE_UNSUPPORTED_ARCH)
    __trap();
#else
    asm volatile("cp.async.commit_group;\n" : : : "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(TENSOR_CORE_UNSUPPORTED_ARCH)
    __trap();
#else
    asm volatile("cp.async.wait_group %0;\n" : : "n"(N) : "memory");
#endif
}

#undef TENSOR_CORE_UNSUPPORTED_ARCH

#endif
