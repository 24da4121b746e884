// common/cpu_backend/cooperative_groups.h — CUDA's cooperative groups for blocks and warp tiles, on the CPU backend.
//
// What <cooperative_groups.h> and <cooperative_groups/reduce.h> give a kernel in the cpu flavor (the files of those
// names in cuda_include/ include this one). Each operation is the warp or block primitive CUDA builds it from, so it
// has the same rules here as there: a tile's shuffles and votes are __shfl_*_sync / __ballot_sync over the tile's
// lanes (mask and width), tile.sync() is __syncwarp(tile's mask), block.sync() is __syncthreads(). A group's shfl
// moves any trivially copyable type, one shuffle per 8-byte word.
//   thread_block            this_thread_block(): sync, thread_rank, num_threads/size, group_index, thread_index,
//                           dim_threads/group_dim
//   thread_block_tile<N>    tiled_partition<N>(block or tile), N = 1, 2, 4, ..., 32: sync, thread_rank,
//                           num_threads/size, meta_group_rank/meta_group_size, shfl, shfl_up, shfl_down, shfl_xor,
//                           any, all, ballot
//   coalesced_group         coalesced_threads(): the lanes active here (__activemask), ranked in lane order. The
//                           backend does not track divergence: __activemask() is every lane that has not exited,
//                           so inside a branch some lanes skip, the group's first collective faults (never completes)
//   reduce(group, value, op) with plus, less, greater, bit_and, bit_or, bit_xor or any callable: the result in
//                           every thread of the group (a butterfly of shfl_xor over a tile)
//   grid_group              this_grid(): thread_rank, block_rank, num_threads/size, num_blocks, block_index,
//                           dim_blocks/group_dim, is_valid, sync (in a cooperative launch: cudaLaunchCooperativeKernel,
//                           whose blocks all run at once; elsewhere a kernel fault naming it)
//   thread_group            a thread_block or tile as one type; tiled_partition(group, n) with a run-time n (a
//                           power of two up to 32): sync, thread_rank, num_threads/size, meta_group_rank/size
// Not here (a compile error names them): tiles wider than a warp (tiled_partition<N> with N > 32,
// block_tile_memory), tiled_partition(group, n) with n > 32, labeled_partition,
// binary_partition, multi-grid and cluster groups, memcpy_async / wait, invoke_one, reduce_update_async.
#pragma once

#include <bit>
#include <cstring>
#include <type_traits>

#include "common/cpu_backend/runtime.h"

