// common/device_info.h — what the program is running on, in one line: the GPU (name, compute capability, SMs,
// memory) for the cuda flavor, or the CPU backend for the cpu flavor.
#pragma once

#include <string>

// Fails with one clear message and a non-zero exit when the cuda flavor finds no GPU.
void require_device_or_exit(const char* program);

// e.g. "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver 13.0)" or "CPU backend (1 worker, emulated 8.0 GiB)".
std::string device_summary();
