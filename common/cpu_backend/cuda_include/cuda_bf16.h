// <cuda_bf16.h> for the cpu flavor: CUDA's own header (found next on the include path), read as a host compiler
// reads it. nvcc_implicit.h defines __CUDACC__ for the program's own `#ifdef __CUDACC__` branches, but under it
// CUDA's header would define its device side (inline PTX g++ cannot compile); its host side converts and compares.
#pragma once
#include <memory>  // before CUDA's __noinline__ macro (as in ../runtime.h)
#pragma push_macro("__CUDACC__")
#undef __CUDACC__
#include_next <cuda_bf16.h>
#pragma pop_macro("__CUDACC__")
