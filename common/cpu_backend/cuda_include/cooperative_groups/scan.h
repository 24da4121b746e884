// <cooperative_groups/scan.h> for the cpu flavor: cg::inclusive_scan and cg::exclusive_scan over a warp tile, from
// the tile's shfl_up (log2(N) steps, as on a GPU). exclusive_scan gives the tile's first thread a value-initialized
// T (0 for numbers; CUDA leaves that value to the operator).
#pragma once
#include "../../cooperative_groups.h"

namespace cooperative_groups {

template <unsigned N, typename Parent, typename T, typename Op = plus<T>>
T inclusive_scan(const thread_block_tile<N, Parent>& tile, T value, Op op = Op()) {
    for (unsigned offset = 1; offset < N; offset *= 2) {
        const T before = tile.shfl_up(value, offset);
        if (tile.thread_rank() >= offset) value = op(before, value);
    }
    return value;
}

template <unsigned N, typename Parent, typename T, typename Op = plus<T>>
T exclusive_scan(const thread_block_tile<N, Parent>& tile, T value, Op op = Op()) {
    const T inclusive = inclusive_scan(tile, value, op);
    const T shifted = tile.shfl_up(inclusive, 1);
    return tile.thread_rank() == 0 ? T{} : shifted;
}

}  // namespace cooperative_groups
