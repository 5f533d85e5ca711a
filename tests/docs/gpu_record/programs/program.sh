# program.sh KIND STEP PROGRAM CHECKS: a stand-in program's output on 2 ranks, in the real
# programs' formats; exit 1 when it fails. KIND: cxx (tests/cxx/check.hpp: CHECKS lines a rank,
# copy_semantics_test also one SKIPPED line, then RESULT), example (examples/nvshmem_upcxx_copy.cpp's
# RESULT line), c (tests/c/uxn_test.h: its summary of CHECKS checks).
kind=$1 step=$2 program=$3 checks=$4
fail=0
[ "${UXN_FIXTURE_FAIL:-}" = "$step/$program" ] && fail=1
case $kind in
cxx)
  for r in 0 1; do
    i=0
    while [ "$i" -lt "$checks" ]; do printf 'CHECK rank %d %s: %s.c%d: bytes as written\n' "$r" PASS "$program" "$i"; i=$((i + 1)); done
  done
  [ "$program" = copy_semantics_test ] && printf 'CHECK rank %d %s: %s.F3: needs 2 GPUs\n' 0 SKIPPED "$program"
  [ "$fail" = 1 ] && printf 'CHECK rank %d %s: %s.c%d: 1 wrong byte\n' 1 FAIL "$program" "$checks"
  printf 'RESULT %s %s: %d failures on 2 ranks\n' "$program" "$([ "$fail" = 1 ] && echo FAIL || echo PASS)" "$fail" ;;
example)
  printf 'RESULT %s: %d wrong elements or round trips in total (1048576 elements x 5 checks x 2 PEs)\n' \
    "$([ "$fail" = 1 ] && echo FAIL || echo PASS)" "$fail" ;;
c)
  [ "$fail" = 1 ] && printf '[rank 1] heap_check.cu:200: CHECK(%s) failed: one byte\n' 'wrong == 0' >&2
  printf '%s: 2 ranks, %d checks, %d failures: %s\n' "$program" "$checks" "$fail" "$([ "$fail" = 1 ] && echo FAILED || echo passed)" ;;
esac
exit "$fail"
