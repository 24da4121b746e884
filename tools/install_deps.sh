#!/usr/bin/env bash
# tools/install_deps.sh — installs the Debian/Ubuntu packages the build needs, if any are missing.
# Called by `make` before configuring; safe to run again (it installs nothing when everything is there).
set -euo pipefail

# openmpi-bin libopenmpi-dev: lesson 09 (data parallelism: mpirun, mpi.h); without them that lesson alone is skipped.
# python3-matplotlib: `make report`'s charts (tools/report.py) and their test. curl: data/download_mnist.sh and its
# test (a skipped test fails `make test`: tools/ctest_checked.sh).
packages=(cmake ninja-build g++ make catch2 zlib1g-dev libboost-context-dev libcli11-dev nlohmann-json3-dev python3
          python3-matplotlib curl openmpi-bin libopenmpi-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
    echo "installing missing packages: ${missing[*]}"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "error: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
        sudo="sudo"
    fi
    $sudo apt-get update -qq || echo "warning: apt-get update failed; trying to install from the current lists" >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit is not a Debian package we can rely on (Debian's is older and in non-free): both flavors need
# its headers, and the cuda flavor its nvcc. Look where NVIDIA's installers put it.
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    cat >&2 <<'MSG'
error: the CUDA toolkit was not found (no nvcc on PATH, no /usr/local/cuda).
  Both flavors need its headers (cuda_fp16.h, ...); the cuda flavor also needs nvcc.
  Install CUDA 12 or 13 from https://developer.nvidia.com/cuda-downloads (a GPU is not required),
  or put its bin/ directory on PATH.
MSG
    exit 1
fi
