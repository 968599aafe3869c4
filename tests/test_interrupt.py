"""Ctrl-C and SIGTERM stop a run, not fail it: the trials it had not finished are `interrupted`
or `not_started` (never `failed`), the exit code is 130, the exact resume command is printed,
and that command finishes every trial, continuing the interrupted ones from their last epoch."""

from __future__ import annotations

import glob
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO, run_here

pytestmark = pytest.mark.slow

# 20 epochs of 96 samples: several seconds per trial, so the run is still going when the first
# trial has saved its first epoch and the signal arrives; the others wait their turn.
ARGS = ["--space", "components", "--only", "baseline,no_images", "--seeds", "2",
        "--epochs", "20", "--set", "synthetic_train=96", "--set", "synthetic_val=16",
        "--set", "synthetic_test=16", "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16",
        "--set", "num_heads=2", "--set", "batch_size=16", "--no-dashboard"]
STATUSES_OF_A_STOPPED_RUN = {"ok", "interrupted", "not_started"}
RAY_NATIVE_DUMP = ("SIGTERM received", "*** ", "Aborted", "Failed to connect to GCS")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}


def run_and_signal(tmp: Path, name: str, sig: int, *, group: bool) -> dict:
    """Start the CLI, send ``sig`` once a trial has saved an epoch (to the whole process group
    as a terminal's Ctrl-C, ``timeout`` and schedulers do, or to the driver alone as ``kill``
    does), wait for it to exit."""
    storage = tmp / "results"
    command = [sys.executable, "-u", str(REPO / "run_ablations.py"), *ARGS,
               "--name", name, "--storage", str(storage)]
    out, err = tmp / f"{name}.out", tmp / f"{name}.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=tmp, env=env(),
                                start_new_session=True)
        deadline = time.monotonic() + 180
        while not glob.glob(str(storage / name / "trial_state" / "*" / "state.pt")):
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()[-3000:]
            time.sleep(0.1)
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        try:
            returncode = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return {"returncode": returncode, "stdout": out.read_text(), "stderr": err.read_text(),
            "root": storage / name, "storage": storage}


def assert_stopped_cleanly(run: dict, name: str) -> None:
    text = run["stdout"] + run["stderr"]
    assert run["returncode"] == 130, text[-3000:]
    command = (f"python {REPO / 'run_ablations.py'} --resume --name {name} "
               f"--storage {run['storage']}")
    assert command in text, text[-3000:]
    assert "Traceback" not in run["stderr"], run["stderr"][-3000:]
    for native in RAY_NATIVE_DUMP:
        assert native not in run["stderr"], run["stderr"][-3000:]
    assert "Tuner.restore" not in text  # Tune's own hint is for its Python API, not the CLI


@pytest.fixture(scope="module")
def ctrl_c(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ctrl-c")
    return run_and_signal(tmp, "stopped", signal.SIGINT, group=True)


def test_ctrl_c_marks_unfinished_trials_interrupted_not_failed(ctrl_c):
    assert_stopped_cleanly(ctrl_c, "stopped")
    trials = pd.read_parquet(ctrl_c["root"] / "trials.parquet")
    assert len(trials) == 4
    assert set(trials["status"]) <= STATUSES_OF_A_STOPPED_RUN, trials[["trial_name", "status"]]
    interrupted = trials[trials["status"] == "interrupted"]
    assert len(interrupted) >= 1 and (interrupted["epochs_run"] >= 1).all()
    assert (trials.loc[trials["status"] == "not_started", "epochs_run"] == 0).all()
    assert trials.loc[trials["status"] != "ok", "failure_reason"].isna().all()
    counts = trials["status"].value_counts()
    assert (f"{counts.get('interrupted', 0)} interrupted, "
            f"{counts.get('not_started', 0)} not started") in ctrl_c["stdout"]
    # what --resume needs is still there
    assert (ctrl_c["root"] / "trial_state").is_dir()


def test_the_printed_resume_command_finishes_every_trial(ctrl_c):
    before = pd.read_parquet(ctrl_c["root"] / "trials.parquet").set_index("trial_name")
    text = ctrl_c["stdout"] + ctrl_c["stderr"]
    printed = re.search(r"python \S*run_ablations\.py --resume [^\n]*", text).group(0)
    command = shlex.split(printed)
    assert command[:2] == ["python", str(REPO / "run_ablations.py")], printed
    # its arguments, run in this process (run_here: Ray's and Tune's warnings reach the
    # captured stderr); --allow-changed: other tests may edit the checkout meanwhile
    # (provenance is not tested here); --no-dashboard as in the first run.
    resumed = run_here(*command[2:], "--no-dashboard", "--allow-changed",
                       cwd=ctrl_c["root"].parent.parent)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    output = resumed.stdout + resumed.stderr
    # One line on what happens to each trial, and no Tune warning per trial not started.
    assert "Could not fetch metrics" not in output and "Failed to fetch metrics" not in output
    counts = before["status"].value_counts()
    assert (f"Resuming experiment stopped (components): {counts.get('ok', 0)} finished (kept), "
            f"{counts.get('interrupted', 0)} continue") in resumed.stdout, resumed.stdout
    assert re.search(rf", {counts.get('not_started', 0)} starts?\n", resumed.stdout)

    after = pd.read_parquet(ctrl_c["root"] / "trials.parquet").set_index("trial_name")
    assert (after["status"] == "ok").all(), after[["status", "error"]]
    assert (after["epochs_run"] == 20).all()
    for name, row in before.iterrows():
        if row["status"] == "interrupted":  # continued after its last saved epoch
            assert after.loc[name, "resumed_from_epoch"] >= row["epochs_run"] >= 1, name
        elif row["status"] == "not_started":
            assert after.loc[name, "resumed_from_epoch"] == 0, name
    epochs = pd.read_parquet(ctrl_c["root"] / "epochs.parquet")
    assert not epochs.duplicated(["trial_name", "epoch"]).any()
    assert (epochs.groupby("trial_name")["epoch"].nunique() == 20).all()
    assert not (ctrl_c["root"] / "trial_state").exists()  # nothing left to resume


def test_sigterm_to_the_driver_stops_like_ctrl_c(tmp_path):
    """``kill PID``, Kubernetes: the signal reaches the driver only; Ray keeps running and
    Tune stops the trials, so the results are written."""
    run = run_and_signal(tmp_path, "terminated", signal.SIGTERM, group=False)
    assert_stopped_cleanly(run, "terminated")
    trials = pd.read_parquet(run["root"] / "trials.parquet")
    assert set(trials["status"]) <= STATUSES_OF_A_STOPPED_RUN
    assert (trials["status"] == "interrupted").any()

