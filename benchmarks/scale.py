"""Scale: N tiny trials through the runner's command line and through a bare Ray Tune
``Tuner`` with a plain function trainable; prints a markdown table.

    python benchmarks/scale.py --trials 100,300            # about 10 minutes on 2 cores
    python benchmarks/scale.py --trials 100,300,1000       # about 35 minutes
    python benchmarks/scale.py --trials 100 --address auto # on a running cluster (docs/cluster.md)

The trials: the `components` space (9 variants) at ceil(N / 9) seeds, with settings small enough
that a trial trains in a fraction of a second (1 epoch, 64/16/16 samples, CNN widths 8,16,16,
embedding 16), 1 CPU each. Both paths train the same trials with the same
:func:`ablations.trial.loop.train`: the bare path calls it in a function trainable that only
reports each epoch's metrics (no state files, no checkpoint, no predictions, no callbacks, no
tables), with ``reuse_actors=True`` as the runner does. Columns, per path and N:

- fit s: the driver's time in ``Tuner.fit`` (for the runner: experiment.json's ``fit_s``);
  what comes before it (planning, Ray's start) is a fixed cost, measured by
  benchmarks/overhead.py;
- s/trial: fit s / N; slot-s/trial: fit s x slots / N (slots: trials that can run at once);
- train s/trial: the mean time inside ``train()`` (runner: trials.parquet's ``wall_s``);
- overhead s/trial: slot-s/trial - train s/trial, what each trial costs beyond its training;
  x bare: the runner's overhead over bare Tune's at the same N;
- driver MiB: the driver process's peak RSS; driver CPU s: its user + system CPU time;
- collect s: the runner writing trials/epochs/predictions Parquet and experiment.json after
  Tune ends (experiment.json's ``collect_s``);
- report s: ``run_ablations.py report`` on the experiment, a fresh process;
- process s: launch to exit of the whole command.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from common import REPO, _env, machine, markdown

VARIANTS = 9  # the components space
TINY = {"epochs": 1, "synthetic_train": 64, "synthetic_val": 16, "synthetic_test": 16,
        "cnn_widths": "8,16,16", "embed_dim": 16, "batch_size": 16}

# Runs the command line in this process so that its peak RSS and CPU time are the driver's.
RUNNER = """
import json, resource, runpy, sys, time
args, out = json.loads(sys.argv[1]), sys.argv[2]
sys.argv = ["run_ablations.py", *args]
code = 0
try:
    runpy.run_path("run_ablations.py", run_name="__main__")
except SystemExit as done:
    code = done.code or 0
usage = resource.getrusage(resource.RUSAGE_SELF)
with open(out, "w") as handle:
    json.dump({"code": code, "rss_mib": usage.ru_maxrss / 1024,
               "cpu_s": usage.ru_utime + usage.ru_stime}, handle)
"""

BARE = """
import json, os, resource, sys, time
import ray
from ray import tune
from ablations.experiment.api import Experiment
from ablations.trial.loop import train

seeds, overrides, storage, address = (int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3],
                                      sys.argv[4] or None)
specs = Experiment("components", seeds=seeds, overrides=overrides).plan()
plan = {spec.name: spec.config.to_dict() for spec in specs}

def trainable(config, plan):
    from ablations.config import TrialConfig
    trial = TrialConfig.from_dict(plan[config["trial"]])
    started = time.perf_counter()
    train(trial, report=lambda metrics, state, predictions: None)
    tune.report({"train_s": time.perf_counter() - started})

ray.init(address=address) if address else ray.init(num_cpus=os.cpu_count())
slots = int(ray.cluster_resources().get("CPU", 1))
tuner = tune.Tuner(
    tune.with_resources(tune.with_parameters(trainable, plan=plan), {"cpu": 1}),
    param_space={"trial": tune.grid_search(list(plan))},
    tune_config=tune.TuneConfig(reuse_actors=True),
    run_config=tune.RunConfig(name="bare", storage_path=storage, verbose=0),
)
started = time.perf_counter()
grid = tuner.fit()
fit_s = time.perf_counter() - started
train_s = [r.metrics.get("train_s") for r in grid if r.metrics]
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"fit_s": fit_s, "trials": len(grid), "ok": len(train_s), "slots": slots,
                  "train_s": sum(train_s) / max(1, len(train_s)),
                  "rss_mib": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}))
