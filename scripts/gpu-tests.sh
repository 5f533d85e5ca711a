#!/usr/bin/env bash
# The GPU tests on a GPU host: the test suite's label gpu (tests/CMakeLists.txt with UXN_GPU=ON),
# against the installed library. Finds the tools, then calls CMake and ctest, once per NVSHMEM:
#   - UPC++: every release of UXN_UPCXX_DIR (a folder with ../shared/upcxx's setup.sh and tarballs),
#     laid out in OUTDIR/upcxx by setup.sh (which finds the CUDA toolkit: CUDA_HOME);
#   - NVSHMEM: the machine's pip wheel (python3's nvidia.nvshmem), then each UXN_NVSHMEM_TARBALLS
#     (.tar.xz of lib/ + include/);
#   - nvcc on PATH, the GPUs' compute capability (CUDA_ARCH, e.g. 90) and count (nvidia-smi).
#   UXN_PREFIX=<install prefix of this library> UXN_UPCXX_DIR=<dir> scripts/gpu-tests.sh OUTDIR [ctest args...]
# ctest arguments narrow the run, e.g. -R 'cxx.2023.9.0' or -LE bench (UXN_SUBPROJECT_CTEST_ARGS, e.g.
# "-R bench", narrows the projects' own ctest runs too). UXN_BASELINE_PREFIX (another
# install of this library) adds the BENCH rounds against it (label bench; with UXN_BASELINE_SRC,
# that build's tests/cxx folder, its own nvshmem_hpp_test against its own headers); UXN_CUFFTMP_HOME and
# UXN_NVSHMEM_CU13_ROOT (cuFFTMp for CUDA 13 and NVSHMEM >= 3.8.0 cu13) add examples/cufftmp on 1
# and 2 ranks (label cufftmp); UXN_RELEASES (default
# every release of scripts/common.sh's UXN_UPCXX_RELEASES); UXN_CTEST_JOBS (default 6: builds side by side; GPU runs one at a time).
# OUTDIR/<nvshmem>/suite/Testing/Temporary/LastTest.log holds every test's output; OUTDIR/summary.txt
# ctest's summaries. UXN_PREFIX defaults to the quickstart's ./install.
# Each NVSHMEM's run is written as a record (scripts/gpu-results.py record: date, library and
# commit, GPUs, driver, CUDA, NVSHMEM and its wheel, UPC++, what ran, tests, checks, failures,
# result) into UXN_RECORD_DIR (default: the clone's docs/gpu-runs/); scripts/gpu-results.py then
# regenerates docs/gpu-results.md's table (docs/gpu-results.md, "Recording a run").
set -u
OUTDIR=${1:?usage: scripts/gpu-tests.sh OUTDIR [ctest args...]}
shift
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# Paths given relative to the caller's folder, made absolute before the cd to the clone.
uxn_absolute_dirs UXN_PREFIX UXN_UPCXX_DIR UXN_BASELINE_PREFIX UXN_BASELINE_SRC UXN_CUFFTMP_HOME UXN_NVSHMEM_CU13_ROOT
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RECORD_DIR=${UXN_RECORD_DIR:-$PWD/docs/gpu-runs}
PREFIX=${UXN_PREFIX:-$UXN_QUICKSTART_PREFIX}
[ -e "$PREFIX/lib/libupcxx_extra_nvshmem.so" ] || { echo "no upcxx-extra-nvshmem in $PREFIX: run ./scripts/quickstart.sh, or set UXN_PREFIX" >&2; exit 2; }
UPCXX_DIR=${UXN_UPCXX_DIR:?UXN_UPCXX_DIR must name a directory with setup.sh and the UPC++ tarballs}
NVCC=$(command -v nvcc) || { echo "no nvcc on PATH" >&2; exit 2; }
ARCH=${CUDA_ARCH:-$(uxn_gpu_arch)}; ARCH=${ARCH#sm_}
NGPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
uxn_gpu_env
# One GPU: its ranks share it (NVSHMEM maps the peer PE as a P2P peer).
[ "$NGPU" -ge 2 ] || export UXN_ALLOW_SHARED_GPU=1
# The sub-projects' ctest prints every test's output (the CHECK, BENCH and RESULT lines).
export UXN_SUBPROJECT_VERBOSE=1
uxn_gpu_upcxx_prologue "$OUTDIR" "$UPCXX_DIR"
echo "CUDA architecture: $ARCH; GPUs: $NGPU; nvcc: $NVCC; library: $PREFIX"
rc=0
: > "$OUTDIR/summary.txt"
for NV in "${homes[@]}"; do
  nvver=$(uxn_nvshmem_version "$NV")
  # Two homes of one release (the cu12 and the cu13 wheel of 3.8.0) get build folders of their own.
  B="$OUTDIR/nvshmem-$nvver"; n=2
  while [[ " ${used_builds:-} " == *" $B "* ]]; do B="$OUTDIR/nvshmem-$nvver-$n"; n=$((n + 1)); done
  used_builds="${used_builds:-} $B"
  echo; echo "== NVSHMEM $nvver ($NV)"
  releases="${UXN_RELEASES:-${UXN_UPCXX_RELEASES[*]}}"
  cmake -S tests -B "$B/suite" -DUXN_GPU=ON -DUXN_PREFIX="$PREFIX" -DUXN_UPCXX_ROOT="$OUTDIR/upcxx" \
    -DUXN_UPCXX_RELEASES="${releases// /;}" -DUXN_NVSHMEM_ROOTS="$NV" -DUXN_CUDA_COMPILER="$NVCC" \
    -DUXN_CUDA_ARCHITECTURES="$ARCH" -DUXN_GPU_COUNT="$NGPU" -DUXN_JOBS=4 \
    -DUXN_BASELINE_PREFIX="${UXN_BASELINE_PREFIX:-}" -DUXN_BASELINE_SRC="${UXN_BASELINE_SRC:-}" -DUXN_CUFFTMP_HOME="${UXN_CUFFTMP_HOME:-}" \
    -DUXN_NVSHMEM_CU13_ROOT="${UXN_NVSHMEM_CU13_ROOT:-}" > "$B.configure.log" 2>&1 ||
    { cat "$B.configure.log"; echo "the test suite did not configure"; rc=1; continue; }
  ctest --test-dir "$B/suite" -L gpu -j "${UXN_CTEST_JOBS:-6}" --output-on-failure "$@" 2>&1 | tee "$B.ctest.log"
  st=${PIPESTATUS[0]}
  [ "$st" -eq 0 ] || rc=1
  { echo "== NVSHMEM $nvver: ctest exit $st"; sed -n '/tests passed/,$p' "$B.ctest.log"; } >> "$OUTDIR/summary.txt"
  # The run's record: the wheel is the pip distribution that holds this NVSHMEM, else the tarball.
  wheel=$(python3 - "$NV" <<'PY' 2>/dev/null
import sys, os
from importlib import metadata
home = os.path.realpath(sys.argv[1])
for d in metadata.distributions():
    n = d.metadata["Name"] or ""
    if n.startswith("nvidia-nvshmem") and any(os.path.realpath(str(d.locate_file(f))).startswith(home) for f in (d.files or [])[:50]):
        print(n); break
PY
)
  [ -n "$wheel" ] || wheel="tarball $(basename "$NV")"
  python3 scripts/gpu-results.py record "$RECORD_DIR/$(date -u +%Y-%m-%d)-nvshmem-$nvver-$(date -u +%H%M%S).json" \
    --ctest-log "$B.ctest.log" --test-log "$B/suite/Testing/Temporary/LastTest.log" --exit "$st" \
    --nvshmem "$nvver" --wheel "$wheel" --upcxx "$releases" \
    --ran "scripts/gpu-tests.sh: ctest -L gpu${*:+ $*}" 2>&1 | tee -a "$OUTDIR/summary.txt"
  # A record refused (no test ran, or the log contradicts the exit status) fails the script too.
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
cat "$OUTDIR/summary.txt"
exit "$rc"
