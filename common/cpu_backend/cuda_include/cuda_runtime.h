// <cuda_runtime.h> for the cpu flavor: what a CUDA file gets when tools/nvcc-cpu (or the cpu build) compiles it.
// The runtime API and the kernel language come from the CPU backend (../runtime.h); CUDA's own headers still
// provide the types (dim3, float4, __half, cudaError_t...).
#pragma once
#include "../runtime.h"