namespace cooperative_groups {

namespace details {
// A thread's index in its block, x fastest (CUDA's thread_rank and the order of lanes in warps).
inline unsigned block_thread_rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
inline unsigned block_thread_count() {
    return blockDim.x * blockDim.y * blockDim.z;
}
// A group's shfl takes any trivially copyable type, of any size (CUDA's moves it in 32-bit pieces); the warp
// primitives move at most 8 bytes, so a larger value goes in 8-byte words, one shuffle each.
template <typename T, typename ShuffleWord>
T shuffle_any(const T& value, ShuffleWord shuffle_word) {
    static_assert(std::is_trivially_copyable_v<T>, "a group's shfl moves trivially copyable values");
    if constexpr (sizeof(T) <= 8) {
        return shuffle_word(value);
    } else {
        unsigned long long words[(sizeof(T) + 7) / 8] = {};
        std::memcpy(words, static_cast<const void*>(&value), sizeof(T));
        for (unsigned long long& word : words) word = shuffle_word(word);
        T result;
        std::memcpy(static_cast<void*>(&result), words, sizeof(T));
        return result;
    }
}
}  // namespace details

class thread_block {
  public:
    static void sync() { __syncthreads(); }
    static unsigned long long thread_rank() { return details::block_thread_rank(); }
    static unsigned long long num_threads() { return details::block_thread_count(); }
    static unsigned long long size() { return num_threads(); }
    static dim3 group_index() { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    static dim3 thread_index() { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    static dim3 dim_threads() { return dim3(blockDim.x, blockDim.y, blockDim.z); }
    static dim3 group_dim() { return dim_threads(); }
};

inline thread_block this_thread_block() {
    return {};
}

inline void sync(const thread_block& block) {
    block.sync();
}

// Tiles of N consecutive threads of the block (N a power of two up to a warp): the lanes
// [N * (lane / N), N * (lane / N) + N) of a warp.
template <unsigned N, typename Parent = void>
class thread_block_tile {
    static_assert(N <= 32,
                  "the CPU backend does not have cooperative groups' tiles wider than a warp "
                  "(tiled_partition<N> for N > 32)");
    static_assert(N >= 1 && std::has_single_bit(N),
                  "cooperative_groups::tiled_partition<N>: N must be a power of two from 1 to 32");

  public:
    static constexpr unsigned num_threads() { return N; }
    static constexpr unsigned size() { return N; }
    static unsigned thread_rank() { return details::block_thread_rank() % N; }
    static unsigned meta_group_rank() { return details::block_thread_rank() / N; }
    static unsigned meta_group_size() { return (details::block_thread_count() + N - 1) / N; }
    // The tile's lanes within its warp, as a mask for the *_sync primitives.
    static unsigned mask() {
        const unsigned first_lane = details::block_thread_rank() % 32 / N * N;
        return (N == 32 ? 0xffffffffu : ((1u << N) - 1u)) << first_lane;
    }
    static void sync() { __syncwarp(mask()); }

    template <typename T>
    T shfl(T value, int source_rank) const {
        return details::shuffle_any(value, [&](auto word) { return __shfl_sync(mask(), word, source_rank, int(N)); });
    }
    template <typename T>
    T shfl_up(T value, unsigned delta) const {
        return details::shuffle_any(value, [&](auto word) { return __shfl_up_sync(mask(), word, delta, int(N)); });
    }
    template <typename T>
    T shfl_down(T value, unsigned delta) const {
        return details::shuffle_any(value, [&](auto word) { return __shfl_down_sync(mask(), word, delta, int(N)); });
    }
    template <typename T>
    T shfl_xor(T value, unsigned lane_mask) const {
        return details::shuffle_any(value,
                                    [&](auto word) { return __shfl_xor_sync(mask(), word, int(lane_mask), int(N)); });
    }
    unsigned ballot(int predicate) const {  // bit i: the tile's thread i
        const unsigned first_lane = details::block_thread_rank() % 32 / N * N;
        return (__ballot_sync(mask(), predicate) >> first_lane) & (N == 32 ? 0xffffffffu : ((1u << N) - 1u));
    }
    int any(int predicate) const { return ballot(predicate) != 0; }
    int all(int predicate) const { return __all_sync(mask(), predicate); }

    // A tile with its parent's type forgotten (thread_block_tile<32> tile = tiled_partition<32>(block)).
    operator thread_block_tile<N, void>() const requires(!std::is_void_v<Parent>) { return {}; }
};

template <unsigned N, typename Parent>
thread_block_tile<N, Parent> tiled_partition(const Parent&) {
    static_assert(
        std::is_same_v<Parent, thread_block> || requires { Parent::num_threads(); },
        "tiled_partition<N>: the parent must be a thread_block or a thread_block_tile");
    return {};
}

template <unsigned N, typename Parent>
void sync(const thread_block_tile<N, Parent>& tile) {
    tile.sync();
}

// A group whose kind is known only at run time: a thread_block, a thread_block_tile<N> converted to it, or
// tiled_partition(group, size) with a run-time size (a power of two up to 32, no larger than the parent). Its sync
// is the block's barrier or the tile's __syncwarp, as for the typed groups.
class thread_group {
  public:
    thread_group(const thread_block&) : tile_(0) {}
    template <unsigned N, typename Parent>
    thread_group(const thread_block_tile<N, Parent>&) : tile_(N) {}
    void sync() const {
        if (tile_ == 0)
            __syncthreads();
        else
            __syncwarp(mask());
    }
    unsigned long long thread_rank() const {
        return tile_ == 0 ? details::block_thread_rank() : details::block_thread_rank() % tile_;
    }
    unsigned long long num_threads() const { return tile_ == 0 ? details::block_thread_count() : tile_; }
    unsigned long long size() const { return num_threads(); }
    unsigned meta_group_rank() const { return tile_ == 0 ? 0 : details::block_thread_rank() / tile_; }
    unsigned meta_group_size() const { return tile_ == 0 ? 1 : (details::block_thread_count() + tile_ - 1) / tile_; }

  private:
    friend thread_group tiled_partition(const thread_group& parent, unsigned tile_size);
    explicit thread_group(unsigned tile) : tile_(tile) {}
    unsigned mask() const {
        const unsigned first_lane = details::block_thread_rank() % 32 / tile_ * tile_;
        return (tile_ == 32 ? 0xffffffffu : ((1u << tile_) - 1u)) << first_lane;
    }
    unsigned tile_;  // 0: the whole block
};

inline thread_group tiled_partition(const thread_group& parent, unsigned tile_size) {
    if (tile_size == 0 || tile_size > 32 || !std::has_single_bit(tile_size) || tile_size > parent.num_threads())
        cpu_backend::kernel_fault(
            "cooperative_groups::tiled_partition(group, size): the CPU backend takes a size that is a power of two "
            "from 1 to 32, no larger than the parent group");
    return thread_group(tile_size);
}

inline void sync(const thread_group& group) {
    group.sync();
}

// The lanes of the warp that are running this code together (__activemask), ranked in lane order.
class coalesced_group {
  public:
    explicit coalesced_group(unsigned lanes) : lanes_(lanes) {}
    unsigned num_threads() const { return unsigned(std::popcount(lanes_)); }
    unsigned size() const { return num_threads(); }
    unsigned thread_rank() const { return unsigned(std::popcount(lanes_ & ((1u << lane()) - 1u))); }
    unsigned meta_group_rank() const { return 0; }
    unsigned meta_group_size() const { return 1; }
    void sync() const { __syncwarp(lanes_); }
    template <typename T>
    T shfl(T value, unsigned source_rank) const {
        const int lane = int(lane_of_rank(source_rank % num_threads()));
        return details::shuffle_any(value, [&](auto word) { return __shfl_sync(lanes_, word, lane); });
    }
    template <typename T>
    T shfl_down(T value, unsigned delta) const {
        const unsigned rank = thread_rank() + delta;
        const int lane = int(lane_of_rank(rank < num_threads() ? rank : thread_rank()));
        return details::shuffle_any(value, [&](auto word) { return __shfl_sync(lanes_, word, lane); });
    }
    template <typename T>
    T shfl_up(T value, unsigned delta) const {
        const unsigned rank = thread_rank() >= delta ? thread_rank() - delta : thread_rank();
        const int lane = int(lane_of_rank(rank));
        return details::shuffle_any(value, [&](auto word) { return __shfl_sync(lanes_, word, lane); });
    }
    unsigned ballot(int predicate) const {  // bit i: the group's thread i
        const unsigned lanes_voting = __ballot_sync(lanes_, predicate);
        unsigned result = 0;
        for (unsigned rank = 0; rank < num_threads(); ++rank)
            if (lanes_voting >> lane_of_rank(rank) & 1u) result |= 1u << rank;
        return result;
    }
    int any(int predicate) const { return __ballot_sync(lanes_, predicate) != 0; }
    int all(int predicate) const { return __all_sync(lanes_, predicate); }
    unsigned get_mask() const { return lanes_; }

  private:
    static unsigned lane() { return details::block_thread_rank() % 32; }
    unsigned lane_of_rank(unsigned rank) const {
        unsigned remaining = lanes_;
        for (unsigned r = 0; r < rank; ++r) remaining &= remaining - 1;  // drop the lowest set bit
        return unsigned(std::countr_zero(remaining));
    }
    unsigned lanes_;
};

inline coalesced_group coalesced_threads() {
    return coalesced_group(__activemask());
}

// The grid. sync() waits for every thread of every block: only in a cooperative launch (cudaLaunchCooperativeKernel),
// where the backend runs all blocks at once; elsewhere it is a kernel fault, as a GPU may hang there.
class grid_group {
  public:
    static unsigned long long block_rank() {
        return blockIdx.x + gridDim.x * (blockIdx.y + static_cast<unsigned long long>(gridDim.y) * blockIdx.z);
    }
    static unsigned long long thread_rank() {
        return block_rank() * details::block_thread_count() + details::block_thread_rank();
    }
    static unsigned long long num_threads() {
        return static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z * details::block_thread_count();
    }
    static unsigned long long size() { return num_threads(); }
    static unsigned long long num_blocks() {
        return static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z;
    }
    static dim3 group_dim() { return dim3(gridDim.x, gridDim.y, gridDim.z); }
    static dim3 dim_blocks() { return group_dim(); }
    static dim3 block_index() { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    static bool is_valid() { return cpu_backend::in_cooperative_launch(); }
    static void sync(std::source_location site = std::source_location::current()) { cpu_backend::grid_sync(site); }
};

inline grid_group this_grid() {
    return {};
}
inline void sync(const grid_group&, std::source_location site = std::source_location::current()) {
    cpu_backend::grid_sync(site);
}

// --- <cooperative_groups/reduce.h> ---------------------------------------------------------------------------------
template <typename T>
struct plus {
    T operator()(const T& a, const T& b) const { return a + b; }
};
template <typename T>
struct less {
    T operator()(const T& a, const T& b) const { return b < a ? b : a; }  // the smaller: a min-reduction
};
template <typename T>
struct greater {
    T operator()(const T& a, const T& b) const { return a < b ? b : a; }  // the larger: a max-reduction
};
template <typename T>
struct bit_and {
    T operator()(const T& a, const T& b) const { return a & b; }
};
template <typename T>
struct bit_or {
    T operator()(const T& a, const T& b) const { return a | b; }
};
template <typename T>
struct bit_xor {
    T operator()(const T& a, const T& b) const { return a ^ b; }
};

// The reduction of `value` over the tile, returned to every thread of it: a butterfly of shfl_xor, log2(N) steps.
template <unsigned N, typename Parent, typename T, typename Op>
T reduce(const thread_block_tile<N, Parent>& tile, T value, Op op) {
    for (unsigned offset = N / 2; offset > 0; offset /= 2) value = op(value, tile.shfl_xor(value, offset));
    return value;
}

// Over a coalesced group (any number of lanes): every lane reads every other's value, in rank order.
template <typename T, typename Op>
T reduce(const coalesced_group& group, T value, Op op) {
    T result = group.shfl(value, 0);
    for (unsigned rank = 1; rank < group.num_threads(); ++rank) result = op(result, group.shfl(value, rank));
    return result;
}

}  // namespace cooperative_groups
