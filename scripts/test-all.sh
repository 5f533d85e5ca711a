#!/usr/bin/env bash
# Every test of upcxx-extra-nvshmem, no GPU needed: finds the tools and the caches, then runs the
# test suite (tests/CMakeLists.txt: one ctest test per step, with labels) with CMake and ctest.
# It installs nothing: first `bash scripts/install-deps.sh` (what .ci/run does); without Rust it
# stops at once with the command.
#   scripts/test-all.sh [ctest arguments...]     e.g.  -L cxx   -R readme   -LE rust
#
# Environment (all optional; defaults from the cache that install-deps.sh fills):
#   UXN_CACHE                ${UXN_CACHE:-$HOME/.cache/upcxx-extra-nvshmem}
#   UXN_NVSHMEM_ROOTS        colon-separated .../nvidia/nvshmem dirs (default: $UXN_CACHE/nvshmem/*)
#   UXN_CUDA_INCLUDE         colon-separated CUDA include dirs (default: from $UXN_CACHE/cuda)
#   UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB  libnvshmem_host.so.3 for the "loaded" tests (default:
#                            the UXN_NVSHMEM_DEFAULT release of scripts/common.sh)
#   UXN_UPCXX_ROOT           where ../shared/upcxx/setup.sh laid out UPC++ (default $UXN_CACHE/upcxx)
#   UXN_WORK                 work directory (default: a fresh temporary one, removed at the end
#                            unless UXN_KEEP=1)
#   UXN_SKIP_CARGO_TEST=1    leave out the steps that need cargo; UXN_SKIP_ASAN=1 the ASan build
#   CARGO_TARGET_DIR         shared by cargo test (debug) and the CMake build (release);
#                            default <repo>/target
# Every step runs even when an earlier one failed (except those that need the install); the exit
# status is ctest's: non-zero if any step failed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
. scripts/common.sh
# Without Rust every step would fail: stop now, with the command that installs it.
if ! uxn_have_rust; then
  cat >&2 <<EOF
test-all.sh: Rust >= $UXN_RUST_MIN is needed (cargo builds and tests the library), and none is on PATH.
Install it, then run this again:
    $(uxn_rust_install_cmd tests)
