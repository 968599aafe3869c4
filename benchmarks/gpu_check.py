#!/usr/bin/env python3
"""What a GPU machine runs first: every CUDA path's test and the switches benchmark, one command.

    python benchmarks/gpu_check.py                 # the tests, then the switches table
    python benchmarks/gpu_check.py --skip-bench    # the tests only
    python benchmarks/gpu_check.py --systems       # also the systems space, one epoch

``--tests``, ``--pytest-args``, ``--bench-args`` and ``--systems-args`` narrow each part (e.g.
for a quick check of the script itself); their defaults run all of it. ``--address
auto|HOST:PORT`` runs the systems space on that running Ray instead of a local one the command
starts (docs/cluster.md; its results go to a temporary folder of this machine, which every node
must be able to write); a cluster's GPUs are then checked in each trial, not at planning, so a
cell this machine's GPU could not run is planned and fails there rather than being skipped.

Prints the device (name, compute capability, memory, torch and CUDA versions), a table of the
GPU-path test files (passed / failed / skipped, and the skip reasons), the switches benchmark's
table (benchmarks/switches.py on the same device) and, with ``--systems``, the systems space's
summary. On a machine without CUDA the CUDA-only tests are skipped (the table says so) and the
rest runs on the CPU: that is the part checked in CI. Exit code 1 when a test failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The tests of the code paths that differ on a GPU: CUDA state, precision, compile modes, CUDA
# graphs in Tune's threads, fractional GPUs, memory, the plugin under every switch.
GPU_TESTS = ("tests/test_gpu_paths.py", "tests/test_systems.py",
             "tests/test_cuda_graph_threads.py", "tests/test_gpu_share.py",
             "tests/test_plugin_switches.py", "tests/test_benchmark_switches.py")


def device_line() -> str:
    import torch

    if not torch.cuda.is_available():
        return f"device: cpu (no CUDA visible to torch {torch.__version__})"
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    free, total = torch.cuda.mem_get_info(index)
    return (f"device: {props.name}, capability {props.major}.{props.minor}, "
            f"{free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB; torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}")


def test_table(junit: Path) -> tuple[list[str], int]:
    """Markdown rows per test file from pytest's JUnit XML, and the number of failures."""
    counts: dict[str, Counter] = {}
    reasons: dict[str, set] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("classname", "").replace(".", "/") + ".py"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
                reasons.setdefault(name, set()).add(
                    (child.get("message") or "").removeprefix("Skipped: ")[:60])
        counts.setdefault(name, Counter())[outcome] += 1
    rows = ["| test file | passed | failed | skipped | skip reasons |", "|---|---|---|---|---|"]
    failed = 0
    for name in sorted(counts):
        c = counts[name]
        failed += c["failed"]
        rows.append(f"| {name} | {c['passed']} | {c['failed']} | {c['skipped']} | "
                    f"{'; '.join(sorted(reasons.get(name, ()))) or '-'} |")
    return rows, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-bench", action="store_true", help="run the tests only")
    parser.add_argument("--systems", action="store_true",
                        help="also run the systems space (one epoch per cell) on this device")
    parser.add_argument("--bench-args", default="",
                        help="extra arguments for benchmarks/switches.py, e.g. '--steps 5'")
    parser.add_argument("--tests", default=",".join(GPU_TESTS),
                        help="comma-separated test files or node ids to run (default: every "
                             "GPU-path test file)")
    parser.add_argument("--pytest-args", default="",
                        help="extra arguments for pytest, e.g. '-n 0'")
    parser.add_argument("--systems-args", default="",
                        help="with --systems: extra arguments for run_ablations.py, e.g. "
                             "'--only nockpt-off-bf16'")
    parser.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                        help="with --systems: a running Ray for the run (default: it starts a "
                             "local one)")
    args = parser.parse_args(argv)
    print(device_line(), flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "gpu.xml"
        # A file not in this checkout is left out; a node id (FILE::TEST) counts by its file.
        tests = [t for t in args.tests.split(",") if (ROOT / t.split("::")[0]).exists()]
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--junitxml={junit}", *args.pytest_args.split(), *tests], cwd=ROOT,
                       check=False)
        rows, failed = test_table(junit)
    print("\n" + "\n".join(rows), flush=True)
    if not args.skip_bench:
        print("\nbenchmarks/switches.py:", flush=True)
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "switches.py"),
                        *args.bench_args.split()], cwd=ROOT, check=False)
    if args.systems:
        import torch

        gpus = ["--gpus-per-trial", "1"] if torch.cuda.is_available() else []
        where = ["--address", args.address] if args.address else []
        print("\nsystems space, one epoch per cell:", flush=True)
        with tempfile.TemporaryDirectory() as storage:
            subprocess.run([sys.executable, str(ROOT / "run_ablations.py"), "--space", "systems",
                            "--epochs", "1", "--seeds", "1", "--storage", storage, "--quiet",
                            *gpus, *where, *args.systems_args.split()], cwd=ROOT, check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
