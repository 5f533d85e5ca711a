#!/usr/bin/env python3
"""Tables (markdown) and a plot of UPC++'s GPU microbenchmark on NVSHMEM's heap
(tests/cxx/bench/gpu_microbenchmark.cpp, run by scripts/gpu-microbench.sh): its four variants side by
side, from ONE run.

    python3 scripts/plot-microbench.py CSV [--png OUT.png] [--title "machine, UPC++ x, NVSHMEM y"]

CSV is scripts/gpu-microbench.sh's OUTDIR/microbench-<release>.csv, or any text holding the
benchmark's own "CSV,..." lines (a log): variant,upcxx,pattern,test,column,bytes,window,trials,
unit,value,note. Prints to stdout:
  1. the issue's targets as ratios measured in the run (heap.copy against NVSHMEM's baseline and
     against upcxx::copy);
  2. one table per pattern and test (uni/bi x latency/blocking/flood/flood_remote): a row per copy
     size, a cell per memory column holding the four variants' figures in the order of the legend;
     NA where a variant does not measure the column (the note says why in the CSV).
With --png it also draws bandwidth against size, a panel per memory column and pattern, a colour
per variant and a line style per test (needs matplotlib: pip install matplotlib; without it the
tables are still printed and the script says so on stderr).
"""
import csv
import io
import sys

VARIANTS = [  # (key in the CSV, label)
    ("nvshmem", "NVSHMEM putmem/getmem(_nbi)+quiet"),
    ("heap_copy", "heap.copy (NVSHMEM heap)"),
    ("upcxx_heap", "upcxx::copy (NVSHMEM heap)"),
    ("upcxx_own", "upcxx::copy (UPC++'s own segment)"),
]
SHORT = {"nvshmem": "NV", "heap_copy": "hc", "upcxx_heap": "uh", "upcxx_own": "uo"}
COLUMNS = ["LGpu->RGpu", "RGpu->LGpu", "LSh->RGpu", "RGpu->LSh", "LGpu->RSh", "RSh->LGpu",
           "LSh->RSh", "RSh->LSh", "Priv->RSh", "RSh->Priv", "Priv->RGpu", "RGpu->Priv"]
TESTS = [("uni", "latency"), ("uni", "blocking"), ("uni", "flood"), ("uni", "flood_remote"),
         ("bi", "blocking"), ("bi", "flood"), ("bi", "flood_remote")]
TEST_TITLE = {"latency": "blocking 8-byte latency (us per copy)", "blocking": "blocking bandwidth (GiB/s)",
              "flood": "flood bandwidth (GiB/s)", "flood_remote": "flood remote_cx bandwidth (GiB/s)"}
FIELDS = ["variant", "upcxx", "pattern", "test", "column", "bytes", "window", "trials", "unit", "value", "note"]


def load(path):
    """{(variant, pattern, test, column, bytes): (value or None, note, window)}, the first run's."""
    text = open(path).read()
    lines = []
    for line in text.splitlines():
        if line.startswith("CSV,"):
            line = line[4:]
        if line.startswith("variant,") or line.count(",") < len(FIELDS) - 1:
            continue
        lines.append(line)
    data, upcxx = {}, set()
    for row in csv.DictReader(io.StringIO("\n".join(lines)), fieldnames=FIELDS):
        key = (row["variant"], row["pattern"], row["test"], row["column"], int(row["bytes"]))
        if key in data:  # a second run of the same variant: keep the first
            continue
        try:
            value = float(row["value"])
        except ValueError:
            value = None
        data[key] = (value, row["note"] or "", int(row["window"]))
        upcxx.add(row["upcxx"])
    return data, upcxx


