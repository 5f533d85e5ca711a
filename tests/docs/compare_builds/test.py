#!/usr/bin/env python3
"""scripts/compare-builds.py on runs whose answer is known (ctest docs.compare_builds).

Two builds, three rounds of flood_bench and stream_bench lines. In every round the new build moves
a batched window 5% faster relative to NVSHMEM's put in its own run, while whole runs are slowed
by up to 1.4x (the machine's speed modes: every time of a run scaled alike); unbatched windows are
the same in both. A round that only one build ran is left out, and input that is not a benchmark
line is refused.
"""
import pathlib
import re
import subprocess
import sys
import tempfile

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "compare-builds.py"
failures = 0


def check(what, ok):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    failures += not ok


def run(kind, text, *args):
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "runs.txt"
        path.write_text(text)
        p = subprocess.run([sys.executable, str(SCRIPT), kind, str(path), *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def ratio(out, label):
    m = re.search(re.escape(label) + r": \S+ over \S+, (\d+) rounds: ([0-9.]+)x \(95% interval ([0-9.]+)-([0-9.]+)\)", out)
    return (int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4))) if m else None


floods = []
for r, speed in ((1, 1.0), (2, 1.4), (3, 0.8)):
    for build, batched_gain in (("new", 1.05), ("base", 1.0)):
        s = speed if build == "new" else 1.0 / speed  # the two builds' runs in different modes
        floods.append(f"== {build} {r}")
        floods.append("flood_bench: header line, ignored")
        for n, put in ((8, 350.0), (4096, 340.0), (65536, 345.0)):
            b, u = 35.0 / batched_gain, 380.0
            floods.append(f"FLOOD put {n} 100 {b * s:.4f} 0 {u * s:.4f} 0 {put * s:.4f} 0 1 1")
floods.append("== new 4")  # a round of one build only
floods.append("FLOOD put 8 100 1.0 0 1.0 0 100.0 0 1 1")
rc, out = run("floods", "\n".join(floods) + "\n", "--new", "new", "--base", "base")
check(f"floods: exit 0 (got {rc}: {out[:200]})", rc == 0)
b = ratio(out, "batched")
check(f"floods: batched 1.050x over 3 rounds, interval 1.050-1.050, whatever the runs' speed (got {b})",
      b is not None and b[0] == 3 and abs(b[1] - 1.05) < 1e-3 and abs(b[2] - 1.05) < 1e-3 and abs(b[3] - 1.05) < 1e-3)
u = ratio(out, "unbatched")
check(f"floods: unbatched 1.000x (got {u})", u is not None and u[0] == 3 and abs(u[1] - 1.0) < 1e-3)
check("floods: per-size lines name both builds' own ratio to NVSHMEM",
      re.search(r"8 B: NVSHMEM's time over ours, median of rounds: new 10\.500x, base 10\.000x", out) is not None)

stream = []
for r in (1, 2):
    for build, t in (("new", 10.0), ("base", 11.0)):
        stream.append(f"== {build} round {r}")
        for n in (8, 1024):
            for w, put in ((1, 11.0), (100, 550.0)):
                ours = t if w == 1 else put / (1.1 if build == "new" else 1.0)
                stream.append(f"STREAM {n} {w} {ours:.4f} 0 {put:.4f} 0 1 0 0 1 0 0")
rc, out = run("stream", "\n".join(stream) + "\n", "--new", "new", "--base", "base")
check(f"stream: exit 0 (got {rc})", rc == 0)
w1, w100 = ratio(out, "window 1, copy_on_stream"), ratio(out, "window 100, copy_on_stream")
check(f"stream: window 1 1.100x (got {w1})", w1 is not None and w1[0] == 2 and abs(w1[1] - 1.1) < 1e-3)
check(f"stream: window 100 1.100x (got {w100})", w100 is not None and abs(w100[1] - 1.1) < 1e-3)
rc, out = run("stream", "\n".join(stream) + "\n", "--new", "new", "--base", "base", "--window", "100")
check("stream: --window 100 prints that window only", rc == 0 and "window 1," not in out and "window 100," in out)

# after: 10 waits of the new build, readiness 1..10 us (so 10 within 10 us, 90th percentile 9 us)
# and one of 25 us; the base build's three waits, an old AFTER line without the readiness column
# among them (left out).
after = ["== new 1"] + [f"AFTER 268435456 190.0 185.0 1.0 5.0 {90 + k:.1f} 80 0.08 {k + 1:.1f}" for k in range(10)]
after += ["== new 2", "AFTER 268435456 190.0 185.0 1.0 5.0 97.5 80 0.08 25.0"]
after += ["== base 1", "AFTER 268435456 190.0 185.0 1.0 180.0 2.3 2 90.00",
          "AFTER 268435456 190.0 185.0 1.0 180.0 2.3 2 90.00 3.0", "AFTER 268435456 190.0 185.0 1.0 180.0 2.3 2 90.00 4.0"]
rc, out = run("after", "\n".join(after) + "\n", "--new", "new", "--base", "base")
check(f"after: exit 0 (got {rc}: {out[:200]})", rc == 0)
check("after: the new build's 11 waits: freed 90.0/95.0/99.0%, median 6.0 us, 90th percentile 10.0 us, max 25.0, 10 of 11",
      "new: 11 waits; host time freed 90.0% / 95.0% / 99.0%; ready after the stream reached the point: median 6.0 us, "
      "90th percentile 10.0 us, max 25.0 us, 10 of 11 within 10 us" in out)
check("after: the base build's 2 waits with a readiness column", "base: 2 waits; host time freed 2.3% / 2.3% / 2.3%" in out)
rc, out = run("after", "== new 1\nAFTER 268435456 190.0 185.0 1.0 5.0 97.5 80 0.08 2.0\n", "--new", "new", "--base", "base")
check(f"after: a build with no AFTER line is refused (exit {rc})", rc != 0 and "no AFTER line" in out)

rc, out = run("floods", "== new 1\nFLOOD put eight 100 1 0 1 0 1 0 1 1\n", "--new", "new", "--base", "base")
check(f"a line that is not the benchmark's is refused (exit {rc}: {out.strip()[:120]})", rc != 0 and "cannot read the line" in out)
rc, out = run("floods", "\n".join(floods[:6]) + "\n", "--new", "new", "--base", "other")
check(f"no round with both builds is refused (exit {rc}: {out.strip()[:120]})", rc != 0 and "no round has both builds" in out)

print(f"RESULT compare_builds {'PASS' if failures == 0 else f'FAIL ({failures})'}")
sys.exit(1 if failures else 0)
