#!/usr/bin/env python3
"""The test of scripts/gpu-results.py record (ctest: docs.gpu_record): the record of a run of
scripts/gpu-tests.sh says what its logs say. The logs are those of the stand-in suite (suite/,
programs/: the GPU suite's shape, the real programs' lines, no GPU), run by make-logs.sh as
gpu-tests.sh runs the GPU suite: the ones kept in logs/ (ctest 3.25.1, which writes
"100% tests passed, 0 tests failed out of 4", and 4.4.5, which writes "100% tests passed out of
4"), and, with a ctest given (test.py CTEST), fresh ones from that ctest.

    test.py [CTEST]
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SCRIPT = os.path.join(ROOT, "scripts", "gpu-results.py")

# The stand-in's counts (programs/): a cxx step passes 40 checks (nvshmem_hpp_test 2 x 8 + RESULT,
# copy_semantics_test 2 x 6 + RESULT and one SKIPPED line, copy_cover_test 2 x 4 + RESULT, the
# example's RESULT), c.gpu 22 (heap_check's summaries, 11 checks each of 2).
CXX, C = 40, 22
# case: (ctest exit, tests, checks, failures, result, notes), or a refusal's words.
EXPECT = {
    "filtered": (0, 4, 2 * CXX, 0, "PASS", "2 check lines SKIPPED"),
    "all": (0, 6, 2 * CXX + C, 0, "PASS", "2 check lines SKIPPED"),
    "failed": (8, 4, 2 * CXX - 1, 1, "FAIL",
               "2 check lines FAIL; 2 check lines SKIPPED; failed: cxx.2023.9.0.seq (Failed)"),
    "none": (0, "no test ran"),
    "skipped": (0, 6, 2 * CXX, 0, "FAIL", "2 check lines SKIPPED; did not run: c.gpu (Skipped)"),
    "home-3.4.5": (0, 6, 2 * CXX + C, 0, "PASS", "2 check lines SKIPPED"),
    "home-3.8.0": (8, 6, 2 * CXX + C - 1, 1, "FAIL",
                   "1 check lines FAIL; 2 check lines SKIPPED; failed: cxx.2020.10.0.seq (Failed)"),
}
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def record(tmp, label, ctest_log, test_log, status):
    """scripts/gpu-results.py record on these logs: (exit status, output, the record or None)."""
    out = os.path.join(tmp, f"{label}.json")
    if os.path.exists(out):
        os.remove(out)
    cmd = [sys.executable, SCRIPT, "record", out, "--ctest-log", ctest_log, "--exit", str(status),
           "--nvshmem", "3.4.5", "--wheel", "nvidia-nvshmem-cu12", "--upcxx", "2023.9.0 2020.10.0",
           "--ran", "scripts/gpu-tests.sh: ctest -L gpu"]
    if test_log is not None:
        cmd += ["--test-log", test_log]
    p = subprocess.run(cmd, capture_output=True, text=True)
    rec = None
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            rec = json.load(f)
    return p.returncode, (p.stdout + p.stderr).strip(), rec


def refused(label, got, words):
    rc, out, rec = got
    if rc == 0 or rec is not None or words not in out:
        fail(f"{label}: want no record and '{words}'; got exit {rc}, record {rec}, output: {out}")
    else:
        print(f"ok   {label}: not written ({out.split('not written: ', 1)[-1]})")


def check_logs(logs, tmp):
    name = os.path.basename(logs)
    for case, want in EXPECT.items():
        d = os.path.join(logs, case)
        with open(os.path.join(d, "exit")) as f:
            status = int(f.read())
        label = f"{name}/{case}"
        if status != want[0]:
            fail(f"{label}: ctest exited {status}, the case wants {want[0]}: the stand-in or ctest changed")
            continue
        test_log = os.path.join(d, "LastTest.log")
        got = record(tmp, label.replace("/", "-"), os.path.join(d, "ctest.log"), test_log, status)
        if len(want) == 2:
            refused(label, got, want[1])
            continue
        rc, out, rec = got
        if rc != 0 or rec is None:
            fail(f"{label}: no record (exit {rc}): {out}")
            continue
        have = (rec["tests"], rec["checks"], rec["failures"], rec["result"], rec.get("notes", ""))
        if have != want[1:]:
            fail(f"{label}: record says {have}, its logs {want[1:]}")
        else:
            print(f"ok   {label}: {out}")
    # What no record may say: a summary against the exit status, another run's test log, no summary.
    def logs_of(case):
        return os.path.join(logs, case, "ctest.log"), os.path.join(logs, case, "LastTest.log")
    c, t = logs_of("filtered")
    refused(f"{name}/filtered exit 8", record(tmp, "x", c, t, 8), "but ctest exited 8")
    c, t = logs_of("failed")
    refused(f"{name}/failed exit 0", record(tmp, "x", c, t, 0), "counts 1 failed of 4 but ctest exited 0")
    c, _ = logs_of("home-3.4.5")
    _, t = logs_of("filtered")
    refused(f"{name}/all with filtered's test log", record(tmp, "x", c, t, 0), "not this run's log")
    refused(f"{name}/no test log", record(tmp, "x", c, os.path.join(tmp, "nothing.log"), 0), "no test log")
    # A run cut short: its console output without the summary.
    c, t = logs_of("filtered")
    with open(c, encoding="utf-8") as f:
        text = f.read()
    cut = os.path.join(tmp, "cut.log")
    with open(cut, "w", encoding="utf-8") as f:
        f.write(text[:text.index("tests passed")].rsplit("\n", 1)[0] + "\n")
    refused(f"{name}/cut short, exit 0", record(tmp, "x", cut, t, 0), "printed no summary")
    rc, out, rec = record(tmp, "cut", cut, t, 130)
    if rec is None or rec["result"] != "FAIL" or rec["failures"] is not None or "did not finish" not in rec.get("notes", ""):
        fail(f"{name}/cut short, exit 130: want a FAIL record, failures not counted; got {rec} ({out})")
    else:
        print(f"ok   {name}/cut short, exit 130: {out}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        sets = sorted(os.path.join(HERE, "logs", d) for d in os.listdir(os.path.join(HERE, "logs")))
        if len(sets) < 2:
            fail("logs/: want the logs of ctest 3 and ctest 4")
        for logs in sets:
            check_logs(logs, tmp)
        if len(sys.argv) > 1:
            fresh = os.path.join(tmp, "fresh")
            p = subprocess.run(["bash", os.path.join(HERE, "make-logs.sh"), fresh, sys.argv[1]],
                               capture_output=True, text=True)
            if p.returncode != 0:
                fail(f"make-logs.sh with {sys.argv[1]} failed: {p.stdout}{p.stderr}")
            else:
                with open(os.path.join(fresh, "ctest-version")) as f:
                    print(f"fresh logs: {f.read().strip()}")
                check_logs(fresh, tmp)
    if failures:
        print(f"{len(failures)} failed")
        return 1
    print("every record says what its logs say")
    return 0


if __name__ == "__main__":
    sys.exit(main())
