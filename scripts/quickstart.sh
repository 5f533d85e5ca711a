#!/usr/bin/env bash
# The main job, on a fresh machine without a GPU: install what is needed, build and install the
# library (CMake drives cargo), run a CPU demonstration of the translation, then run the doctor
# against the NVSHMEM it installed.
#   ./scripts/quickstart.sh            # installs into ./install (PREFIX=... to change)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/install-deps.sh
PREFIX="${PREFIX:-$PWD/install}"
cmake -S . -B build -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
cmake --install build
echo
echo "== installed into $PREFIX:"
(cd "$PREFIX" && find . -maxdepth 4 \( -type f -o -type l \) | sort)
echo
echo "== CPU demonstration: examples/translate_demo.c against the installed library"
cc -std=c11 -Wall -Wextra -o build/translate_demo examples/translate_demo.c \
  $(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --cflags --libs upcxx-extra-nvshmem) -Wl,-rpath,"$PREFIX/lib"
./build/translate_demo
echo
echo "== upcxx-nvshmem-doctor on the NVSHMEM 3.4.5 that install-deps.sh installed"
"$PREFIX/bin/upcxx-nvshmem-doctor" "$UXN_CACHE/nvshmem/3.4.5/nvidia/nvshmem/lib/libnvshmem_host.so.3"
