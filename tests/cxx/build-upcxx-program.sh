#!/usr/bin/env bash
# Builds one UPC++ + NVSHMEM + upcxx-extra-nvshmem program (the example, the GPU tests of the C++
# layer): compiled with UPC++'s compiler and flags (upcxx-meta), linked with nvcc -rdc=true because
# NVSHMEM's init (nvshmemi_init_thread) lives in the device library libnvshmem_device.a.
#   build-upcxx-program.sh SOURCE OUTPUT
# Environment: UPCXX_INSTALL (required), NVSHMEM_HOME (.../nvidia/nvshmem), UXN_PREFIX (the
#   install prefix of this library), UPCXX_NETWORK/CODEMODE/THREADMODE (default smp/opt/seq),
#   NVCC (default nvcc), CUDA_HOME (default /usr/local/cuda; a home with include/ and lib64/ holding
#   libcudart_static.a and libcudadevrt.a: a toolkit, or ../shared/upcxx/setup.sh's cuda-home with
#   the nvidia-cuda-nvcc wheel's nvcc, which is how CI links without a toolkit), CUDA_ARCH (sm_90),
#   UXN_CXXFLAGS (more compiler flags, e.g. -DUPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1).
set -euo pipefail
src="$1"; out="$2"
: "${UPCXX_INSTALL:?UPCXX_INSTALL must name the UPC++ install}" "${NVSHMEM_HOME:?NVSHMEM_HOME must name the NVSHMEM install}" "${UXN_PREFIX:?UXN_PREFIX must name the install prefix of upcxx-extra-nvshmem}"
export UPCXX_NETWORK="${UPCXX_NETWORK:-smp}" UPCXX_CODEMODE="${UPCXX_CODEMODE:-opt}" UPCXX_THREADMODE="${UPCXX_THREADMODE:-seq}"
M="$UPCXX_INSTALL/bin/upcxx-meta"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
# nvshmem.h includes CCCL headers (cuda/std/...): CUDA 13 keeps them under include/cccl.
CCCL=""; for d in "$CUDA_HOME/include/cccl" "$CUDA_HOME/targets/x86_64-linux/include/cccl" "$CUDA_HOME/include"; do
  if [ -e "$d/nv/target" ]; then CCCL="$CCCL -I$d"; fi
done
CUDALIB=""; for d in "$CUDA_HOME/lib64" "$CUDA_HOME/targets/x86_64-linux/lib" "$CUDA_HOME/lib64/stubs"; do
  if [ -d "$d" ]; then CUDALIB="$CUDALIB -L$d"; fi
done
# nvcc takes -L/-l as they are; everything else of UPC++'s LIBS goes to the host linker.
ULIBS=""; for t in $($M LIBS); do case "$t" in -L*|-l*) ULIBS="$ULIBS $t" ;; -pthread) ULIBS="$ULIBS -Xcompiler -pthread" ;; esac; done
# nvcc will not take libnvshmem_host.so.3 by its versioned name: a link directory with the .so name,
# one per program so that programs built side by side in one folder do not race on it.
linkdir="$out.nvshmem-link"
mkdir -p "$linkdir"
ln -sf "$NVSHMEM_HOME/lib/libnvshmem_host.so.3" "$linkdir/libnvshmem_host.so"
CXX="$($M CXX)"
# shellcheck disable=SC2046,SC2086
$CXX $($M CXXFLAGS) -std=c++17 $($M PPFLAGS) -I"$CUDA_HOME/include" $CCCL -I"$NVSHMEM_HOME/include" -I"$UXN_PREFIX/include" ${UXN_CXXFLAGS:-} -c "$src" -o "$out.o"
# shellcheck disable=SC2086
"${NVCC:-nvcc}" -arch="${CUDA_ARCH:-sm_90}" -rdc=true -ccbin "$CXX" -I"$CUDA_HOME/include" "$out.o" -o "$out" $CUDALIB \
  -L"$linkdir" -L"$NVSHMEM_HOME/lib" -lnvshmem_host -lnvshmem_device -L"$UXN_PREFIX/lib" -lupcxx_extra_nvshmem \
  -Xlinker -rpath -Xlinker "$UXN_PREFIX/lib" -Xlinker -rpath -Xlinker "$NVSHMEM_HOME/lib" $ULIBS
