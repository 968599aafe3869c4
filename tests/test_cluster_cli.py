"""The command line on a real Ray cluster started with Ray's own CLI, as an operator starts one:
`ray start --head` and `ray start --address` in subprocesses, token authentication on
(RAY_AUTH_MODE=token and the head's token on every process, as docs/cluster.md says), then
`run_ablations.py --address`, `ray job submit`, a wrong address, a missing or wrong token, and
data that one node cannot see.

Where the machine allows it (`unshare`, as root), the worker node runs in its own mount and
hostname namespaces: it has its own hostname (so the trials' hosts tell the nodes apart) and a
folder the head sees is empty on it (a data directory only some nodes can read).

Only the processes this module starts are stopped (by process group, then any process left
whose command line names this cluster's private temp dir): never `ray stop`, which stops every
Ray on the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO, write_data_dir
from tests.flat_project import write_flat_project
from tests.ray_cluster import RAY_CLI, WORKER_HOST, RayCluster, free_port

pytestmark = pytest.mark.slow

# Two trials (one per node), each well under a second of training.
TINY_RUN = ["--space", "components", "--only", "baseline,no_images", "--seeds", "1",
            "--epochs", "1", "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16",
            "--set", "num_heads=2", "--set", "batch_size=16", "--quiet"]
SYNTHETIC = ["--set", "synthetic_train=96", "--set", "synthetic_val=32",
             "--set", "synthetic_test=48"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    ray_cluster = RayCluster(tmp_path_factory.mktemp("ray-cluster"))
    try:
        ray_cluster.start()
        yield ray_cluster
    finally:
        ray_cluster.stop()


def run_cli(*args, env, timeout=240, cwd=None):
    # timeout: a deadlock guard, not a speed limit
    return subprocess.run([sys.executable, str(REPO / "run_ablations.py"), *args], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def one_line(proc) -> str:
    """The one error line of a run refused before ``ray.init`` (which, on an address it cannot
    use, retries for a minute or more and logs a line every second)."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def assert_experiment_written(folder: Path, trials: int) -> pd.DataFrame:
    for name in ("trials.parquet", "epochs.parquet", "predictions.parquet"):
        assert (folder / name).is_file(), name
    df = pd.read_parquet(folder / "trials.parquet")
    assert len(df) == trials and (df["status"] == "ok").all(), df[["trial_name", "error"]]
    return df


def last_results(folder: Path) -> list[dict]:
    """Each trial's last row of Tune's result.json (Tune adds ``hostname`` and ``pid``)."""
    return [json.loads(result.read_text().strip().splitlines()[-1])
            for result in sorted((folder / "tune").glob("*/result.json"))]


def trial_nodes(folder: Path, cluster: RayCluster) -> list[str]:
    """The node each trial ran on, as its node's temp dir: Ray keeps a log of every worker
    process of a node, named with its pid, in the node's session folder."""
    nodes = []
    for result in last_results(folder):
        log = f"session_*/logs/python-core-worker-*_{result['pid']}.log"
        found = [temp for temp in cluster.temp_dirs if any(Path(temp).glob(log))]
        assert len(found) == 1, (result["pid"], found)
        nodes += found
    return nodes


