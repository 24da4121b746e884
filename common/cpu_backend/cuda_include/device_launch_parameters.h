// <device_launch_parameters.h> (threadIdx, blockIdx...) for the cpu flavor: part of the CPU backend.
// The runtime API and the kernel language come from the CPU backend (../runtime.h); CUDA's own headers still
// provide the types (dim3, float4, __half, cudaError_t...).
#pragma once
#include "../runtime.h"