ray.shutdown()
"""


def overrides_args() -> list[str]:
    args = []
    for key, value in TINY.items():
        args += (["--epochs", str(value)] if key == "epochs" else ["--set", f"{key}={value}"])
    return args


def run_runner(seeds: int, storage: str, address: str | None) -> dict:
    out = Path(storage) / "driver.json"
    args = ["--space", "components", "--seeds", str(seeds), *overrides_args(),
            "--cpus-per-trial", "1", "--storage", storage, "--name", "scale", "--quiet"]
    if address:
        args += ["--address", address]
    launched = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(args), str(out)],
                          cwd=REPO, env=_env(), capture_output=True, text=True, check=False)
    process_s = time.perf_counter() - launched
    driver = json.loads(out.read_text()) if out.exists() else {"code": done.returncode}
    if done.returncode or driver["code"]:
        raise RuntimeError(f"runner failed ({driver['code']}):\n{done.stderr[-3000:]}")
    folder = Path(storage) / "scale"
    trials = pd.read_parquet(folder / "trials.parquet")
    meta = json.loads((folder / "experiment.json").read_text())
    started = time.perf_counter()
    report = subprocess.run([sys.executable, "run_ablations.py", "report", str(folder)],
                            cwd=REPO, env=_env(), capture_output=True, text=True, check=False)
    report_s = time.perf_counter() - started
    if report.returncode:
        raise RuntimeError(f"report failed:\n{report.stderr[-3000:]}")
    return {"trials": len(trials), "ok": int((trials["status"] == "ok").sum()),
            "fit_s": float(meta["fit_s"]), "train_s": float(trials["wall_s"].mean()),
            "slots": slots_of(meta), "rss_mib": driver["rss_mib"], "cpu_s": driver["cpu_s"],
            "collect_s": float(meta.get("collect_s", math.nan)), "report_s": report_s,
            "process_s": process_s}


def slots_of(meta: dict) -> int:
    cpus = meta.get("cluster_cpus") or os.cpu_count()
    return int(cpus)


def run_bare(seeds: int, storage: str, address: str | None) -> dict:
    launched = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", BARE, str(seeds), json.dumps(TINY), storage,
                           address or ""], cwd=REPO, env=_env(), capture_output=True,
                          text=True, check=False)
    process_s = time.perf_counter() - launched
    if done.returncode:
        raise RuntimeError(f"bare Tune failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out.update(process_s=process_s, collect_s=math.nan, report_s=math.nan)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", default="100,300",
                        help="comma-separated trial counts (each rounded up to 9 x seeds)")
    parser.add_argument("--address", default=None,
                        help="a running Ray cluster for both paths (default: a local Ray)")
    args = parser.parse_args()
    rows = []
    print(machine(), file=sys.stderr)
    for n in (int(v) for v in args.trials.split(",")):
        seeds = math.ceil(n / VARIANTS)
        measured = {}
        for path, run in (("bare Tune", run_bare), ("runner CLI", run_runner)):
            with tempfile.TemporaryDirectory(prefix="bench-scale-") as storage:
                measured[path] = run(seeds, storage, args.address)
            print(f"{path} at {seeds * VARIANTS} trials: {json.dumps(measured[path])}",
                  file=sys.stderr, flush=True)
        bare_overhead = overhead(measured["bare Tune"])
        for path, m in measured.items():
            rows.append([m["trials"], path, m["ok"], m["fit_s"], m["fit_s"] / m["trials"],
                         m["fit_s"] * m["slots"] / m["trials"], m["train_s"], overhead(m),
                         overhead(m) / bare_overhead, m["rss_mib"], m["cpu_s"], m["collect_s"],
                         m["report_s"], m["process_s"]])
    print(markdown(["trials", "path", "ok", "fit s", "s/trial", "slot-s/trial", "train s/trial",
                    "overhead s/trial", "x bare", "driver MiB", "driver CPU s", "collect s",
                    "report s", "process s"], rows))


def overhead(m: dict) -> float:
    return m["fit_s"] * m["slots"] / m["trials"] - m["train_s"]


if __name__ == "__main__":
    main()