def test_run_with_address_uses_both_nodes_and_writes_parquet(cluster, tmp_path):
    data = write_data_dir(tmp_path / "data", frames=4)  # seen by both nodes: the check passes
    # Two cells of a space that gives each trial a fresh worker process (systems): Tune places
    # both trials at once, one per node (one CPU each), and the second cannot take the first
    # one's process when that ends first, as it may when workers are reused.
    two_cells = ["--space", "systems", "--only", "nockpt-off-fp32,ckpt-off-fp32",
                 *TINY_RUN[4:]]
    proc = run_cli(*two_cells, "--data", str(data), "--address", cluster.address,
                   "--storage", str(tmp_path / "results"), "--name", "two-nodes",
                   env=cluster.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr + cluster.log_tail()
    folder = tmp_path / "results" / "two-nodes"
    assert_experiment_written(folder, trials=2)
    assert sorted(trial_nodes(folder, cluster)) == sorted(cluster.temp_dirs[:2])
    if cluster.isolated:  # the worker node has a hostname of its own
        hosts = {result["hostname"] for result in last_results(folder)}
        assert hosts == {socket.gethostname(), WORKER_HOST}


def test_ray_job_submit_round_trip_writes_parquet(cluster, tmp_path):
    storage = tmp_path / "results"
    entrypoint = [sys.executable, "run_ablations.py", *TINY_RUN, *SYNTHETIC,
                  "--address", "auto", "--storage", str(storage), "--name", "as-a-job"]
    proc = subprocess.run(
        [str(RAY_CLI), "job", "submit", "--address", f"http://127.0.0.1:{cluster.dashboard_port}",
         "--working-dir", str(REPO), "--", *entrypoint],
        env=cluster.env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "cannot pickle" not in proc.stdout + proc.stderr
    assert_experiment_written(storage / "as-a-job", trials=2)


# Own code (docs/own-code.md): the digits example's command, the reference and one ablation, one
# seed, 3 epochs. A training function on both nodes: the flat
# project's function below, from a folder the worker node cannot see.
OWN_CODE_RUN = ["--only", "no_second_layer", "--seeds", "1", "--set", "epochs=3", "--quiet"]


def test_a_command_runs_as_a_ray_job(cluster, tmp_path):
    storage = tmp_path / "results"
    entrypoint = [sys.executable, "run_ablations.py", "--space", "examples/digits/command.yaml",
                  *OWN_CODE_RUN, "--address", "auto", "--storage", str(storage),
                  "--name", "own-command"]
    proc = subprocess.run(
        [str(RAY_CLI), "job", "submit", "--address", f"http://127.0.0.1:{cluster.dashboard_port}",
         "--working-dir", str(REPO), "--", *entrypoint],
        env=cluster.env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    trials = assert_experiment_written(storage / "own-command", trials=2)
    assert trials["test_acc"].between(0.5, 1).all()


@pytest.mark.parametrize("contract", [["--space", "command.yaml"],
                                      ["--model", "fn:FLAT", "--space", "fit.yaml"]],
                         ids=["script", "function"])
def test_a_flat_project_with_its_own_model_py_runs_on_both_nodes(cluster, tmp_path, contract):
    """A researcher's folder (tests/flat_project.py: model.py, results.py, utils.py, ... beside
    the script and the function), through the installed `run-ablations`, started in a folder the
    worker node cannot see when the machine allows it: the folder travels to the workers, and
    its own `model` and `results` are the ones imported there."""
    project = write_flat_project(cluster.hidden / f"project-{contract[1].split('.')[0]}")
    env = {key: value for key, value in cluster.env.items() if key != "PYTHONPATH"}
    # each trial waits for the other before its first epoch (utils.meet): both hold a node's
    # one CPU at once, so each runs on a node of its own however slow the machine
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("run-ablations")), *contract, "--seeds", "1",
         "--set", f"meet={tmp_path / 'meet'}", "--quiet", "--address", cluster.address,
         "--storage", str(tmp_path / "results"), "--name", "flat"],
        cwd=project, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr + cluster.log_tail()
    folder = tmp_path / "results" / "flat"
    trials = assert_experiment_written(folder, trials=2)
    assert trials["test_loss"].between(0, 1).all()
    assert sorted(trial_nodes(folder, cluster)) == sorted(cluster.temp_dirs[:2])


def test_address_with_no_cluster_fails_fast_in_one_line(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}
    proc = run_cli(*TINY_RUN, "--address", address, "--storage", str(tmp_path), env=env,
                   timeout=60)
    line = one_line(proc)
    assert address.split(":")[1] in line and "ray start --head" in line, line
    assert not any(tmp_path.iterdir())  # nothing written


def test_missing_or_wrong_token_fails_in_one_line_naming_the_fix(cluster, tmp_path):
    home = tmp_path / "home"  # no ~/.ray/auth_token there
    home.mkdir()
    no_token = {k: v for k, v in cluster.env.items()
                if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")} | {"HOME": str(home)}
    proc = run_cli(*TINY_RUN, "--address", cluster.address, "--storage", str(tmp_path / "r"),
                   env=no_token, timeout=60)
    line = one_line(proc)
    assert "requires a token" in line and "RAY_AUTH_MODE=token" in line, line
    assert "ray get-auth-token" in line, line

    wrong = cluster.env | {"RAY_AUTH_TOKEN": secrets.token_hex(32)}
    proc = run_cli(*TINY_RUN, "--address", cluster.address, "--storage", str(tmp_path / "r"),
                   env=wrong, timeout=60)
    line = one_line(proc)
    assert "refused this process's token" in line and "ray get-auth-token" in line, line


def test_data_check_names_the_node_that_cannot_see_the_data(cluster, tmp_path):
    if not cluster.isolated:
        pytest.skip("needs `unshare` (root) to hide a folder from one node on one machine")
    data = write_data_dir(cluster.hidden / "data", frames=4)  # the worker node cannot see it
    proc = run_cli(*TINY_RUN, "--data", str(data), "--address", cluster.address,
                   "--storage", str(tmp_path / "r"), "--name", "blind", env=cluster.env)
    line = one_line(proc)
    assert f"--data {data} is not visible on 1 of 2 nodes" in line, line
    assert WORKER_HOST in line, line
    assert not (tmp_path / "r" / "blind" / "trials.parquet").exists()
