#!/usr/bin/env bash
# Every test of upcxx-extra-nvshmem, no GPU needed:
#   1. cargo test --locked (unit, layout/bindgen, header drift...), the macros' doctests; the loom model (loom/)
#   2. CMake configure / build / install into a temporary prefix
#   3. c_tests built against the installed prefix, ctest under mpiexec (1, 2, 4 ranks)
#   4. the same under AddressSanitizer, against a MOVED copy of the prefix (relocatability)
#   5. pkg-config smoke check (against the moved copy)
#   6. the C++ layer (tests/cxx) against each real UPC++ release x threadmode laid out by
#      ../shared/upcxx/setup.sh in $UXN_UPCXX_ROOT: header alone (-Wall -Wextra -Werror), the CPU
#      failure tests on 1/2/3 ranks, the example and the GPU tests compiled and linked (nvcc from
#      the nvidia-cuda-nvcc wheel); skipped, visibly, when there is no UPC++
#
# Environment (all optional; defaults from the cache that .ci/run fills):
#   UXN_CACHE                ${UXN_CACHE:-$HOME/.cache/upcxx-extra-nvshmem}
#   UXN_NVSHMEM_ROOTS        colon-separated .../nvidia/nvshmem dirs (default: $UXN_CACHE/nvshmem/*)
#   UXN_CUDA_INCLUDE         colon-separated CUDA include dirs (default: from $UXN_CACHE/cuda)
#   UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB  libnvshmem_host.so.3 for test_nvshmem_loaded (default:
#                            the UXN_NVSHMEM_DEFAULT release of scripts/common.sh)
#   UXN_UPCXX_ROOT           where setup.sh laid out UPC++ (default $UXN_CACHE/upcxx)
#   UXN_WORK                 work directory (default: a fresh temporary one, removed at the end
#                            unless UXN_KEEP=1)
#   UXN_SKIP_CARGO_TEST=1    skip step 1;  UXN_SKIP_ASAN=1  skip step 4
#   CARGO_TARGET_DIR         shared by cargo test (debug) and the CMake build (release);
#                            default <repo>/target
# Every step runs even when an earlier one failed (except those needing the install); the exit
# status is non-zero if any failed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
. scripts/common.sh
CACHE="$UXN_CACHE"
if [ -z "${UXN_NVSHMEM_ROOTS:-}" ]; then
  roots=()
  for v in "${UXN_NVSHMEM_VERSIONS[@]}"; do
    d="$(uxn_nvshmem_root "$v")"
    [ -d "$d" ] && roots+=("$d")
  done
  UXN_NVSHMEM_ROOTS="$(IFS=:; echo "${roots[*]:-}")"
fi
if [ -z "${UXN_CUDA_INCLUDE:-}" ]; then
  incs=()
  for d in "$CACHE/cuda/nvidia/cuda_runtime/include" "$CACHE/cuda/nvidia/cuda_cccl/include"; do
    [ -d "$d" ] && incs+=("$d")
  done
  UXN_CUDA_INCLUDE="$(IFS=:; echo "${incs[*]:-}")"
fi
if [ -z "${UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB:-}" ] && [ -e "$(uxn_nvshmem_root "$UXN_NVSHMEM_DEFAULT")/lib/libnvshmem_host.so.3" ]; then
  UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB="$(uxn_nvshmem_root "$UXN_NVSHMEM_DEFAULT")/lib/libnvshmem_host.so.3"
fi
export UXN_NVSHMEM_ROOTS UXN_CUDA_INCLUDE UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB="${UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

JOBS="$(nproc 2>/dev/null || echo 2)"
if [ -n "${UXN_WORK:-}" ]; then
  WORK="$UXN_WORK"
  mkdir -p "$WORK"
else
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/uxn-test-all.XXXXXX")"
  if [ "${UXN_KEEP:-0}" != 1 ]; then trap 'rm -rf "$WORK"' EXIT; fi
fi
PREFIX="$WORK/prefix"
MOVED="$WORK/prefix-moved"

echo "== upcxx-extra-nvshmem test-all: work dir $WORK"
echo "   UXN_NVSHMEM_ROOTS=$UXN_NVSHMEM_ROOTS"
echo "   UXN_CUDA_INCLUDE=$UXN_CUDA_INCLUDE"
echo "   UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB=$UPCXX_EXTRA_NVSHMEM_TEST_NVSHMEM_LIB"
echo "   CARGO_TARGET_DIR=$CARGO_TARGET_DIR"

