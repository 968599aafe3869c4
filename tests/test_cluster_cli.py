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
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO, write_data_dir

pytestmark = pytest.mark.slow

RAY_CLI = Path(sys.executable).with_name("ray")
WORKER_HOST = "ablation-test-worker"
# Two trials (one per node), each well under a second of training.
TINY_RUN = ["--space", "components", "--only", "baseline,no_images", "--seeds", "1",
            "--epochs", "1", "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16",
            "--set", "num_heads=2", "--set", "batch_size=16", "--quiet"]
SYNTHETIC = ["--set", "synthetic_train=96", "--set", "synthetic_val=32",
             "--set", "synthetic_test=48"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def namespaces_available() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "-u", "true"], capture_output=True)
    return probe.returncode == 0


class RayCluster:
    """A head (1 CPU) and a worker node (1 CPU) started with `ray start --block`."""

    def __init__(self, root: Path):
        # One temp dir per node, as on separate machines (nodes sharing one would share the
        # runtime environments' folders: one node's clean-up deletes the other's job folder).
        # Short paths: Unix socket paths live there.
        self.temp_dirs = [tempfile.mkdtemp(prefix="rc", dir="/tmp") for _ in range(2)]
        self.hidden = root / "hidden-on-worker"  # empty on the worker node when isolated
        self.hidden.mkdir()
        self.token = secrets.token_hex(32)
        self.port = free_port()
        self.dashboard_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token,
                    "RAY_USAGE_STATS_ENABLED": "0"}
        self.env.pop("RAY_ADDRESS", None)
        self.isolated = namespaces_available()
        self.logs = root
        self.processes: list[subprocess.Popen] = []

    def _start(self, name: str, command: list[str]) -> None:
        log = open(self.logs / f"{name}.log", "w")
        self.processes.append(subprocess.Popen(
            command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True))  # its own process group: stopped as one

    def start(self) -> None:
        def common(temp_dir: str) -> list[str]:
            return ["--num-cpus=1", "--block", f"--temp-dir={temp_dir}",
                    f"--dashboard-agent-listen-port={free_port()}"]

        self._start("head", [str(RAY_CLI), "start", "--head", f"--port={self.port}",
                             "--include-dashboard=true", "--dashboard-host=127.0.0.1",
                             f"--dashboard-port={self.dashboard_port}",
                             f"--ray-client-server-port={free_port()}",
                             *common(self.temp_dirs[0])])
        self.wait_for_nodes(1)
        worker = [str(RAY_CLI), "start", f"--address={self.address}", *common(self.temp_dirs[1])]
        if self.isolated:
            setup = (f"hostname {WORKER_HOST} && mount -t tmpfs none {self.hidden} "
                     '&& exec "$@"')
            worker = ["unshare", "-m", "-u", "sh", "-c", setup, "sh", *worker]
        self._start("worker", worker)
        self.wait_for_nodes(2)
        self.wait_for_dashboard()

    def alive_nodes(self) -> int:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

        with grpc.insecure_channel(self.address,
                                   options=[("grpc.enable_http_proxy", 0)]) as channel:
            stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
            try:
                reply = stub.GetAllNodeInfo(
                    gcs_service_pb2.GetAllNodeInfoRequest(), timeout=5,
                    metadata=[("authorization", f"Bearer {self.token}")])
            except grpc.RpcError:
                return 0
        return sum(node.state == 0 for node in reply.node_info_list)  # 0: ALIVE

    def wait_for_nodes(self, count: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_nodes() < count:
            for process in self.processes:
                assert process.poll() is None, self.log_tail()
            assert time.monotonic() < deadline, f"{count} nodes never alive\n{self.log_tail()}"
            time.sleep(0.5)

    def wait_for_dashboard(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.dashboard_port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, f"no dashboard\n{self.log_tail()}"
                time.sleep(0.5)

    def log_tail(self) -> str:
        return "\n".join(f"--- {log.name}\n" + log.read_text()[-2000:]
                         for log in sorted(self.logs.glob("*.log")))

    def stop(self) -> None:
        for process in self.processes:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3
        for process in self.processes:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Anything of this cluster that left its process group (its command line names one of
        # the cluster's private temp dirs): only ours.
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if any(temp_dir.encode() in cmdline for temp_dir in self.temp_dirs):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for temp_dir in self.temp_dirs:
            shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    ray_cluster = RayCluster(tmp_path_factory.mktemp("ray-cluster"))
    try:
        ray_cluster.start()
        yield ray_cluster
    finally:
        ray_cluster.stop()


def run_cli(*args, env, timeout=240, cwd=None):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(REPO / "run_ablations.py"), *args], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)
    return proc, time.monotonic() - started


def one_line(proc) -> str:
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


def trial_hosts(folder: Path) -> set[str]:
    hosts = set()
    for result in (folder / "tune").glob("*/result.json"):
        lines = result.read_text().strip().splitlines()
        hosts.add(json.loads(lines[-1])["hostname"])
    return hosts


def test_run_with_address_uses_both_nodes_and_writes_parquet(cluster, tmp_path):
    data = write_data_dir(tmp_path / "data", frames=4)  # seen by both nodes: the check passes
    proc, _ = run_cli(*TINY_RUN, "--data", str(data), "--address", cluster.address,
                      "--storage", str(tmp_path / "results"), "--name", "two-nodes",
                      env=cluster.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr + cluster.log_tail()
    folder = tmp_path / "results" / "two-nodes"
    assert_experiment_written(folder, trials=2)
    # Where the trials ran is Tune's choice: with trials this short it often runs both in one
    # reused worker process. They ran on this cluster's nodes, whatever their hostnames.
    assert trial_hosts(folder) <= {socket.gethostname(), WORKER_HOST}


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


def test_address_with_no_cluster_fails_fast_in_one_line(tmp_path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}
    proc, elapsed = run_cli(*TINY_RUN, "--address", address, "--storage", str(tmp_path),
                            env=env, timeout=60)
    line = one_line(proc)
    assert elapsed < 15, elapsed
    assert address.split(":")[1] in line and "ray start --head" in line, line
    assert not any(tmp_path.iterdir())  # nothing written


def test_missing_or_wrong_token_fails_in_one_line_naming_the_fix(cluster, tmp_path):
    home = tmp_path / "home"  # no ~/.ray/auth_token there
    home.mkdir()
    no_token = {k: v for k, v in cluster.env.items()
                if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")} | {"HOME": str(home)}
    proc, elapsed = run_cli(*TINY_RUN, "--address", cluster.address,
                            "--storage", str(tmp_path / "r"), env=no_token, timeout=60)
    line = one_line(proc)
    assert elapsed < 15, elapsed
    assert "requires a token" in line and "RAY_AUTH_MODE=token" in line, line
    assert "ray get-auth-token" in line, line

    wrong = cluster.env | {"RAY_AUTH_TOKEN": secrets.token_hex(32)}
    proc, _ = run_cli(*TINY_RUN, "--address", cluster.address, "--storage", str(tmp_path / "r"),
                      env=wrong, timeout=60)
    line = one_line(proc)
    assert "refused this process's token" in line and "ray get-auth-token" in line, line


def test_data_check_names_the_node_that_cannot_see_the_data(cluster, tmp_path):
    if not cluster.isolated:
        pytest.skip("needs `unshare` (root) to hide a folder from one node on one machine")
    data = write_data_dir(cluster.hidden / "data", frames=4)  # the worker node cannot see it
    proc, _ = run_cli(*TINY_RUN, "--data", str(data), "--address", cluster.address,
                      "--storage", str(tmp_path / "r"), "--name", "blind", env=cluster.env)
    line = one_line(proc)
    assert f"--data {data} is not visible on 1 of 2 nodes" in line, line
    assert WORKER_HOST in line, line
    assert not (tmp_path / "r" / "blind" / "trials.parquet").exists()
