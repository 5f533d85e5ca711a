#!/usr/bin/env bash
# UPC++'s GPU microbenchmark on NVSHMEM's heap (tests/cxx/bench/gpu_microbenchmark.cpp), on the GPU
# machine: built with CMake against the installed package for each UPC++ release (../shared/upcxx,
# carried with its setup.sh), then its four variants run side by side, one after the other, on 2
# ranks sharing ONE GPU (smp conduit):
#   nvshmem     NVSHMEM's own host-initiated putmem/getmem(_nbi) + quiet (the baseline)
#   heap_copy   heap.copy on nvshmem_malloc'd memory wrapped by nvshmem_heap
#   upcxx_heap  upcxx::copy on the same heap's global pointers
#   upcxx_own   upcxx::copy on UPC++'s own GPU segment (as UPC++ ships it)
# Writes OUTDIR/microbench-<release>.csv (one header, then every variant's CSV lines: variant,
# upcxx, pattern, test, column, bytes, window, trials, unit, value, note), OUTDIR/machine.txt,
# each variant's log, and, with python3, OUTDIR/microbench-<release>.md (the table of
# scripts/plot-microbench.py) and .png (when matplotlib is there).
#   UXN_PREFIX=<install prefix of this library> UXN_UPCXX_DIR=<dir with setup.sh + UPC++ tarballs> \
#   scripts/gpu-microbench.sh OUTDIR
# Knobs: UXN_RELEASES (default 2023.9.0; "2020.10.0 2023.9.0" for both: 2020.10 has no remote_cx
# on copy, those tables say NA), UXN_MB_VARIANTS (default "nvshmem heap_copy upcxx_heap
# upcxx_own"), UXN_MB_ARGS (the benchmark's arguments, default below: 8 B to 4 MiB doubling plus
# one 64 MiB row of window 4, window 100, at most 4 timed windows per measurement and about 4 MiB
# per rank), UXN_MB_GPU (default 0: CUDA_VISIBLE_DEVICES), UXN_MB_TIMEOUT (per variant, default
# 300 s), UXN_MB_JOBS (build parallelism, default nproc), UPCXX_THREADMODE (default seq).
# upcxx::copy of device memory goes through host bounce buffers, so its two variants take most
# of the wall time; UXN_MB_VARIANTS="nvshmem heap_copy" runs only the fast ones.
# Exit status 0 when every variant ran to SUCCESS.
set -u
OUTDIR=${1:?usage: scripts/gpu-microbench.sh OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/scripts/common.sh"
# Paths given relative to the caller's folder, made absolute (CMake runs in other folders).
uxn_absolute_dirs UXN_PREFIX UXN_UPCXX_DIR
PREFIX=${UXN_PREFIX:?UXN_PREFIX must name the install prefix of this library}
UPCXX_DIR=${UXN_UPCXX_DIR:?UXN_UPCXX_DIR must name a directory with setup.sh and the UPC++ tarballs}
VARIANTS=${UXN_MB_VARIANTS:-nvshmem heap_copy upcxx_heap upcxx_own}
ARGS=${UXN_MB_ARGS:--csv -s 8 -m 4194304 -x 67108864 -xw 4 -w 100 -t 4 -v 4194304}
TM=${UPCXX_THREADMODE:-seq}
uxn_gpu_env
export GASNET_PSHM_NODES=2

# The machine, the UPC++ layout (CUDA_HOME) and the NVSHMEM installs (homes: the machine's first).
uxn_gpu_upcxx_prologue "$OUTDIR" "$UPCXX_DIR"
NV="${homes[0]}"
nvver=$(uxn_nvshmem_version "$NV")
{
  echo "gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i "${UXN_MB_GPU:-0}" 2>/dev/null | head -1)"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') x $(nproc)"
  echo "nvshmem=$nvver"
  echo "args=$ARGS"
  echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$OUTDIR/machine.txt"
cat "$OUTDIR/machine.txt"

summary=()
failed=0
for REL in ${UXN_RELEASES:-2023.9.0}; do
  U="$OUTDIR/upcxx/upcxx-$REL"; B="$OUTDIR/bench-$REL-$TM"
  echo; echo "== build: UPC++ $REL $TM, NVSHMEM $nvver ($NV)"
  t0=$SECONDS
  if ! { UPCXX_INSTALL="$U" UPCXX_THREADMODE="$TM" UPCXX_CODEMODE=O3 UPCXX_NETWORK=smp \
           cmake -S "$ROOT/tests/cxx/bench" -B "$B" -DCMAKE_PREFIX_PATH="$PREFIX" -DNVSHMEM_HOME="$NV" \
             -DCUDA_HOME="$CUDA_HOME" > "$B.configure.log" 2>&1 &&
         cmake --build "$B" -j "${UXN_MB_JOBS:-$(nproc)}" > "$B.build.log" 2>&1; }; then
    tail -30 "$B.configure.log" "$B.build.log" 2>/dev/null
    summary+=("SUMMARY FAIL build UPC++ $REL"); failed=1; continue
  fi
  echo "built in $((SECONDS - t0)) s"
  csv="$OUTDIR/microbench-$REL.csv"
  echo "variant,upcxx,pattern,test,column,bytes,window,trials,unit,value,note" > "$csv"
  for v in $VARIANTS; do
    log="$OUTDIR/microbench-$REL-$v.log"
    echo; echo "== $v (UPC++ $REL): $B/gpu_microbenchmark_$v $ARGS"
    t0=$SECONDS rc=0
    # shellcheck disable=SC2086
    CUDA_VISIBLE_DEVICES="${UXN_MB_GPU:-0}" LD_LIBRARY_PATH="$NV/lib:$PREFIX/lib:${LD_LIBRARY_PATH:-}" \
      timeout "${UXN_MB_TIMEOUT:-300}" "$B/gpu_microbenchmark_$v" $ARGS > "$log" 2>&1 || rc=$?
    grep -v '^CSV,' "$log" | grep -vE '^\s*$' | head -20
    grep '^CSV,' "$log" | grep -v '^CSV,variant,' | sed 's/^CSV,//' >> "$csv"
    verdict=PASS
    if [ "$rc" -ne 0 ] || ! grep -q '^SUCCESS' "$log"; then verdict=FAIL; failed=1; fi
    summary+=("SUMMARY $verdict $v UPC++ $REL exit=$rc $(grep -c '^CSV,' "$log") lines ($((SECONDS - t0)) s)")
  done
  if command -v python3 >/dev/null 2>&1; then
    python3 "$ROOT/scripts/plot-microbench.py" "$csv" --png "$OUTDIR/microbench-$REL.png" \
      --title "$(sed -n 's/^gpu=//p' "$OUTDIR/machine.txt"), 2 ranks on one GPU, UPC++ $REL $TM, NVSHMEM $nvver" \
      > "$OUTDIR/microbench-$REL.md" || echo "plot-microbench.py failed (the CSV is in $csv)"
  fi
done
echo
printf '%s\n' "${summary[@]}"
exit $failed
