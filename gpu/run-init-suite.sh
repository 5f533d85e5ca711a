#!/usr/bin/env bash
# upcxx::extra::nvshmem_init()/nvshmem_finalize() on the GPU machine (2 GPUs, nvcc, CMake), against
# each UPC++ release (../shared/upcxx, carried with its setup.sh) and each NVSHMEM (the machine's
# pip wheel, and others carried as .tar.xz of lib/ + include/), 2 ranks on the smp conduit:
#   1. README's first program, its blocks as they are (scripts/readme-blocks.py), built with CMake
#      and with the upcxx wrapper: each PE must print "b holds PE <previous>'s bytes";
#   2. tests/cxx/nvshmem_init_gpu_test (host-only build): init on the default device, the refusal
#      to finalize under an active heap, finalize, init again on the caller's device with a heap
#      size; CUDA VMM on and off;
#   3. tests/consumer as a package consumer with its kernel program (upcxx_extra_nvshmem_add_device_code:
#      nvshmem_init through NVSHMEM's device library; a kernel's nvshmem_int_p read back by UPC++)
#      and the example (host-only build). NVSHMEM releases without libnvshmem_device.a skip the
#      kernel program.
#   [UXN_PREFIX=<install prefix of this library>] UXN_UPCXX_DIR=<dir with setup.sh + tarballs> \
#   [UXN_NVSHMEM_TARBALLS="a.tar.xz ..."] [CUDA_ARCH=90] gpu/run-init-suite.sh [outdir]
# UXN_PREFIX defaults to the quickstart's ./install; CUDA_ARCH (compute capability, e.g. 90, or
# native) to the GPU's own (nvidia-smi).
# Prints the runs' lines and one SUMMARY line per run; exit status 0 when every run passed.
set -u
OUTDIR=${1:-/tmp/uxn-init}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/scripts/common.sh"
PREFIX=${UXN_PREFIX:-$UXN_QUICKSTART_PREFIX}
[ -e "$PREFIX/lib/libupcxx_extra_nvshmem.so" ] || { echo "no upcxx-extra-nvshmem in $PREFIX: run ./scripts/quickstart.sh, or set UXN_PREFIX" >&2; exit 2; }
UPCXX_DIR=${UXN_UPCXX_DIR:?UXN_UPCXX_DIR must name a directory with setup.sh and the UPC++ tarballs}
ARCH=${CUDA_ARCH:-$(uxn_gpu_arch)}; ARCH=${ARCH#sm_}
echo "CUDA architecture: $ARCH"
uxn_gpu_env

# The machine, the UPC++ layout (CUDA_HOME) and the NVSHMEM installs to test (homes).
uxn_gpu_upcxx_prologue "$OUTDIR" "$UPCXX_DIR"

summary=()
failed=0
# run LABEL EXPECT LOG command...: runs the command (240 s at most), prints its lines, and records
# a SUMMARY line; EXPECT: a regular expression every PASS needs in the output.
run() {
  local label="$1" expect="$2" log="$3"; shift 3
  echo; echo "== $label: $*"
  local t0=$SECONDS rc=0
  timeout 240 "$@" > "$log" 2>&1 || rc=$?
  grep -vE "^\s*$" "$log" | head -60
  local verdict=PASS
  if [ "$rc" -ne 0 ] || ! grep -qE "$expect" "$log" || grep -q "CHECK rank [0-9]* FAIL" "$log"; then verdict=FAIL; failed=1; fi
  summary+=("SUMMARY $verdict $label exit=$rc ($((SECONDS - t0)) s)")
}
# Every PE of the README program must print the previous PE's number.
readme_ok() { grep -q "PE 0: b holds PE 1's bytes" "$1" && grep -q "PE 1: b holds PE 0's bytes" "$1"; }

for NV in "${homes[@]}"; do
  nvver=$(uxn_nvshmem_version "$NV")
  for REL in ${UXN_RELEASES:-2020.10.0 2023.9.0}; do
    U="$OUTDIR/upcxx/upcxx-$REL"; B="$OUTDIR/$REL-nvshmem$nvver"; tag="UPC++ $REL, NVSHMEM $nvver"
    rm -rf "$B"; mkdir -p "$B"
    export UPCXX_INSTALL="$U" NVSHMEM_HOME="$NV"
    # 1. README's first program.
    python3 "$ROOT/scripts/readme-blocks.py" "$ROOT/README.md" "$B/readme" > /dev/null
    for how in cmake upcxx; do
      if (cd "$B/readme/first" && PREFIX="$PREFIX" bash -e "build-$how.sh") > "$B/readme-build-$how.log" 2>&1; then
        run "README first program ($how), $tag" "b holds PE" "$B/readme-run-$how.log" \
          bash -c "cd '$B/readme/first' && bash run-$how.sh"
        readme_ok "$B/readme-run-$how.log" || { summary+=("SUMMARY FAIL README first program ($how) output, $tag"); failed=1; }
      else
        tail -20 "$B/readme-build-$how.log"; summary+=("SUMMARY FAIL README first program ($how) BUILD, $tag"); failed=1
      fi
    done
    # 2. nvshmem_init_gpu_test, and the CPU test of the failure paths (on a GPU machine its
    # 'no GPU' case says SKIPPED).
    if UPCXX_THREADMODE=seq cmake -S "$ROOT/tests/cxx" -B "$B/cxx" -DCMAKE_PREFIX_PATH="$PREFIX" -DUXN_NVSHMEM_HOME="$NV" \
         -DUXN_TEST_NVSHMEM_LIB="$NV/lib/libnvshmem_host.so.3" > "$B/cxx-configure.log" 2>&1 &&
       cmake --build "$B/cxx" --target nvshmem_init_gpu_test nvshmem_init_cpu_test > "$B/cxx-build.log" 2>&1; then
      run "nvshmem_init_gpu_test VMM on, $tag" "RESULT nvshmem_init_gpu_test PASS" "$B/init-vmm.log" \
        "$U/bin/upcxx-run" -n 2 "$B/cxx/nvshmem_init_gpu_test"
      run "nvshmem_init_gpu_test VMM off, $tag" "RESULT nvshmem_init_gpu_test PASS" "$B/init-novmm.log" \
        env NVSHMEM_DISABLE_CUDA_VMM=1 "$U/bin/upcxx-run" -n 2 "$B/cxx/nvshmem_init_gpu_test"
      run "nvshmem_init_cpu_test, $tag" "RESULT nvshmem_init_cpu_test PASS" "$B/init-cpu.log" \
        env UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB="$NV/lib/libnvshmem_host.so.3" "$U/bin/upcxx-run" -n 3 "$B/cxx/nvshmem_init_cpu_test"
    else
      tail -30 "$B/cxx-configure.log" "$B/cxx-build.log"; summary+=("SUMMARY FAIL tests/cxx BUILD, $tag"); failed=1
    fi
    # 3. The consumer: the example (host-only) and the kernel program (device library).
    dev=()
    if [ -e "$NV/lib/libnvshmem_device.a" ]; then
      dev=(-DUXN_CONSUMER_DEVICE=ON -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DCMAKE_CUDA_ARCHITECTURES="$ARCH")
    else
      summary+=("SUMMARY SKIPPED kernel program: NVSHMEM $nvver has no libnvshmem_device.a, $tag")
    fi
    if cmake -S "$ROOT/tests/consumer" -B "$B/consumer" -DUXN_CONSUMER_HOW=package -DCMAKE_PREFIX_PATH="$PREFIX" \
         -DUPCXX_INSTALL="$U" -DNVSHMEM_HOME="$NV" "${dev[@]}" > "$B/consumer-configure.log" 2>&1 &&
       cmake --build "$B/consumer" > "$B/consumer-build.log" 2>&1; then
      run "example (host-only build), $tag" "RESULT PASS" "$B/example.log" \
        "$U/bin/upcxx-run" -n 2 "$B/consumer/nvshmem_upcxx_copy"
      if [ "${#dev[@]}" -gt 0 ]; then
        run "kernel program (device library), VMM on, $tag" "RESULT ring_kernel PASS" "$B/ring.log" \
          "$U/bin/upcxx-run" -n 2 "$B/consumer/ring_kernel"
        run "kernel program (device library), VMM off, $tag" "RESULT ring_kernel PASS" "$B/ring-novmm.log" \
          env NVSHMEM_DISABLE_CUDA_VMM=1 "$U/bin/upcxx-run" -n 2 "$B/consumer/ring_kernel"
      fi
    else
      tail -30 "$B/consumer-configure.log" "$B/consumer-build.log"; summary+=("SUMMARY FAIL tests/consumer BUILD, $tag"); failed=1
    fi
  done
done
echo
printf '%s\n' "${summary[@]}"
exit "$failed"
