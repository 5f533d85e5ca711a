#!/usr/bin/env python3
"""Plots the COPYBENCH lines of tests/cxx/nvshmem_copy_test.cpp (one run) as bandwidth and latency
against message size, and prints the table for BENCHMARKS.md.

    python3 scripts/plot-copy-bench.py LOG [OUT.png] [--title "machine, UPC++ x, NVSHMEM y"]

LOG is any text holding the COPYBENCH lines of ONE run (the GPU suite's log; the first run's
lines are taken when there are several). Needs matplotlib (pip install matplotlib) for the PNG.
"""
import re
import sys

SERIES = ["heap.copy put", "heap.copy get", "upcxx::copy put", "nvshmem_putmem + quiet", "cudaMemcpyAsync by hand"]


def parse(text):
    rows, seen = [], set()
    for line in text.splitlines():
        m = re.match(r"\s*COPYBENCH (\d+) ([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+) \|", line)
        if not m:
            continue
        size = int(m.group(1))
        if size in seen:  # a second run starts: keep the first
            break
        seen.add(size)
        rows.append((size, [float(m.group(i)) for i in range(2, 7)]))
    return rows


def human(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    title = ""
    if "--title" in argv:
        title = argv[argv.index("--title") + 1]
        args = [a for a in args if a != title]
    if not args:
        print(__doc__)
        return 64
    rows = parse(open(args[0]).read())
    if not rows:
        print(f"no COPYBENCH lines in {args[0]}", file=sys.stderr)
        return 65
    print("| size | " + " | ".join(f"{s} (us)" for s in SERIES) + " | heap.copy put / nvshmem_putmem bandwidth | heap.copy put / upcxx::copy bandwidth |")
    print("|---" * (len(SERIES) + 3) + "|")
    def ratio(a, b, fmt):
        return fmt.format(a / b) if a > 0 and b > 0 else "n/a"

    for size, us in rows:
        print(f"| {human(size)} | " + " | ".join(f"{u:.2f}" if u > 0 else "not timed" for u in us)
              + f" | {ratio(us[3], us[0], '{:.2f}x')} | {ratio(us[2], us[0], '{:.1f}x')} |")
    if len(args) > 1:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (bw, lat) = plt.subplots(1, 2, figsize=(12, 4.5))
        for i, name in enumerate(SERIES):
            pts = [(r[0], r[1][i]) for r in rows if r[1][i] > 0]  # 0: not timed
            xs, us = [p[0] for p in pts], [p[1] for p in pts]
            bw.plot(xs, [s / u / 1e3 for s, u in zip(xs, us)], marker="o", label=name)
            lat.plot(xs, us, marker="o", label=name)
        for ax, ylabel in ((bw, "bandwidth (GB/s)"), (lat, "time per copy, completion included (us)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("bytes")
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
        bw.legend()
        fig.suptitle(title or "nvshmem_heap::copy vs upcxx::copy vs nvshmem_putmem (one run)")
        fig.tight_layout()
        fig.savefig(args[1], dpi=110)
        print(f"wrote {args[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
