#!/usr/bin/env bash
# The C++ layer on the GPU machine: the example and the GPU tests of upcxx_extra/nvshmem.hpp, built
# against each real UPC++ release (../shared/upcxx, carried with its setup.sh) and each NVSHMEM
# (the machine's, and others carried as .tar.xz of lib/ + include/), run on 2 ranks (smp conduit,
# one GPU each) with CUDA VMM on and off.
#   [UXN_PREFIX=<install prefix of this library>] UXN_UPCXX_DIR=<dir with setup.sh + tarballs> \
#   [UXN_NVSHMEM_TARBALLS="a.tar.xz ..."] [CUDA_ARCH=90] gpu/run-upcxx-suite.sh [outdir]
# UXN_PREFIX defaults to the quickstart's ./install; CUDA_ARCH (compute capability, e.g. 90, or
# native) to the GPU's own (nvidia-smi).
# UXN_RANKS (default 2: one GPU each), UXN_THREADMODES (default seq), UXN_RELEASES (default both),
# UXN_COPY_MAX_BYTES (1 GiB); UXN_BASELINE_PREFIX (+ UXN_BASELINE_ROUNDS, 3): hpp_test's BENCH
# alternating between this library and another build of it (an install prefix), in the same run;
# with UXN_BASELINE_SRC (a folder holding that build's nvshmem_hpp_test.cpp, gpu_test_util.hpp and
# build-upcxx-program.sh) the baseline program is built from those sources against that prefix's
# headers, so two releases of the C++ layer are compared too.
# Prints every CHECK/BENCH/RESULT line and ends with one SUMMARY line per run.
set -u
OUTDIR=${1:-/tmp/uxn-upcxx}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
# Paths given relative to the caller's folder, made absolute before the cd to the clone.
for _v in UXN_PREFIX UXN_UPCXX_DIR UXN_BASELINE_PREFIX NVSHMEM_HOME; do
  if [ -n "${!_v:-}" ] && [ -d "${!_v}" ]; then printf -v "$_v" '%s' "$(cd "${!_v}" && pwd)"; fi
