#!/usr/bin/env bash
# Installs what upcxx-extra-nvshmem needs on Debian/Ubuntu (apt, as root or through sudo), and the
# NVSHMEM host libraries / CUDA headers of the pip wheels into a cache OUTSIDE the repo:
# ${UXN_CACHE:-$HOME/.cache/upcxx-extra-nvshmem}. Safe to re-run: cached wheels are kept.
#
#   UXN_DEPS=user    what building, installing and using the library needs (the quickstart): Rust,
#                    cmake, make, g++, binutils, pkg-config, and ONE NVSHMEM for the doctor: release
#                    UXN_NVSHMEM_DEFAULT of nvidia-nvshmem-cu${UXN_NVSHMEM_CUDA:-12}
#                    (UXN_NVSHMEM_CUDA=13 takes the cu13 wheel: docs/install.md, "Which NVSHMEM wheel").
#   UXN_DEPS=tests   (the default; .ci/run) the above, and what the tests need: Rust's rustfmt and
#                    clippy, Open MPI, clang and libclang (one Rust test), every NVSHMEM release the
#                    tests use, CUDA headers, and, with ../shared/upcxx, the UPC++ layout and nvcc.
#
# Source it to get the environment the tests use:
#   . scripts/install-deps.sh
# exports UXN_CACHE and, for the tests, UXN_NVSHMEM_ROOTS, UXN_CUDA_INCLUDE,
# UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/common.sh
CACHE="$UXN_CACHE"
NVSHMEM_VERSIONS=("${UXN_NVSHMEM_VERSIONS[@]}")
DEPS="${UXN_DEPS:-tests}"
case "$DEPS" in
  user|tests) ;;
  *) echo "UXN_DEPS=$DEPS: use user (the library) or tests (the library and its tests)" >&2
     return 1 2>/dev/null || exit 1 ;;
esac
case "$UXN_NVSHMEM_CUDA" in
  12|13) ;;
  *) echo "UXN_NVSHMEM_CUDA=$UXN_NVSHMEM_CUDA: use 12 (nvidia-nvshmem-cu12) or 13 (nvidia-nvshmem-cu13)" >&2
     return 1 2>/dev/null || exit 1 ;;
esac

# --- Rust first: without it nothing else is worth installing ----------------------------------
# (the tests: with rustfmt and clippy, for cargo fmt --check and cargo clippy)
if [ "$DEPS" = tests ]; then uxn_ensure_rust tests; else uxn_ensure_rust; fi || { return 1 2>/dev/null || exit 1; }

# --- system packages: only what is missing, never an upgrade -------------------------------
#   cmake, make, g++        the CMake build (and the C/C++ tests: header hygiene compiles C++17)
#   binutils                nm/readelf/strip: the install (and the exports, soname checks)
#   pkg-config              building programs against the install (and the pkg-config check)
#   ca-certificates         https for pip, when missing
#   python3-pip             only when no pip is there, for the wheels below
# and for the tests only (UXN_DEPS=tests):
#   openmpi-bin, libopenmpi-dev   mpiexec and mpi.h for the C tests
#   libclang-dev, clang     bindgen in the Rust layout test only (libclang + its resource headers)
# No root and no apt (a cluster login node): set UXN_NO_APT=1 (automatic without root or sudo)
# and provide them from modules or Spack (docs/install.md: "On a cluster").
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi; }
packages=(cmake make g++ binutils pkg-config ca-certificates)
tools=(cmake make c++ cc nm readelf strip pkg-config python3)
modules="cmake"
if [ "$DEPS" = tests ]; then
  packages+=(openmpi-bin libopenmpi-dev libclang-dev clang)
  tools+=(mpiexec mpicc)
  modules="cmake openmpi"
fi
if ! python3 -m pip --version >/dev/null 2>&1; then packages+=(python3-pip); fi
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
else
  UXN_NO_APT=1
