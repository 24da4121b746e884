// common/cpu_backend/internal.h — shared between the CPU backend's scheduler and host API; not for kernels.
#pragma once

#include <cstddef>

#include "common/cpu_backend/runtime.h"

namespace cpu_backend {

inline constexpr size_t kDefaultSharedBytes = 48 * 1024;  // per block, without cudaFuncSetAttribute
inline constexpr size_t kMaxSharedBytes = 227 * 1024;     // per block, the opt-in maximum of sm_90

// Stores the error for cudaGetLastError (per host thread, as in CUDA) and returns it.
cudaError_t record_error(cudaError_t error);

// Prints "CPU backend: <message>" and aborts: for misuse that a GPU would not survive either.
[[noreturn]] void fatal(const char* format, ...) __attribute__((format(printf, 1, 2)));

unsigned configured_workers();

}  // namespace cpu_backend