(or: bash scripts/install-deps.sh, which installs it and the tests' other dependencies)
Nothing was run.
EOF
  exit 1
fi
CACHE="$UXN_CACHE"
if [ -z "${UXN_NVSHMEM_ROOTS:-}" ]; then
  roots=()
  for v in "${UXN_NVSHMEM_VERSIONS[@]}"; do
    d="$(uxn_nvshmem_root "$v")"
    [ -d "$d" ] && roots+=("$d")
  done
  UXN_NVSHMEM_ROOTS="$(IFS=:; echo "${roots[*]:-}")"
fi
if [ -z "${UXN_CUDA_INCLUDE:-}" ]; then
  incs=()
  for d in "$CACHE/cuda/nvidia/cuda_runtime/include" "$CACHE/cuda/nvidia/cuda_cccl/include"; do
    [ -d "$d" ] && incs+=("$d")
  done
  UXN_CUDA_INCLUDE="$(IFS=:; echo "${incs[*]:-}")"
fi
if [ -z "${UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB:-}" ] && [ -e "$(uxn_nvshmem_root "$UXN_NVSHMEM_DEFAULT")/lib/libnvshmem_host.so.3" ]; then
  UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB="$(uxn_nvshmem_root "$UXN_NVSHMEM_DEFAULT")/lib/libnvshmem_host.so.3"
fi
export UXN_NVSHMEM_ROOTS UXN_CUDA_INCLUDE UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB="${UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

if [ -n "${UXN_WORK:-}" ]; then
  WORK="$UXN_WORK"
  mkdir -p "$WORK"
else
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/uxn-test-all.XXXXXX")"
  if [ "${UXN_KEEP:-0}" != 1 ]; then trap 'rm -rf "$WORK"' EXIT; fi
fi
UPCXX_ROOT="${UXN_UPCXX_ROOT:-$CACHE/upcxx}"

# A CUDA compiler that compiles (the GPU programs and the kernel program): nvcc on PATH, else a
# toolkit laid out from the nvcc + nvvm wheels and UPC++'s CUDA home.
cuda_compiler=""
if command -v nvcc >/dev/null 2>&1; then
  cuda_compiler="$(command -v nvcc)"
elif [ -x "$CACHE/nvvm/nvidia/cu13/nvvm/bin/cicc" ] && [ -x "$CACHE/nvcc/nvidia/cu13/bin/nvcc" ] && [ -d "$UPCXX_ROOT/cuda-home" ] &&
     bash scripts/cuda-toolkit-from-wheels.sh "$WORK/cuda-toolkit" "$CACHE/nvcc/nvidia/cu13" "$CACHE/nvvm/nvidia/cu13" \
       "$UPCXX_ROOT/cuda-home" >/dev/null; then
  cuda_compiler="$WORK/cuda-toolkit/bin/nvcc"
fi

echo "== upcxx-extra-nvshmem test-all: work dir $WORK"
echo "   UXN_NVSHMEM_ROOTS=$UXN_NVSHMEM_ROOTS"
echo "   UXN_CUDA_INCLUDE=$UXN_CUDA_INCLUDE"
echo "   UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB=$UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB"
echo "   CARGO_TARGET_DIR=$CARGO_TARGET_DIR"
echo "   UPC++: $UPCXX_ROOT; CUDA compiler: ${cuda_compiler:-none}"
# The quickstart installs only what a user needs; the tests' dependencies come from install-deps.sh.
if ! command -v mpiexec >/dev/null 2>&1 || [ -z "$UXN_NVSHMEM_ROOTS" ]; then
  echo "   note: no mpiexec or no NVSHMEM release in $CACHE: bash scripts/install-deps.sh installs what the tests need"
fi

onoff() { if [ "$1" = 1 ]; then echo OFF; else echo ON; fi; }
cmake -S tests -B "$WORK/suite" \
  -DUXN_CACHE="$CACHE" \
  -DUXN_NVSHMEM_ROOTS="${UXN_NVSHMEM_ROOTS//:/;}" \
  -DUXN_NVSHMEM_DEFAULT="$UXN_NVSHMEM_DEFAULT" \
  -DUXN_NVSHMEM_CU13_ROOT="$(uxn_nvshmem_root "$UXN_NVSHMEM_CU13" 13)" \
  -DUXN_CUFFTMP_HOME="$CACHE/cufftmp/$UXN_CUFFTMP_VERSION/nvidia/cufftmp/cu13" \
  -DUXN_TEST_NVSHMEM_LIB="$UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB" \
  -DUXN_UPCXX_ROOT="$UPCXX_ROOT" \
  -DUXN_CUDA_COMPILER="$cuda_compiler" \
  -DUXN_CLANG_FORMAT="$CACHE/clang-format/clang_format/data/bin/clang-format" \
  -DUXN_CARGO_TARGET_DIR="$CARGO_TARGET_DIR" \
  -DUXN_JOBS="$(nproc 2>/dev/null || echo 2)" \
  -DUXN_RUST="$(onoff "${UXN_SKIP_CARGO_TEST:-0}")" \
  -DUXN_ASAN="$(onoff "${UXN_SKIP_ASAN:-0}")" \
  -DUXN_MUTANTS="$([ "${UXN_MUTANTS:-0}" = 1 ] && echo ON || echo OFF)" > "$WORK/suite-configure.log" ||
  { cat "$WORK/suite-configure.log"; echo "test-all.sh: the test suite (tests/CMakeLists.txt) did not configure"; exit 1; }
ctest --test-dir "$WORK/suite" --output-on-failure "$@"
