// kernels/warp_reduce.cuh — reductions across the lanes of a warp with shuffles (no shared memory, no atomics).
//
// defines: group_sum, group_max, group_argmax, row_group_width.
//
// A "group" is `width` consecutive lanes of a warp (width a power of two, 1..32) working on one row, e.g. 16
// lanes per row of 10 logits, two rows per warp. __shfl_xor_sync(mask, v, offset, width) with offset < width
// never leaves the group, so log2(width) butterfly steps leave the group's total in every lane of the group.
// Each lane ends with the same bits (a + b == b + a exactly), and the order of the additions is fixed by the
// lane numbering, so the result is deterministic.
//
// Every lane of the warp must call these together (they use the full mask): kernels keep out-of-range lanes
// alive with neutral values instead of returning early.
#pragma once

#include "common/launch.h"

__device__ __forceinline__ float group_sum(float v, int width) {
    for (int offset = width / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset, width);
    return v;
}

__device__ __forceinline__ int group_sum(int v, int width) {
    for (int offset = width / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset, width);
    return v;
}

__device__ __forceinline__ float group_max(float v, int width) {
    for (int offset = width / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset, width));
    return v;
}

// Largest value and its index; ties go to the lowest index (as the CPU reference does).
__device__ __forceinline__ void group_argmax(float& value, int& index, int width) {
    for (int offset = width / 2; offset > 0; offset /= 2) {
        const float other_value = __shfl_xor_sync(0xffffffffu, value, offset, width);
        const int other_index = __shfl_xor_sync(0xffffffffu, index, offset, width);
        if (other_value > value || (other_value == value && other_index < index)) {
            value = other_value;
            index = other_index;
        }
    }
}

// Lanes per row for a row of `columns` elements: the smallest power of two ≥ columns, at most a whole warp
// (32). Small rows (10 classes) then use 16 lanes instead of leaving 22 of 32 lanes idle.
__host__ __device__ constexpr int row_group_width(int columns) {
    int width = 1;
    while (width < columns && width < 32) width *= 2;
    return width;
}