fi
can_apt=1
if [ "${UXN_NO_APT:-0}" = 1 ] || ! command -v apt-get >/dev/null 2>&1; then can_apt=0
elif [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then can_apt=0; fi
if [ "$can_apt" = 1 ] && [ "${#missing[@]}" -gt 0 ]; then
  echo "apt: installing what is missing: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends --no-upgrade "${missing[@]}"
elif [ "${#missing[@]}" -gt 0 ] || [ "$can_apt" = 0 ]; then
  # No apt here: check the tools themselves (they may come from modules or Spack).
  need=()
  for t in "${tools[@]}"; do
    command -v "$t" >/dev/null 2>&1 || need+=("$t")
  done
  if [ "${#need[@]}" -gt 0 ]; then
    echo "Missing tools: ${need[*]} (and apt cannot be used here). On a cluster: module load $modules" >&2
    echo "(or spack install $modules pkgconf; spack load $modules pkgconf), then run this again." >&2
    return 1 2>/dev/null || exit 1
  fi
  if [ "$DEPS" = tests ]; then
    echo "apt: not used (UXN_NO_APT or no root); the tools are on PATH. libclang is only needed by one Rust test."
  else
    echo "apt: not used (UXN_NO_APT or no root); the tools are on PATH."
  fi
else
  echo "apt: every package is installed already (nothing to do)"
fi

# --- NVSHMEM host libraries and CUDA headers (pip wheels, --target layout) --------------------
# pip install --target does not touch the system Python (no PEP 668 conflict).
pip_target() { # dest packages...
  local dest="$1"; shift
  rm -rf "$dest.partial"
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --disable-pip-version-check --no-cache-dir --no-deps --quiet --target "$dest.partial" "$@"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
}
# The user's NVSHMEM: one release, of the CUDA major version asked for (UXN_NVSHMEM_CUDA).
nvshmem_wheel() { # version cuda-major
  local root dest
  root="$(uxn_nvshmem_root "$1" "$2")"
  dest="${root%/nvidia/nvshmem}"
  if [ -e "$root/lib/libnvshmem_host.so.3" ]; then
    echo "nvidia-nvshmem-cu$2 $1: cached in $dest"
  else
    echo "nvidia-nvshmem-cu$2 $1: installing into $dest"
    mkdir -p "$(dirname "$dest")"
    pip_target "$dest" "nvidia-nvshmem-cu$2==$1"
  fi
}
nvshmem_wheel "$UXN_NVSHMEM_DEFAULT" "$UXN_NVSHMEM_CUDA"
export UXN_CACHE="$CACHE"
if [ "$DEPS" = user ]; then
  return 0 2>/dev/null || exit 0
fi

# --- the tests from here on: every cu12 release they run against, CUDA headers -----------------
for v in "${NVSHMEM_VERSIONS[@]}"; do
  [ "$UXN_NVSHMEM_CUDA" = 12 ] && [ "$v" = "$UXN_NVSHMEM_DEFAULT" ] && continue   # installed above
  nvshmem_wheel "$v" 12
done
if [ -e "$CACHE/cuda/nvidia/cuda_runtime/include/cuda_runtime.h" ] && [ -d "$CACHE/cuda/nvidia/cuda_cccl/include" ]; then
  echo "CUDA headers: cached in $CACHE/cuda"
else
  echo "CUDA headers: installing into $CACHE/cuda"
  pip_target "$CACHE/cuda" nvidia-cuda-runtime-cu12 nvidia-cuda-cccl-cu12
fi

# clang-format, one pinned release (the PyPI wheel), so that every machine formats the C/C++ sources
# alike (.clang-format; test-all.sh checks them).
if [ -x "$CACHE/clang-format/clang_format/data/bin/clang-format" ]; then
  echo "clang-format 18.1.8: cached in $CACHE/clang-format"
else
  echo "clang-format 18.1.8: installing into $CACHE/clang-format"
  pip_target "$CACHE/clang-format" "clang-format==18.1.8"
fi

# --- UPC++ (the C++ layer's tests) ----------------------------------------------------------------
# Real UPC++ 2020.10.0 and 2023.9.0 (CUDA-enabled, smp) come from ../shared/upcxx when this
# checkout has it (never from the repo): setup.sh lays them out in $CACHE/upcxx, with a CUDA home
# (headers, cudart, a link-only libcuda stub) when there is no toolkit. nvcc for linking the GPU
# programs (device link of libnvshmem_device.a) comes from the nvidia-cuda-nvcc wheel, and cicc
# (nvcc's compiler of device code) from the nvidia-nvvm wheel of the same release.
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
  # cicc, with which that nvcc compiles CUDA code too (the test of a program with its own kernel)
  if [ -x "$CACHE/nvvm/nvidia/cu13/nvvm/bin/cicc" ]; then
    echo "nvvm (nvidia-nvvm wheel): cached in $CACHE/nvvm"
  else
    echo "nvvm (nvidia-nvvm wheel): installing into $CACHE/nvvm"
    pip_target "$CACHE/nvvm" "nvidia-nvvm==13.0.88"
  fi
  # cuFFTMp for examples/cufftmp's test: the cu13 wheel (205 MB) and the cu13 NVSHMEM it loads.
  nvshmem_wheel "$UXN_NVSHMEM_CU13" 13
  if [ -e "$CACHE/cufftmp/$UXN_CUFFTMP_VERSION/nvidia/cufftmp/cu13/lib/libcufftMp.so.12" ]; then
    echo "nvidia-cufftmp-cu13 $UXN_CUFFTMP_VERSION: cached in $CACHE/cufftmp/$UXN_CUFFTMP_VERSION"
  else
    echo "nvidia-cufftmp-cu13 $UXN_CUFFTMP_VERSION: installing into $CACHE/cufftmp/$UXN_CUFFTMP_VERSION"
    mkdir -p "$CACHE/cufftmp"
    pip_target "$CACHE/cufftmp/$UXN_CUFFTMP_VERSION" "nvidia-cufftmp-cu13==$UXN_CUFFTMP_VERSION"
  fi
  export UXN_UPCXX_ROOT="$CACHE/upcxx"
else
  echo "UPC++: SKIPPED: no $SHARED_UPCXX/setup.sh (the C++ layer's tests will be skipped)"
fi

roots=()
for v in "${NVSHMEM_VERSIONS[@]}"; do roots+=("$(uxn_nvshmem_root "$v")"); done
UXN_NVSHMEM_ROOTS="$(IFS=:; echo "${roots[*]}")"
export UXN_NVSHMEM_ROOTS
export UXN_CUDA_INCLUDE="$CACHE/cuda/nvidia/cuda_runtime/include:$CACHE/cuda/nvidia/cuda_cccl/include"
export UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB="$(uxn_nvshmem_root "$UXN_NVSHMEM_DEFAULT")/lib/libnvshmem_host.so.3"

