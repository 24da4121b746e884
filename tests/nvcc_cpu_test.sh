#!/usr/bin/env bash
# tests/nvcc_cpu_test.sh BUILD_DIR — tools/nvcc-cpu on plain CUDA files (tests/plain_cuda/, written as public
# kernel-exercise repositories write them): each compiles unmodified, runs and validates against its CPU reference;
# the must-fail cases stop with the fault they should; CUDA's libraries are refused by name, and so, in one line, are the
# driver API, textures and cooperative groups' tiles wider than a warp (tests/plain_cuda/refused/).
set -uo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
driver="$here/../tools/nvcc-cpu"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export CUDA_CPU_BUILD="$build"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for source in "$here"/plain_cuda/*.cu; do
    name=$(basename "$source" .cu)
    # GPU flags as a tutorial's Makefile passes them: accepted and ignored.
    if ! "$driver" -O2 -arch=sm_90 -lineinfo "$source" -o "$scratch/$name" >"$scratch/$name.build" 2>&1; then
        cat "$scratch/$name.build"; fail "$name: did not compile"; continue
    fi
    if "$scratch/$name" >"$scratch/$name.out" 2>&1 && grep -qx PASSED "$scratch/$name.out"; then
        echo "ok: $name compiled unmodified and validated"
    else
        cat "$scratch/$name.out"; fail "$name: did not validate"
    fi
done

# must fail: each a kernel fault that names what went wrong
expect_fault() {  # PROGRAM, CASE, then text the message must hold
    local output status
    [ -x "$scratch/$1" ] || return 0  # its build failed, reported above
    output=$("$scratch/$1" "$2" 2>&1); status=$?
    if [ "$status" -eq 0 ] || ! grep -qF "$3" <<<"$output"; then
        echo "$output"; fail "$1 $2: expected a fault mentioning '$3' (exit status $status)"
    else
        echo "ok: $1 $2 stops: $(grep -F "$3" <<<"$output" | head -1 | cut -c1-160)"
    fi
}
expect_fault launch_forms trap "__trap() was called"
expect_fault launch_forms grid-sync "grid_group::sync() (this_grid().sync()) at"  # a <<<>>> launch, not cooperative
expect_fault launch_forms assert "assert(x[i] >= 0.0f) failed at"
expect_fault cooperative_grid block-skips-grid-sync \
    "block (1,0,0) finished the kernel without reaching the this_grid().sync() at"

# CUDA's libraries: refused by name, nothing built
output=$("$driver" "$here/plain_cuda/reduce_versions.cu" -o "$scratch/with_cublas" -lcublas 2>&1); status=$?
if [ "$status" -ne 0 ] && grep -qF "cuBLAS is not available on the CPU backend" <<<"$output" \
    && [ ! -e "$scratch/with_cublas" ]; then
    echo "ok: -lcublas refused: $output" | cut -c1-160
else
    echo "$output"; fail "-lcublas was not refused by name"
fi

# What the CPU backend does not have: refused with one line naming the feature, nothing built (tests/plain_cuda/refused/).
expect_refusal() {  # FILE, then the feature the line must name
    local output status
    output=$("$driver" "$here/plain_cuda/refused/$1.cu" -o "$scratch/refused_$1" 2>&1); status=$?
    if [ "$status" -ne 0 ] && [ "$(wc -l <<<"$output")" -eq 1 ] && grep -qF "uses $2" <<<"$output" \
        && grep -q "^nvcc-cpu: .*$1.cu: " <<<"$output" && [ ! -e "$scratch/refused_$1" ]; then
        echo "ok: $1 refused in one line: $output" | cut -c1-200
    else
        echo "$output" | head -20; fail "$1: expected one line naming '$2' (exit status $status)"
    fi
}
expect_refusal driver_api "the CUDA driver API (cuInit"
expect_refusal texture_object "textures (tex2D)"
expect_refusal multi_warp_tile "cooperative groups' tiles wider than a warp (block_tile_memory"

# A launch the translator cannot read: one message naming the file and line, no compiler noise.
printf '__global__ void k() {}\nint main() {\n    k<<<1, 1>>>;\n}\n' >"$scratch/broken.cu"
output=$("$driver" "$scratch/broken.cu" -o "$scratch/broken" 2>&1); status=$?
if [ "$status" -ne 0 ] && grep -qF "broken.cu:3: a launch needs its argument list" <<<"$output"; then
    echo "ok: a launch without arguments is reported at its line"
else
    echo "$output"; fail "a malformed launch was not reported at broken.cu:3"
fi

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
