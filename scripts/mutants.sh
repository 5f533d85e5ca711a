#!/usr/bin/env bash
# cargo-mutants over the copy engine (src/engine/core/) and the translation table's published
# state (src/table/{translation,snapshot,errors,peers}.rs), tested by their loom models
# (tests/loom: engine_model.rs, table_model.rs, and the unit tests those files hold). The loom
# crate compiles those files from src/ by path, which cargo-mutants does not follow out of a
# crate's tree, so the run is made in a copy of the commit whose root manifest is the loom crate's.
#
# Three groups, each with the tests that can see its files: `engine` (src/engine/core/, tested by
# every loom test: the engine's model takes about 11 s on 2 cores), `watcher` (the engine's
# watcher thread and CudaEngine, src/engine/{watcher,mod}.rs, outside the models: tested by
# `cargo test --test api_engine` over the CUDA stand-in alone, so it needs UXN_MUTANTS_STANDIN)
# and `table` (the table's four files, tested by the loom crate's unit tests and table_model.rs
# alone: a fraction of a second).
# Results in OUTDIR/GROUP/mutants.out. The ctest test `mutants` (label mutants) runs them all, outside
# the default suite. The outcome and every missed mutant: docs/testing.md.
#
# Second test command: with UXN_MUTANTS_STANDIN set to a directory holding the CUDA stand-in's
# libcuda.so.1 (tests/standin), every mutant the models missed is tested again by `cargo test` of
# the library crate over the stand-in, in a copy whose root manifest is the library's: `--lib
# --test api_engine` for the engine (the engine's C ABI through the CUDA driver path the models do
# not see); for the table, `--lib` (the table's unit tests, which the loom build leaves out) and
# the tests that translate through the C ABI (api_c_abi, api_local_ptr, api_fuzz_regressions,
# int_concurrency).
# Results in OUTDIR/GROUP/cargo-test/mutants.out; a mutant missed there too is in its missed.txt.
#
# The mutants that cannot matter (equivalent, or performance only: docs/testing.md) are not run:
# scripts/mutants-excluded.txt holds one --exclude-re regex a line (keyed on the change and its
# function, never on a line number), each with a comment saying why.
#   scripts/mutants.sh OUTDIR [engine|watcher|table|all] [cargo-mutants arguments, e.g. --file '**/engine/core/gate.rs']
# A --file among the arguments replaces the group's own files (its tests stay the group's).
# Exit status: 0 when no mutant was missed (one that timed out counts as caught), 2 when one was,
# anything else a failure of the run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:?usage: mutants.sh OUTDIR [engine|table|all] [cargo-mutants args]}" && cd "$1" && pwd)"
shift
groups=(engine watcher table)
case "${1:-}" in
  engine | watcher | table) groups=("$1"); shift ;;
  all) shift ;;
esac
command -v cargo-mutants >/dev/null || { echo "mutants.sh: cargo-mutants is not installed (cargo install --locked cargo-mutants)" >&2; exit 2; }
if [ -n "${UXN_MUTANTS_STANDIN:-}" ] && [ ! -e "$UXN_MUTANTS_STANDIN/libcuda.so.1" ]; then
  echo "mutants.sh: no libcuda.so.1 in UXN_MUTANTS_STANDIN=$UXN_MUTANTS_STANDIN" >&2; exit 2
fi
tree="$out/tree" lib="$out/tree-lib"
rm -rf "$tree" "$lib" && mkdir -p "$tree" "$lib"
# The working tree's files as git knows them (committed or not), nothing else; tree-lib is the
# same files as they are, for the second test command.
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar cf - 2>/dev/null) | tar xf - -C "$tree"
(cd "$tree" && tar cf - .) | tar xf - -C "$lib"
python3 - "$tree" <<'PY'
import glob, os, sys
tree = sys.argv[1]
os.chdir(tree)
s = open("tests/loom/Cargo.toml").read()
s = s.replace("[package]", "[package]\nautotests = false\nautobins = false\nautoexamples = false\nautobenches = false\nbuild = false", 1)
s = s.replace("[lib]\n", '[lib]\npath = "tests/loom/src/lib.rs"\n', 1)
for t in sorted(glob.glob("tests/loom/tests/*.rs")):
    s += f'\n[[test]]\nname = "{os.path.basename(t)[:-3]}"\npath = "{t}"\n'
open("Cargo.toml", "w").write(s)
PY
cp "$tree/tests/loom/Cargo.lock" "$tree/Cargo.lock"
excluded=()
while IFS= read -r r; do
  case "$r" in '' | '#'*) continue ;; esac
  excluded+=(--exclude-re "$r")
done <"$ROOT/scripts/mutants-excluded.txt"
# The arguments' --file options (they replace a group's own files, in both commands).
user_files=()
prev=
for a in "$@"; do
  if [ "$prev" = --file ]; then user_files+=(--file "$a"); elif [ "${a#--file=}" != "$a" ]; then user_files+=("$a"); fi
  prev=$a
