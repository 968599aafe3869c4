"""The three own-code examples end to end on Ray, through the command line's entry point: the
digits classifier as a training function, as a script through the command contract, and as a
LightningModule (docs/own-code.md).

What each proves, once per mechanism:

- the driver killed with SIGKILL (the driver and the Ray it started) once a trial has saved an
  epoch before its last, then ``--resume``: every trial ends once, a trial cut off continues
  from its saved epoch, and the experiment's trackers (MLflow) get every trial. The restore is
  Tune's and the same for every kind of code; it runs for the command, whose kill leaves the
  most behind: each program in a process tree of its own under its supervisor, its checkpoint
  in ``{resume_dir}``, and epoch lines it may write after the runner's last save;
- each kind's own save and reload on Ray's workers: the training function's state through
  ``trial.save`` / ``trial.restore``, Lightning's ``last.ckpt`` (``fit_lightning``), the
  program's checkpoint (the kill above). For the function and Lightning, a trial that fails
  right after saving an epoch (tests/digits_faults.py) is retried from it (``--max-failures
  1``), in this process on the test worker's shared Ray: its trials run in this process's
  folder, the checkout's root, and import the examples from it;
- for every kind: each trial once in trials.parquet, each epoch once in epochs.parquet, the
  code's keys and metrics as columns, the verdicts on the declared metric, the console and the
  report in the declared units and no other; the command's methods paragraph."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from ablations.experiment.execution.trainable import load_state
from tests.conftest import REPO, run_here
from tests.digits_faults import FAIL_AFTER_EPOCH, FAILING, SPEC_OF

pytestmark = pytest.mark.slow

EXAMPLES = {
    "command": "examples/digits/command.yaml",  # killed and resumed
    "function": "examples/digits/ablations.yaml",  # a trial retried
    "lightning": "examples/digits/lightning.yaml",  # a trial retried
}
EPOCHS = 20
# The reference and one ablation at two seeds: four trials
SMALL = ["--only", "no_second_layer", "--seeds", "2", "--set", f"epochs={EPOCHS}",
         "--no-dashboard"]
TRIALS = sorted(f"{variant}-seed{seed}" for variant in ("baseline", "no_second_layer")
                for seed in (0, 1))


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


def killed_and_resumed(storage) -> dict:
    """The command's run, logged to MLflow, killed with its Ray once a trial has saved an
    epoch before its last, then resumed and reported in this process."""
    root = storage / "command"
    command, kw = cli("--space", EXAMPLES["command"], *SMALL, "--name", "command",
                      "--storage", str(storage), "--log-to", "mlflow")
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
    # resumed in this process, on the test worker's shared Ray: another driver, another Ray;
    # --allow-changed: the command's code is every .py file of the checkout it runs in, which
    # others may edit meanwhile (a resume on changed code: tests/test_own_code_fingerprint.py)
    resumed = run_here("--resume", "--name", "command", "--storage", str(storage),
                       "--no-dashboard", "--allow-changed", cwd=REPO)
    return {"root": root, "killed": killed, "run": resumed}


def retried(kind: str, folder) -> dict:
    """The example's space file with its training function failing once (tests/digits_faults.py),
    run with one retry in this process."""
    example = REPO / EXAMPLES[kind]
    text, found = re.subn(r"^model: (\S+)", lambda match: f"model: {SPEC_OF[match[1]]}",
                          example.read_text(), count=1, flags=re.MULTILINE)
    assert found == 1, example
    space = folder / example.name
    space.write_text(text)
    storage = folder / "results"
    run = run_here("--space", str(space), *SMALL, "--name", kind, "--storage", str(storage),
                   "--max-failures", "1", cwd=REPO)
    return {"root": storage / kind, "run": run}


@pytest.fixture(scope="module", params=list(EXAMPLES))
def example(request, tmp_path_factory):
    """Each kind's run and its report. The in-process runs (run_here) run in the checkout's
    root, as the command line does from there: their trials run the script and import the
    examples from it."""
    kind = request.param
    folder = tmp_path_factory.mktemp(kind)
    ran = killed_and_resumed(folder / "results") if kind == "command" \
        else retried(kind, folder)
    report = None
    if kind in ("function", "command"):  # the report reads every kind's tables alike
        report = run_here("report", str(ran["root"]), "--figures", "png", cwd=REPO)  # no Ray
    return {"kind": kind, "report": report, **ran}


def assert_every_trial_ended_once(example) -> pd.DataFrame:
    run = example["run"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    trials = pd.read_parquet(example["root"] / "trials.parquet")
    assert sorted(trials["trial_name"]) == TRIALS
    assert (trials["status"] == "ok").all(), trials[["trial_name", "status", "error"]]
    epochs = pd.read_parquet(example["root"] / "epochs.parquet")
    per_trial = epochs.groupby("trial_name")["epoch"].apply(lambda e: tuple(sorted(e)))
    assert sorted(per_trial.index) == TRIALS
    assert per_trial.map(lambda e: e == tuple(range(1, EPOCHS + 1))).all(), per_trial
    assert epochs[["val_acc", "val_loss"]].notna().all().all()
    return trials.set_index("trial_name")


@pytest.mark.parametrize("example", ["command"], indirect=True)
def test_a_killed_run_resumes_and_ends_every_trial_once(example):
    killed = example["killed"]
    assert not killed["trials_written"], killed["output"][-3000:]
    assert_every_trial_ended_once(example)
    assert "Resuming experiment" in example["run"].stdout


@pytest.mark.parametrize("example", ["command"], indirect=True)
def test_a_trial_cut_off_mid_way_continues_from_its_saved_epoch(example):
    cut = {name: epoch for name, epoch in example["killed"]["saved"].items()
           if name not in example["killed"]["finished"] and 0 < epoch < EPOCHS}
    assert cut, example["killed"]
    trials = pd.read_parquet(example["root"] / "trials.parquet").set_index("trial_name")
    for name, epoch in cut.items():  # a worker may save one more epoch before it dies
        assert epoch <= trials.loc[name, "resumed_from_epoch"] <= EPOCHS, (name, epoch)


@pytest.mark.parametrize("example", ["function", "lightning"], indirect=True)
def test_a_failed_trial_is_retried_from_its_saved_epoch(example):
    """The example's own state (the function's, Lightning's last.ckpt) saved by one worker and
    reloaded by the next: the retried trial starts after its saved epoch, its epochs before it,
    kept in the saved state, are each in epochs.parquet once, and Tune's log of its reports
    (its result.json, over both runs) has each epoch once: none trained again."""
    trials = assert_every_trial_ended_once(example)
    assert trials.loc[FAILING, "resumed_from_epoch"] == FAIL_AFTER_EPOCH
    assert (trials.drop(FAILING)["resumed_from_epoch"] == 0).all(), trials["resumed_from_epoch"]
    assert (trials["epochs_run"] == EPOCHS).all(), trials["epochs_run"]
    log = example["root"] / "tune" / FAILING / "result.json"
    reported = [json.loads(line)["epoch"] for line in log.read_text().splitlines()]
    assert reported == [*range(1, EPOCHS + 1), EPOCHS], reported  # the final result: the last


def test_metrics_are_columns_and_verdicts_use_the_declared_metric_and_units(example):
    trials = pd.read_parquet(example["root"] / "trials.parquet")
    assert trials["test_acc"].between(0.8, 1).all() and (trials["test_loss"] > 0).all()
    assert {"second_layer" if example["kind"] != "command" else "layers", "dropout",
            "augment"} <= set(trials.columns)
    assert (trials["data_source"] == "own code").all()
    out = example["run"].stdout
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


@pytest.mark.parametrize("example", ["command"], indirect=True)  # the run that is logged
def test_the_trackers_get_each_trial_in_its_units_and_the_verdicts(example):
    """MLflow (the default SQLite store in the experiment folder), started by the killed run
    and continued by its resume: a run per trial with the declared metrics, its curves by
    epoch and its keys, and the verdicts' run."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{example['root'] / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("command")
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == sorted([*TRIALS, "command-verdicts"])
    for name in TRIALS:
        run = runs[name]
        assert run.info.status == "FINISHED" and 0.5 < run.data.metrics["test_acc"] <= 1
        assert run.data.params["dropout"] == "0.2" and "cnn_widths" not in run.data.params
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_acc")]
        assert sorted(set(steps)) == list(range(1, EPOCHS + 1))  # a cut trial logs again
    assert runs["command-verdicts"].data.tags["verdict.baseline"] == "reference"
