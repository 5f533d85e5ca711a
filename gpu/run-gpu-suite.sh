#!/usr/bin/env bash
# The GPU suite: builds gpu/heap_check.cu against the machine's NVSHMEM (NVSHMEM_HOME, else the pip
# nvidia-nvshmem of python3) and the installed upcxx-extra-nvshmem, then runs 2 PEs under mpirun
# in every configuration below; then the concurrency test (built from the source tree with
# cargo) and bench_translate (c_tests/, built against the install). Run it on a machine with >= 2
# GPUs, Open MPI, nvcc, CMake and Rust:
#   [UXN_PREFIX=<install prefix of this library>] [CUDA_ARCH=90] gpu/run-gpu-suite.sh [outdir]
# UXN_PREFIX defaults to the quickstart's ./install; CUDA_ARCH (compute capability, e.g. 90, or
# native) to the GPU's own (nvidia-smi). Prints everything; docs/gpu-results.md says what it was
# run on and what passed. What cannot be built is a failure, listed at the end.
set -u
OUTDIR=${1:-/tmp/uxn-gpu}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Paths given relative to the caller's folder, made absolute before the cd to the clone.
for _v in UXN_PREFIX UXN_UPCXX_DIR UXN_BASELINE_PREFIX NVSHMEM_HOME; do
  if [ -n "${!_v:-}" ] && [ -d "${!_v}" ]; then printf -v "$_v" '%s' "$(cd "${!_v}" && pwd)"; fi
done
cd "$ROOT"
. scripts/common.sh
PREFIX=${UXN_PREFIX:-$UXN_QUICKSTART_PREFIX}
[ -e "$PREFIX/lib/libupcxx_extra_nvshmem.so" ] || { echo "no upcxx-extra-nvshmem in $PREFIX: run ./scripts/quickstart.sh, or set UXN_PREFIX" >&2; exit 2; }
NV=${NVSHMEM_HOME:-$(python3 -c "import nvidia.nvshmem as m; print(m.__path__[0])")}
ARCH=${CUDA_ARCH:-$(uxn_gpu_arch)}; ARCH=${ARCH#sm_}
uxn_gpu_env
LINKDIR=$OUTDIR/nvlib
mkdir -p "$LINKDIR"
ln -sf "$NV/lib/libnvshmem_host.so.3" "$LINKDIR/libnvshmem_host.so"
echo "== machine"; lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|CPU max MHz|NUMA node\(s\))" ; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; nvcc --version | tail -1
echo "CUDA architecture: $ARCH"
mpirun --version | head -1; echo "NVSHMEM: $NV"; ls "$NV/lib" | head -3
MPI_CFLAGS=$(mpicxx --showme:compile | sed 's/-pthread//g')
MPI_LIBS=""
for t in $(mpicxx --showme:link); do
  case "$t" in -L*|-l*) MPI_LIBS="$MPI_LIBS $t" ;; -Wl,*) MPI_LIBS="$MPI_LIBS -Xlinker ${t#-Wl,}" ;; -pthread) MPI_LIBS="$MPI_LIBS -Xcompiler -pthread" ;; esac
done
set -x
# The call floor (same signatures as the translation calls, no translation) in its own library.
cc -O2 -shared -fPIC -I"$PREFIX/include" c_tests/bench_floor.c -o "$LINKDIR/libuxn_bench_floor.so" || exit 2
nvcc -O2 -rdc=true -arch="$(uxn_nvcc_arch "$ARCH")" -std=c++17 gpu/heap_check.cu -o "$OUTDIR/heap_check" \
  -I"$NV/include" -I"$PREFIX/include" -Ic_tests $MPI_CFLAGS \
  -L"$LINKDIR" -L"$NV/lib" -lnvshmem_host -lnvshmem_device -L"$PREFIX/lib" -lupcxx_extra_nvshmem -luxn_bench_floor \
  $MPI_LIBS -lcuda || exit 2
