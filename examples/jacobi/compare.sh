#!/usr/bin/env bash
# jacobi_upcxx's three -halo modes beside NVIDIA's NVSHMEM Jacobi solver, on the same meshes and
# iterations: one CSV line per run, then each run's time as a multiple of NVIDIA's (README.md here,
# "Against NVIDIA's solver").
#
#   examples/jacobi/compare.sh <jacobi_upcxx> [<NVIDIA's jacobi>]
#
# Environment: NP (ranks, default 2), MESHES (NXxNY..., default "16384x16384 4096x4096"), NITER
# (default 1000), UPCXX_RUN (default $UPCXX_INSTALL/bin/upcxx-run), MPIRUN (default mpirun: NVIDIA's
# solver bootstraps NVSHMEM with MPI), NVSHMEM_DISABLE_NVLS (default 1). A run that fails prints
# "<variant>, <nx>, <ny>, FAILED" and the script goes on; its exit status is 1 then.
set -uo pipefail
ours=${1:?usage: compare.sh <jacobi_upcxx> [<NVIDIA jacobi binary>]}
theirs=${2:-}
NP=${NP:-2}
NITER=${NITER:-1000}
MESHES=${MESHES:-16384x16384 4096x4096}
UPCXX_RUN=${UPCXX_RUN:-${UPCXX_INSTALL:+$UPCXX_INSTALL/bin/}upcxx-run}
MPIRUN=${MPIRUN:-mpirun}
export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=${NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME:-lo}

rc=0
lines=()
run() {  # run <variant> <nx> <ny> <command...>: its CSV line (the line that starts with <variant>)
  local variant=$1 nx=$2 ny=$3 out line
  shift 3
  out=$("$@" -nx "$nx" -ny "$ny" -niter "$NITER" -csv 2>&1)
  line=$(printf '%s\n' "$out" | grep -m1 "^$variant, ") || {
    printf '%s\n' "$out" | tail -5 >&2
    line="$variant, $nx, $ny, FAILED"
    rc=1
  }
  echo "$line"
  lines+=("$line")
}

echo "variant, nx, ny, niter, nccheck, GPUs, 1, time on the GPUs (s), time on 1 GPU (s)"
for mesh in $MESHES; do
  nx=${mesh%x*}
  ny=${mesh#*x}
  for mode in device copy upcxx; do
    run "upcxx-halo-$mode" "$nx" "$ny" "$UPCXX_RUN" -n "$NP" "$ours" -halo "$mode"
  done
  if [ -n "$theirs" ]; then
    run nvshmem "$nx" "$ny" "$MPIRUN" -np "$NP" "$theirs"
  fi
done

# Each run's time on the GPUs, and as a multiple of NVIDIA's on the same mesh (below 1: faster).
echo
printf '%s\n' "${lines[@]}" | awk -F', ' '
  $4 != "FAILED" { t[$1 FS $2 FS $3] = $8; if ($1 == "nvshmem") ref[$2 FS $3] = $8; key[++n] = $1 FS $2 FS $3 }
  END {
    printf "%-18s %-12s %10s %12s\n", "variant", "mesh", "time (s)", "vs nvshmem"
    for (i = 1; i <= n; i++) {
      split(key[i], k, FS); m = k[2] FS k[3]
      printf "%-18s %-12s %10.4f %12s\n", k[1], k[2] "x" k[3], t[key[i]], (m in ref) ? sprintf("%.3f", t[key[i]] / ref[m]) : "-"
    }
  }'
exit "$rc"
