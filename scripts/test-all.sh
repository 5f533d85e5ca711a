#!/usr/bin/env bash
# Every test of upcxx-extra-nvshmem, no GPU needed. It installs nothing: first
# `bash scripts/install-deps.sh` (what .ci/run does); without Rust it stops at once with the command.
#   1. cargo test --locked (unit, layout/bindgen, header drift...), the macros' doctests, cargo fmt --check,
#      clippy -D warnings and clang-format; the loom model (loom/); the copy engine under stand-ins for CUDA
#      and UPC++ with ThreadSanitizer (tests/cxx/model/); the installers (re-run, without Rust, the users' part)
#   2. CMake configure / build / install into a temporary prefix
#   3. c_tests built against the installed prefix, ctest under mpiexec (1, 2, 4 ranks)
#   4. the same under AddressSanitizer, against a MOVED copy of the prefix (relocatability)
#   5. pkg-config smoke check (against the moved copy); a consumer with a wrong UPCXX_INSTALL: CMake's
#      fatal message names UPC++ first
#   6. the C++ layer (tests/cxx) against each real UPC++ release x threadmode laid out by
#      ../shared/upcxx/setup.sh in $UXN_UPCXX_ROOT: header alone (-Wall -Wextra -Werror), the CPU
#      failure tests on 1/2/3 ranks, the example and the GPU tests compiled and linked (nvcc from
#      the nvidia-cuda-nvcc wheel); skipped, visibly, when there is no UPC++
#      and once more (seq) in the public-API mode (UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1: every
#      heap.copy through upcxx::copy, no UPC++ internal used)
#   6b. UPC++'s GPU microbenchmark ported onto the heap (tests/cxx/bench, four variants) and
#      examples/cufftmp, built against each UPC++ release and started without a GPU (SKIPPED /
#      a clean failure on every rank)
#   7. README's first program (its marked blocks verbatim, in an env -i shell: built with CMake and
#      with the upcxx wrapper), examples/ (a CMake project against the install) and tests/consumer
#      (FetchContent, add_subdirectory) against real UPC++: run on 2 ranks without a GPU, they must
#      fail together; skipped, visibly, when there is no UPC++
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
# Without Rust every step would fail: stop now, with the command that installs it.
if ! uxn_have_rust; then
  cat >&2 <<EOF
test-all.sh: Rust >= $UXN_RUST_MIN is needed (cargo builds and tests the library), and none is on PATH.
Install it, then run this again:
    $(uxn_rust_install_cmd tests)