set +x
export LD_LIBRARY_PATH=$NV/lib:$PREFIX/lib:$LINKDIR:${LD_LIBRARY_PATH:-}
failed=()
# Runs one step; a non-zero exit is a failure of the suite (the script exits 1 at the end).
run() {
  echo; echo "== $*"
  env "$@"; local rc=$?
  echo "(exit $rc)"
  [ "$rc" -eq 0 ] || failed+=("$* (exit $rc)")
}
MPIRUN="mpirun -np 2 --bind-to none -x NVSHMEM_DISABLE_NVLS -x LD_LIBRARY_PATH"
run $MPIRUN "$OUTDIR/heap_check" mpi
run $MPIRUN "$OUTDIR/heap_check" uid
run NVSHMEM_DISABLE_CUDA_VMM=1 NVSHMEM_SYMMETRIC_SIZE=4G $MPIRUN -x NVSHMEM_DISABLE_CUDA_VMM -x NVSHMEM_SYMMETRIC_SIZE "$OUTDIR/heap_check" mpi
run NVSHMEM_DISABLE_CUDA_VMM=1 NVSHMEM_SYMMETRIC_SIZE=4G $MPIRUN -x NVSHMEM_DISABLE_CUDA_VMM -x NVSHMEM_SYMMETRIC_SIZE "$OUTDIR/heap_check" uid
run UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW=4096 $MPIRUN -x UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW "$OUTDIR/heap_check" mpi --expect-validation-failure
# A stripped copy of the real library: only the public route (step 3) is left.
mkdir -p "$OUTDIR/stripped"
cp "$NV/lib/libnvshmem_host.so.3" "$OUTDIR/stripped/" && strip --strip-all "$OUTDIR/stripped/libnvshmem_host.so.3"
run UXN_EXPECT_STRIPPED=1 $MPIRUN -x UXN_EXPECT_STRIPPED -x LD_LIBRARY_PATH="$OUTDIR/stripped:$LD_LIBRARY_PATH" "$OUTDIR/heap_check" uid
if [ -x "$PREFIX/bin/upcxx-nvshmem-doctor" ]; then
  run "$PREFIX/bin/upcxx-nvshmem-doctor" "$NV/lib/libnvshmem_host.so.3"
  run "$PREFIX/bin/upcxx-nvshmem-doctor" --json "$OUTDIR/stripped/libnvshmem_host.so.3"
fi

# ---- Same-host concurrency and scaling: tests/int_concurrency.rs, built here from the source tree
# (cargo, release), and c_tests/bench_translate, built here against the install.
if command -v cargo >/dev/null 2>&1; then
  run UXN_STRESS_MS=4000 UXN_ASSERT_SCALING=1 cargo test --locked --release --test int_concurrency -- --nocapture
else
  failed+=("concurrency test: not built: no cargo on PATH (UXN_DEPS=user bash scripts/install-deps.sh installs Rust)")
fi
BENCH=""
if cmake -S c_tests -B "$OUTDIR/c_tests" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release > "$OUTDIR/c_tests-build.log" 2>&1 &&
   cmake --build "$OUTDIR/c_tests" --target bench_translate >> "$OUTDIR/c_tests-build.log" 2>&1; then
  BENCH="$OUTDIR/c_tests/bench_translate"
  run "$BENCH" --max-pes 1048576
else
  tail -20 "$OUTDIR/c_tests-build.log"
  failed+=("bench_translate: not built (c_tests/ against $PREFIX: $OUTDIR/c_tests-build.log)")
fi

# ---- Same-run comparison with another build of this library (UXN_BASELINE_PREFIX: its lib/, same
# soname): the same heap_check and bench_translate binaries run against either library,
# alternating, UXN_BASELINE_ROUNDS times. Compare the BENCH lines.
if [ -n "${UXN_BASELINE_PREFIX:-}" ]; then
  for round in $(seq 1 "${UXN_BASELINE_ROUNDS:-3}"); do
    for which in baseline current; do
      lib=$PREFIX/lib; [ "$which" = baseline ] && lib=$UXN_BASELINE_PREFIX/lib
      echo; echo "== round $round: $which library ($lib)"
      LD_LIBRARY_PATH=$lib:$LD_LIBRARY_PATH $MPIRUN "$OUTDIR/heap_check" mpi | grep -E "^BENCH|SUMMARY"
      if [ -n "$BENCH" ]; then
        LD_LIBRARY_PATH=$lib:$LD_LIBRARY_PATH "$BENCH" --max-pes 65536 | grep -E "^\| (2|65536) "
      fi
    done
  done
fi

# ---- The UPC++ layer: gpu/run-upcxx-suite.sh, against the UPC++ releases of ../shared/upcxx
# (carry its setup.sh and tarballs, name the folder in UXN_UPCXX_DIR).
if [ -n "${UXN_UPCXX_DIR:-}" ]; then
  UXN_PREFIX="$PREFIX" CUDA_ARCH="$ARCH" bash gpu/run-upcxx-suite.sh "$OUTDIR/upcxx" || failed+=("gpu/run-upcxx-suite.sh")
else
  echo "SKIPPED: the UPC++ layer (set UXN_UPCXX_DIR to a folder with ../shared/upcxx's setup.sh and tarballs)"
fi

echo
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "GPU suite: every step passed"
