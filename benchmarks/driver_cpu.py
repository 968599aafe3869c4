"""The CPU seconds a CLI run's driver process spends (its own user + system time: not Ray's
daemons', nor the trials'), and its peak memory, as the runner runs it and with either of two
things Tune's driver does by itself put back (ablations/experiment/execution/tune_usage.py): the
usage tag of the run's callbacks, which the runner leaves out while Ray's usage statistics are off,
and torch, which Tune's TensorBoard logger imports through tensorboardX.

    python benchmarks/driver_cpu.py --repeats 5

Each repeat runs the same tiny table (the components space's baseline and no_images, --seeds
seeds: 2, 1 epoch, --no-dashboard, --no-reuse) once per case, each in a fresh process with
RAY_USAGE_STATS_ENABLED=0: as the runner runs it, with the tag as Tune takes it (imported:
mlflow and wandb where installed), and with tensorboardX importing torch; the order rotates,
after --warmups runs not counted (1: it fills the caches of the data and of the cost
estimate, without which the estimate imports torch). Prints a markdown table: per case, the
median, min and max of the driver's CPU seconds, its median peak memory (RSS) and the run's
median wall seconds, and each case's difference to the first. ``--address`` runs every case on
that Ray instead of a local one each run starts: the differences between the cases stand, and
each driver's figure then leaves out starting Ray.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from common import machine, markdown, run_python

# The command line in-process; "tag" puts Tune's tag back, "torch" lets tensorboardX import
# torch. Prints the exit code, the driver's CPU seconds, its peak RSS and whether it loaded
# torch as JSON on stdout's last line.
PROBE = """
import contextlib, json, resource, sys
import ablations.experiment.execution.runner as runner
if sys.argv[1] == "tag":
    runner.no_unsent_callback_tag = contextlib.nullcontext
if sys.argv[1] == "torch":
    runner.tensorboardx_without_torch = lambda: None
from ablations.cli.main import main
code = main(sys.argv[2:])
used = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"code": code, "cpu_s": used.ru_utime + used.ru_stime,
                  "rss_mib": used.ru_maxrss / 1024, "torch": "torch" in sys.modules}))
"""
TABLE = ["--space", "components", "--only", "baseline,no_images",
         "--epochs", "1", "--set", "synthetic_train=64", "--set", "synthetic_val=16",
         "--set", "synthetic_test=16", "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16",
         "--set", "batch_size=16", "--no-dashboard", "--no-reuse", "--quiet"]
CASES = {"as the runner runs it": "runner", "with Tune's callback tag": "tag",
         "with torch through tensorboardX": "torch"}


def driver_run(case: str, storage: str, where: list[str], seeds: int = 2) -> dict:
    """The driver's CPU seconds, peak RSS (MiB) and whether it loaded torch, and the run's
    wall seconds, of one run of TABLE at ``seeds`` seeds (``where``: the CLI's ``--address``
    flag, or none)."""
    start = time.perf_counter()
    report = run_python(PROBE, case, *TABLE, "--seeds", str(seeds), "--storage", storage,
                        *where)
    report["wall_s"] = time.perf_counter() - start
    if report["code"] != 0:
        raise RuntimeError(f"the run exited {report['code']}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmups", type=int, default=1, help="runs before, not counted")
    parser.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                        help="run every case on this Ray, not a local one per run")
    parser.add_argument("--seeds", type=int, default=2, help="the table's seeds (2: 4 trials)")
    args = parser.parse_args()
    where = ["--address", args.address] if args.address else []
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # every case; the runs inherit it
    runs: dict[str, list[dict]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory(prefix="bench-driver-") as storage:
        for _ in range(args.warmups):  # not counted: they fill the data and estimate caches
            driver_run("runner", storage, where, args.seeds)
        names = list(CASES)
        for repeat in range(args.repeats):
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                runs[name].append(driver_run(CASES[name], storage, where, args.seeds))

    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[name])

    rows = [[name, len(runs[name]), median(name, "cpu_s"),
             min(run["cpu_s"] for run in runs[name]), max(run["cpu_s"] for run in runs[name]),
             median(name, "rss_mib"), median(name, "wall_s"),
             "yes" if any(run["torch"] for run in runs[name]) else "no"] for name in CASES]
    print(f"Machine: {machine()}")
    print(markdown(["case", "runs", "driver CPU s (median)", "min", "max",
                    "driver peak MiB (median)", "wall s (median)", "torch loaded"], rows))
    first = names[0]
    for name in names[1:]:
        print(f"\n{name}: {median(name, 'cpu_s') - median(first, 'cpu_s'):+.2f} CPU-s and "
              f"{median(name, 'rss_mib') - median(first, 'rss_mib'):+.0f} MiB for the driver "
              "a run (differences of the medians)")


if __name__ == "__main__":
    main()
