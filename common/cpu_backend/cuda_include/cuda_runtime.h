// <cuda_runtime.h> for the cpu flavor: what a CUDA file gets when tools/nvcc-cpu (or the cpu build) compiles it.
// The runtime API and the kernel language come from the CPU backend (../runtime.h); CUDA's own headers still
// provide the types (dim3, float4, __half, cudaError_t...).
#pragma once
// The C and C++ headers nvcc's own <cuda_runtime.h> includes (crt/common_functions.h, crt/math_functions.h): CUDA
// files call printf, malloc, memcpy, assert, sqrt... having included nothing but it, or nothing at all.
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <new>
#include <utility>

#include <library_types.h>  // cudaDataType, libraryPropertyType

#include "../runtime.h"

// The guard of CUDA's own header: helpers test it to know the runtime API is there (cuda-samples' helper_cuda.h
// defines findCudaDevice, checkCudaErrors... only `#ifdef __CUDA_RUNTIME_H__`).
#ifndef __CUDA_RUNTIME_H__
#define __CUDA_RUNTIME_H__
#endif
