#!/usr/bin/env bash
# Writes src/cuda/batch_copy.ptx (the kernel of heap.copy's batched fast path, which src/cuda.rs
# embeds) from src/cuda/batch_copy.cu with nvcc, or with --check compares the checked-in file
# with what nvcc makes (exit 1 when they differ). The PTX targets compute_75 and declares PTX ISA
# 8.0 (CUDA 12.0), so every driver of CUDA 12.0 or later JIT-compiles it for its GPU; the kernel
# uses nothing newer.
#   scripts/gen-batch-ptx.sh [--check] [NVCC]      (NVCC default: nvcc on PATH)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
NVCC="${1:-nvcc}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$NVCC" -ptx -arch=compute_75 -o "$tmp/raw.ptx" "$ROOT/src/cuda/batch_copy.cu"
# The compiler's banner (its build, the date) is dropped, so the file depends on the source only.
{
  echo "// Generated from src/cuda/batch_copy.cu by scripts/gen-batch-ptx.sh: do not edit."
  grep -v '^//' "$tmp/raw.ptx" | sed -e 's/^\.version .*/.version 8.0/'
} > "$tmp/batch_copy.ptx"
if [ "$check" = 1 ]; then
  if ! diff -u "$ROOT/src/cuda/batch_copy.ptx" "$tmp/batch_copy.ptx"; then
    echo "src/cuda/batch_copy.ptx drifted from batch_copy.cu: run scripts/gen-batch-ptx.sh and commit it" >&2
    exit 1
  fi
  echo "src/cuda/batch_copy.ptx matches src/cuda/batch_copy.cu ($("$NVCC" --version | tail -1))"
else
  cp "$tmp/batch_copy.ptx" "$ROOT/src/cuda/batch_copy.ptx"
fi