failed=()
passed=()
skipped=()
step() { # name command...
  local name="$1"; shift
  echo
  echo "== $name"
  local t0=$SECONDS
  if "$@"; then
    passed+=("$name ($((SECONDS - t0)) s)")
  else
    echo "== $name: FAILED"
    failed+=("$name")
    return 1
  fi
}

# 1. Rust tests (the header drift check is one of them).
if [ "${UXN_SKIP_CARGO_TEST:-0}" != 1 ]; then
  step "cargo test" cargo test --locked || true
  # The boundary macro's doctests: an export without `#[export]` must fail to compile.
  step "C ABI macros (export without the boundary does not compile)" cargo test --locked -p upcxx-extra-nvshmem-macros || true
  step "benches build (cargo check --benches)" cargo check --locked --benches || true
fi

# 1a. The loom model of the table's concurrency protocol (loom/): every interleaving of a reader
# against publish / replace / pool reuse / detach must pass; with the old bug put back
# (--cfg uxn_loom_bug) the model must catch it (that test is should_panic there).
loom_model() {
  RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$CARGO_TARGET_DIR/loom" \
    cargo test --locked --release --manifest-path loom/Cargo.toml &&
  RUSTFLAGS="--cfg loom --cfg uxn_loom_bug" CARGO_TARGET_DIR="$CARGO_TARGET_DIR/loom-bug" \
    cargo test --locked --release --manifest-path loom/Cargo.toml --test table_model replace_reusing_the_pool
}
if [ "${UXN_SKIP_CARGO_TEST:-0}" != 1 ]; then
  step "loom model of the table (and the bug it catches)" loom_model || true
fi

# 1b. The installer: a re-run installs nothing and takes seconds; without Rust it stops first,
# with the exact command, before anything else is installed.
installer_rerun() {
  local t0=$SECONDS out
  out="$(bash scripts/install-deps.sh 2>&1)" || { echo "$out"; return 1; }
  echo "$out" | sed 's/^/   /'
  echo "$out" | grep -q "apt: every package is installed already\|apt: not used" || { echo "the re-run went to apt"; return 1; }
  [ $((SECONDS - t0)) -le 60 ] || { echo "the re-run took $((SECONDS - t0)) s"; return 1; }
}
installer_without_rust() {
  # PATH without any directory holding cargo, a HOME without ~/.cargo, rustup unreachable.
  local p="" d out rc
  IFS=: read -ra _dirs <<<"$PATH"
  for d in "${_dirs[@]}"; do [ -x "$d/cargo" ] || p="${p:+$p:}$d"; done
  if PATH="$p" command -v cargo >/dev/null 2>&1; then echo "SKIPPED: cannot hide cargo here"; return 0; fi
  mkdir -p "$WORK/no-rust-home"
  out="$(env PATH="$p" HOME="$WORK/no-rust-home" UXN_RUSTUP_URL=https://127.0.0.1:9/rustup-init.sh bash scripts/install-deps.sh 2>&1)"; rc=$?
  echo "$out" | sed 's/^/   /'
  [ "$rc" -ne 0 ] && echo "$out" | grep -q "curl --proto '=https' --tlsv1.2 -sSf https://127.0.0.1:9/rustup-init.sh | sh -s -- -y --profile minimal" &&
    echo "$out" | grep -q "Nothing else was installed" && ! echo "$out" | grep -q "^apt:\|nvidia-nvshmem"
}
step "installer re-run: no apt, seconds" installer_rerun || true
step "installer without Rust: stops first with the command" installer_without_rust || true

# 2. CMake build and install.
cmake_install() {
  cmake -S "$ROOT" -B "$WORK/build" -DCMAKE_INSTALL_PREFIX="$PREFIX" -DUXN_CARGO_TARGET_DIR="$CARGO_TARGET_DIR" &&
    cmake --build "$WORK/build" -j "$JOBS" &&
    cmake --install "$WORK/build" &&
    rm -rf "$MOVED" && cp -a "$PREFIX" "$MOVED"
}
installed=0
step "cmake build + install" cmake_install && installed=1

c_tests() { # build-dir prefix extra-cmake-args...
  local dir="$1" prefix="$2"; shift 2
  cmake -S "$ROOT/c_tests" -B "$dir" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" &&
    cmake --build "$dir" -j "$JOBS" &&
    (cd "$dir" && ctest --output-on-failure -j "$JOBS")
}

