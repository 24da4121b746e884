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

// atomicAdd on bfloat16 (sm_80+; CUDA's header declares it for device code only): a compare-and-swap loop on the value's
// bits, since blocks may run on several workers at once. The sum is added in float and rounded once to bfloat16:
// float's 24 bits are more than 2·8 + 2, so rounding twice gives the correctly rounded sum, as the GPU's add does.
namespace cpu_backend::bf16 {
template <typename Bits, typename T, typename Add>
T atomic_add_bits(T* address, T value, Add add) {
    static_assert(sizeof(Bits) == sizeof(T));
    Bits* bits_address = reinterpret_cast<Bits*>(address);
    Bits expected = __atomic_load_n(bits_address, __ATOMIC_RELAXED);
    for (;;) {
        T old;
        std::memcpy(static_cast<void*>(&old), &expected, sizeof old);
        const T sum = add(old, value);
        Bits desired;
        std::memcpy(&desired, static_cast<const void*>(&sum), sizeof desired);
        if (__atomic_compare_exchange_n(bits_address, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return old;
    }
}
inline __nv_bfloat16 add(__nv_bfloat16 a, __nv_bfloat16 b) {
    return __float2bfloat16(__bfloat162float(a) + __bfloat162float(b));
}
}  // namespace cpu_backend::bf16

inline __nv_bfloat16 atomicAdd(__nv_bfloat16* address, const __nv_bfloat16 value) {
    return cpu_backend::bf16::atomic_add_bits<uint16_t>(address, value, cpu_backend::bf16::add);
}
// On a GPU each half of the pair is added atomically on its own; one 32-bit CAS is stronger, which no correct program
// can tell apart.
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* address, const __nv_bfloat162 value) {
    return cpu_backend::bf16::atomic_add_bits<uint32_t>(address, value, [](__nv_bfloat162 a, __nv_bfloat162 b) {
        __nv_bfloat162 sum;
        sum.x = cpu_backend::bf16::add(a.x, b.x);
        sum.y = cpu_backend::bf16::add(a.y, b.y);
        return sum;
    });
}
