// common/device_info.h — what the program is running on, in one line: the GPU (name, compute capability, SMs,
// memory) for the cuda flavor, or the CPU backend for the cpu flavor.
#pragma once

#include <string>

// Returns when there is a GPU to run on (always, in the cpu flavor). Otherwise exits with status 1 and a plain
// message: no CUDA GPU found, or a driver too old for this build's CUDA runtime; and where the cpu build is.
void require_device_or_exit(const char* program);

// e.g. "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver 13.0)" or "CPU backend (1 worker, emulated 8.0 GiB)".
std::string device_summary();
