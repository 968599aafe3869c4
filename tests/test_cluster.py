"""Fault tolerance on a real two-node Ray cluster (ray.cluster_utils.Cluster on one machine):
the worker node running a trial dies; the trial resumes from its last checkpoint elsewhere."""

from __future__ import annotations

import threading
import time

import pytest

from ablations.experiment.options import RunOptions
from ablations.experiment.runner import run_experiment
from search_spaces import TrialSpec
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow


def test_worker_node_dies_mid_trial_and_the_trial_finishes(tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    worker = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)
    try:
        config = tiny_config(epochs=6, synthetic_train=512, ablation="survivor")
        options = RunOptions(storage=tmp_path, name="nodes", space="components",
                             progress=False, max_failures=2)
        state = tmp_path / "nodes" / "trial_state" / "survivor-seed0" / "state.pt"
        outcome = {}

        def run():  # in a thread: adding a node must happen in the main thread
            outcome["result"] = run_experiment(
                [TrialSpec("survivor-seed0", "survivor", 0, config)], options)

        runner = threading.Thread(target=run)
        runner.start()
        deadline = time.monotonic() + 120
        while not state.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # until the first epoch's state is saved
        assert state.exists(), "the trial never saved an epoch"
        cluster.remove_node(worker)  # the node dies with the trial on it
        cluster.add_node(num_cpus=1)  # a replacement joins
        runner.join(timeout=240)
        assert not runner.is_alive()
        result = outcome["result"]
    finally:
        ray.shutdown()
        cluster.shutdown()
    row = result.trials.iloc[0]
    assert row["status"] == "ok" and row["epochs_run"] == 6
    # it continued from the epoch saved before the node died, not from scratch
    assert row["resumed_from_epoch"] >= 1
    epochs = result.epochs["epoch"].tolist()
    assert sorted(set(epochs)) == [1, 2, 3, 4, 5, 6]
