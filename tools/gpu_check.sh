#!/usr/bin/env bash
# tools/gpu_check.sh — everything worth running on a GPU, in one go, with logs: build the cuda flavor for the GPU
# that is present, run the whole test suite (nothing may be skipped there), the benchmarks and the reference run.
#   tools/gpu_check.sh [LOG_DIR]       (default: build/gpu-check-logs)
# Ends non-zero if the build or any test fails, or if any test was skipped.
set -uo pipefail
case "${1:-}" in
    -h | --help)
        cat << EOF
usage: $0 [LOG_DIR]
On a machine with an NVIDIA GPU: builds the cuda flavor for that GPU in build/cuda-native, runs the whole test
suite there (a skipped test counts as a failure), then the benchmarks, and writes each step's log to LOG_DIR
(default: \$OUT if set, else build/gpu-check-logs; a relative LOG_DIR is taken from the repository root).
Exits 1 if the build or any test fails, or if any test was skipped.
Environment:
  OUT   the log directory when LOG_DIR is not given
  PATH  searched for nvidia-smi, nvcc, cmake and ctest (/usr/local/cuda/bin is appended to it)
EOF
        exit 0 ;;
    -*) echo "gpu_check.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac
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

# No -DCMAKE_CUDA_ARCHITECTURES=native (CMake >= 3.24): CMakeLists.txt picks the visible GPU's own architecture.
cmake -S . -B build/cuda-native -DFLAVOR=cuda >"$logs/build.txt" 2>&1 &&
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