def human(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def fmt(v):
    if v is None:
        return "NA"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def val(data, v, pattern, test, column, size):
    got = data.get((v, pattern, test, column, size))
    return got[0] if got else None


def ratio(a, b):
    return a / b if a is not None and b is not None and b > 0 else None


def targets(data, out):
    """The issue's targets, as ratios from this run (higher is better for bandwidth)."""
    sizes = sorted({k[4] for k in data if k[2] == "flood"})
    print("### Targets (ratios from this run)\n", file=out)
    print("| target | measured | met |", file=out)
    print("|---|---|---|", file=out)

    def row(name, ratios, want, higher=True):
        """ratios: (ratio or None, where) pairs."""
        rs = [(r, w) for r, w in ratios if r is not None]
        if not rs:
            print(f"| {name} | not measured | - |", file=out)
            return
        worst = min(rs) if higher else max(rs)
        ok = worst[0] >= want if higher else worst[0] <= want
        lo, hi = min(r for r, _ in rs), max(r for r, _ in rs)
        print(f"| {name} | {lo:.2f}x-{hi:.2f}x over {len(rs)} figures; worst {worst[0]:.2f}x ({worst[1]}) | "
              f"{'yes' if ok else '**no**'} |", file=out)

    big = [s for s in sizes if 4096 <= s <= 4 << 20]
    for col, what in (("LGpu->RGpu", "put"), ("RGpu->LGpu", "get")):
        row(f"uni flood {what} ({col}), 4 KiB-4 MiB: heap.copy / NVSHMEM nbi flood >= 0.9x",
            [(ratio(val(data, "heap_copy", "uni", "flood", col, s), val(data, "nvshmem", "uni", "flood", col, s)), human(s))
             for s in big], 0.9)
    row("uni flood remote_cx / plain flood, heap.copy, every column and size >= 0.8x",
        [(ratio(val(data, "heap_copy", "uni", "flood_remote", c, s), val(data, "heap_copy", "uni", "flood", c, s)),
          f"{c} {human(s)}") for c in COLUMNS for s in sizes], 0.8)
    row("8 B blocking latency, heap.copy / nvshmem_putmem+quiet (LGpu->RGpu) <= 1.2x",
        [(ratio(val(data, "heap_copy", "uni", "latency", "LGpu->RGpu", 8),
                val(data, "nvshmem", "uni", "latency", "LGpu->RGpu", 8)), "8 B")],
        1.2, higher=False)
    row("LGpu->RGpu 4 MiB flood, heap.copy / upcxx::copy on UPC++'s own segment >= 10x",
        [(ratio(val(data, "heap_copy", "uni", "flood", "LGpu->RGpu", 4 << 20),
                val(data, "upcxx_own", "uni", "flood", "LGpu->RGpu", 4 << 20)), "4 MiB")], 10)
    slower = []
    for (v, p, t, c, s), (x, _, _) in sorted(data.items()):
        if v != "heap_copy" or x is None:
            continue
        y = val(data, "upcxx_heap", p, t, c, s)
        if y is None:
            continue
        r = y / x if t == "latency" else x / y  # >= 1: heap.copy at least as fast
        slower.append((r, f"{p} {t} {c} {human(s)}"))
    row("no column slower than upcxx::copy on the same memory: heap.copy / upcxx::copy (heap), every figure >= 1x",
        slower, 1.0)
    print(file=out)


def tables(data, out):
    sizes = sorted({k[4] for k in data})
    legend = " / ".join(f"{SHORT[k]} = {label}" for k, label in VARIANTS)
    print(f"Each cell: {' / '.join(SHORT[k] for k, _ in VARIANTS)} ({legend}); NA: not measured by that "
          "variant (see the CSV's note).\n", file=out)
    for pattern, test in TESTS:
        rows = [s for s in sizes if any((v, pattern, test, c, s) in data for v, _ in VARIANTS for c in COLUMNS)]
        if not rows:
            continue
        cols = [c for c in COLUMNS if any((v, pattern, test, c, s) in data for v, _ in VARIANTS for s in rows)]
        print(f"### {'Uni' if pattern == 'uni' else 'Bi'}-directional {TEST_TITLE[test]}\n", file=out)
        print("| bytes | window | " + " | ".join(cols) + " |", file=out)
        print("|---:|---:|" + "---|" * len(cols), file=out)
        for s in rows:
            windows = sorted({data[k][2] for k in data if k[1] == pattern and k[2] == test and k[4] == s})
            cells = []
            for c in cols:
                cells.append(" / ".join(fmt(val(data, v, pattern, test, c, s)) for v, _ in VARIANTS))
            print(f"| {human(s)} | {','.join(map(str, windows))} | " + " | ".join(cells) + " |", file=out)
        print(file=out)


def plot(data, png, title):
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib): no PNG written", file=sys.stderr)
        return 0
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"blocking": ":", "flood": "-", "flood_remote": "--"}
    colours = {"nvshmem": "black", "heap_copy": "tab:green", "upcxx_heap": "tab:orange", "upcxx_own": "tab:red"}
    fig, axes = plt.subplots(4, 6, figsize=(28, 17), sharex=True)
    for pi, pattern in enumerate(("uni", "bi")):
        for ci, col in enumerate(COLUMNS):
            ax = axes[pi * 2 + ci // 6][ci % 6]
            for v, label in VARIANTS:
                for test, ls in styles.items():
                    pts = sorted((k[4], x[0]) for k, x in data.items()
                                 if k[0] == v and k[1] == pattern and k[2] == test and k[3] == col and x[0])
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, color=colours[v], marker=".",
                                label=f"{label}, {test}")
            ax.set_title(f"{pattern}: {col}", fontsize=10)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if ci % 6 == 0:
                ax.set_ylabel("GiB/s")
            if pi == 1 and ci >= 6:
                ax.set_xlabel("bytes per copy")
    handles, labels = [], []
    for ax in axes.flat:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9)
    fig.suptitle(title or "UPC++ gpu_microbenchmark on NVSHMEM's heap (one run)")
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    fig.savefig(png, dpi=80)
    print(f"wrote {png}", file=sys.stderr)
    return 0


def main(argv):
    args, png, title = [], None, ""
    i = 1
    while i < len(argv):
        if argv[i] == "--png" and i + 1 < len(argv):
            png = argv[i + 1]
            i += 2
        elif argv[i] == "--title" and i + 1 < len(argv):
            title = argv[i + 1]
            i += 2
        elif argv[i].startswith("-"):
            print(__doc__)
            return 64
        else:
            args.append(argv[i])
            i += 1
    if len(args) != 1:
        print(__doc__)
        return 64
    data, upcxx = load(args[0])
    if not data:
        print(f"no benchmark lines in {args[0]}", file=sys.stderr)
        return 65
    out = sys.stdout
    print(f"## UPC++ gpu_microbenchmark on NVSHMEM's heap{': ' + title if title else ''}\n", file=out)
    print(f"UPC++ {', '.join(sorted(upcxx))}; variants: " + ", ".join(
        f"{label} ({'run' if any(k[0] == v for k in data) else 'not run'})" for v, label in VARIANTS) + ".\n", file=out)
    targets(data, out)
    tables(data, out)
    if png:
        return plot(data, png, title)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
