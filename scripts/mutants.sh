#!/usr/bin/env bash
# cargo-mutants over the copy engine (src/engine/core/) and the translation table's published
# state (src/table/{translation,snapshot,errors,peers}.rs), tested by their loom models
# (tests/loom: engine_model.rs, table_model.rs, and the unit tests those files hold). The loom
# crate compiles those files from src/ by path, which cargo-mutants does not follow out of a
# crate's tree, so the run is made in a copy of the commit whose root manifest is the loom crate's.
# Slow (about 6-10 s a mutant on 2 cores, ~700 mutants): the ctest test `mutants` (label mutants)
# runs it, outside the default suite. The outcome and every missed mutant: docs/testing.md.
#
# Second test command: with UXN_MUTANTS_STANDIN set to a directory holding the CUDA stand-in's
# libcuda.so.1 (tests/standin), every mutant the models missed is tested again by `cargo test
# --lib --test api_engine` of the library crate over the stand-in (the table's unit tests, which
# the loom build leaves out, and the engine's C ABI through the CUDA driver path the models do not
# see), in a copy whose root manifest is the library's, results in
# OUTDIR/cargo-test/mutants.out. A mutant missed there too is in OUTDIR/cargo-test's missed.txt.
#
# The mutants that cannot matter (equivalent, or performance only: docs/testing.md) are not run:
# scripts/mutants-excluded.txt holds one --exclude-re regex a line (keyed on the change and its
# function, never on a line number), each with a comment saying why.
#   scripts/mutants.sh OUTDIR [cargo-mutants arguments, e.g. --file '**/engine/core/gate.rs']
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:?usage: mutants.sh OUTDIR [cargo-mutants args]}" && cd "$1" && pwd)"
shift
command -v cargo-mutants >/dev/null || { echo "mutants.sh: cargo-mutants is not installed (cargo install --locked cargo-mutants)" >&2; exit 2; }
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
files=(--file '**/engine/core/*.rs' --file '**/table/translation.rs' --file '**/table/snapshot.rs' --file '**/table/errors.rs' --file '**/table/peers.rs')
[ $# -gt 0 ] && files=()
excluded=()
while IFS= read -r r; do
  case "$r" in '' | '#'*) continue ;; esac
  excluded+=(--exclude-re "$r")
done <"$ROOT/scripts/mutants-excluded.txt"
cd "$tree"
rc=0
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$out/target" cargo mutants --no-shuffle --profile release --timeout 300 \
  --output "$out" "${files[@]}" "${excluded[@]}" "$@" || rc=$?
missed="$out/mutants.out/missed.txt"
# 2 is cargo-mutants' "some mutants were missed"; anything else is its own failure.
if [ "$rc" != 2 ] || [ -z "${UXN_MUTANTS_STANDIN:-}" ] || [ ! -s "$missed" ]; then exit "$rc"; fi
[ -e "$UXN_MUTANTS_STANDIN/libcuda.so.1" ] || { echo "mutants.sh: no libcuda.so.1 in UXN_MUTANTS_STANDIN=$UXN_MUTANTS_STANDIN" >&2; exit 2; }
# Each missed mutant by its exact name (its file, line, column and change), as a regex; the
# models name src/'s files by the loom crate's path to them (tests/loom/src/../../../src/...).
mapfile -t res < <(python3 -c 'import re, sys; [print("^" + re.escape(l.rstrip("\n").replace("tests/loom/src/../../../", "", 1)) + "$") for l in open(sys.argv[1]) if l.strip()]' "$missed")
# (cargo-mutants 27.1 selects its "delete field" mutants whatever --re says: one more may be run.)
args=()
for r in "${res[@]}"; do args+=(--re "$r"); done
cd "$lib"
mkdir -p "$out/cargo-test"
LD_LIBRARY_PATH="$UXN_MUTANTS_STANDIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" UXN_REQUIRE_CUDA=1 CARGO_TARGET_DIR="$out/target-lib" \
  cargo mutants --no-shuffle --timeout 300 --output "$out/cargo-test" "${files[@]}" "${excluded[@]}" "$@" "${args[@]}" -- --lib --test api_engine
