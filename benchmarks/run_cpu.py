"""The CPU seconds a tiny CLI run costs the whole machine (the driver, Ray's daemons, the trial
workers), with the local Ray as a user gets it (the machine's CPUs: two trials at a time on 2
cores, a worker started ahead for the first driver) and as the tests start it
(tests/conftest.py: one CPU through Ray's RAY_OVERRIDE_RESOURCES, one trial at a time, no
worker started ahead: RAY_prestart_worker_first_driver=0).

    python benchmarks/run_cpu.py --repeats 3

Each repeat runs the same table (the components space's baseline and no_images, --seeds seeds:
2, 1 epoch, tiny model, --no-dashboard, --no-reuse: 4 trials) once per case, each in a fresh
process, the order alternating, after --warmups runs not counted (1: it fills the data and estimate
caches). The CPU seconds are the machine's busy time over the run (/proc/stat), so run it on an
otherwise idle machine. Prints a markdown table: per case, the median, min and max CPU seconds
and the median wall seconds, and the medians' ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from unittest import mock

from common import machine, markdown, run_cli

TABLE = ["--space", "components", "--only", "baseline,no_images",
         "--epochs", "1", "--set", "synthetic_train=64", "--set", "synthetic_val=16",
         "--set", "synthetic_test=16", "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16",
         "--set", "batch_size=16", "--no-dashboard", "--no-reuse"]
TESTS_RAY = {"RAY_OVERRIDE_RESOURCES": '{"CPU": 1}', "RAY_prestart_worker_first_driver": "0"}
CASES = {"the machine's CPUs (as a user runs it)": {},
         "one CPU, no worker ahead (as the tests run it)": TESTS_RAY}


def busy_seconds() -> float:
    """The machine's CPU seconds spent so far, every core: user, nice, system, irq and softirq
    time (/proc/stat's first line; not idle, I/O wait, time stolen by a hypervisor, nor guest
    time, which user time already holds)."""
    with open("/proc/stat") as stat:
        ticks = [int(field) for field in stat.readline().split()[1:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def measured_run(settings: dict[str, str], seeds: int = 2) -> tuple[float, float]:
    """(the machine's CPU seconds, wall seconds) of one run of TABLE at ``seeds`` seeds with
    ``settings`` in its environment (and no other of TESTS_RAY's); the environment is restored
    afterwards."""
    with mock.patch.dict(os.environ):
        for name in TESTS_RAY:
            os.environ.pop(name, None)
        os.environ.update(settings)
        busy, start = busy_seconds(), time.perf_counter()
        run_cli([*TABLE, "--seeds", str(seeds)])
        return busy_seconds() - busy, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmups", type=int, default=1, help="runs before, not counted")
    parser.add_argument("--seeds", type=int, default=2,
                        help="the table's seeds (2: 4 trials, each in a fresh worker)")
    args = parser.parse_args()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    for _ in range(args.warmups):  # not counted: they fill the caches
        measured_run({}, args.seeds)
    cpu: dict[str, list[float]] = {name: [] for name in CASES}
    wall: dict[str, list[float]] = {name: [] for name in CASES}
    for repeat in range(args.repeats):
        for name in list(CASES) if repeat % 2 == 0 else list(reversed(CASES)):
            seconds, elapsed = measured_run(CASES[name], args.seeds)
            cpu[name].append(seconds)
            wall[name].append(elapsed)
    rows = [[name, len(cpu[name]), statistics.median(cpu[name]), min(cpu[name]),
             max(cpu[name]), statistics.median(wall[name])] for name in CASES]
    print(f"Machine: {machine()}")
    print(markdown(["local Ray", "runs", "machine CPU s (median)", "min", "max",
                    "wall s (median)"], rows))
    user, tests = (statistics.median(cpu[name]) for name in CASES)
    print(f"\nAs the tests run it, a tiny run costs {tests / user:.2f}x the CPU seconds.")


if __name__ == "__main__":
    main()
