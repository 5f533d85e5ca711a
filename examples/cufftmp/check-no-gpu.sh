#!/usr/bin/env bash
# Runs cufftmp_upcxx where there is no GPU and checks that it fails cleanly: a non-zero exit status,
# within the timeout (no rank left waiting), no abort, and every rank printing rank 0's
# nvshmem_init error ("rank R: nvshmem_init: ...").
#   check-no-gpu.sh UPCXX_RUN RANKS PROGRAM [args...]      (UXN_TIMEOUT, default 120 s)
set -u
run="$1" n="$2"; shift 2
log="$(mktemp)"
timeout "${UXN_TIMEOUT:-120}" "$run" -n "$n" -- "$@" > "$log" 2>&1
rc=$?
sed 's/^/   | /' "$log"
fail() { echo "check-no-gpu: FAIL: $*"; rm -f "$log"; exit 1; }
[ "$rc" -ne 124 ] || fail "timed out: a rank was left waiting"
[ "$rc" -ne 0 ] || fail "exit status 0 without a GPU"
! grep -qi "abort\|terminate called\|core dumped\|RESULT cufftmp_upcxx PASS" "$log" || fail "aborted, or claimed a pass"
m0="$(sed -n 's/^rank 0: \(nvshmem_init: .*\)$/\1/p' "$log" | head -1)"
[ -n "$m0" ] || fail "rank 0 printed no nvshmem_init error"
for ((r = 1; r < n; r++)); do
  line="$(sed -n "s/^rank $r: \(nvshmem_init: .*\)$/\1/p" "$log" | head -1)"
  [ "$line" = "$m0" ] || [[ "$line" == *": $m0" ]] || [[ "$line" == *"rank 0"* ]] || fail "rank $r printed '$line', not rank 0's error"
done
rm -f "$log"
echo "check-no-gpu: PASS: exit status $rc, every one of the $n ranks reported: $m0"
