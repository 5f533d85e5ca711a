# Shared by the scripts (sourced, never run): where things are cached, which NVSHMEM releases the
# tests use, and the Rust check. One place for each default.
#   . "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# ---- The releases and the cache layout, named here once ------------------------------------------
# The test suite's CMake reads these lines as text too (tests/releases.cmake, for tests/CMakeLists.txt
# and tests/standin/CMakeLists.txt): keep each a plain NAME=word or NAME=(word word ...) at the start
# of a line, no quotes, no $; {version} and {cuda} are filled in by uxn_nvshmem_root and the CMake.
# The cache (scripts/install-deps.sh fills it) is $HOME/UXN_CACHE_IN_HOME unless UXN_CACHE says otherwise.
UXN_CACHE_IN_HOME=.cache/upcxx-extra-nvshmem
# nvidia-nvshmem-cu12 releases the tests run against; the middle one is the default library, the
# one NVSHMEM that the quickstart (UXN_DEPS=user) installs.
UXN_NVSHMEM_VERSIONS=(3.1.7 3.4.5 3.8.0)
UXN_NVSHMEM_DEFAULT=3.4.5
# Where a release's NVSHMEM root (.../nvidia/nvshmem) is in the cache: the cu12 wheels, and those of
# another CUDA major version ({cuda}: 13 for nvidia-nvshmem-cu13).
UXN_CACHE_NVSHMEM=nvshmem/{version}/nvidia/nvshmem
UXN_CACHE_NVSHMEM_CU=nvshmem-cu{cuda}/{version}/nvidia/nvshmem
# nvidia-cufftmp-cu13 release of examples/cufftmp's test; it loads nvidia-nvshmem-cu13 >= 3.8.0.
UXN_CUFFTMP_VERSION=12.1.3.2
# The CUDA 13 NVSHMEM release that cuFFTMp loads (nvidia-nvshmem-cu13), for the same test.
UXN_NVSHMEM_CU13=3.8.0
# UPC++ releases the tests build against, oldest first, laid out in the cache's UXN_CACHE_UPCXX by
# ../shared/upcxx/setup.sh (upcxx-<release>/, and cuda-home/ for the CUDA headers).
UXN_UPCXX_RELEASES=(2020.10.0 2023.9.0)
UXN_CACHE_UPCXX=upcxx
# ---------------------------------------------------------------------------------------------------

# The pip wheels (NVSHMEM host libraries, CUDA headers, nvcc) and the UPC++ layout live here,
# outside the clone.
UXN_CACHE="${UXN_CACHE:-$HOME/$UXN_CACHE_IN_HOME}"
# The CUDA major version of the user's NVSHMEM wheel: 12 (nvidia-nvshmem-cu12, runs on drivers
# >= 525, CUDA 12.x and 13.x alike) or 13 (nvidia-nvshmem-cu13, needs a CUDA 13 driver, >= 580).
# Match the CUDA major version of the toolkit the program is built with. The tests use cu12.
UXN_NVSHMEM_CUDA="${UXN_NVSHMEM_CUDA:-12}"
# The oldest Rust that builds the crate (Cargo.toml: edition 2024, rust-version).
UXN_RUST_MIN=1.85
UXN_RUSTUP_URL="${UXN_RUSTUP_URL:-https://sh.rustup.rs}"
export PATH="$HOME/.cargo/bin:$PATH"

# uxn_absolute_dirs VAR...: each variable naming an existing folder relative to the current one
# is made absolute (the GPU scripts' paths, before they cd or CMake runs elsewhere).
uxn_absolute_dirs() {
  local v
  for v in "$@"; do
    if [ -n "${!v:-}" ] && [ -d "${!v}" ]; then printf -v "$v" '%s' "$(cd "${!v}" && pwd)"; fi
  done
}

# The environment of every GPU run (scripts/gpu-*.sh; one node): NVLS off, Open MPI allowed as root,
# NVSHMEM's unique-id bootstrap on loopback and UPC++'s shared heap for the smp runs (both
# overridable).
uxn_gpu_env() {
  export NVSHMEM_DISABLE_NVLS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME="${NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME:-lo}"
  export UPCXX_SHARED_HEAP_SIZE="${UPCXX_SHARED_HEAP_SIZE:-1GB}"
}

