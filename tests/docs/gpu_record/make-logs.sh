#!/usr/bin/env bash
# make-logs.sh OUT [CTEST]: runs the stand-in suite (suite/, programs/) with CTEST (default: the
# ctest on PATH) as scripts/gpu-tests.sh runs the GPU suite, once per case, each into OUT/<case>/:
# ctest.log (ctest's console output), LastTest.log (its Testing/Temporary/LastTest.log, when ctest
# wrote one), exit (ctest's exit status). The cases:
#   filtered      -R '^cxx\.(2023\.9\.0|2020\.10\.0)\.seq$': 4 tests (2 steps and their builds), all pass
#   all           every test: 6, all pass
#   failed        as filtered, copy_semantics_test of 2023.9.0 fails one check
#   none          -R '^cxx\.2024': no test
#   skipped       every test, c.gpu prints "SKIPPED: " (the suite's skip)
#   home-3.4.5, home-3.8.0   two NVSHMEM homes, one build folder each (as gpu-tests.sh), every
#                 test; the second's cxx.2020.10.0.seq fails its example
set -u
OUT=${1:?usage: make-logs.sh OUT [CTEST]}
CTEST=${2:-ctest}
CMAKE=$(dirname "$(command -v "$CTEST")")/cmake
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
one() {  # one CASE HOME [ctest arguments]
  local case=$1 home=$2; shift 2
  local B="$OUT/build/$home"
  [ -e "$B/CMakeCache.txt" ] || "$CMAKE" -S "$HERE/suite" -B "$B" -DUXN_NVSHMEM_ROOTS="/opt/$home" > "$OUT/$home.configure.log" 2>&1 ||
    { cat "$OUT/$home.configure.log"; exit 1; }
  mkdir -p "$OUT/$case"
  rm -f "$B/Testing/Temporary/LastTest.log"
  (cd "$OUT" && UXN_SUBPROJECT_VERBOSE=1 "$CTEST" --test-dir "$B" -L gpu -j 6 --output-on-failure "$@" > "$OUT/$case/ctest.log" 2>&1)
  echo $? > "$OUT/$case/exit"
  [ ! -e "$B/Testing/Temporary/LastTest.log" ] || cp "$B/Testing/Temporary/LastTest.log" "$OUT/$case/LastTest.log"
}
F='^cxx\.(2023\.9\.0|2020\.10\.0)\.seq$'
one filtered nvshmem-3.4.5 -R "$F"
one all nvshmem-3.4.5
UXN_FIXTURE_FAIL=cxx.2023.9.0.seq/copy_semantics_test one failed nvshmem-3.4.5 -R "$F"
one none nvshmem-3.4.5 -R '^cxx\.2024'
UXN_FIXTURE_SKIP=c.gpu one skipped nvshmem-3.4.5
one home-3.4.5 nvshmem-3.4.5
UXN_FIXTURE_FAIL=cxx.2020.10.0.seq/example one home-3.8.0 nvshmem-3.8.0
"$CTEST" --version | head -1 > "$OUT/ctest-version"
rm -rf "$OUT/build" "$OUT"/*.configure.log
