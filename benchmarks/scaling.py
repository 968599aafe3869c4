"""Scaling: the `components` space with one seed (9 trials) on k concurrent trials, one CPU
each, through the CLI; prints a markdown table.

    python benchmarks/scaling.py --k 1,2
    python benchmarks/scaling.py --k 1,2 --address auto   # on a running Ray (docs/cluster.md)

For each k (``--max-concurrent k``, 1 CPU and 1 thread per trial; ``--epochs``,
``--set KEY=VALUE`` and ``--address`` go to the CLI as they are, default: none of them; with
``--address`` each run connects to that Ray, which needs k CPUs, instead of starting one, and
the storage is a temporary folder of this machine that every node must be able to write):

- wall s: the driver's time in ``Tuner.fit`` (Ray already started);
- sum of trial s: the trials' own wall times (``wall_s``: data, model, training, evaluation);
- occupancy: sum of trial s / (k x wall s): how busy the k slots were;
- speed-up: wall s at k=1 / wall s at k; efficiency: speed-up / k (the goal: >= 0.85 at
  k = number of cores). Trials slow each other down when they share memory bandwidth and
  caches, which occupancy does not see and efficiency does;
- first result s: from launching the process to the first epoch's reported result;
- process s: the whole CLI process (Ray's start and shutdown included; with ``--address``,
  connecting to it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from common import key_value, machine, markdown, run_cli


def once(k: int, epochs: int | None, overrides: list[tuple[str, str]],
         address: str | None = None) -> dict:
    args = ["--space", "components", "--seeds", "1", "--max-concurrent", str(k),
            "--cpus-per-trial", "1"]
    if address:
        args += ["--address", address]
    if epochs:
        args += ["--epochs", str(epochs)]
    for key, value in overrides:
        args += ["--set", f"{key}={value}"]
    out = run_cli(args)
    trials = out["trials"]
    assert (trials["status"] == "ok").all(), trials[["trial_name", "status", "error"]]
    wall = float(out["metadata"]["driver_wall_s"])
    return {
        "k": k, "trials": len(trials), "wall_s": wall,
        "sum_trial_s": float(trials["wall_s"].sum()),
        "first_result_s": float(out["epochs"]["reported_at"].min() - out["launched_at"]),
        "process_s": out["ended_at"] - out["launched_at"],
        "mean_samples_per_s": float(trials["train_samples_per_s"].median()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cores = os.cpu_count() or 1
    parser.add_argument("--k", default=",".join(str(k) for k in range(1, cores + 1)),
                        help="concurrent trials to try (default 1..number of cores)")
    parser.add_argument("--epochs", type=int, default=None, help="default: the trials' own (4)")
    parser.add_argument("--set", dest="overrides", type=key_value, action="append",
                        default=[], metavar="KEY=VALUE",
                        help="the CLI's --set, e.g. synthetic_train=64 (repeatable; default: "
                             "none)")
    parser.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                        help="a running Ray for every run (default: each starts a local one)")
    args = parser.parse_args()
    started = time.time()
    results = [once(int(k), args.epochs, args.overrides, args.address)
               for k in args.k.split(",")]
    base = next((r for r in results if r["k"] == 1), None)
    rows = []
    for r in results:
        speedup = base["wall_s"] / r["wall_s"] if base else float("nan")
        rows.append([r["k"], r["trials"], r["wall_s"], r["sum_trial_s"],
                     f"{r['sum_trial_s'] / (r['k'] * r['wall_s']):.3f}",
                     f"{speedup:.2f}", f"{speedup / r['k']:.3f}", r["first_result_s"],
                     r["process_s"], r["mean_samples_per_s"]])
    print(f"Machine: {machine()}")
    changed = "".join(f", {key}={value}" for key, value in args.overrides)
    print(f"components{changed}, 1 seed, 1 CPU per trial; {time.time() - started:.0f} s in "
          "all.\n")
    print(markdown(["k", "trials", "wall s", "sum of trial s", "occupancy", "speed-up",
                    "efficiency", "first result s", "process s",
                    "median trial samples/s"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
