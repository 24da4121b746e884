// kernels/gemm_version.h — the names of the GEMM steps, host-only (no kernels), so that plain C++ files, which the
// cuda flavor compiles with the host compiler, can name a step. The steps themselves: kernels/gemm.cuh.
#pragma once

#include <climits>
#include <cstdio>
#include <stdexcept>

// The most rows a matrix of leading dimension `ld` may have in the GEMMs (fp32 and fp16): they index with int
// (A[row * lda + k]: legible, and all MNIST needs), and an edge block forms addresses up to one tile (≤ 128 rows)
// past a matrix's last row before its bounds check, hence a margin of 256 rows: (rows + 256) · ld ≤ INT_MAX.
// The one definition of this limit: the GEMMs' argument check (gemm_common.cuh) and the largest batch of lessons 06
// and 07 (max_indexable_batch, lessons/lesson.h) use it. For a 1024-wide layer: 2,096,895 rows.
constexpr int gemm_max_rows(int ld) {
    return ld <= 0 ? INT_MAX : int(INT_MAX / ld) - 256;
}

// The steps in staircase order: step N is kernels/gemm_vN_<name>.cuh.
enum class GemmVersion : int {
    naive = 1,
    coalesced = 2,
    smem_tiled = 3,
    register_blocked = 4,
    vectorized = 5,
    double_buffered = 6,
    warp_tiled = 7,
};
inline constexpr int kGemmVersionCount = 7;
inline constexpr GemmVersion kFastestGemm = GemmVersion::warp_tiled;  // the top of the staircase

inline const char* gemm_version_name(GemmVersion version) {
    switch (version) {
        case GemmVersion::naive:
            return "naive";
        case GemmVersion::coalesced:
            return "coalesced";
        case GemmVersion::smem_tiled:
            return "smem_tiled";
        case GemmVersion::register_blocked:
            return "register_blocked";
        case GemmVersion::vectorized:
            return "vectorized";
        case GemmVersion::double_buffered:
            return "double_buffered";
        case GemmVersion::warp_tiled:
            return "warp_tiled";
    }
    return "unknown";
}

// For command-line flags: 1..kGemmVersionCount → GemmVersion, anything else → std::invalid_argument.
inline GemmVersion gemm_version_from_int(int version) {
    if (version < 1 || version > kGemmVersionCount) {
        char text[64];  // (snprintf rather than string + to_string: g++ 12 warns falsely on the latter)
        std::snprintf(text, sizeof text, "GEMM version must be 1..%d, not %d", kGemmVersionCount, version);
        throw std::invalid_argument(text);
    }
    return static_cast<GemmVersion>(version);
}
