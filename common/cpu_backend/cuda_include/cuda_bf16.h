// <cuda_bf16.h> for the cpu flavor: CUDA's own header (found next on the include path), read as a host compiler
// reads it. nvcc_implicit.h defines __CUDACC__ for the program's own `#ifdef __CUDACC__` branches, but under it
// CUDA's header would define its device side (inline PTX g++ cannot compile); its host side converts and compares.
#pragma once
#include <memory>  // before CUDA's __noinline__ macro (as in ../runtime.h)
#pragma push_macro("__CUDACC__")
#undef __CUDACC__
#include_next <cuda_bf16.h>
#pragma pop_macro("__CUDACC__")

#include <cstdint>
#include <cstring>

#include "common/cpu_backend/runtime.h"  // cpu_backend::fp16::atomic_add_bits, the compare-and-swap loop

// atomicAdd on bfloat16 (sm_80+; CUDA's header declares it for device code only): fp16_host.h's compare-and-swap loop
// on the value's bits, since blocks may run on several workers at once. The sum is added in float and rounded once
// to bfloat16: float's 24 bits are more than 2·8 + 2, so rounding twice gives the correctly rounded sum, as the GPU's
// add does.
namespace cpu_backend::bf16 {
template <typename Bits, typename T>
Bits bits_of(T value) {
    Bits bits;
    std::memcpy(&bits, static_cast<const void*>(&value), sizeof bits);
    return bits;
}
template <typename T, typename Bits>
T from_bits(Bits bits) {
    T value;
    std::memcpy(static_cast<void*>(&value), &bits, sizeof bits);
    return value;
}
inline __nv_bfloat16 add(__nv_bfloat16 a, __nv_bfloat16 b) {
    return __float2bfloat16(__bfloat162float(a) + __bfloat162float(b));
}
}  // namespace cpu_backend::bf16

inline __nv_bfloat16 atomicAdd(__nv_bfloat16* address, const __nv_bfloat16 value) {
    using namespace cpu_backend::bf16;
    return cpu_backend::fp16::atomic_add_bits<uint16_t>(address, value, bits_of<uint16_t, __nv_bfloat16>,
                                                        from_bits<__nv_bfloat16, uint16_t>, add);
}
// On a GPU each half of the pair is added atomically on its own; one 32-bit CAS is stronger, which no correct program
// can tell apart.
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* address, const __nv_bfloat162 value) {
    using namespace cpu_backend::bf16;
    return cpu_backend::fp16::atomic_add_bits<uint32_t>(
        address, value, bits_of<uint32_t, __nv_bfloat162>, from_bits<__nv_bfloat162, uint32_t>,
        [](__nv_bfloat162 a, __nv_bfloat162 b) {
            __nv_bfloat162 sum;
            sum.x = add(a.x, b.x);
            sum.y = add(a.y, b.y);
            return sum;
        });
}
