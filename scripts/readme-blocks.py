#!/usr/bin/env python3
"""Writes the code blocks of README.md that are marked for testing into a directory, so that CI
builds and runs exactly what the README shows:

    scripts/readme-blocks.py README.md OUTDIR

A marked block is a fenced code block whose opening fence directly follows a line

    <!-- test: NAME -->

(HTML comments do not show on the rendered page). The block's text is written to OUTDIR/NAME
(NAME may contain '/'). A marker not followed by a fence, or the same NAME twice, is an error.
Prints one line per file written.

A block that CI does not run says so, and why, on the line before its fence:

    <!-- untested: WHY -->

    scripts/readme-blocks.py --check README.md

checks the page without writing anything (ctest: docs.readme, docs.streams for docs/streams.md):
every fenced block that names a language is marked `test:` or `untested:`; a page named README.md
is also at most MAX_LINES lines and names the test command that .ci/run runs
(./scripts/test-all.sh).
"""
import os
import re
import sys

MARKER = re.compile(r"^<!--\s*test:\s*(\S+)\s*-->\s*$")
UNTESTED = re.compile(r"^<!--\s*untested:\s*\S.*-->\s*$")
MAX_LINES = 250
TEST_COMMAND = "./scripts/test-all.sh"
FENCE = re.compile(r"^(```+|~~~+)")


def blocks(lines):
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            i += 1
            continue
        name = m.group(1)
        if i + 1 >= len(lines) or not FENCE.match(lines[i + 1]):
            raise SystemExit(f"README line {i + 1}: marker '{name}' is not followed by a fenced code block")
        fence = FENCE.match(lines[i + 1]).group(1)
        body = []
        j = i + 2
        while j < len(lines) and not lines[j].startswith(fence):
            body.append(lines[j])
            j += 1
        if j >= len(lines):
            raise SystemExit(f"README line {i + 2}: the block '{name}' is not closed")
        yield name, "".join(body)
        i = j + 1


def check(readme):
    with open(readme, encoding="utf-8") as f:
        lines = f.readlines()
    list(blocks(lines))  # the markers' own errors
    problems = []
    i, fence = 0, None
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and fence is None:
            fence = m.group(1)
            lang = lines[i][len(fence):].strip()
            prev = lines[i - 1] if i > 0 else ""
            if lang and not MARKER.match(prev) and not UNTESTED.match(prev):
                problems.append(f"{readme} line {i + 1}: a ```{lang} block with neither <!-- test: NAME --> "
                                "nor <!-- untested: WHY --> on the line before it")
        elif fence is not None and lines[i].startswith(fence) and not lines[i][len(fence):].strip():
            fence = None
        i += 1
    is_readme = os.path.basename(readme) == "README.md"
    if is_readme and len(lines) > MAX_LINES:
        problems.append(f"{readme}: {len(lines)} lines, more than {MAX_LINES}: move material to docs/ or CONTRIBUTING.md")
    if is_readme and TEST_COMMAND not in "".join(lines):
        problems.append(f"{readme}: does not name {TEST_COMMAND}, the test command .ci/run runs")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        raise SystemExit(1)
    n = sum(1 for _ in blocks(lines))
    print(f"{readme}: {len(lines)} lines, {n} blocks run by CI, every other code block marked untested")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        return check(sys.argv[2])
    if len(sys.argv) != 3:
        raise SystemExit("usage: readme-blocks.py README.md OUTDIR")
    readme, out = sys.argv[1], sys.argv[2]
    with open(readme, encoding="utf-8") as f:
        lines = f.readlines()
    seen = set()
    for name, text in blocks(lines):
        if name in seen:
            raise SystemExit(f"README: the block '{name}' is marked twice")
        if name.startswith("/") or ".." in name.split("/"):
            raise SystemExit(f"README: bad block name '{name}'")
        seen.add(name)
        path = os.path.join(out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"{path} ({len(text.splitlines())} lines)")
    if not seen:
        raise SystemExit("README: no marked blocks")


if __name__ == "__main__":
    main()
