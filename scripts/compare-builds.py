#!/usr/bin/env python3
"""Two builds of this library against each other, from alternating runs of one benchmark.

Each build is measured against NVSHMEM's own calls in the same run (flood_bench: `putmem_nbi` +
quiet; stream_bench: `putmem_on_stream` + `quiet_on_stream`), and the builds are compared through
those ratios, so a machine whose speed changes between runs (one run of a build, then one of the
other) shifts both sides of a ratio alike. The input is the runs' output, each run after a line

    == <build> <round>      (or: == <build> round <round>)

(the benchmark's own lines follow unchanged). For every round and size where both builds ran:

    floods:  (put / batched)_new / (put / batched)_base, and the same for unbatched
    stream:  (put / copy_on_stream)_new / (put / copy_on_stream)_base, per window

and then, per round, the geometric mean over the sizes; over the rounds, their geometric mean with a
95% bootstrap interval (resampling rounds; fixed seed). Above 1: the new build is faster. Per size,
the median over rounds of each build's own ratio to NVSHMEM is printed too.

    python3 scripts/compare-builds.py floods OUT.txt [MORE.txt ...] --new f --base c
    python3 scripts/compare-builds.py stream OUT.txt --new g --base f [--window 1]
    python3 scripts/compare-builds.py after OUT.txt --new g --base f

`after` summarises stream_bench's AFTER lines of each build (every wait of every round, not
paired by round): the host time freed (min / median / max) and the time from the stream reaching
the point until the future was ready (median, 90th percentile, max, and how many within 10 us).

BENCHMARKS.md, "How to run", names the runs that feed it.
"""

import argparse
import math
import random
import re
import signal
import statistics
import sys


def parse(paths, kind):
    """{(build, (file, round)): {key: (ours..., put)}} from the runs in `paths`."""
    runs = {}
    for fi, path in enumerate(paths):
        parse_one(runs, fi, path, kind)
    return runs


def parse_one(runs, fi, path, kind):
    cur = None
    with open(path) as f:
        for line in f:
            m = re.match(r"== (\S+) (?:round )?(\d+)\b", line)
            if m:
                cur = (m.group(1), (fi, int(m.group(2))))
                runs.setdefault(cur, {})
                continue
            fields = line.split()
            if cur is None or not fields:
                continue
            try:
                if kind == "floods" and fields[0] == "FLOOD":
                    # FLOOD <dir> <bytes> <window> <batched min> <max> <unbatched min> <max> <put min> ...
                    key = (fields[1], int(fields[2]), int(fields[3]))
                    runs[cur][key] = (float(fields[4]), float(fields[6]), float(fields[8]))
                elif kind == "after" and fields[0] == "AFTER" and len(fields) >= 10:
                    # AFTER <bytes> <total> <blocked> <call> <progress> <freed %> <calls> <us a call> <ready us>
                    runs[cur].setdefault("after", []).append((float(fields[6]), float(fields[9])))
                elif kind == "stream" and fields[0] == "STREAM":
                    # STREAM <bytes> <window> <copy_on_stream min> <max> <put min> ...
                    key = (int(fields[1]), int(fields[2]))
                    runs[cur][key] = (float(fields[3]), float(fields[5]))
            except (IndexError, ValueError):
                sys.exit(f"{path}: cannot read the line {line.strip()!r}")


def interval(logs, draws=20000, seed=1):
    """The geometric mean of exp(logs) and a 95% bootstrap interval over them."""
    rng = random.Random(seed)
    means = sorted(math.exp(statistics.fmean(rng.choices(logs, k=len(logs)))) for _ in range(draws))
    return math.exp(statistics.fmean(logs)), means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def compare(runs, new, base, columns, keep):
    """Per column: the rounds' log ratios (geometric mean over sizes) and per-size medians."""
    rounds = sorted({r for (b, r) in runs if b == new} & {r for (b, r) in runs if b == base})
    if not rounds:
        sys.exit(f"no round has both builds {new!r} and {base!r}")
    out = {}
    for ci, name in columns:
        per_round, per_size = [], {}
        for r in rounds:
            a, b = runs[(new, r)], runs[(base, r)]
            keys = sorted(k for k in a if k in b and keep(k))
            if not keys:
                continue
            logs = []
            for k in keys:
                ra, rb = a[k][-1] / a[k][ci], b[k][-1] / b[k][ci]  # NVSHMEM's time over ours, each build
                logs.append(math.log(ra / rb))
                per_size.setdefault(k, ([], []))
                per_size[k][0].append(ra)
                per_size[k][1].append(rb)
            per_round.append(statistics.fmean(logs))
        if not per_round:
            sys.exit("no size ran in both builds")
        out[name] = (per_round, per_size)
    return out


def percentile(xs, q):
    """The q-th percentile of xs (nearest rank)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))]


def summarise_after(runs, builds):
    for b in builds:
        waits = [w for (build, _), run in runs.items() if build == b for w in run.get("after", [])]
        if not waits:
            sys.exit(f"no AFTER line with a readiness column for build {b!r}")
        freed, ready = [w[0] for w in waits], [w[1] for w in waits]
        print(
            f"{b}: {len(waits)} waits; host time freed {min(freed):.1f}% / {statistics.median(freed):.1f}% / "
            f"{max(freed):.1f}%; ready after the stream reached the point: median {statistics.median(ready):.1f} us, "
            f"90th percentile {percentile(ready, 90):.1f} us, max {max(ready):.1f} us, "
            f"{sum(r <= 10 for r in ready)} of {len(ready)} within 10 us"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["floods", "stream", "after"])
    ap.add_argument("files", nargs="+", help="the runs' output (several files: their rounds are told apart)")
    ap.add_argument("--new", required=True, help="the build measured (its name after ==)")
    ap.add_argument("--base", required=True, help="the build it is compared with")
    ap.add_argument("--window", type=int, help="stream: only this window (default: each window apart)")
    ap.add_argument("--dir", default="put", help="floods: the direction (default put)")
    args = ap.parse_args()
    runs = parse(args.files, args.kind)
    if args.kind == "after":
        return summarise_after(runs, [args.new, args.base])
    if args.kind == "floods":
        groups = [("", lambda k: k[0] == args.dir)]
        columns = [(0, "batched"), (1, "unbatched")]
    else:
        windows = sorted({k[1] for run in runs.values() for k in run})
        if args.window is not None:
            windows = [args.window]
        groups = [(f"window {w}, ", lambda k, w=w: k[1] == w) for w in windows]
        columns = [(0, "copy_on_stream")]
    for label, keep in groups:
        for name, (per_round, per_size) in compare(runs, args.new, args.base, columns, keep).items():
            g, lo, hi = interval(per_round)
            print(
                f"{label}{name}: {args.new} over {args.base}, {len(per_round)} rounds: {g:.3f}x "
                f"(95% interval {lo:.3f}-{hi:.3f}); rounds {' '.join(f'{math.exp(x):.3f}' for x in per_round)}"
            )
            for k, (ra, rb) in sorted(per_size.items()):
                size = k[1] if args.kind == "floods" else k[0]
                print(
                    f"  {size:>10} B: NVSHMEM's time over ours, median of rounds: "
                    f"{args.new} {statistics.median(ra):.3f}x, {args.base} {statistics.median(rb):.3f}x"
                )


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    main()
