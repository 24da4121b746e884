#!/usr/bin/env bash
# tools/gpu_check.sh — everything worth running on a GPU, in one go, with logs: build the cuda flavor for the GPU
# that is present, run the whole test suite (nothing may be skipped there), the benchmarks and the reference run.
#   tools/gpu_check.sh [LOG_DIR]       (default: build/gpu-check-logs)
# Ends non-zero if the build or any test fails, or if any test was skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:-${OUT:-build/gpu-check-logs}}
mkdir -p "$logs"
export PATH=$PATH:/usr/local/cuda/bin
status=0

{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    nvcc --version | tail -1
} 2>&1 | tee "$logs/device.txt"

cmake -S . -B build/cuda-native -DFLAVOR=cuda -DCMAKE_CUDA_ARCHITECTURES=native >"$logs/build.txt" 2>&1 &&
    cmake --build build/cuda-native -j "$(nproc)" >>"$logs/build.txt" 2>&1 || { tail -50 "$logs/build.txt"; exit 1; }

ctest --test-dir build/cuda-native --output-on-failure -j 4 2>&1 | tee "$logs/tests.txt" | tail -15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if grep -q "Not Run\|Skipped" "$logs/tests.txt"; then
    echo "gpu_check: some tests were skipped on a GPU" >&2
    status=1
fi

build/cuda-native/bench/backend_bench 2>&1 | tee "$logs/backend_bench.txt"
build/cuda-native/bench/bench 2>&1 | tee "$logs/bench.txt"
exit $status
