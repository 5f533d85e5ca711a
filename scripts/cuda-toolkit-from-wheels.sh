#!/usr/bin/env bash
# Lays out a CUDA toolkit that can compile and link CUDA code (nvcc + cicc) from pip wheels, for the
# tests of programs with their own NVSHMEM kernels on machines without a CUDA toolkit:
#   scripts/cuda-toolkit-from-wheels.sh DEST NVCC_WHEEL_DIR NVVM_WHEEL_DIR CUDA_HOME
# NVCC_WHEEL_DIR / NVVM_WHEEL_DIR: the nvidia/cu13 folders of the nvidia-cuda-nvcc and nvidia-nvvm
# wheels (same release); CUDA_HOME: include/ (CUDA runtime headers, include/cccl) and lib64/
# (cudart, libcudadevrt.a), e.g. the one ../shared/upcxx/setup.sh makes. DEST/bin/nvcc is then a
# compiler CMake accepts (CMAKE_CUDA_COMPILER). nvcc finds its tools from where it is, so it is
# copied; the rest are links. Idempotent.
set -euo pipefail
dest="$1" nvcc_dir="$2" nvvm_dir="$3" cuda="$4"
for f in "$nvcc_dir/bin/nvcc" "$nvvm_dir/nvvm/bin/cicc" "$cuda/include/cuda_runtime.h"; do
  [ -e "$f" ] || { echo "cuda-toolkit-from-wheels: no $f" >&2; exit 1; }
done
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/targets/x86_64-linux/include"
for f in "$nvcc_dir"/bin/*; do
  case "$(basename "$f")" in
    nvcc|nvcc.profile) cp -p "$f" "$dest/bin/" ;;
    *) ln -s "$f" "$dest/bin/" ;;
  esac
done
ln -s "$nvvm_dir/nvvm" "$dest/nvvm"
for f in "$cuda"/include/* "$nvcc_dir"/include/*; do
  [ -e "$dest/targets/x86_64-linux/include/$(basename "$f")" ] || ln -s "$f" "$dest/targets/x86_64-linux/include/"
done
ln -s "$cuda/lib64" "$dest/targets/x86_64-linux/lib"
ln -s targets/x86_64-linux/include "$dest/include"
ln -s targets/x86_64-linux/lib "$dest/lib64"
"$dest/bin/nvcc" --version | tail -1
