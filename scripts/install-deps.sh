#!/usr/bin/env bash
# Installs what building and testing upcxx-extra-nvshmem needs on Debian/Ubuntu (apt, as root or
# through sudo), and the NVSHMEM host libraries / CUDA headers of the pip wheels into a cache
# OUTSIDE the repo: ${UXN_CACHE:-$HOME/.cache/upcxx-extra-nvshmem}. Safe to re-run: cached
# wheels are kept. Source it to get the environment the tests use:
#   . scripts/install-deps.sh
# exports UXN_CACHE, UXN_NVSHMEM_ROOTS, UXN_CUDA_INCLUDE, UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CACHE="${UXN_CACHE:-$HOME/.cache/upcxx-extra-nvshmem}"
NVSHMEM_VERSIONS=(3.1.7 3.4.5 3.8.0)
export PATH="$HOME/.cargo/bin:$PATH"

# --- system packages -------------------------------------------------------------------------
#   cmake, make, g++        the CMake build and the C/C++ tests (header hygiene compiles C++17)
#   openmpi-bin, libopenmpi-dev   mpiexec and mpi.h for the C tests
#   libclang-dev, clang     bindgen in the Rust layout test (libclang + its resource headers)
#   pkg-config              the pkg-config smoke check
#   binutils                nm/readelf for the exports and soname checks
#   python3-pip             only when no pip is there, for the wheels below
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
packages=(cmake make g++ binutils openmpi-bin libopenmpi-dev libclang-dev clang pkg-config ca-certificates)
if ! python3 -m pip --version >/dev/null 2>&1; then packages+=(python3-pip); fi
as_root env DEBIAN_FRONTEND=noninteractive apt-get update
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"

# --- NVSHMEM host libraries and CUDA headers (pip wheels, --target layout) --------------------
# pip install --target does not touch the system Python (no PEP 668 conflict).
pip_target() { # dest packages...
  local dest="$1"; shift
  rm -rf "$dest.partial"
  python3 -m pip install --disable-pip-version-check --no-cache-dir --no-deps --quiet --target "$dest.partial" "$@"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
}
mkdir -p "$CACHE/nvshmem"
for v in "${NVSHMEM_VERSIONS[@]}"; do
  if [ -e "$CACHE/nvshmem/$v/nvidia/nvshmem/lib/libnvshmem_host.so.3" ]; then
    echo "nvidia-nvshmem-cu12 $v: cached in $CACHE/nvshmem/$v"
  else
    echo "nvidia-nvshmem-cu12 $v: installing into $CACHE/nvshmem/$v"
    pip_target "$CACHE/nvshmem/$v" "nvidia-nvshmem-cu12==$v"
  fi
done
if [ -e "$CACHE/cuda/nvidia/cuda_runtime/include/cuda_runtime.h" ] && [ -d "$CACHE/cuda/nvidia/cuda_cccl/include" ]; then
  echo "CUDA headers: cached in $CACHE/cuda"
else
  echo "CUDA headers: installing into $CACHE/cuda"
  pip_target "$CACHE/cuda" nvidia-cuda-runtime-cu12 nvidia-cuda-cccl-cu12
fi

# --- UPC++ (the C++ layer's tests) ----------------------------------------------------------------
# Real UPC++ 2020.10.0 and 2023.9.0 (CUDA-enabled, smp) come from ../shared/upcxx when this
# checkout has it (never from the repo): setup.sh lays them out in $CACHE/upcxx, with a CUDA home
# (headers, cudart, a link-only libcuda stub) when there is no toolkit. nvcc for linking the GPU
# programs (device link of libnvshmem_device.a) comes from the nvidia-cuda-nvcc wheel.
SHARED_UPCXX="${UXN_SHARED_UPCXX:-$PWD/../shared/upcxx}"
if [ -x "$SHARED_UPCXX/setup.sh" ]; then
  echo "UPC++: laying out the releases of $SHARED_UPCXX in $CACHE/upcxx"
  "$SHARED_UPCXX/setup.sh" "$CACHE/upcxx" | sed 's/^/   /'
  if [ -x "$CACHE/nvcc/nvidia/cu13/bin/nvcc" ]; then
    echo "nvcc (nvidia-cuda-nvcc wheel): cached in $CACHE/nvcc"
  else
    echo "nvcc (nvidia-cuda-nvcc wheel): installing into $CACHE/nvcc"
    pip_target "$CACHE/nvcc" "nvidia-cuda-nvcc==13.0.88"
  fi
  export UXN_UPCXX_ROOT="$CACHE/upcxx"
else
  echo "UPC++: SKIPPED: no $SHARED_UPCXX/setup.sh (the C++ layer's tests will be skipped)"
fi

roots=()
for v in "${NVSHMEM_VERSIONS[@]}"; do roots+=("$CACHE/nvshmem/$v/nvidia/nvshmem"); done
UXN_NVSHMEM_ROOTS="$(IFS=:; echo "${roots[*]}")"
export UXN_NVSHMEM_ROOTS
export UXN_CUDA_INCLUDE="$CACHE/cuda/nvidia/cuda_runtime/include:$CACHE/cuda/nvidia/cuda_cccl/include"
export UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB="$CACHE/nvshmem/3.4.5/nvidia/nvshmem/lib/libnvshmem_host.so.3"
export UXN_CACHE="$CACHE"

