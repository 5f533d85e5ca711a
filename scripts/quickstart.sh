#!/usr/bin/env bash
# The main job, on a fresh machine without a GPU: install what a user needs (Rust first, then only
# the missing system packages among cmake/make/g++/binutils/pkg-config, then ONE NVSHMEM wheel into
# ~/.cache; nothing that only the tests need), build and install the library (CMake drives cargo),
# run a CPU demonstration of the translation, then run the doctor against the NVSHMEM it installed.
#   ./scripts/quickstart.sh            # installs into ./install (PREFIX=... to change)
#   UXN_NVSHMEM_CUDA=13 ./scripts/quickstart.sh   # nvidia-nvshmem-cu13 instead of -cu12 (README)
# The tests' dependencies: bash scripts/install-deps.sh (UXN_DEPS=tests, the default), then
# ./scripts/test-all.sh.
# Without root or apt (a cluster): UXN_NO_APT=1 PREFIX=$HOME/opt/upcxx-extra-nvshmem ./scripts/quickstart.sh
# with cmake, a C/C++ compiler and pkg-config from modules or Spack (docs/install.md: "On a cluster").
set -euo pipefail
cd "$(dirname "$0")/.."
UXN_DEPS=user . scripts/install-deps.sh
PREFIX="${PREFIX:-$PWD/install}"
# cargo's release build goes to ./target, where scripts/test-all.sh looks for it too.
cmake -S . -B build -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_BUILD_TYPE=Release -DUXN_CARGO_TARGET_DIR="$PWD/target"
cmake --build build -j"$(nproc)"
cmake --install build
echo
echo "== installed into $PREFIX:"
(cd "$PREFIX" && find . -maxdepth 4 \( -type f -o -type l \) | sort)
echo
echo "== CPU demonstration: examples/translate_demo.c against the installed library (pkg-config flags, no LD_LIBRARY_PATH)"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -o build/translate_demo examples/translate_demo.c \
  $(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --cflags --libs upcxx-extra-nvshmem)
./build/translate_demo
echo
echo "== upcxx-nvshmem-doctor on the NVSHMEM $UXN_NVSHMEM_DEFAULT (nvidia-nvshmem-cu$UXN_NVSHMEM_CUDA) that this quickstart installed in $UXN_CACHE"
"$PREFIX/bin/upcxx-nvshmem-doctor" "$(uxn_nvshmem_root "$UXN_NVSHMEM_DEFAULT" "$UXN_NVSHMEM_CUDA")/lib/libnvshmem_host.so.3"
