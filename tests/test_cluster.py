"""Fault tolerance on a real two-node Ray cluster started as an operator starts one (`ray start`
in subprocesses, token authentication on): the worker node running a trial is killed (SIGKILL
of its raylet and workers, as a lost machine); the trial resumes from its last saved epoch on a
replacement node and the command line finishes with every table written."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO
from tests.ray_cluster import RayCluster

pytestmark = pytest.mark.slow

# One trial of six short epochs: the node dies after its first epoch is saved, well before its
# last (about 0.3 s an epoch here, longer on slower machines: the kill only needs epoch 1).
SURVIVOR = ["--space", "components", "--only", "baseline", "--seeds", "1", "--epochs", "6",
            "--set", "synthetic_train=512", "--set", "synthetic_val=32",
            "--set", "synthetic_test=48", "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16",
            "--set", "num_heads=2", "--set", "batch_size=16", "--quiet"]


def test_worker_node_killed_mid_trial_and_the_trial_resumes_on_a_replacement(tmp_path):
    root = Path(tempfile.mkdtemp(prefix="kc", dir="/tmp"))  # short: Ray's socket paths
    cluster = RayCluster(root, head_cpus=0)  # the trial can only run on a worker node
    storage = tmp_path / "results"
    state = storage / "nodes" / "trial_state" / "baseline-seed0" / "history.json"
    try:
        cluster.start()
        driver = subprocess.Popen(
            [sys.executable, str(REPO / "run_ablations.py"), *SURVIVOR, "--address",
             cluster.address, "--max-failures", "2", "--storage", str(storage),
             "--name", "nodes"],
            env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 180
            while not state.exists() and driver.poll() is None:
                assert time.monotonic() < deadline, "the trial never saved an epoch"
                time.sleep(0.05)
            assert driver.poll() is None, "the run ended before the node was killed"
            cluster.kill_worker()  # the node dies with the trial on it
            cluster.start_worker()  # a replacement joins
            output, _ = driver.communicate(timeout=300)
        finally:
            if driver.poll() is None:
                driver.kill()
    finally:
        logs = cluster.log_tail()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert driver.returncode == 0, output + logs
    folder = storage / "nodes"
    row = pd.read_parquet(folder / "trials.parquet").iloc[0]
    assert row["status"] == "ok" and row["epochs_run"] == 6, row.to_dict()
    # it continued from the epoch saved before the node died, not from scratch
    assert 1 <= row["resumed_from_epoch"] < 6, row.to_dict()
    epochs = pd.read_parquet(folder / "epochs.parquet")["epoch"].tolist()
    assert sorted(set(epochs)) == [1, 2, 3, 4, 5, 6]
    assert (folder / "predictions.parquet").is_file()