pkgconfig_smoke() {
  local dir="$WORK/pkgconfig"
  mkdir -p "$dir"
  cat > "$dir/smoke.c" <<'C'
#include <stdio.h>
#include <string.h>
#include "upcxx_extra_nvshmem.h"
int main(void) {
  const char *v = upcxx_extra_nvshmem_version();
  int bad = upcxx_extra_nvshmem_to_global_ptr(NULL, 0, NULL) != UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT;
  printf("upcxx-extra-nvshmem %s via pkg-config: %s\n", v, bad ? "FAILED" : "ok");
  return bad || !v || !*v;
}
C
  local flags
  flags="$(PKG_CONFIG_PATH="$MOVED/lib/pkgconfig" pkg-config --cflags --libs upcxx-extra-nvshmem)"
  echo "pkg-config --cflags --libs upcxx-extra-nvshmem: $flags"
  PKG_CONFIG_PATH="$MOVED/lib/pkgconfig" pkg-config --modversion upcxx-extra-nvshmem
  # shellcheck disable=SC2086
  cc -std=c11 -Wall -Wextra -Werror "$dir/smoke.c" -o "$dir/smoke" $flags &&
    # As the README says: the program starts without LD_LIBRARY_PATH (the .pc file's rpath).
    env -u LD_LIBRARY_PATH "$dir/smoke"
}

