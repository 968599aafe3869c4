"""Runner overhead: one trial run (a) by calling the plain training loop and (b) as a Ray Tune
trial through the CLI, each in a fresh process; prints a markdown table.

    python benchmarks/overhead.py --threads 1,2 --repeats 3

The trial: the `components` baseline (full model, synthetic default data, seed 0), --epochs
epochs, N torch threads (plain: ``num_threads=N``; CLI: ``--cpus-per-trial N``), and any
``--set KEY=VALUE`` config overrides on both paths (default: none). Reported per
path, medians over the repeats (the two paths alternate, so drift hits both):

- samples/s: the trial's steady-state training throughput (the median over epochs of each
  epoch's samples/s, the first step excluded), and the ratio CLI / plain;
- threads: what ``torch.get_num_threads()`` was inside the trial;
- start s: from launching the process to the trial's first training step (imports, data,
  model; for the CLI also starting Ray and a worker);
- first result s: from launching the process to the first epoch's reported result;
- wall s: the whole process.
Ray's start alone (``ray.init`` with the CLI's options, dashboard on) is timed separately.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from common import key_value, machine, markdown, run_cli, run_plain, run_python

RAY_START = """
import json, sys, time
t0 = time.perf_counter()
from ablations.experiment.execution.runner import RunOptions, init_ray
init_ray(RunOptions(storage="/tmp", name="x", space="components", dashboard=sys.argv[1] == "on"))
print(json.dumps({"seconds": time.perf_counter() - t0}))
import ray; ray.shutdown()
"""


SYNTHETIC = """
import json, os, statistics, sys, tempfile, time
with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:  # removed at the end
    os.environ["ABLATION_CACHE_DIR"] = cache
    import ablations.model.synthetic as data
    def timed(fn):
        t0 = time.perf_counter(); fn(); return time.perf_counter() - t0
    out = {"generate": statistics.median(timed(data.make_synthetic) for _ in range(5))}
    timed(data.load_synthetic)  # generates and writes the cache file
    out["memory"] = statistics.median(timed(data.load_synthetic) for _ in range(5))
    disk = []
    for _ in range(5):
        data._RECENT.clear()
        disk.append(timed(data.load_synthetic))
    out["disk"] = statistics.median(disk)
print(json.dumps(out))
"""


def synthetic_load_s() -> dict:
    """Seconds to get the default synthetic set: generated, from the on-disk cache (a fresh
    worker), from the process's cache (a reused worker); medians of 5."""
    return run_python(SYNTHETIC)


def plain_once(threads: int, epochs: int, overrides: dict[str, str]) -> dict:
    out = run_plain({"ablation": "baseline", "seed": 0, "epochs": epochs,
                     "num_threads": threads, **overrides})
    metrics, history = out["metrics"], out["history"]
    first = history[0]
    return {
        "samples_per_s": metrics["steady_train_samples_per_s"],
        "threads": metrics["torch_threads"],
        "start_s": first["reported_at"] - first["epoch_s"] - out["launched_at"],
        "first_result_s": first["reported_at"] - out["launched_at"],
        "wall_s": out["ended_at"] - out["launched_at"],
    }


def cli_once(threads: int, epochs: int, dashboard: bool, overrides: dict[str, str]) -> dict:
    out = run_cli(["--space", "components", "--only", "baseline", "--seeds", "1",
                   "--epochs", str(epochs), "--cpus-per-trial", str(threads),
                   "--dashboard", str(dashboard).lower(),
                   *(arg for key, value in overrides.items() for arg in
                     ("--set", f"{key}={value}"))])
    trial = out["trials"].iloc[0]
    assert trial["status"] == "ok", trial["error"]
    first = out["epochs"].sort_values("epoch").iloc[0]
    return {
        "samples_per_s": float(trial["train_samples_per_s"]),
        "threads": int(trial["torch_threads"]),
        "start_s": float(first["reported_at"] - first["epoch_s"] - out["launched_at"]),
        "first_result_s": float(first["reported_at"] - out["launched_at"]),
        "wall_s": out["ended_at"] - out["launched_at"],
    }


def ray_start_s(dashboard: bool) -> float:
    return run_python(RAY_START, "on" if dashboard else "off")["seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2", help="torch threads / CPUs per trial")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dashboard", choices=["true", "false"], default="true",
                        help="the CLI's --dashboard (default on, as users run it)")
    parser.add_argument("--set", dest="overrides", type=key_value, action="append",
                        default=[], metavar="KEY=VALUE",
                        help="override one trial config key on both paths, e.g. "
                             "synthetic_train=64 (repeatable; default: none)")
    args = parser.parse_args()
    overrides = dict(args.overrides)
    dashboard = args.dashboard == "true"
    started = time.time()
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        runs: dict[str, list[dict]] = {"plain loop": [], "Tune trial via CLI": []}
        for _ in range(args.repeats):
            runs["plain loop"].append(plain_once(threads, args.epochs, overrides))
            runs["Tune trial via CLI"].append(cli_once(threads, args.epochs, dashboard,
                                                       overrides))
        plain_rate = statistics.median(r["samples_per_s"] for r in runs["plain loop"])
        for path, results in runs.items():
            med = {k: statistics.median(r[k] for r in results) for k in results[0]}
            rows.append([threads, path, med["samples_per_s"],
                         f"{med['samples_per_s'] / plain_rate:.3f}",
                         "/".join(str(r["threads"]) for r in results),
                         med["start_s"], med["first_result_s"], med["wall_s"],
                         " ".join(f"{r['samples_per_s']:.0f}" for r in results)])
    ray_s = [ray_start_s(dashboard) for _ in range(args.repeats)]
    synthetic = synthetic_load_s()
    print(f"Machine: {machine()}")
    changed = "".join(f", {key}={value}" for key, value in overrides.items())
    print(f"Baseline trial{changed}, {args.epochs} epochs, {args.repeats} repeats (medians), "
          f"dashboard {'on' if dashboard else 'off'}; {time.time() - started:.0f} s in all.\n")
    print(markdown(["threads", "path", "samples/s", "x plain", "torch threads", "start s",
                    "first result s", "wall s", "samples/s per repeat"], rows))
    print(f"\nRay start alone (ray.init as the CLI does it, median of {args.repeats}): "
          f"{statistics.median(ray_s):.1f} s")
    print(f"Synthetic default set per trial: generated {synthetic['generate']:.3f} s, from the "
          f"disk cache {synthetic['disk']:.3f} s, from the process's cache "
          f"{synthetic['memory'] * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