# The GPU scripts' defaults: the library installed where ./scripts/quickstart.sh installs it (the
# clone's ./install), and code built for the GPU found: the compute capability of GPU 0 as
# nvidia-smi reports it (9.0 -> 90), else "native" (nvcc -arch=native, CMAKE_CUDA_ARCHITECTURES=native).
UXN_QUICKSTART_PREFIX="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/install"
uxn_gpu_arch() {
  local cc
  cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')"
  case "$cc" in [1-9][0-9]|[1-9][0-9][0-9]) echo "$cc" ;; *) echo native ;; esac
}
# nvcc's -arch for uxn_gpu_arch's answer ($1): sm_90, or native.
uxn_nvcc_arch() { case "$1" in native) echo native ;; *) echo "sm_$1" ;; esac; }

# The NVSHMEM root (.../nvidia/nvshmem) of release $1 in the cache (UXN_CACHE_NVSHMEM): the cu12
# wheels in nvshmem/, the cu13 ones in nvshmem-cu13/ ($2: the CUDA major version, default 12).
uxn_nvshmem_root() {
  local t="$UXN_CACHE_NVSHMEM"
  [ "${2:-12}" = 12 ] || t="${UXN_CACHE_NVSHMEM_CU//\{cuda\}/$2}"
  echo "$UXN_CACHE/${t//\{version\}/$1}"
}

# Runs "$@" (rustup, or one of its proxies cargo/rustc) and leaves no rustup home behind that it
# created: rustup writes $RUSTUP_HOME/settings.toml (default ~/.rustup) even when it cannot run,
# e.g. with no default toolchain. A home that was there before is never touched.
uxn_rustup_probe() {
  local home="${RUSTUP_HOME:-$HOME/.rustup}" had=1 rc=0
  [ -e "$home" ] || had=
  "$@" || rc=$?
  if [ "$rc" != 0 ] && [ -z "$had" ] && [ -d "$home" ] && [ "$(ls -A "$home")" = settings.toml ]; then
    rm -f "$home/settings.toml" && rmdir "$home"
  fi
  return "$rc"
}

# 0 when rustup is on PATH without a default toolchain (its cargo and rustc cannot run).
uxn_rustup_without_default() {
  command -v rustup >/dev/null 2>&1 || return 1
  ! uxn_rustup_probe rustup default >/dev/null 2>&1
}

# 0 when a cargo/rustc >= UXN_RUST_MIN is on PATH.
uxn_have_rust() {
  command -v cargo >/dev/null 2>&1 && command -v rustc >/dev/null 2>&1 || return 1
  local v
  v="$(uxn_rustup_probe rustc --version 2>/dev/null | awk '{print $2}')"
  [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$UXN_RUST_MIN" "${v%%-*}" | sort -V | head -n1)" = "$UXN_RUST_MIN" ]
}

# What the tests need of Rust beyond the compiler and cargo: cargo fmt and cargo clippy.
UXN_RUST_TEST_COMPONENTS="rustfmt clippy"
# The rustup arguments: the minimal profile (rustc, cargo, the standard library), and for the
# tests ($1 = tests) the components rustfmt and clippy too.
uxn_rustup_args() {
  local a="-y --profile minimal"
  [ "${1:-}" = tests ] && a="$a --component ${UXN_RUST_TEST_COMPONENTS// /,}"
  echo "$a"
}
# The command that installs Rust with rustup's standard installer (into ~/.rustup and ~/.cargo);
# $1 = tests: with rustfmt and clippy.
uxn_rust_install_cmd() {
  echo "curl --proto '=https' --tlsv1.2 -sSf $UXN_RUSTUP_URL | sh -s -- $(uxn_rustup_args "${1:-}")"
}