(or: bash scripts/install-deps.sh, which installs it and the tests' other dependencies)
Nothing was run.
EOF
  exit 1
fi
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
# The quickstart installs only what a user needs; the tests' dependencies come from install-deps.sh.
if ! command -v mpiexec >/dev/null 2>&1 || [ -z "$UXN_NVSHMEM_ROOTS" ]; then
  echo "   note: no mpiexec or no NVSHMEM release in $CACHE: bash scripts/install-deps.sh installs what the tests need"
fi

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
  # Formatting (rustfmt.toml) and lints, -D warnings: the library and macros/, and loom/ as
  # the model compiles it.
  # (scripts/install-deps.sh installs both: rustup's --component rustfmt,clippy.)
  rust_fmt() { cargo fmt --all -- --check && (cd loom && cargo fmt -- --check) && (cd fuzz && cargo fmt -- --check); }
  rust_clippy() {
    cargo clippy --workspace --all-targets --locked -- -D warnings &&
      RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$CARGO_TARGET_DIR/loom" \
        cargo clippy --all-targets --locked --manifest-path loom/Cargo.toml -- -D warnings
  }
  step "cargo fmt --check (workspace, loom, fuzz)" rust_fmt || true
  # The C and C++ sources (.clang-format; the cbindgen header is generated, not formatted).
  cxx_fmt() {
    local cf="$CACHE/clang-format/clang_format/data/bin/clang-format" f bad=0
    [ -x "$cf" ] || { echo "no $cf: run scripts/install-deps.sh"; return 1; }
    while IFS= read -r f; do
      "$cf" --dry-run -Werror "$f" 2>&1 | head -5 || true
      "$cf" --dry-run -Werror "$f" >/dev/null 2>&1 || bad=1
    done < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' | grep -v '^include/upcxx_extra_nvshmem\.h$')
    [ "$bad" = 0 ] || echo "format with: $cf -i <file> (clang-format 18.1.8, .clang-format)"
    return "$bad"
  }
  step "clang-format --dry-run -Werror (C and C++ sources)" cxx_fmt || true
  step "cargo clippy -D warnings (library, macros; loom under --cfg loom)" rust_clippy || true
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

# 1b. The copy engine's threads and lifetimes (include/upcxx_extra/nvshmem/copy_engine.hpp) with
# stand-ins for CUDA and UPC++'s personas (tests/cxx/model/), under ThreadSanitizer.
copy_engine_model() {
  local out="$WORK/copy_engine_model_test"
  g++ -std=c++17 -O1 -g -fsanitize=thread -Wall -Wextra -Werror -I "$ROOT/tests/cxx/model" -I "$ROOT/include" \
    -I "$ROOT/tests/cxx" "$ROOT/tests/cxx/model/copy_engine_model_test.cpp" -o "$out" -pthread &&
    TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$out" 200
}
step "copy engine model (stand-ins for CUDA and UPC++, ThreadSanitizer)" copy_engine_model || true

# 1c. The installer: a re-run installs nothing and takes seconds; without Rust it stops first,
# with the exact command, before anything else is installed.
installer_rerun() {
  local t0=$SECONDS out
  out="$(bash scripts/install-deps.sh 2>&1)" || { echo "$out"; return 1; }
  echo "$out" | sed 's/^/   /'
  echo "$out" | grep -q "apt: every package is installed already\|apt: not used" || { echo "the re-run went to apt"; return 1; }
  [ $((SECONDS - t0)) -le 60 ] || { echo "the re-run took $((SECONDS - t0)) s"; return 1; }
}
# Runs `script` with Rust hidden (PATH without any directory holding cargo, a HOME without
# ~/.cargo, rustup unreachable): it must fail, print rustup's exact command and `said`, and none
# of `never` (a grep pattern). Skipped where cargo cannot be hidden.
without_rust() { # script said never
  local p="" d out rc
  IFS=: read -ra _dirs <<<"$PATH"
  for d in "${_dirs[@]}"; do [ -x "$d/cargo" ] || p="${p:+$p:}$d"; done
  if PATH="$p" command -v cargo >/dev/null 2>&1; then echo "SKIPPED: cannot hide cargo here"; return 0; fi
  mkdir -p "$WORK/no-rust-home"
  out="$(env PATH="$p" HOME="$WORK/no-rust-home" UXN_RUSTUP_URL=https://127.0.0.1:9/rustup-init.sh bash "$1" 2>&1)"; rc=$?
  echo "$out" | sed 's/^/   /'
  [ "$rc" -ne 0 ] && echo "$out" | grep -q "curl --proto '=https' --tlsv1.2 -sSf https://127.0.0.1:9/rustup-init.sh | sh -s -- -y --profile minimal --component rustfmt,clippy" &&
    echo "$out" | grep -q "$2" && ! echo "$out" | grep -q "$3"
}
installer_without_rust() { without_rust scripts/install-deps.sh "Nothing else was installed" "^apt:\|nvidia-nvshmem"; }
# test-all.sh itself without Rust: stops at once with the command, runs no step.
test_all_without_rust() { without_rust scripts/test-all.sh "Nothing was run" "^== \|FAILED\|command not found"; }
# The users' installer (the quickstart's): one NVSHMEM, nothing that only the tests need.
installer_user() {
  local out
  out="$(UXN_DEPS=user bash scripts/install-deps.sh 2>&1)" || { echo "$out"; return 1; }
  echo "$out" | sed 's/^/   /'
  [ "$(echo "$out" | grep -c "^nvidia-nvshmem-cu")" = 1 ] || { echo "not exactly one NVSHMEM"; return 1; }
  ! echo "$out" | grep -q "CUDA headers\|UPC++\|nvcc" || { echo "test-only dependencies in the users' install"; return 1; }
}
step "installer re-run: no apt, seconds" installer_rerun || true
step "installer without Rust: stops first with the command" installer_without_rust || true
step "test-all.sh without Rust: stops at once with the command" test_all_without_rust || true
step "installer for users (UXN_DEPS=user): one NVSHMEM, no test-only dependencies" installer_user || true

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

# A consumer configured with a wrong UPCXX_INSTALL: CMake's fatal reason names UPC++ (and
# UPCXX_INSTALL) first, before the CUDA headers that a missing UPC++ also loses.
wrong_upcxx_install() {
  local dir="$WORK/wrong-upcxx" out rc=0 reason
  rm -rf "$dir"; mkdir -p "$dir/src"
  cat > "$dir/src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(wrong_upcxx LANGUAGES CXX)
find_package(UpcxxExtraNvshmem 0.1 CONFIG REQUIRED COMPONENTS cxx nvshmem)
CMAKE
  out="$(env -u UPCXX_INSTALL -u CUDA_HOME cmake -S "$dir/src" -B "$dir/build" -DCMAKE_PREFIX_PATH="$MOVED" \
    -DUPCXX_INSTALL="$dir/no-such-upcxx" -DNVSHMEM_HOME="$(uxn_nvshmem_root "$UXN_NVSHMEM_DEFAULT")" 2>&1)" || rc=$?
  echo "$out" | sed 's/^/   | /'
  [ "$rc" -ne 0 ] || { echo "configure succeeded with UPCXX_INSTALL=$dir/no-such-upcxx"; return 1; }
  reason="$(echo "$out" | sed -n '/Reason given by package:/,$p' | tr -s ' \n' ' ')"
  echo "$reason" | grep -q "Reason given by package: component cxx .*UPC++ not found (UPCXX_INSTALL=$dir/no-such-upcxx is not a UPC++ install" ||
    { echo "the fatal reason does not begin with UPC++ and UPCXX_INSTALL"; return 1; }
  [ "$(echo "$out" | grep -c "Found UPCXX")" = 0 ] || { echo "a 'Found UPCXX' line"; return 1; }
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
  step "CMake: a wrong UPCXX_INSTALL gets a fatal message that names UPC++ first" wrong_upcxx_install || true

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
  UPCXX_RELEASES="2020.10.0 2023.9.0"
  # Whether ../shared/upcxx was laid out in UPCXX_ROOT (else the UPC++ steps say SKIPPED).
  have_upcxx() { [ -d "$UPCXX_ROOT" ] && ls "$UPCXX_ROOT"/upcxx-*/bin/upcxx-meta >/dev/null 2>&1; }
  # What links the GPU programs: nvcc (on PATH, else the nvidia-cuda-nvcc wheel) and the CUDA
  # home (setup.sh's, else CUDA_HOME). Sets nvcc and cuda in the caller's locals.
  gpu_link_tools() {
    nvcc="$(command -v nvcc || true)"
    [ -n "$nvcc" ] || nvcc="$CACHE/nvcc/nvidia/cu13/bin/nvcc"
    cuda="$UPCXX_ROOT/cuda-home"
    [ -d "$cuda" ] || cuda="${CUDA_HOME:-/usr/local/cuda}"
  }
  cxx_layer() { # release threadmode [public]
    local u="$UPCXX_ROOT/upcxx-$1" dir="$WORK/cxx-$1-$2${3:+-$3}" cuda nvcc gpu=() mode=()
    # public: every test and GPU program in the public-API mode (UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1)
    [ "${3:-}" = public ] && mode=(-DUXN_UPCXX_PUBLIC_ONLY=ON)
    [ -x "$u/bin/upcxx-meta" ] || { echo "no $u/bin/upcxx-meta"; return 1; }
    gpu_link_tools
    # The GPU programs build against the newest NVSHMEM given (its headers are what users meet:
    # 3.8 declares a global ::nvshmem_error, for one).
    local newest="${UXN_NVSHMEM_ROOTS##*:}"
    if [ -x "$nvcc" ] && [ -n "$newest" ]; then
      gpu=(-DUXN_NVSHMEM_HOME="$newest"
           -DUXN_CUDA_HOME="$cuda" -DUXN_NVCC="$nvcc")
    fi
    UPCXX_INSTALL="$u" UPCXX_THREADMODE="$2" UPCXX_CODEMODE=O3 UPCXX_NETWORK=smp \
      cmake -S "$ROOT/tests/cxx" -B "$dir" -DCMAKE_PREFIX_PATH="$MOVED" "${gpu[@]}" "${mode[@]}" \
        -DUXN_TEST_LD_LIBRARY_PATH="$UPCXX_ROOT/cuda-home/lib64/stubs" &&
      cmake --build "$dir" -j "$JOBS" &&
      (cd "$dir" && ctest --output-on-failure)
  }
  if have_upcxx; then
    for rel in $UPCXX_RELEASES; do
      for tm in seq par; do
        step "C++ layer: UPC++ $rel $tm" cxx_layer "$rel" "$tm" || true
      done
      step "C++ layer: UPC++ $rel seq, public-API mode (UPCXX_EXTRA_NVSHMEM_UPCXX_PUBLIC_ONLY=1)" \
        cxx_layer "$rel" seq public || true
    done
  else
    echo
    echo "== C++ layer: SKIPPED: no UPC++ in $UPCXX_ROOT (../shared/upcxx absent: see scripts/install-deps.sh)"
    skipped+=("C++ layer against UPC++ (no ../shared/upcxx)")
  fi

  # 6b. UPC++'s GPU microbenchmark (tests/cxx/bench: gpu_microbenchmark.cpp built four ways) and
  # 7b. examples/cufftmp (cuFFTMp from UPC++ with CUFFT_COMM_NONE), against each UPC++ release
  # (seq, opt): they build against the installed package; started on 2 ranks without a GPU, the
  # benchmark's variants say SKIPPED (exit 77: ctest "Skipped"), and every rank of the cuFFTMp
  # example fails with rank 0's nvshmem_init error (examples/cufftmp/check-no-gpu.sh).
  microbench() { # release
    local u="$UPCXX_ROOT/upcxx-$1" dir="$WORK/microbench-$1" newest="${UXN_NVSHMEM_ROOTS##*:}"
    [ -n "$newest" ] || { echo "no NVSHMEM release in $CACHE"; return 1; }
    UPCXX_INSTALL="$u" UPCXX_THREADMODE=seq UPCXX_CODEMODE=O3 UPCXX_NETWORK=smp \
      cmake -S "$ROOT/tests/cxx/bench" -B "$dir" -DCMAKE_PREFIX_PATH="$MOVED" -DNVSHMEM_HOME="$newest" \
        -DCUDA_HOME="$UPCXX_ROOT/cuda-home" -DUXN_BENCH_LD_LIBRARY_PATH="$UPCXX_ROOT/cuda-home/lib64/stubs" &&
      cmake --build "$dir" -j "$JOBS" &&
      (cd "$dir" && ctest --output-on-failure)
  }
  cufftmp_example() { # release
    local u="$UPCXX_ROOT/upcxx-$1" dir="$WORK/cufftmp-$1" nv cfm
    nv="$(uxn_nvshmem_root 3.8.0 13)"
    cfm="$CACHE/cufftmp/$UXN_CUFFTMP_VERSION/nvidia/cufftmp/cu13"
    [ -e "$cfm/lib/libcufftMp.so.12" ] && [ -e "$nv/lib/libnvshmem_host.so.3" ] ||
      { echo "no nvidia-cufftmp-cu13 $UXN_CUFFTMP_VERSION or nvidia-nvshmem-cu13 3.8.0 in $CACHE (bash scripts/install-deps.sh)"; return 1; }
    UPCXX_INSTALL="$u" UPCXX_THREADMODE=seq UPCXX_CODEMODE=O3 UPCXX_NETWORK=smp \
      cmake -S "$ROOT/examples/cufftmp" -B "$dir" -DCMAKE_PREFIX_PATH="$MOVED" -DNVSHMEM_HOME="$nv" \
        -DCUFFTMP_HOME="$cfm" -DCUDA_HOME="$UPCXX_ROOT/cuda-home" -DUXN_CUFFTMP_EXPECT_GPU=OFF \
        -DUXN_CUFFTMP_LD_LIBRARY_PATH="$UPCXX_ROOT/cuda-home/lib64/stubs" &&
      cmake --build "$dir" -j "$JOBS" &&
      (cd "$dir" && ctest --output-on-failure)
  }
  if have_upcxx; then
    for rel in $UPCXX_RELEASES; do
      step "microbenchmark (tests/cxx/bench): UPC++ $rel, four variants build, SKIPPED without a GPU" microbench "$rel" || true
      step "examples/cufftmp: UPC++ $rel, builds and links, fails cleanly on 2 ranks without a GPU" cufftmp_example "$rel" || true
    done
  fi

  # 7. README's first program and a consumer of the source tree, against real UPC++, no GPU.
  # The README's blocks marked <!-- test: NAME --> are extracted (scripts/readme-blocks.py), built
  # as the README says (CMake, then the upcxx wrapper) and run on 2 ranks; tests/consumer is built
  # with FetchContent and with add_subdirectory (the example, and a program with its own NVSHMEM
  # kernel when nvcc can compile: nvcc on PATH, or the nvcc + nvvm wheels). Without a GPU every
  # run must fail together: exit status non-zero, no timeout (a rank left waiting), no abort, and
  # every rank printing rank 0's nvshmem_init error.
  fail_together() { # log rc ranks what
    local log="$1" rc="$2" n="$3" what="$4" m0 line r
    sed 's/^/   | /' "$log"
    [ "$rc" -ne 124 ] || { echo "$what: timed out: a rank was left waiting"; return 1; }
    [ "$rc" -ne 0 ] || { echo "$what: exit status 0 without a GPU"; return 1; }
    ! grep -qi "abort\|terminate called\|core dumped" "$log" || { echo "$what: aborted"; return 1; }
    m0="$(sed -n 's/^rank 0: \(nvshmem_init: .*\)$/\1/p' "$log" | head -1)"
    [ -n "$m0" ] || { echo "$what: rank 0 printed no nvshmem_init error"; return 1; }
    for ((r = 1; r < n; r++)); do
      line="$(sed -n "s/^rank $r: \(nvshmem_init: .*\)$/\1/p" "$log" | head -1)"
      [ "$line" = "$m0" ] || [[ "$line" == *": $m0" ]] || { echo "$what: rank $r printed '$line', not rank 0's error"; return 1; }
    done
    echo "$what: every rank failed with rank 0's error (exit $rc)"
  }
  # The README's first program as a newcomer runs it: its blocks verbatim, in a shell with nothing
  # set but HOME and PATH (env -i), the settings for a machine without a GPU. Stand-ins for what the
  # newcomer has: a clone whose ./install is the test prefix (the quickstart's), and a HOME whose
  # ~/.cache/upcxx-extra-nvshmem holds the cache's NVSHMEM and UPC++ layout (links), so that
  # ~/first is made in the work directory. The files main.cpp and CMakeLists.txt are copied in
  # where the README says to write them; for UPC++ 2020.10.0 the settings name it instead of
  # 2023.9.0 (the only change).
  readme_first() { # release
    local dir="$WORK/readme-$1" rc how
    [ -x "$UPCXX_ROOT/upcxx-$1/bin/upcxx-meta" ] || { echo "no UPC++ $1 in $UPCXX_ROOT"; return 1; }
    [ -e "$(uxn_nvshmem_root "$UXN_NVSHMEM_DEFAULT")/lib/libnvshmem_host.so.3" ] ||
      { echo "no NVSHMEM $UXN_NVSHMEM_DEFAULT in the cache (the quickstart's)"; return 1; }
    grep -q "nvshmem/$UXN_NVSHMEM_DEFAULT/nvidia/nvshmem" README.md ||
      { echo "README's settings do not name NVSHMEM $UXN_NVSHMEM_DEFAULT (scripts/common.sh UXN_NVSHMEM_DEFAULT)"; return 1; }
    rm -rf "$dir"
    mkdir -p "$dir/clone" "$dir/home/.cache/upcxx-extra-nvshmem"
    python3 scripts/readme-blocks.py README.md "$dir/blocks" || return 1
    cp -a "$MOVED" "$dir/clone/install"
    ln -s "$CACHE/nvshmem" "$dir/home/.cache/upcxx-extra-nvshmem/nvshmem"
    ln -s "$UPCXX_ROOT" "$dir/home/.cache/upcxx-extra-nvshmem/upcxx"
    local b="$dir/blocks/first"
    [ "$1" = 2023.9.0 ] || sed -i "s/upcxx-2023\.9\.0/upcxx-$1/" "$b/no-gpu.sh"
    cat > "$dir/newcomer.sh" <<'SH'
# newcomer.sh CLONE BLOCKS HOW LOG: the README's blocks in order, as one shell session.
set -e
cd "$1"
. "$2/settings.sh"
. "$2/no-gpu.sh"
. "$2/folder.sh"
cp "$2/main.cpp" "$2/CMakeLists.txt" .          # the README: "main.cpp", "CMakeLists.txt"
set -x
. "$2/build-$3.sh"
set +x
rc=0
timeout 120 bash "$2/run-$3.sh" > "$4" 2>&1 || rc=$?
exit "$rc"
SH
    for how in cmake upcxx; do
      rc=0
      env -i HOME="$dir/home" PATH="$PATH" bash "$dir/newcomer.sh" "$dir/clone" "$b" "$how" "$dir/run-$how.log" || rc=$?
      [ -e "$dir/run-$how.log" ] || { echo "README first program ($how, UPC++ $1): the build failed (exit $rc)"; return 1; }
      fail_together "$dir/run-$how.log" "$rc" 2 "README first program ($how, UPC++ $1)" || return 1
    done
  }
  consumer() { # FetchContent|add_subdirectory release
    local u="$UPCXX_ROOT/upcxx-$2" dir="$WORK/consumer-$1" cuda="$UPCXX_ROOT/cuda-home" dev=() rc nvcc=""
    local newest="${UXN_NVSHMEM_ROOTS##*:}"
    if command -v nvcc >/dev/null 2>&1; then
      nvcc="$(command -v nvcc)"
    elif [ -x "$CACHE/nvvm/nvidia/cu13/nvvm/bin/cicc" ] && [ -x "$CACHE/nvcc/nvidia/cu13/bin/nvcc" ] &&
         bash scripts/cuda-toolkit-from-wheels.sh "$WORK/cuda-toolkit-$1" "$CACHE/nvcc/nvidia/cu13" "$CACHE/nvvm/nvidia/cu13" "$cuda"; then
      nvcc="$WORK/cuda-toolkit-$1/bin/nvcc"
    fi
    if [ -n "$nvcc" ]; then
      dev=(-DUXN_CONSUMER_DEVICE=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90)
    else
      echo "no nvcc that compiles (nvcc on PATH, or the nvidia-nvvm wheel): the kernel program is not built"
      skipped+=("consumer ($1): the program with its own NVSHMEM kernel (no nvcc that compiles)")
    fi
    rm -rf "$dir"
    cmake -S "$ROOT/tests/consumer" -B "$dir" -DUXN_CONSUMER_HOW="$1" -DUPCXX_INSTALL="$u" -DNVSHMEM_HOME="$newest" \
      -DUXN_CARGO_TARGET_DIR="$CARGO_TARGET_DIR" "${dev[@]}" && cmake --build "$dir" -j "$JOBS" || return 1
    rc=0
    LD_LIBRARY_PATH="$cuda/lib64/stubs" timeout 120 "$u/bin/upcxx-run" -n 2 "$dir/nvshmem_upcxx_copy" > "$dir/example.log" 2>&1 || rc=$?
    fail_together "$dir/example.log" "$rc" 2 "example via $1 (UPC++ $2)" || return 1
    if [ -n "$nvcc" ]; then
      rc=0
      LD_LIBRARY_PATH="$cuda/lib64/stubs" timeout 120 "$u/bin/upcxx-run" -n 2 "$dir/ring_kernel" > "$dir/ring.log" 2>&1 || rc=$?
      fail_together "$dir/ring.log" "$rc" 2 "kernel program via $1 (UPC++ $2)" || return 1
      [ "$(grep -c "NVSHMEM's device library registered" "$dir/ring.log")" -eq 2 ] ||
        { echo "the kernel program did not register NVSHMEM's device library on both ranks"; return 1; }
    fi
  }
  # examples/ as a CMake project against the installed package (examples/README.md's commands),
  # UPC++ 2023.9.0, the default NVSHMEM: every example built (UXN_EXAMPLES_REQUIRE_ALL),
  # translate_demo passes on the CPU, nvshmem_upcxx_copy on 2 ranks without a GPU fails together.
  examples_build() {
    local dir="$WORK/examples" u="$UPCXX_ROOT/upcxx-2023.9.0" rc=0
    rm -rf "$dir"
    cmake -S "$ROOT/examples" -B "$dir" -DCMAKE_PREFIX_PATH="$MOVED" -DUPCXX_INSTALL="$u" \
      -DNVSHMEM_HOME="$(uxn_nvshmem_root "$UXN_NVSHMEM_DEFAULT")" -DUXN_EXAMPLES_REQUIRE_ALL=ON &&
      cmake --build "$dir" -j "$JOBS" || return 1
    "$dir/translate_demo" || { echo "translate_demo failed"; return 1; }
    UPCXX_SHARED_HEAP_SIZE=1GB LD_LIBRARY_PATH="$UPCXX_ROOT/cuda-home/lib64/stubs" timeout 120 \
      "$u/bin/upcxx-run" -n 2 "$dir/nvshmem_upcxx_copy" > "$dir/example.log" 2>&1 || rc=$?
    fail_together "$dir/example.log" "$rc" 2 "examples/nvshmem_upcxx_copy (UPC++ 2023.9.0)"
  }
  if have_upcxx && [ -n "$UXN_NVSHMEM_ROOTS" ]; then
    for rel in $UPCXX_RELEASES; do
      step "README: first program, UPC++ $rel (CMake, upcxx wrapper; 2 ranks fail together)" readme_first "$rel" || true
    done
    step "examples/: CMake project against the install (translate_demo passes; nvshmem_upcxx_copy fails together)" examples_build || true
    step "consumer: FetchContent, UPC++ 2023.9.0 (example + kernel program; fail together)" consumer FetchContent 2023.9.0 || true
    step "consumer: add_subdirectory, UPC++ 2020.10.0 (example + kernel program; fail together)" consumer add_subdirectory 2020.10.0 || true
  else
    echo
    echo "== README first program and consumer: SKIPPED: no UPC++ in $UPCXX_ROOT or no NVSHMEM"
    skipped+=("README first program and consumer (no UPC++ or no NVSHMEM)")
  fi

  # ---- copy tests in the debug codemode (tests/cxx/copy_*; the opt builds are in the C++ layer
  # ---- steps above, CMake block 4). Per release and threadmode: copy_semantics_test (and, par
  # ---- only, copy_cover_test: about 70 s to compile in debug) compiled and linked against UPC++'s
  # ---- debug codemode (assertions on: global pointer arithmetic across allocators asserts there)
  # ---- and started (exit 77 without a GPU); copy_signatures compiled in debug (par only: its
  # ---- table does not depend on the threadmode).
  copy_tests_debug() { # release threadmode
    local u="$UPCXX_ROOT/upcxx-$1" dir="$WORK/copy-debug-$1-$2" cuda nvcc prog rc
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
    gpu_link_tools
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
  if have_upcxx; then
    for rel in $UPCXX_RELEASES; do
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
