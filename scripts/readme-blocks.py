#!/usr/bin/env python3
"""Writes the code blocks of README.md that are marked for testing into a directory, so that CI
builds and runs exactly what the README shows:

    scripts/readme-blocks.py README.md OUTDIR

A marked block is a fenced code block whose opening fence directly follows a line

    <!-- test: NAME -->

(HTML comments do not show on the rendered page). The block's text is written to OUTDIR/NAME
(NAME may contain '/'). A marker not followed by a fence, or the same NAME twice, is an error.
Prints one line per file written.
"""
import os
import re
import sys

MARKER = re.compile(r"^<!--\s*test:\s*(\S+)\s*-->\s*$")
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


def main():
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
