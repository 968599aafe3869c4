"""Resume: a driver killed with SIGKILL mid-experiment continues with --resume; every trial
ends up in trials.parquet exactly once and nothing that had finished is run again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from ablations.trainable import load_state
from tests.conftest import REPO, start_until

pytestmark = pytest.mark.slow

TINY = ["--set", "synthetic_train=96", "--set", "synthetic_val=16", "--set", "synthetic_test=16",
        "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16", "--set", "num_heads=2",
        "--set", "batch_size=16", "--no-dashboard"]


def cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    return [sys.executable, "-u", str(REPO / "run_ablations.py"), *args], dict(cwd=cwd, env=env)


def test_sigkill_then_resume(tmp_path):
    args = ["--space", "components", "--only", "baseline,no_images,single_frame",
            "--seeds", "2", "--epochs", "3", "--name", "killed", *TINY]
    command, kw = cli(*args, cwd=tmp_path)
    # wait until two trials have finished
    proc, seen, deadline = start_until(command, kw, "[2/6]", timeout=180)
    root = tmp_path / "ablation_results" / "killed"

    def started_unfinished():  # trials with a saved epoch that have not printed their line
        done = {line.split()[1] for line in seen if line.startswith("[")}
        return {p.parent.name for p in (root / "trial_state").glob("*/state.pt")} - done

    while not started_unfinished() and time.monotonic() < deadline:
        time.sleep(0.05)  # ... and a third has saved an epoch: then kill everything
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray it started, no clean-up
    seen.extend(proc.stdout.read().splitlines(keepends=True))  # lines printed before the kill
    proc.wait(timeout=30)
    assert any(line.startswith("[2/6]") for line in seen), "".join(seen[-20:])
    assert not (root / "trials.parquet").exists()  # it died before writing results
    cut_off = {name: load_state(str(root / "trial_state" / name / "state.pt"))["epoch"]
               for name in started_unfinished()}
    assert cut_off and all(epoch >= 1 for epoch in cut_off.values()), cut_off

    command, kw = cli("--resume", "--name", "killed", "--no-dashboard", cwd=tmp_path)
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300, **kw)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Resuming experiment killed" in resumed.stdout
    trials = pd.read_parquet(root / "trials.parquet")
    assert sorted(trials["trial_name"]) == sorted(
        f"{v}-seed{s}" for v in ("baseline", "no_images", "single_frame") for s in (0, 1))
    assert (trials["status"] == "ok").all()
    epochs = pd.read_parquet(root / "epochs.parquet")
    assert not epochs.duplicated(["trial_name", "epoch"]).any()
    per_trial = epochs.groupby("trial_name")["epoch"].apply(lambda e: tuple(sorted(e)))
    assert per_trial.map(lambda e: e == (1, 2, 3)).all(), per_trial
    # Trials that had finished were not trained again: either Tune's state had them as done
    # (they do not run), or they restart from their final state and only re-evaluate.
    finished_before = {line.split()[1] for line in seen if line.startswith("[")}
    rows = trials.set_index("trial_name")
    rerun = {line.split()[1] for line in resumed.stdout.splitlines() if line.startswith("[")}
    for name in finished_before:
        if name in rerun:
            assert rows.loc[name, "resumed_from_epoch"] == 3, name
        else:
            assert rows.loc[name, "resumed_from_epoch"] == 0, name
    # trials cut off mid-way continued from their last saved epoch, not from scratch: at least
    # the one saved when the driver was killed (a worker outside the killed process group may
    # save one more before it notices). One whose last epoch was saved had finished, though the
    # driver died before it said so: as above.
    for name, epoch in cut_off.items():
        resumed_from = rows.loc[name, "resumed_from_epoch"]
        assert resumed_from in ({0, 3} if epoch == 3 else {1, 2, 3}), (name, epoch)
        assert resumed_from == 0 or resumed_from >= epoch, (name, epoch, resumed_from)

    # The same --name and plan again: nothing left to run, the same rows.
    command, kw = cli(*args, cwd=tmp_path)
    again = subprocess.run(command, capture_output=True, text=True, timeout=300, **kw)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming it" in again.stdout
    assert len(pd.read_parquet(root / "trials.parquet")) == 6

    # The same --name with another plan is refused, and nothing is touched.
    before = (root / "trials.parquet").read_bytes()
    command, kw = cli("--space", "components", "--only", "baseline", "--name", "killed",
                      *TINY, cwd=tmp_path)
    other = subprocess.run(command, capture_output=True, text=True, timeout=120, **kw)
    assert other.returncode == 2 and "holds a different experiment" in other.stderr
    assert (root / "trials.parquet").read_bytes() == before
