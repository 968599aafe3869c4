"""The CPU seconds a CLI run's driver process spends (its own user + system time: not Ray's
daemons', nor the trials'), with and without Ray Tune's usage tag of the run's callbacks,
which the runner leaves out while Ray's usage statistics are off
(ablations/experiment/tune_usage.py).

    python benchmarks/driver_cpu.py --repeats 5

Each repeat runs the same tiny table (the components space's baseline and no_images, 2 seeds,
1 epoch, --no-dashboard, --no-reuse) twice, each in a fresh process with
RAY_USAGE_STATS_ENABLED=0: once as the runner runs it, once with the tag as Tune takes it
(imported: mlflow and wandb where installed); the order alternates, after --warmups runs not
counted (1: it fills the caches of the data and of the cost estimate). Prints a markdown table:
per case, the median, min and max of the driver's CPU seconds and of the run's wall seconds,
and the medians' difference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from common import machine, markdown, run_python

# The command line in-process; "tag" puts Tune's tag back. Prints the exit code and the
# driver's CPU seconds as JSON on stdout's last line.
PROBE = """
import contextlib, json, resource, sys
if sys.argv[1] == "tag":
    import ablations.experiment.runner as runner
    runner.no_unsent_callback_tag = contextlib.nullcontext
from ablations.cli.main import main
code = main(sys.argv[2:])
used = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"code": code, "cpu_s": used.ru_utime + used.ru_stime}))
"""
TABLE = ["--space", "components", "--only", "baseline,no_images", "--seeds", "2",
         "--epochs", "1", "--set", "synthetic_train=64", "--set", "synthetic_val=16",
         "--set", "synthetic_test=16", "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16",
         "--set", "batch_size=16", "--no-dashboard", "--no-reuse", "--quiet"]
CASES = {"as the runner runs it (no tag)": "no-tag", "with Tune's callback tag": "tag"}


def driver_run(case: str, storage: str) -> tuple[float, float]:
    """(the driver's CPU seconds, the run's wall seconds) of one run of TABLE."""
    start = time.perf_counter()
    report = run_python(PROBE, case, *TABLE, "--storage", storage)
    wall = time.perf_counter() - start
    if report["code"] != 0:
        raise RuntimeError(f"the run exited {report['code']}")
    return report["cpu_s"], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmups", type=int, default=1, help="runs before, not counted")
    args = parser.parse_args()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # both cases; the runs inherit it
    cpu: dict[str, list[float]] = {name: [] for name in CASES}
    wall: dict[str, list[float]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory(prefix="bench-driver-") as storage:
        for _ in range(args.warmups):  # not counted: they fill the data and estimate caches
            driver_run("no-tag", storage)
        for repeat in range(args.repeats):
            order = list(CASES) if repeat % 2 == 0 else list(reversed(CASES))
            for name in order:
                seconds, elapsed = driver_run(CASES[name], storage)
                cpu[name].append(seconds)
                wall[name].append(elapsed)
    rows = [[name, len(cpu[name]), statistics.median(cpu[name]), min(cpu[name]),
             max(cpu[name]), statistics.median(wall[name])] for name in CASES]
    print(f"Machine: {machine()}")
    print(markdown(["case", "runs", "driver CPU s (median)", "min", "max", "wall s (median)"],
                   rows))
    saved = statistics.median(cpu["with Tune's callback tag"]) - \
        statistics.median(cpu["as the runner runs it (no tag)"])
    print(f"\nThe tag costs the driver {saved:.2f} CPU-s a run (difference of the medians).")


if __name__ == "__main__":
    main()