done

# group NAME: the group's files, the models' tests and the library's tests.
group() {
  local name=$1 files model_tests lib_tests
  shift
  case "$name" in
    engine)
      files=(--file '**/engine/core/*.rs')
      model_tests=()
      lib_tests=(--lib --test api_engine) ;;
    watcher)
      # The engine's watcher thread and CudaEngine (src/engine/{watcher,mod}.rs): not in the loom
      # models, so only the library's tests over the stand-in see them.
      files=(--file 'src/engine/watcher.rs' --file 'src/engine/mod.rs')
      model_tests=()
      lib_tests=(--test api_engine) ;;
    table)
      files=(--file '**/table/translation.rs' --file '**/table/snapshot.rs' --file '**/table/errors.rs' --file '**/table/peers.rs')
      model_tests=(--lib --test table_model)
      lib_tests=(--lib --test api_c_abi --test api_local_ptr --test api_fuzz_regressions --test int_concurrency) ;;
  esac
  [ ${#user_files[@]} = 0 ] || files=()
  local g="$out/$name" rc=0
  mkdir -p "$g"
  echo "mutants.sh: group $name" >&2
  if [ "$name" = watcher ]; then
    [ -n "${UXN_MUTANTS_STANDIN:-}" ] || { echo "mutants.sh: group watcher needs UXN_MUTANTS_STANDIN (its tests run over the CUDA stand-in)" >&2; return 2; }
    (cd "$lib" && LD_LIBRARY_PATH="$UXN_MUTANTS_STANDIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" UXN_REQUIRE_CUDA=1 \
      CARGO_TARGET_DIR="$out/target-lib" cargo mutants --no-shuffle --profile release --timeout 60 --output "$g" \
      "${files[@]}" "${excluded[@]}" "$@" -- "${lib_tests[@]}") || rc=$?
    # 2: a mutant missed; 3: one timed out (counted as caught), with or without missed ones.
    case "$rc" in
      0) return 0 ;;
      2 | 3) if [ -s "$g/mutants.out/missed.txt" ]; then return 2; else return 0; fi ;;
      *) return "$rc" ;;
    esac
  fi
  (cd "$tree" && RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$out/target" cargo mutants --no-shuffle --profile release \
    --timeout 300 --output "$g" "${files[@]}" "${excluded[@]}" "$@" -- "${model_tests[@]}") || rc=$?
  local missed="$g/mutants.out/missed.txt"
  # cargo-mutants exits 2 when a mutant was missed and 3 when one timed out (with or without
  # missed ones); anything else is its own failure. A timeout counts as caught: the tests saw a
  # hang (docs/testing.md).
  case "$rc" in
    2 | 3) [ -s "$missed" ] || return 0 ;;
    *) return "$rc" ;;
  esac
  [ -n "${UXN_MUTANTS_STANDIN:-}" ] || return 2
  # Each missed mutant by its exact name (its file, line, column and change) as the library's
  # copy names it (the models name src/'s files by the loom crate's path to them,
  # tests/loom/src/../../../src/...), then as a regex.
  local in_src="$g/missed-in-src.txt" res args=() r
  sed 's|^tests/loom/src/\.\./\.\./\.\./||' "$missed" >"$in_src"
  mapfile -t res < <(python3 -c 'import re, sys; [print("^" + re.escape(l.rstrip("\n")) + "$") for l in open(sys.argv[1]) if l.strip()]' "$in_src")
  # The arguments' other options (a --re of theirs would select more than the missed ones) are
  # not passed. (cargo-mutants 27.1 selects its "delete field" mutants whatever --re says: one
  # more may be run.)
  for r in "${res[@]}"; do args+=(--re "$r"); done
  mkdir -p "$g/cargo-test"
  rc=0
  (cd "$lib" && LD_LIBRARY_PATH="$UXN_MUTANTS_STANDIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" UXN_REQUIRE_CUDA=1 \
    CARGO_TARGET_DIR="$out/target-lib" cargo mutants --no-shuffle --timeout 300 --output "$g/cargo-test" \
    "${files[@]}" "${user_files[@]}" "${excluded[@]}" "${args[@]}" -- "${lib_tests[@]}") || rc=$?
  case "$rc" in
    0 | 2 | 3) ;;
    *) return "$rc" ;;
  esac
  # Missed by both commands: a mutant the second missed that the models caught (a "delete field"
  # one run again, above) is caught.
  local second="$g/cargo-test/mutants.out/missed.txt" both
  both="$([ -e "$second" ] && grep -Fxf "$in_src" "$second" || true)"
  [ -z "$both" ] || { sed 's/^/mutants.sh: missed by the models and by cargo test: /' <<<"$both" >&2; return 2; }
}

status=0
for name in "${groups[@]}"; do
  rc=0
  group "$name" "$@" || rc=$?
  case "$rc" in
    0) ;;
    2) [ "$status" = 0 ] && status=2 ;;
    *) status=$rc ;;
  esac
done
exit "$status"
