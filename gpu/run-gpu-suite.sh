#!/usr/bin/env bash
# The GPU suite: builds gpu/heap_check.cu against the machine's NVSHMEM (pip nvidia-nvshmem) and
# the installed upcxx-extra-nvshmem, then runs 2 PEs under mpirun in every configuration the
# issues ask for. Run it on a machine with >= 2 GPUs, Open MPI and nvcc:
#   UXN_PREFIX=<install prefix of this library> gpu/run-gpu-suite.sh [outdir]
# Prints everything; docs/gpu-results.md says what its runs proved.
set -u
OUTDIR=${1:-/tmp/uxn-gpu}
mkdir -p "$OUTDIR"
PREFIX=${UXN_PREFIX:-$PWD/.dev}
NV=${NVSHMEM_HOME:-$(python3 -c "import nvidia.nvshmem as m; print(m.__path__[0])")}
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
uxn_gpu_env
LINKDIR=$OUTDIR/nvlib
mkdir -p "$LINKDIR"
ln -sf "$NV/lib/libnvshmem_host.so.3" "$LINKDIR/libnvshmem_host.so"
echo "== machine"; lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|CPU max MHz|NUMA node\(s\))" ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
mpirun --version | head -1; echo "NVSHMEM: $NV"; ls "$NV/lib" | head -3
MPI_CFLAGS=$(mpicxx --showme:compile | sed 's/-pthread//g')
MPI_LIBS=""
for t in $(mpicxx --showme:link); do
  case "$t" in -L*|-l*) MPI_LIBS="$MPI_LIBS $t" ;; -Wl,*) MPI_LIBS="$MPI_LIBS -Xlinker ${t#-Wl,}" ;; -pthread) MPI_LIBS="$MPI_LIBS -Xcompiler -pthread" ;; esac
done
set -x
# The call floor (same signatures as the translation calls, no translation) in its own library.
cc -O2 -shared -fPIC -I"$PREFIX/include" c_tests/bench_floor.c -o "$LINKDIR/libuxn_bench_floor.so" || exit 2
nvcc -O2 -rdc=true -arch=sm_90 -std=c++17 gpu/heap_check.cu -o "$OUTDIR/heap_check" \
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

# ---- Same-host concurrency and scaling (binaries built on the CPU machine, carried in .dev/bin).
if [ -x "$PREFIX/bin/concurrency-test" ]; then
  run UXN_STRESS_MS=4000 UXN_ASSERT_SCALING=1 "$PREFIX/bin/concurrency-test" --nocapture
fi
if [ -x "$PREFIX/bin/bench_translate" ]; then
  run "$PREFIX/bin/bench_translate" --max-pes 1048576
fi

# ---- Same-run comparison with another build of this library (UXN_BASELINE_PREFIX: its lib/, same
# soname; e.g. the commit before a refactor): the same heap_check and bench_translate binaries run
# against either library, alternating, UXN_BASELINE_ROUNDS times. Compare the BENCH lines.
if [ -n "${UXN_BASELINE_PREFIX:-}" ]; then
  for round in $(seq 1 "${UXN_BASELINE_ROUNDS:-3}"); do
    for which in baseline current; do
      lib=$PREFIX/lib; [ "$which" = baseline ] && lib=$UXN_BASELINE_PREFIX/lib
      echo; echo "== round $round: $which library ($lib)"
      LD_LIBRARY_PATH=$lib:$LD_LIBRARY_PATH $MPIRUN "$OUTDIR/heap_check" mpi | grep -E "^BENCH|SUMMARY"
      if [ -x "$PREFIX/bin/bench_translate" ]; then
        LD_LIBRARY_PATH=$lib:$LD_LIBRARY_PATH "$PREFIX/bin/bench_translate" --max-pes 65536 | grep -E "^\| (2|65536) "
      fi
    done
  done
fi

# ---- The UPC++ layer: gpu/run-upcxx-suite.sh, against the UPC++ releases of ../shared/upcxx
# (carry its setup.sh and tarballs, name the folder in UXN_UPCXX_DIR).
if [ -n "${UXN_UPCXX_DIR:-}" ]; then
  UXN_PREFIX="$PREFIX" bash gpu/run-upcxx-suite.sh "$OUTDIR/upcxx" || failed+=("gpu/run-upcxx-suite.sh")
else
  echo "SKIPPED: the UPC++ layer (set UXN_UPCXX_DIR to a folder with ../shared/upcxx's setup.sh and tarballs)"
fi

echo
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "GPU suite: every step passed"
