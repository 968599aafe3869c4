"""The three own-code examples end to end on a local Ray, as a user runs them: the digits
classifier as a training function, as a script through the command contract, and as a
LightningModule (docs/own-code.md). Each run is killed with SIGKILL (the driver and the Ray
it started) once a trial has saved an epoch before its last, continued with --resume, then
(the function's) reported: every trial ends
once in trials.parquet, every epoch once in epochs.parquet, the verdicts are on the declared
metric, and the console and the report print the declared units and no other."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from ablations.experiment.trainable import load_state
from tests.conftest import REPO, run_here

pytestmark = pytest.mark.slow

EXAMPLES = {
    "function": "examples/digits/ablations.yaml",
    "command": "examples/digits/command.yaml",
    "lightning": "examples/digits/lightning.yaml",
}
EPOCHS = 20
# The reference and one ablation at two seeds: four trials
SMALL = ["--only", "no_second_layer", "--seeds", "2", "--set", f"epochs={EPOCHS}",
         "--no-dashboard"]


def cli(*args: str) -> tuple[list[str], dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    return [sys.executable, "-u", str(REPO / "run_ablations.py"), *args], dict(cwd=REPO, env=env)


def saved_epochs(root) -> dict[str, int]:
    """Each trial's last saved epoch (a worker may be replacing a state file meanwhile)."""
    found = {}
    for path in (root / "trial_state").glob("*/state.pt"):
        try:
            found[path.parent.name] = load_state(str(path))["epoch"]
        except (OSError, RuntimeError, EOFError, KeyError):
            continue
    return found


@pytest.fixture(scope="module", params=list(EXAMPLES))
def example(request, tmp_path_factory):
    kind = request.param
    storage = tmp_path_factory.mktemp(kind) / "results"
    root = storage / kind
    tracked = ["--log-to", "mlflow"] if kind == "function" else []  # and its resume, after
    command, kw = cli("--space", EXAMPLES[kind], *SMALL, "--name", kind,
                      "--storage", str(storage), *tracked)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, **kw)
    deadline = time.monotonic() + 300
    # kill once a trial has saved an epoch before its last, however fast this machine is
    while not any(0 < epoch < EPOCHS for epoch in saved_epochs(root).values()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray it started
    output = proc.stdout.read()
    proc.wait(timeout=60)
    killed = {"finished": {line.split()[1] for line in output.splitlines()
                           if line.startswith("[")},
              "trials_written": (root / "trials.parquet").exists(),
              "saved": saved_epochs(root), "output": output}
    command, kw = cli("--resume", "--name", kind, "--storage", str(storage), "--no-dashboard")
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=600, **kw)
    report = None
    if kind in ("function", "command"):  # the report reads every kind's tables alike
        report = run_here("report", str(root), "--figures", "png", cwd=REPO)  # no Ray
    return {"kind": kind, "root": root, "killed": killed, "resumed": resumed, "report": report}


def test_a_killed_run_resumes_and_ends_every_trial_once(example):
    killed, resumed = example["killed"], example["resumed"]
    assert not killed["trials_written"], killed["output"][-3000:]
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Resuming experiment" in resumed.stdout
    trials = pd.read_parquet(example["root"] / "trials.parquet")
    assert sorted(trials["trial_name"]) == sorted(
        f"{variant}-seed{seed}" for variant in ("baseline", "no_second_layer") for seed in (0, 1))
    assert (trials["status"] == "ok").all(), trials[["trial_name", "status", "error"]]
    epochs = pd.read_parquet(example["root"] / "epochs.parquet")
    per_trial = epochs.groupby("trial_name")["epoch"].apply(lambda e: tuple(sorted(e)))
    assert per_trial.map(lambda e: e == tuple(range(1, EPOCHS + 1))).all(), per_trial
    assert epochs[["val_acc", "val_loss"]].notna().all().all()


def test_a_trial_cut_off_mid_way_continues_from_its_saved_epoch(example):
    cut = {name: epoch for name, epoch in example["killed"]["saved"].items()
           if name not in example["killed"]["finished"] and 0 < epoch < EPOCHS}
    assert cut, example["killed"]
    trials = pd.read_parquet(example["root"] / "trials.parquet").set_index("trial_name")
    for name, epoch in cut.items():  # a worker may save one more epoch before it dies
        assert epoch <= trials.loc[name, "resumed_from_epoch"] <= EPOCHS, (name, epoch)


def test_metrics_are_columns_and_verdicts_use_the_declared_metric_and_units(example):
    trials = pd.read_parquet(example["root"] / "trials.parquet")
    assert trials["test_acc"].between(0.8, 1).all() and (trials["test_loss"] > 0).all()
    assert {"second_layer" if example["kind"] != "command" else "layers", "dropout",
            "augment"} <= set(trials.columns)
    assert (trials["data_source"] == "own code").all()
    out = example["resumed"].stdout
    assert "Verdicts on test_acc (higher is better)" in out
    assert "test_loss (nats)" in out and " km" not in out
    report = example["report"]
    if report is not None:
        assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
        text = (example["root"] / "report.md").read_text()
        assert "test_acc" in text and "test_loss mean (nats)" in text and "km" not in text


@pytest.mark.parametrize("example", ["command"], indirect=True)
def test_the_programs_methods_name_it_and_no_pytorch_fact_the_runner_did_not_see(example):
    """The digits script's methods paragraph, as `report` writes it: the program by name, the
    seeds through its placeholders, what the runner cannot know left to the author, and no
    PyTorch version or seed effect the runner did not see."""
    report = example["report"]
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    text = (example["root"] / "methods.md").read_text()
    assert "variants of the program `examples/digits/train.py` with ablation-runner" in text
    assert "(on its command line as {init_seed}, {data_seed}); [author: " in text
    assert "PyTorch" not in text and "initialisation and dropout" not in text, text


@pytest.mark.parametrize("example", ["function"], indirect=True)  # the run that is logged
def test_the_trackers_get_each_trial_in_its_units_and_the_verdicts(example):
    """MLflow (the default SQLite store in the experiment folder), started by the killed run
    and continued by its resume: a run per trial with the declared metrics, its curves by
    epoch and its keys, and the verdicts' run."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{example['root'] / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("function")
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    trials = [f"{v}-seed{s}" for v in ("baseline", "no_second_layer") for s in (0, 1)]
    assert sorted(runs) == sorted([*trials, "function-verdicts"])
    for name in trials:
        run = runs[name]
        assert run.info.status == "FINISHED" and 0.5 < run.data.metrics["test_acc"] <= 1
        assert run.data.params["dropout"] == "0.2" and "cnn_widths" not in run.data.params
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_acc")]
        assert sorted(set(steps)) == list(range(1, EPOCHS + 1))  # a cut trial logs again
    assert runs["function-verdicts"].data.tags["verdict.baseline"] == "reference"