if [ "$installed" = 1 ]; then
  # 3. C tests against the installed prefix.
  step "c_tests (ctest)" c_tests "$WORK/c_tests" "$PREFIX" || true
  # 4. ASan, against the moved prefix.
  if [ "${UXN_SKIP_ASAN:-0}" != 1 ]; then
    step "c_tests under ASan (moved prefix)" c_tests "$WORK/c_tests-asan" "$MOVED" -DUXN_SANITIZE=address || true
  fi
  # 5. pkg-config.
  step "pkg-config smoke" pkgconfig_smoke || true

  # ---- doctor runs: reserved for upcxx-nvshmem-doctor checks (e.g. the doctor run against each
  # ---- of $UXN_NVSHMEM_ROOTS); the installed binary is "$PREFIX/bin/upcxx-nvshmem-doctor".
  # The installed doctor against every NVSHMEM release: each must be "supported" (exit 0).
  doctor_all() {
    local root rc=0
    IFS=: read -ra _roots <<<"$UXN_NVSHMEM_ROOTS"
    [ "${#_roots[@]}" -gt 0 ] || { echo "no NVSHMEM roots: nothing to check"; return 0; }
    for root in "${_roots[@]}"; do
      [ -n "$root" ] || continue
      "$PREFIX/bin/upcxx-nvshmem-doctor" "$root/lib/libnvshmem_host.so.3" || rc=1
      NVSHMEM_HOME="$root" "$PREFIX/bin/upcxx-nvshmem-doctor" --json | grep '"verdict": "supported"' >/dev/null || rc=1
    done
    return $rc
  }
  step "doctor (installed) runs" doctor_all || true
  # ---- end of doctor runs

  # 6. The C++ layer against every real UPC++ release and threadmode.
  UPCXX_ROOT="${UXN_UPCXX_ROOT:-$CACHE/upcxx}"
  cxx_layer() { # release threadmode
    local u="$UPCXX_ROOT/upcxx-$1" dir="$WORK/cxx-$1-$2" cuda="$UPCXX_ROOT/cuda-home" nvcc gpu=()
    [ -x "$u/bin/upcxx-meta" ] || { echo "no $u/bin/upcxx-meta"; return 1; }
    nvcc="$(command -v nvcc || true)"
    [ -n "$nvcc" ] || nvcc="$CACHE/nvcc/nvidia/cu13/bin/nvcc"
    # The GPU programs build against the newest NVSHMEM given (its headers are what users meet:
    # 3.8 declares a global ::nvshmem_error, for one).
    local newest="${UXN_NVSHMEM_ROOTS##*:}"
    if [ -x "$nvcc" ] && [ -n "$newest" ]; then
      [ -d "$cuda" ] || cuda="${CUDA_HOME:-/usr/local/cuda}"
      gpu=(-DUXN_NVSHMEM_HOME="$newest"
           -DUXN_CUDA_HOME="$cuda" -DUXN_NVCC="$nvcc")
    fi
    UPCXX_INSTALL="$u" UPCXX_THREADMODE="$2" UPCXX_CODEMODE=O3 UPCXX_NETWORK=smp \
      cmake -S "$ROOT/tests/cxx" -B "$dir" -DCMAKE_PREFIX_PATH="$MOVED" "${gpu[@]}" \
        -DUXN_TEST_LD_LIBRARY_PATH="$UPCXX_ROOT/cuda-home/lib64/stubs" &&
      cmake --build "$dir" -j "$JOBS" &&
      (cd "$dir" && ctest --output-on-failure)
  }
  if [ -d "$UPCXX_ROOT" ] && ls "$UPCXX_ROOT"/upcxx-*/bin/upcxx-meta >/dev/null 2>&1; then
    for rel in 2020.10.0 2023.9.0; do
      for tm in seq par; do
        step "C++ layer: UPC++ $rel $tm" cxx_layer "$rel" "$tm" || true
      done
    done
  else
    echo
    echo "== C++ layer: SKIPPED: no UPC++ in $UPCXX_ROOT (../shared/upcxx absent: see scripts/install-deps.sh)"
    skipped+=("C++ layer against UPC++ (no ../shared/upcxx)")
  fi

  # ---- copy tests in the debug codemode (tests/cxx/copy_*; the opt builds are in the C++ layer
  # ---- steps above, CMake block 4). Per release and threadmode: copy_semantics_test (and, par
  # ---- only, copy_cover_test: about 70 s to compile in debug) compiled and linked against UPC++'s
  # ---- debug codemode (assertions on: global pointer arithmetic across allocators asserts there)
  # ---- and started (exit 77 without a GPU); copy_signatures compiled in debug (par only: its
  # ---- table does not depend on the threadmode).
  copy_tests_debug() { # release threadmode
    local u="$UPCXX_ROOT/upcxx-$1" dir="$WORK/copy-debug-$1-$2" cuda="$UPCXX_ROOT/cuda-home" nvcc prog rc
    local newest="${UXN_NVSHMEM_ROOTS##*:}" M="$UPCXX_ROOT/upcxx-$1/bin/upcxx-meta"
    [ -x "$M" ] || { echo "no $M"; return 1; }
    mkdir -p "$dir"
    if [ "$2" = par ]; then
      # shellcheck disable=SC2046
      ( export UPCXX_CODEMODE=debug UPCXX_THREADMODE="$2" UPCXX_NETWORK=smp
        $("$M" CXX) $("$M" CXXFLAGS) -std=c++17 $("$M" PPFLAGS) -I"$MOVED/include" -Wall -Wextra \
          -c "$ROOT/tests/cxx/copy_signatures.cpp" -o "$dir/copy_signatures.o" ) || return 1
      echo "copy_signatures: compiled (debug, $2)"
    fi
    nvcc="$(command -v nvcc || true)"
    [ -n "$nvcc" ] || nvcc="$CACHE/nvcc/nvidia/cu13/bin/nvcc"
    [ -d "$cuda" ] || cuda="${CUDA_HOME:-/usr/local/cuda}"
    if [ ! -x "$nvcc" ] || [ -z "$newest" ]; then echo "SKIPPED: the GPU programs (no nvcc or NVSHMEM)"; return 0; fi
    local progs=(copy_semantics_test)
    [ "$2" = par ] && progs+=(copy_cover_test)
    for prog in "${progs[@]}"; do
      UPCXX_INSTALL="$u" UPCXX_THREADMODE="$2" UPCXX_CODEMODE=debug NVSHMEM_HOME="$newest" UXN_PREFIX="$MOVED" \
        NVCC="$nvcc" CUDA_HOME="$cuda" bash "$ROOT/tests/cxx/build-upcxx-program.sh" \
        "$ROOT/tests/cxx/$prog.cpp" "$dir/$prog" || return 1
      rc=0
      env UPCXX_SHARED_HEAP_SIZE=256MB LD_LIBRARY_PATH="$newest/lib:$UPCXX_ROOT/cuda-home/lib64/stubs" \
        timeout 300 "$u/bin/upcxx-run" -n 2 "$dir/$prog" > "$dir/$prog.log" 2>&1 || rc=$?
      sed 's/^/   /' "$dir/$prog.log" | tail -5
      # 77: skipped (no GPU here); 0: passed (a GPU here); anything else fails the step.
      if [ "$rc" != 77 ] && [ "$rc" != 0 ]; then echo "$prog (debug, $1 $2): exit $rc"; return 1; fi
    done
  }
  if [ -d "$UPCXX_ROOT" ] && ls "$UPCXX_ROOT"/upcxx-*/bin/upcxx-meta >/dev/null 2>&1; then
    for rel in 2020.10.0 2023.9.0; do
      for tm in seq par; do
        step "copy tests, debug codemode: UPC++ $rel $tm" copy_tests_debug "$rel" "$tm" || true
      done
    done
  fi
  # ---- end of copy tests in the debug codemode
fi

echo
echo "== summary"
for p in "${passed[@]}"; do echo "   passed: $p"; done
for k in "${skipped[@]:+${skipped[@]}}"; do echo "   SKIPPED: $k"; done
for f in "${failed[@]:+${failed[@]}}"; do echo "   FAILED: $f"; done
[ "${#failed[@]}" -eq 0 ]
