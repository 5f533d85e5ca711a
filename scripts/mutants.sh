#!/usr/bin/env bash
# cargo-mutants over the copy engine (src/engine/core/) and the translation table's published
# state (src/table/{translation,snapshot,errors,peers}.rs), tested by their loom models
# (tests/loom: engine_model.rs, table_model.rs, and the unit tests those files hold). The loom
# crate compiles those files from src/ by path, which cargo-mutants does not follow out of a
# crate's tree, so the run is made in a copy of the commit whose root manifest is the loom crate's.
# Slow (about 6 s a mutant on 2 cores, ~700 mutants): the ctest test `mutants` (label mutants) runs
# it, outside the default suite. The outcome and every missed mutant: docs/testing.md.
#   scripts/mutants.sh OUTDIR [cargo-mutants arguments, e.g. --file '**/engine/core/gate.rs']
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:?usage: mutants.sh OUTDIR [cargo-mutants args]}" && cd "$1" && pwd)"
shift
command -v cargo-mutants >/dev/null || { echo "mutants.sh: cargo-mutants is not installed (cargo install --locked cargo-mutants)" >&2; exit 2; }
tree="$out/tree"
rm -rf "$tree" && mkdir -p "$tree"
# The working tree's files as git knows them (committed or not), nothing else.
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar cf - 2>/dev/null) | tar xf - -C "$tree"
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
cd "$tree"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$out/target" cargo mutants --no-shuffle --profile release --timeout 300 \
  --output "$out" "${files[@]}" "$@"
