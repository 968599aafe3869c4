"""`ray job submit` on a two-node cluster on one machine, started as an operator started it:
the head with `--temp-dir`, the worker node with none. Ray then gives the worker node the head's
temp dir (ray/_private/node.py, `_init_temp`: a non-head node without `--temp-dir` takes the
head's), so both nodes share one session folder and one `runtime_resources/working_dir_files/`,
where the job's working_dir is unpacked and where the job's driver runs. When the worker node's
runtime-env agent first sets up the job's runtime env (right after the driver's `ray.init`), it
misses in its own cache, deletes that folder and unpacks it again
(ray/_private/runtime_env/working_dir.py `create`: `download_and_unpack_package(...,
overwrite=True)`): the driver's working directory is gone, and Tune's `ExperimentAnalysis` at
the end of `Tuner.fit` raised FileNotFoundError from `os.path.abspath` (an `os.getcwd()`), after
the trial had ended ok, with no Parquet written.

The job must end with the three tables written and the trial ok. The second test makes the same
thing happen in this process, deterministically (the working directory deleted and made again
just before Tune's analysis step): the runner reads Tune's saved state by its full path. The
last one checks the command line's re-entry of its working directory.

The cluster's processes are started and stopped as in tests/test_cluster_cli.py (their own
process groups; then any process whose command line names this cluster's temp dir): never
`ray stop`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.test_cluster_cli import RAY_CLI, RayCluster, assert_experiment_written, free_port

pytestmark = pytest.mark.slow

# The operator's run, with a model and data small enough for a test (the same trial: the
# baseline of the components space, one seed, one epoch).
TINY = ["--set", "cnn_widths=8,16,16", "--set", "embed_dim=16", "--set", "num_heads=2",
        "--set", "batch_size=16", "--set", "synthetic_train=96", "--set", "synthetic_val=32",
        "--set", "synthetic_test=48"]
TINY_OVERRIDES = dict(item.split("=", 1) for item in TINY[1::2]) | {"epochs": 1}


class OneTempDirCluster(RayCluster):
    """The head started with `--temp-dir=<dir>`, the worker node with no `--temp-dir` (so it
    uses the head's). Each node gets its own dashboard-agent port and the head its own Ray
    Client port (free ones): two nodes on one machine, and other clusters on it, would
    otherwise collide on Ray's fixed defaults; nothing else differs from the operator's
    commands."""

    def __init__(self, root: Path, temp_dir: Path):
        super().__init__(root)
        for unused in self.temp_dirs:  # the parent's two private temp dirs: not used here
            Path(unused).rmdir()
        temp_dir.mkdir()
        self.temp_dirs = [str(temp_dir)]  # what stop() looks for in command lines, and removes

    def start(self) -> None:
        self._start("head", [str(RAY_CLI), "start", "--head", f"--port={self.port}",
                             "--num-cpus=1", "--dashboard-host=127.0.0.1",
                             f"--dashboard-port={self.dashboard_port}",
                             f"--temp-dir={self.temp_dirs[0]}", "--block",
                             f"--ray-client-server-port={free_port()}",
                             f"--dashboard-agent-listen-port={free_port()}"])
        self.wait_for_nodes(1)
        self._start("worker", [str(RAY_CLI), "start", f"--address={self.address}",
                               "--num-cpus=1", "--block",
                               f"--dashboard-agent-listen-port={free_port()}"])
        self.wait_for_nodes(2)
        self.wait_for_dashboard()


@pytest.fixture
def operator_cluster():
    # Short paths: Ray's Unix sockets live under the temp dir (a socket path has ~107 bytes;
    # pytest's own temp paths are longer under pytest-xdist)
    root = Path(tempfile.mkdtemp(prefix="rj", dir="/tmp"))
    cluster = OneTempDirCluster(root, root / "t")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_job_on_nodes_sharing_the_heads_temp_dir_writes_its_tables(operator_cluster, tmp_path):
    cluster = operator_cluster
    storage = tmp_path / "results"
    entrypoint = [sys.executable, "run_ablations.py", "--space", "components", "--only",
                  "baseline", "--seeds", "1", "--epochs", "1", *TINY, "--address", "auto",
                  "--storage", str(storage), "--name", "job"]
    proc = subprocess.run(
        [str(RAY_CLI), "job", "submit", "--address", f"http://127.0.0.1:{cluster.dashboard_port}",
         "--working-dir", str(REPO), "--", *entrypoint],
        env=cluster.env, capture_output=True, text=True, timeout=400)
    output = proc.stdout[-6000:] + proc.stderr[-3000:]
    # the premise: both nodes' raylets log under the head's temp dir (one session folder)
    raylet_logs = list(Path(cluster.temp_dirs[0]).glob("session_[0-9]*/logs/raylet*.out"))
    assert len(raylet_logs) == 2, raylet_logs
    assert proc.returncode == 0, output + cluster.log_tail()
    assert "Traceback" not in proc.stdout, output
    # Every node set up the job's runtime env before the run went on and the command line
    # entered the unpacked-again working_dir: Tune's own last step worked (no fallback needed)
    assert "Ray Tune raised" not in proc.stdout + proc.stderr, output
    assert_experiment_written(storage / "job", trials=1)  # the three tables, the trial ok


def test_tables_land_when_the_drivers_working_directory_is_replaced(ray_local, tmp_path,
                                                                    monkeypatch):
    """What a second node's runtime-env agent does to a job's driver, at a chosen moment: the
    working directory is deleted and made again at the same path, the process's is gone, and
    Tune's ExperimentAnalysis (os.getcwd in ray.train._internal.storage._list_at_fs_path)
    raises FileNotFoundError at the end of Tuner.fit. The results come from Tune's saved
    state, and experiment.json says what Tune raised."""
    import ray.tune.tune as tune_module

    from ablations.experiment.api import Experiment

    working_dir = tmp_path / "working_dir"
    working_dir.mkdir()
    monkeypatch.chdir(working_dir)
    analysis = tune_module.ExperimentAnalysis

    def after_the_working_dir_is_replaced(*args, **kwargs):
        shutil.rmtree(working_dir)
        working_dir.mkdir()
        return analysis(*args, **kwargs)

    monkeypatch.setattr(tune_module, "ExperimentAnalysis", after_the_working_dir_is_replaced)
    Experiment("components", seeds=1, only=["baseline"], overrides=TINY_OVERRIDES,
               storage=tmp_path / "results", name="replaced").run()
    folder = tmp_path / "results" / "replaced"
    df = assert_experiment_written(folder, trials=1)
    assert df["test_mae"].notna().all()
    metadata = json.loads((folder / "experiment.json").read_text())
    assert metadata["tune_error"].startswith("FileNotFoundError"), metadata.get("tune_error")


def test_an_error_of_tune_before_any_trial_ended_is_raised(ray_local, tmp_path, monkeypatch):
    from ray import tune

    from ablations.experiment.api import Experiment

    def broken(self):
        raise RuntimeError("Tune broke before any trial ran")

    monkeypatch.setattr(tune.Tuner, "fit", broken)
    with pytest.raises(RuntimeError, match="before any trial ran"):
        Experiment("components", seeds=1, only=["baseline"], overrides=TINY_OVERRIDES,
                   storage=tmp_path / "results", name="broken").run()
    assert not (tmp_path / "results" / "broken" / "trials.parquet").exists()


def test_the_command_line_enters_its_replaced_working_directory_again(tmp_path, monkeypatch):
    from ablations.cli.run import enter_again

    working_dir = tmp_path / "working_dir"
    working_dir.mkdir()
    monkeypatch.chdir(working_dir)
    assert not enter_again(str(working_dir))  # still there: nothing to do
    shutil.rmtree(working_dir)
    with pytest.raises(FileNotFoundError):
        os.getcwd()
    assert not enter_again(str(working_dir))  # not unpacked again (yet): left as it is
    working_dir.mkdir()
    (working_dir / "same.txt").write_text("the same files")
    assert enter_again(str(working_dir))
    assert os.getcwd() == str(working_dir) and Path("same.txt").read_text() == "the same files"
