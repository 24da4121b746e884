// kernels/hgemm_version.h — the names of the tensor-core (fp16) GEMM steps, host-only (no kernels), so that plain
// C++ files, which the cuda flavor compiles with the host compiler, can name a step. The steps themselves:
// kernels/hgemm.cuh.
#pragma once

#include <cstdio>
#include <stdexcept>

// The steps in staircase order: step N is kernels/hgemm_vN_<name>.cuh.
enum class HgemmVersion : int {
    warp_tile = 1,
    block_tile = 2,
    pipelined = 3,
};
inline constexpr int kHgemmVersionCount = 3;
inline constexpr HgemmVersion kFastestHgemm = HgemmVersion::pipelined;  // the top of the staircase

inline const char* hgemm_version_name(HgemmVersion version) {
    switch (version) {
        case HgemmVersion::warp_tile:
            return "warp_tile";
        case HgemmVersion::block_tile:
            return "block_tile";
        case HgemmVersion::pipelined:
            return "pipelined";
    }
    return "unknown";
}

// For command-line flags: 1..kHgemmVersionCount → HgemmVersion, anything else → std::invalid_argument.
inline HgemmVersion hgemm_version_from_int(int version) {
    if (version < 1 || version > kHgemmVersionCount) {
        char text[64];  // (snprintf rather than string + to_string: g++ 12 warns falsely on the latter)
        std::snprintf(text, sizeof text, "HGEMM version must be 1..%d, not %d", kHgemmVersionCount, version);
        throw std::invalid_argument(text);
    }
    return static_cast<HgemmVersion>(version);
}
