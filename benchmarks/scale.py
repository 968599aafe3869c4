"""Scale: N tiny trials through the runner's command line and through a bare Ray Tune
``Tuner`` with a plain function trainable; prints a markdown table.

    python benchmarks/scale.py --trials 100,300            # about 10 minutes on 2 cores
    python benchmarks/scale.py --trials 100,300,1000       # about 35 minutes
    python benchmarks/scale.py --trials 100 --address auto # on a running cluster (docs/cluster.md)
    python benchmarks/scale.py --trials 100,300 --cluster --kill-worker 0.5
        # a head and a worker node started here with `ray start` (1 CPU each, token
        # authentication on), then a run whose worker node is killed half-way

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
- process s: launch to exit of the whole command;
- per node: trials whose last result came from each node (Tune's ``hostname`` in each trial's
  result.json; with ``--cluster`` the worker node has its own hostname where ``unshare`` works).

With ``--kill-worker F``, one more runner run at the largest N on the same two nodes, last, with
``--max-failures 2``: once a fraction F of its trials has finished, the worker node is killed
(SIGKILL of its raylet and workers, as a lost machine); the trials it ran fail and Tune runs
them again on the head. Its row says how many trials had finished when the worker was killed,
and how many failed and ran again (Tune's error.txt in the trial's folder).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from common import REPO, _env, machine, markdown

sys.path.insert(0, str(REPO))
from tests.ray_cluster import RayCluster  # noqa: E402  (a head and a worker, `ray start`)

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


def run_runner(seeds: int, storage: str, address: str | None,
               kill: tuple[float, RayCluster] | None = None) -> dict:
    """The command line in a fresh process; with ``kill`` (fraction, cluster), the cluster's
    worker node is killed once that fraction of the trials has finished."""
    out = Path(storage) / "driver.json"
    folder = Path(storage) / "scale"
    args = ["--space", "components", "--seeds", str(seeds), *overrides_args(),
            "--cpus-per-trial", "1", "--storage", storage, "--name", "scale", "--quiet"]
    if address:
        args += ["--address", address]
    if kill:
        args += ["--max-failures", "2"]
    launched = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", RUNNER, json.dumps(args), str(out)],
                               cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    killed_after = None
    if kill:
        fraction, cluster = kill
        while process.poll() is None:
            # A trial's history file is written when its (one) epoch ends.
            finished = sum(1 for _ in folder.glob("trial_state/*/history.json"))
            if finished >= fraction * seeds * VARIANTS:
                cluster.kill_worker()
                killed_after = finished
                break
            time.sleep(0.2)
    _, stderr = process.communicate()
    process_s = time.perf_counter() - launched
    driver = json.loads(out.read_text()) if out.exists() else {"code": process.returncode}
    if process.returncode or driver["code"]:
        raise RuntimeError(f"runner failed ({driver['code']}):\n{stderr[-3000:]}")
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
            "process_s": process_s, "nodes": per_node(folder / "tune"),
            "killed_after": killed_after,
            "failed_once": sum(1 for _ in (folder / "tune").glob("*/error.txt"))}


def node_of_trials(tune_dir: Path) -> dict[str, str]:
    """Trial folder -> the hostname of its last result (Tune adds it to every result)."""
    nodes = {}
    for result in tune_dir.glob("*/result.json"):
        try:
            lines = result.read_text().strip().splitlines()
            if lines:
                nodes[result.parent.name] = json.loads(lines[-1])["hostname"]
        except (OSError, ValueError, KeyError):
            continue  # being written
    return nodes


def per_node(tune_dir: Path) -> str:
    counts = pd.Series(node_of_trials(tune_dir)).value_counts()
    head = socket.gethostname()  # the head runs on this machine's hostname
    return " / ".join(f"{'head' if host == head else 'worker' if len(counts) > 1 else host}"
                      f" {n}" for host, n in counts.items())


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
    out.update(process_s=process_s, collect_s=math.nan, report_s=math.nan,
               nodes=per_node(Path(storage) / "bare"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", default="100,300",
                        help="comma-separated trial counts (each rounded up to 9 x seeds)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--address", default=None,
                       help="a running Ray cluster for both paths (default: a local Ray)")
    where.add_argument("--cluster", action="store_true",
                       help="start a head and a worker node here with `ray start` (1 CPU each)")
    parser.add_argument("--kill-worker", type=float, default=None, metavar="F",
                        help="with --cluster: one more runner run at the largest N whose worker "
                             "node is killed once a fraction F of its trials has finished")
    args = parser.parse_args()
    if args.kill_worker is not None and not args.cluster:
        parser.error("--kill-worker needs --cluster")
    counts = [int(v) for v in args.trials.split(",")]
    print(machine(), file=sys.stderr)
    rows = []
    with cluster_or_none(args.cluster) as cluster:
        address = cluster.address if cluster else args.address
        for n in counts:
            seeds = math.ceil(n / VARIANTS)
            measured = {}
            for path, run in (("bare Tune", run_bare), ("runner CLI", run_runner)):
                with tempfile.TemporaryDirectory(prefix="bench-scale-") as storage:
                    measured[path] = run(seeds, storage, address)
                print(f"{path} at {seeds * VARIANTS} trials: {json.dumps(measured[path])}",
                      file=sys.stderr, flush=True)
            bare_overhead = overhead(measured["bare Tune"])
            for path, m in measured.items():
                rows.append(row(path, m, overhead(m) / bare_overhead))
        if args.kill_worker is not None:
            # last, on the same two nodes: the runs above have ended and left no trial running
            seeds = math.ceil(max(counts) / VARIANTS)
            with tempfile.TemporaryDirectory(prefix="bench-scale-") as storage:
                m = run_runner(seeds, storage, cluster.address, kill=(args.kill_worker, cluster))
            print(f"runner CLI, worker killed: {json.dumps(m)}", file=sys.stderr, flush=True)
            m["slots"] = math.nan  # 2, then 1: no overhead per slot
            rows.append(row(f"runner CLI, worker node killed after {m['killed_after']} trials "
                            f"({m['failed_once']} failed and ran again)", m, math.nan))
    print(markdown(["trials", "path", "ok", "fit s", "s/trial", "slot-s/trial", "train s/trial",
                    "overhead s/trial", "x bare", "driver MiB", "driver CPU s", "collect s",
                    "report s", "process s", "per node"], rows))


def row(path: str, m: dict, x_bare: float) -> list:
    return [m["trials"], path, m["ok"], m["fit_s"], m["fit_s"] / m["trials"],
            m["fit_s"] * m["slots"] / m["trials"], m["train_s"], overhead(m), x_bare,
            m["rss_mib"], m["cpu_s"], m["collect_s"], m["report_s"], m["process_s"], m["nodes"]]


@contextlib.contextmanager
def cluster_or_none(start: bool):
    """A head and a worker node started with `ray start` (1 CPU each, token authentication on,
    the token in this process's environment for the drivers it starts), stopped at the end."""
    if not start:
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    cluster = RayCluster(root)
    saved = dict(os.environ)
    try:
        cluster.start()
        os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=cluster.token)
        yield cluster
    finally:
        os.environ.clear()
        os.environ.update(saved)
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def overhead(m: dict) -> float:
    return m["fit_s"] * m["slots"] / m["trials"] - m["train_s"]


if __name__ == "__main__":
    main()