done
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/common.sh
PREFIX=${UXN_PREFIX:-$UXN_QUICKSTART_PREFIX}
[ -e "$PREFIX/lib/libupcxx_extra_nvshmem.so" ] || { echo "no upcxx-extra-nvshmem in $PREFIX: run ./scripts/quickstart.sh, or set UXN_PREFIX" >&2; exit 2; }
UPCXX_DIR=${UXN_UPCXX_DIR:?UXN_UPCXX_DIR must name a directory with setup.sh and the UPC++ tarballs}
THREADMODES=${UXN_THREADMODES:-seq}
ARCH=${CUDA_ARCH:-$(uxn_gpu_arch)}; ARCH=${ARCH#sm_}
# tests/cxx/build-upcxx-program.sh links for CUDA_ARCH, in nvcc's form (sm_90, native).
CUDA_ARCH=$(uxn_nvcc_arch "$ARCH"); export CUDA_ARCH
echo "CUDA architecture: $CUDA_ARCH"
uxn_gpu_env
[ -n "${UXN_ALLOW_SHARED_GPU:-}" ] && export UXN_ALLOW_SHARED_GPU

# The machine, the UPC++ layout (CUDA_HOME) and the NVSHMEM installs to test (homes).
uxn_gpu_upcxx_prologue "$OUTDIR" "$UPCXX_DIR"

summary=()
build_failed() { echo "BUILD FAILED: $*"; summary+=("SUMMARY BUILD FAILED: $* exit=1"); }
# Every program is built first, all at once (pass "build"), then run one at a time (pass "run"):
# the builds take most of a suite's time and the machine has the cores for them.
builds=() build_labels=()
build() { # label env... build-upcxx-program.sh SOURCE OUTPUT
  local label="$1"; shift
  local log; log="$OUTDIR/build-$(printf '%s' "$label" | tr -c 'A-Za-z0-9.' '_').log"
  env "$@" > "$log" 2>&1 &
  builds+=("$!:$log") build_labels+=("$label")
}
wait_builds() {
  local i
  for i in "${!builds[@]}"; do
    wait "${builds[$i]%%:*}" || { tail -20 "${builds[$i]#*:}"; build_failed "${build_labels[$i]}"; }
  done
  builds=() build_labels=()
}
run() { # label env... program
  local label="$1"; shift
  echo; echo "== $label: $*"
  local t0=$SECONDS log="$OUTDIR/run.log"
  timeout 240 env "$@" > "$log" 2>&1; local rc=$?
  { echo "== $label"; cat "$log"; } >> "$OUTDIR/all.log"
  grep -vE "SyntaxWarning|^\s*$|re\.compile|import " "$log" | grep -E "CHECK|BENCH|NOTE|RESULT|SKIPPED|upcxx_extra::|rror|bort|PE [0-9]+ \(rank" | head -80
  summary+=("SUMMARY $label exit=$rc $( grep -c 'CHECK rank [0-9]* FAIL' "$log") failed-checks $(grep -o 'RESULT [A-Za-z_ ]*\(PASS\|FAIL\)' "$log" | head -1) ($((SECONDS - t0)) s)")
}
for pass in build run; do
for NV in "${homes[@]}"; do
  nvver=$(uxn_nvshmem_version "$NV")
  for REL in ${UXN_RELEASES:-2020.10.0 2023.9.0}; do
    for TM in $THREADMODES; do
      U="$OUTDIR/upcxx/upcxx-$REL"; B="$OUTDIR/build-$REL-$TM-nvshmem$nvver"; mkdir -p "$B"
      base_prog="$B/nvshmem_hpp_test"
      [ -n "${UXN_BASELINE_SRC:-}" ] && base_prog="$B/baseline_nvshmem_hpp_test"
      if [ $pass = build ]; then
        for prog in examples/nvshmem_upcxx_copy.cpp tests/cxx/nvshmem_hpp_test.cpp tests/cxx/nvshmem_copy_test.cpp; do
          build "$prog ($REL $TM $nvver)" UPCXX_THREADMODE=$TM NVSHMEM_HOME="$NV" UXN_PREFIX="$PREFIX" UPCXX_INSTALL="$U" \
            bash tests/cxx/build-upcxx-program.sh "$prog" "$B/$(basename "$prog" .cpp)"
        done
        if [ -n "${UXN_BASELINE_PREFIX:-}" ] && [ -n "${UXN_BASELINE_SRC:-}" ]; then
          build "baseline hpp_test ($REL $TM $nvver)" UPCXX_THREADMODE=$TM NVSHMEM_HOME="$NV" UXN_PREFIX="$UXN_BASELINE_PREFIX" UPCXX_INSTALL="$U" \
            bash "$UXN_BASELINE_SRC/build-upcxx-program.sh" "$UXN_BASELINE_SRC/nvshmem_hpp_test.cpp" "$base_prog"
        fi
        continue
      fi
      L="LD_LIBRARY_PATH=$NV/lib:$PREFIX/lib:${LD_LIBRARY_PATH:-}"
      tag="UPC++ $REL $TM, NVSHMEM $nvver"
      run "hpp_test VMM on, $tag" "$L" "$U/bin/upcxx-run" -n "${UXN_RANKS:-2}" "$B/nvshmem_hpp_test"
      run "hpp_test VMM off, $tag" "$L" NVSHMEM_DISABLE_CUDA_VMM=1 NVSHMEM_SYMMETRIC_SIZE=5G "$U/bin/upcxx-run" -n "${UXN_RANKS:-2}" "$B/nvshmem_hpp_test"
      run "example VMM on, $tag" "$L" "$U/bin/upcxx-run" -n "${UXN_RANKS:-2}" "$B/nvshmem_upcxx_copy"
      run "example VMM off, $tag" "$L" NVSHMEM_DISABLE_CUDA_VMM=1 NVSHMEM_SYMMETRIC_SIZE=2G "$U/bin/upcxx-run" -n "${UXN_RANKS:-2}" "$B/nvshmem_upcxx_copy"
      run "copy_test VMM on, $tag" "$L" "$U/bin/upcxx-run" -n "${UXN_RANKS:-2}" "$B/nvshmem_copy_test" "${UXN_COPY_MAX_BYTES:-1073741824}"
      run "copy_test VMM off, $tag" "$L" NVSHMEM_DISABLE_CUDA_VMM=1 NVSHMEM_SYMMETRIC_SIZE=3G "$U/bin/upcxx-run" -n "${UXN_RANKS:-2}" "$B/nvshmem_copy_test" "${UXN_COPY_MAX_BYTES:-1073741824}"
      # Same-run comparison of the translation BENCH against another build of this library
      # (UXN_BASELINE_PREFIX, same soname): the same binary, alternating libraries, VMM on.
      if [ -n "${UXN_BASELINE_PREFIX:-}" ]; then
        for round in $(seq 1 "${UXN_BASELINE_ROUNDS:-3}"); do
          run "hpp_test round $round baseline library, $tag" "LD_LIBRARY_PATH=$NV/lib:$UXN_BASELINE_PREFIX/lib:${LD_LIBRARY_PATH:-}" "$U/bin/upcxx-run" -n "${UXN_RANKS:-2}" "$base_prog"
          run "hpp_test round $round current library, $tag" "$L" "$U/bin/upcxx-run" -n "${UXN_RANKS:-2}" "$B/nvshmem_hpp_test"
        done
      fi
    done
  done
done
[ $pass = build ] && wait_builds
done

# ---- nvshmem_heap::copy's own tests (tests/cxx/copy_semantics_test.cpp, copy_cover_test.cpp): each
# ---- UPC++ release x threadmode (UXN_COPY_THREADMODES, default "seq par") x codemode
# ---- (UXN_COPY_CODEMODES, default "opt debug"; copy_cover_test in opt only unless
# ---- UXN_COPY_COVER_DEBUG=1), 2 ranks (UXN_COPY_RANKS) on ONE GPU (CUDA_VISIBLE_DEVICES=UXN_COPY_GPU,
# ---- default 0), CUDA VMM on and off; copy_cover_test also with the fallback forced
# ---- (UPCXX_EXTRA_NVSHMEM_COPY=upcxx); copy_semantics_test once more with every GPU visible (a GPU
# ---- per rank: its F3 needs 2 GPUs visible). The machine's NVSHMEM (UXN_COPY_ALL_NVSHMEM=1: every
# ---- NVSHMEM given). UXN_COPY_TESTS=0 skips the block. One SUMMARY line per run.
copy_run() { # label env... program args
  local label="$1"; shift
  echo; echo "== $label: $*"
  local t0=$SECONDS log="$OUTDIR/copy-run.log"
  # The programs' own watchdog ends a hung rank after 300 s (UXN_TEST_TIMEOUT) with a FAIL line.
  timeout "${UXN_COPY_TIMEOUT:-360}" env "$@" > "$log" 2>&1; local rc=$?
  { echo "== $label"; cat "$log"; } >> "$OUTDIR/all.log"
  # Every failing or skipped check, and the last lines (the final RESULT, an abort's message).
  grep -E "RESULT [^ ]+ (FAIL|SKIPPED)|ERROR|rror|bort" "$log" | head -60
  tail -3 "$log"
  # "exit=N M failed-checks" first: the form the suite's final verdict reads.
  summary+=("SUMMARY $label exit=$rc $(grep -c 'RESULT [^ ]*\.[^ ]* FAIL' "$log") failed-checks $(grep -c 'RESULT [^ ]*\.[^ ]* PASS' "$log") passed $(grep -o 'RESULT copy_[a-z_]* \(PASS\|FAIL\|SKIPPED\)' "$log" | tail -1) ($((SECONDS - t0)) s)")
}
if [ "${UXN_COPY_TESTS:-1}" != 0 ]; then
  copy_homes=("${homes[0]}")
  [ "${UXN_COPY_ALL_NVSHMEM:-0}" = 1 ] && copy_homes=("${homes[@]}")
  ngpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
  for pass in build run; do
  for NV in "${copy_homes[@]}"; do
    nvver=$(uxn_nvshmem_version "$NV")
    for REL in ${UXN_RELEASES:-2020.10.0 2023.9.0}; do
      for TM in ${UXN_COPY_THREADMODES:-seq par}; do
        for CM in ${UXN_COPY_CODEMODES:-opt debug}; do
          U="$OUTDIR/upcxx/upcxx-$REL"; B="$OUTDIR/build-copy-$REL-$TM-$CM-nvshmem$nvver"; mkdir -p "$B"
          progs=(copy_semantics_test copy_finalize_test)
          { [ "$CM" = opt ] || [ "${UXN_COPY_COVER_DEBUG:-0}" = 1 ]; } && progs+=(copy_cover_test)
          if [ $pass = build ]; then
            for prog in "${progs[@]}"; do
              build "$prog ($REL $TM $CM $nvver)" UPCXX_THREADMODE=$TM UPCXX_CODEMODE=$CM NVSHMEM_HOME="$NV" UXN_PREFIX="$PREFIX" \
                UPCXX_INSTALL="$U" bash tests/cxx/build-upcxx-program.sh "tests/cxx/$prog.cpp" "$B/$prog"
            done
            continue
          fi
          L="LD_LIBRARY_PATH=$NV/lib:$PREFIX/lib:${LD_LIBRARY_PATH:-}"
          one="CUDA_VISIBLE_DEVICES=${UXN_COPY_GPU:-0}"
          heap="UPCXX_SHARED_HEAP_SIZE=1GB"  # the fallback stages 64 MiB copies in UPC++'s shared heap
          np="${UXN_COPY_RANKS:-2}"
          tag="UPC++ $REL $TM $CM, NVSHMEM $nvver"
          copy_run "copy_semantics VMM on, 1 GPU, $tag" "$L" "$one" "$heap" "$U/bin/upcxx-run" -n "$np" "$B/copy_semantics_test"
          copy_run "copy_semantics VMM off, 1 GPU, $tag" "$L" "$one" "$heap" NVSHMEM_DISABLE_CUDA_VMM=1 NVSHMEM_SYMMETRIC_SIZE=4G \
            "$U/bin/upcxx-run" -n "$np" "$B/copy_semantics_test"
          if [ "$ngpu" -ge 2 ]; then
            copy_run "copy_semantics VMM on, a GPU per rank, $tag" "$L" "$heap" "$U/bin/upcxx-run" -n "$np" "$B/copy_semantics_test"
          fi
          copy_run "copy_finalize VMM on, 1 GPU, $tag" "$L" "$one" "$heap" "$U/bin/upcxx-run" -n "$np" "$B/copy_finalize_test"
          if [ -x "$B/copy_cover_test" ]; then
            copy_run "copy_cover VMM on, 1 GPU, $tag" "$L" "$one" "$heap" "$U/bin/upcxx-run" -n "$np" "$B/copy_cover_test"
            copy_run "copy_cover VMM off, 1 GPU, $tag" "$L" "$one" "$heap" NVSHMEM_DISABLE_CUDA_VMM=1 NVSHMEM_SYMMETRIC_SIZE=2G \
              "$U/bin/upcxx-run" -n "$np" "$B/copy_cover_test"
            copy_run "copy_cover fallback forced, 1 GPU, $tag" "$L" "$one" "$heap" UPCXX_EXTRA_NVSHMEM_COPY=upcxx \
              "$U/bin/upcxx-run" -n "$np" "$B/copy_cover_test"
          fi
        done
      done
    done
  done
  [ $pass = build ] && wait_builds
  done
fi
# ---- end of nvshmem_heap::copy's own tests
echo
printf '%s\n' "${summary[@]}"
# Non-zero when any run failed: an exit status other than 0 (77 is a skip), or a failed check.
bad=$(printf '%s\n' "${summary[@]}" | grep -Evc 'exit=(0|77) 0 failed-checks' || true)
if [ "$bad" -gt 0 ]; then echo "FAILED: $bad run(s)"; exit 1; fi