# Makes sure Rust >= UXN_RUST_MIN is there: installs it with rustup's standard installer (into
# ~/.rustup and ~/.cargo, no root) when it can reach it, else stops with the exact command.
# $1 = tests: rustfmt and clippy too (added with rustup to a Rust that lacks them).
uxn_ensure_rust() {
  local cmd
  cmd="$(uxn_rust_install_cmd "${1:-}")"
  if uxn_have_rust; then
    echo "Rust: $(rustc --version) (>= $UXN_RUST_MIN)"
    if [ "${1:-}" = tests ] && ! { cargo fmt --version && cargo clippy --version; } >/dev/null 2>&1; then
      if command -v rustup >/dev/null 2>&1; then
        echo "Rust: adding the components the tests need: rustup component add $UXN_RUST_TEST_COMPONENTS"
        # shellcheck disable=SC2086
        rustup component add $UXN_RUST_TEST_COMPONENTS || return 1
      else
        echo "Rust: no cargo fmt or cargo clippy, and no rustup to add them: those two tests will fail" >&2
      fi
    fi
    return 0
  fi
  if command -v curl >/dev/null 2>&1 && curl --proto '=https' --tlsv1.2 -sSf --max-time 20 -o /dev/null "$UXN_RUSTUP_URL" 2>/dev/null; then
    echo "Rust: none >= $UXN_RUST_MIN on PATH; installing it with rustup: $cmd"
    # shellcheck disable=SC2046
    curl --proto '=https' --tlsv1.2 -sSf "$UXN_RUSTUP_URL" | sh -s -- $(uxn_rustup_args "${1:-}") || return 1
    uxn_have_rust && echo "Rust: $(rustc --version)" && return 0
  fi
  local v
  v="$(uxn_rustup_probe rustc --version 2>/dev/null | awk '{print $2}')"
  if uxn_rustup_without_default; then
    local fix="rustup default stable"
    [ "${1:-}" = tests ] && fix="$fix && rustup component add $UXN_RUST_TEST_COMPONENTS"
    cat >&2 <<EOF
Rust >= $UXN_RUST_MIN is needed (cargo builds the library). rustup is installed ($(command -v rustup))
but has no default toolchain, so the cargo and rustc on PATH cannot run. Choose one (this
downloads the stable toolchain), then run this again:
    $fix
Nothing else was installed.
EOF
    return 1
  fi
  if [ -n "$v" ] && command -v rustup >/dev/null 2>&1; then
    cat >&2 <<EOF
Rust >= $UXN_RUST_MIN is needed (cargo builds the library); the rustc on PATH is $v. Update it
(this downloads the stable toolchain), then run this again:
    rustup update stable && rustup default stable
Nothing else was installed.
EOF
    return 1
  fi
  if [ -n "$v" ]; then
    echo "Rust >= $UXN_RUST_MIN is needed (cargo builds the library); the rustc on PATH is $v." >&2
  else
    echo "Rust >= $UXN_RUST_MIN is needed (cargo builds the library), and none is on PATH." >&2
  fi
  cat >&2 <<EOF
The rustup installer at $UXN_RUSTUP_URL cannot be reached from here. Install Rust, then run this again:
    $cmd
(or: your site's module, e.g. 'module load rust', or 'spack install rust', giving rustc >= $UXN_RUST_MIN)
Nothing else was installed.
EOF
  return 1
}

# The version (e.g. 3.4.5) of the NVSHMEM install HOME, from its nvshmem_version.h ("" when none).
#   uxn_nvshmem_version HOME
uxn_nvshmem_version() {
  grep -ho 'NVSHMEM_VENDOR_\(MAJOR\|MINOR\|PATCH\)_VERSION [0-9]*' "$1/include/non_abi/nvshmem_version.h" 2>/dev/null |
    awk '{printf "%s.", $2}' | sed 's/\.$//'
}

# The prologue of the GPU scripts (scripts/gpu-tests.sh, gpu-microbench.sh):
# prints the machine, lays out the UPC++ releases of UPCXX_DIR in OUTDIR/upcxx (exports CUDA_HOME
# as setup.sh found it) and sets `homes` to the NVSHMEM installs to test: the machine's pip wheel,
# then each UXN_NVSHMEM_TARBALLS (.tar.xz of lib/ + include/) unpacked in OUTDIR.
#   uxn_gpu_upcxx_prologue OUTDIR UPCXX_DIR
uxn_gpu_upcxx_prologue() {
  local out="$1" dir="$2" t d
  echo "== machine"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
  cmake --version | head -1
  bash "$dir/setup.sh" "$out/upcxx" | tee "$out/setup.txt"
  CUDA_HOME=$(sed -n 's/^CUDA_HOME=//p' "$out/setup.txt"); export CUDA_HOME
  homes=("$(python3 -c "import nvidia.nvshmem as m; print(m.__path__[0])")")
  for t in ${UXN_NVSHMEM_TARBALLS:-}; do
    d="$out/nvshmem-$(basename "$t" .tar.xz)"; mkdir -p "$d"; tar -xJf "$t" -C "$d" && homes+=("$d")
  done
}
