"""A Ray cluster as an operator starts one, for the tests and benchmarks/scale.py: a head and a
worker node started with `ray start --block` in subprocesses, token authentication on (the head's
token in every process's environment), one temp dir per node.

Where the machine allows it (`unshare`, as root), the worker node runs in its own mount and
hostname namespaces: it has its own hostname (so the trials' hosts tell the nodes apart) and a
folder the head sees is empty on it.

Only the processes started here are stopped (by process group, then any process left whose
command line names this cluster's private temp dirs): never `ray stop`, which stops every Ray on
the machine.
"""

from __future__ import annotations

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

RAY_CLI = Path(sys.executable).with_name("ray")
WORKER_HOST = "ablation-test-worker"


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
    """A head (``head_cpus``) and a worker node (1 CPU) started with `ray start --block`;
    :meth:`kill_worker` and :meth:`start_worker` lose a worker node and add a replacement."""

    def __init__(self, root: Path, head_cpus: int = 1):
        # One temp dir per node, as on separate machines (nodes sharing one would share the
        # runtime environments' folders: one node's clean-up deletes the other's job folder).
        # Short paths: Unix socket paths live there.
        self.temp_dirs = [tempfile.mkdtemp(prefix="rc", dir="/tmp") for _ in range(2)]
        self.hidden = root / "hidden-on-worker"  # empty on the worker node when isolated
        self.hidden.mkdir()
        self.head_cpus = head_cpus
        self.token = secrets.token_hex(32)
        self.port = free_port()
        self.dashboard_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token,
                    "RAY_USAGE_STATS_ENABLED": "0"}
        self.env.pop("RAY_ADDRESS", None)
        self.env.pop("RAY_OVERRIDE_RESOURCES", None)  # the nodes' --num-cpus hold
        self.isolated = namespaces_available()
        self.logs = root
        self.processes: list[subprocess.Popen] = []
        self.worker: subprocess.Popen | None = None  # the worker node started last
        self.nodes = 0  # started and not killed

    def _start(self, name: str, command: list[str]) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "w") as log:
            process = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)  # its own process group: stopped as one
        self.processes.append(process)
        return process

    @staticmethod
    def _node_flags(cpus: int, temp_dir: str) -> list[str]:
        return [f"--num-cpus={cpus}", "--block", f"--temp-dir={temp_dir}",
                f"--dashboard-agent-listen-port={free_port()}"]

    def start(self) -> None:
        self._start("head", [str(RAY_CLI), "start", "--head", f"--port={self.port}",
                             "--include-dashboard=true", "--dashboard-host=127.0.0.1",
                             f"--dashboard-port={self.dashboard_port}",
                             f"--ray-client-server-port={free_port()}",
                             *self._node_flags(self.head_cpus, self.temp_dirs[0])])
        self.nodes = 1
        self.wait_for_nodes(1)
        self.start_worker(self.temp_dirs[1])
        self.wait_for_dashboard()

    def start_worker(self, temp_dir: str | None = None) -> None:
        """A worker node (1 CPU) in its own temp dir; returns once the head counts it alive."""
        if temp_dir is None:
            temp_dir = tempfile.mkdtemp(prefix="rc", dir="/tmp")
            self.temp_dirs.append(temp_dir)
        worker = [str(RAY_CLI), "start", f"--address={self.address}",
                  *self._node_flags(1, temp_dir)]
        if self.isolated:
            setup = (f"hostname {WORKER_HOST} && mount -t tmpfs none {self.hidden} "
                     '&& exec "$@"')
            worker = ["unshare", "-m", "-u", "sh", "-c", setup, "sh", *worker]
        self.worker = self._start(f"worker{len(self.temp_dirs) - 1}", worker)
        self.nodes += 1
        self.wait_for_nodes(self.nodes)

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
        while self.alive_nodes() != count:
            for process in self.processes:
                assert process.poll() is None, self.log_tail()
            assert time.monotonic() < deadline, f"not {count} nodes alive\n{self.log_tail()}"
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

    def kill_worker(self) -> None:
        """SIGKILL the worker node, as a machine lost mid-run: its `ray start` process group,
        every process below it (raylet, workers, a trial's process) and every process naming
        its temp dir; the head sees the node die."""
        worker = self.worker
        # The node's processes, found before any dies (a trial's worker process renames its
        # command line, so it is found as a descendant of the node's `ray start`, not by name).
        doomed = _descendants(worker.pid)
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        worker.wait()
        self._kill_named([self.temp_dirs[-1]])
        self.processes.remove(worker)
        self.worker = None
        self.nodes -= 1

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
        self._kill_named(self.temp_dirs)
        for temp_dir in self.temp_dirs:
            shutil.rmtree(temp_dir, ignore_errors=True)

    @staticmethod
    def _kill_named(temp_dirs: list[str]) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if any(temp_dir.encode() in cmdline for temp_dir in temp_dirs):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _descendants(pid: int) -> list[int]:
    """The ids of every live process below ``pid`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))  # fields[1]: ppid
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found
