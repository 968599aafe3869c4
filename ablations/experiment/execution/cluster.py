"""Reaching a Ray cluster: the runtime environment that ships the project to its workers, the
address check that turns a wrong address or token into one line (instead of a minute of GCS
retries), and whether this process runs as a Ray job. See ``docs/cluster.md``."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from ablations.config.values import arg
from ablations.experiment.provenance.provenance import (
    checkout_root,
    code_fingerprint,
    runner_source,
)


def runtime_env_for_cluster(code: Any = None, spec: str = "") -> dict[str, Any]:
    """The runtime environment that ships the runner to a cluster's workers (they need torch,
    ray, pandas, pyarrow installed; the code itself travels with the job) as one package,
    ``ablations`` (:func:`runner_package`), and the user's own ``code``
    (ablations/config/code.py) where it is given: :func:`own_code_env` (``spec``: the
    ``model`` that names it).

    Inside a Ray job (``ray job submit --working-dir .``) whose working directory is the
    runner's checkout, the runner is already there, in every worker's working directory: it is
    not added again (a second copy would conflict with the job's own runtime environment). A
    job's ``py_modules`` are the job's own choice, left alone. Otherwise the packages go as
    ``py_modules`` directory paths (not module objects: Ray deep-copies the runtime environment
    when it merges it with a job's, and a module cannot be pickled).
    """
    job = job_runtime_env()
    in_checkout = Path.cwd().resolve() == checkout_root()
    if job is not None and (job.get("py_modules") or (job.get("working_dir") and in_checkout)):
        return {}
    env: dict[str, Any] = {"py_modules": [runner_package()]}
    if code is not None and job is None:
        extra = own_code_env(code, spec)
        env["py_modules"] += [path for path in extra.pop("py_modules", [])
                              if path not in env["py_modules"]]
        env.update(extra)
    return env


def runner_package() -> str:
    """The runner as one folder named ``ablations`` with its packages inside, as Ray's
    ``py_modules`` ships it (a folder becomes a top-level package of that name on the workers).
    An installed runner is that folder already. A checkout keeps model/, results/ and
    search_spaces/ beside ablations/ (pyproject.toml's package-dir installs them inside): they
    are copied together once per version of the source, into the temporary folder, keyed by the
    code fingerprint, so that repeated runs reuse one copy and Ray uploads it once."""
    folders = runner_source()
    top = folders["ablations"]
    if all(folder.parent == top for name, folder in folders.items() if name != "ablations"):
        return str(top)
    target = Path(tempfile.gettempdir()) / f"ablation-runner-{code_fingerprint(folders)[:16]}"
    if not (target / "ablations" / "__init__.py").is_file():
        skip = shutil.ignore_patterns("__pycache__", "*.pyc")
        staging = Path(tempfile.mkdtemp(prefix="ablation-runner-", dir=target.parent))
        shutil.copytree(top, staging / "ablations", ignore=skip)
        for name, folder in folders.items():
            if name != "ablations":
                shutil.copytree(folder, staging / "ablations" / name.split(".")[-1],
                                ignore=skip)
        try:
            staging.rename(target)  # whole or not at all; another driver may have won
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return str(target / "ablations")


# Never shipped with a working directory: results, environments, history
WORKING_DIR_EXCLUDES = [".git", ".venv", "venv", "__pycache__", "ablation_results", "*.parquet",
                        "*.pt", "*.ckpt"]


def own_code_env(code: Any, spec: str = "") -> dict[str, Any]:
    """What a cluster's workers need to run ``code``: for a command, and for a training function
    whose module lies in this process's working directory (a flat project folder, where the
    module imports its neighbours: ``from model import Net``), that folder as the job's
    ``working_dir`` (results and environments left out: :data:`WORKING_DIR_EXCLUDES`), which Ray
    puts on every worker's path and makes its working directory; otherwise the top-level
    packages (folders) or modules (files) of the module ``spec`` names and of the function's
    own module, as ``py_modules`` entries, found where this process imports them from."""
    import importlib.util

    from ablations.trial.contracts import contract_of

    contract = contract_of(code)
    here = Path.cwd().resolve()
    working_dir = {"working_dir": str(here), "excludes": WORKING_DIR_EXCLUDES}
    if contract.program:
        return working_dir
    modules = []
    for name in dict.fromkeys([spec.partition(":")[0], *contract.modules(code)]):
        top = name.split(".")[0]
        found = importlib.util.find_spec(top) if top else None
        if found is None or top == "ablations":
            continue
        if found.submodule_search_locations:
            path = Path(list(found.submodule_search_locations)[0]).resolve()
        elif found.origin:
            path = Path(found.origin).resolve()
        else:
            continue
        if path.parent == here:
            return working_dir
        modules.append(str(path))
    return {"py_modules": list(dict.fromkeys(modules))} if modules else {}


def job_runtime_env() -> Optional[dict[str, Any]]:
    """The runtime environment of the Ray job this process runs as, None outside a job."""
    import json

    # Ray sets this in a job's driver (ray/_private/runtime_env/constants.py).
    text = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not text:
        return None
    try:
        return json.loads(text).get("runtime_env") or {}
    except (ValueError, AttributeError):
        return {}


# How long settle_job_working_dir waits for every node to set up the job's runtime environment
SETTLE_TIMEOUT_S = 120.0


def settle_job_working_dir(timeout_s: float = SETTLE_TIMEOUT_S) -> int:
    """In a Ray job with a ``working_dir``, after ``ray.init``: have every alive node set up the
    job's runtime environment now (a task pinned to each, all at once) and wait for them.
    Returns how many nodes answered; outside such a job, 0 and nothing is run.

    Why: the job's driver runs in the working_dir as Ray unpacked it on the head node
    (``<temp dir>/session_*/runtime_resources/working_dir_files/_ray_pkg_<hash>``). Each node's
    runtime-env agent sets up the job's runtime environment on its own (when the job starts,
    or when the node starts its first worker of the job) and, when the package is not in that
    agent's own cache, deletes the package's folder and unpacks it again
    (``ray/_private/runtime_env/working_dir.py``, ``create``: ``download_and_unpack_package(...,
    overwrite=True)``; ``packaging.py``: ``shutil.rmtree(local_dir)``). A worker node started
    without ``--temp-dir`` on the head's machine takes the head's temp dir
    (``ray/_private/node.py``, ``_init_temp``), so that folder is the driver's working
    directory: it is deleted under the running driver, whose ``os.getcwd()`` then raises
    FileNotFoundError (Ray Tune needs it) and whose imports from the folder fail until it is
    unpacked again. Once this returns, the nodes alive now hold the package in their caches
    and do not unpack it again; the command line then enters the folder anew
    (``ablations/cli/main.py``). A node that fails the task is left to the checks and trials
    that follow (``preflight.check_data_on_workers`` names it)."""
    job = job_runtime_env()
    if not job or not job.get("working_dir"):
        return 0
    import ray
    from ray.exceptions import GetTimeoutError, RayError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def ready() -> bool:
        return True

    probe = ray.remote(num_cpus=0)(ready)
    pending = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node_id=node["NodeID"], soft=False)).remote()
        for node in ray.nodes() if node.get("Alive")]
    done, _ = ray.wait(pending, num_returns=len(pending), timeout=timeout_s)
    answered = 0
    for ref in done:
        try:
            answered += bool(ray.get(ref, timeout=0.1))
        except (GetTimeoutError, RayError):
            pass
    return answered


class ClusterUnreachable(ConnectionError):
    """--address names no reachable Ray cluster, or one that refuses this process's token.
    The message is one line naming the problem and the fix."""


# How long the connection check waits for the head (an unroutable address waits this long).
PROBE_TIMEOUT_S = 8.0


def check_cluster_address(address: str) -> str:
    """Before ``ray.init``: check that ``address`` (``auto``, ``host:port``, ``ray://host:port``)
    leads to a Ray head that accepts this process, in seconds. ``ray.init`` itself retries for
    a minute or more on a wrong address, printing a GCS log line every second, and reports a
    missing token the same way. Returns the resolved ``host:port``; raises
    ``ClusterUnreachable`` with one line."""
    import socket

    from ray._private import services

    start_head = "start one with `ray start --head --port=6379` (docs/cluster.md)"
    if address.startswith("ray://"):  # Ray Client: a plain TCP check of its port
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S).close()
        except OSError as exc:
            raise ClusterUnreachable(
                f"no Ray Client server answers at {address} ({exc.strerror or exc}); check the "
                f"address (the head's port 10001 by default) or {start_head}") from None
        return address
    try:
        resolved = services.canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError) as exc:  # `auto` with no cluster recorded
        raise ClusterUnreachable(
            f"{arg('address')} {address}: no running Ray cluster found on this machine (neither "
            f"RAY_ADDRESS nor `ray start` names one: {str(exc).splitlines()[0]}); pass the "
            f"head's host:port or {start_head}") from None
    named = address if resolved == address else f"{address} (= {resolved})"
    status, detail = _gcs_status(resolved, _token_ray_would_send(address))
    if status is None:
        return resolved
    import grpc

    if status == grpc.StatusCode.UNAUTHENTICATED:
        if _token_ray_would_send(address) is None:
            raise ClusterUnreachable(
                f"the Ray cluster at {named} requires a token (token authentication) and this "
                "process sends none: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<the output "
                "of `ray get-auth-token` on the head> (docs/cluster.md)")
        raise ClusterUnreachable(
            f"the Ray cluster at {named} refused this process's token (RAY_AUTH_TOKEN, "
            "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token): use the head's, printed by "
            "`ray get-auth-token` on the head (docs/cluster.md)")
    if status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        raise ClusterUnreachable(
            f"no Ray cluster answers at {named} ({detail}); check the address (the head's "
            f"`ray start --head --port`, 6379 by default) or {start_head}")
    raise ClusterUnreachable(
        f"{named} does not answer as a Ray head ({status.name}: {detail}); pass the port "
        f"given to `ray start --head --port` (6379 by default) or {start_head}")


def _token_ray_would_send(address: str) -> Optional[str]:
    """The token ``ray.init(address=...)`` will send: with RAY_AUTH_MODE=token, or (Ray's own
    rule) for ``auto`` not replaced by RAY_ADDRESS when RAY_AUTH_MODE is unset and a token is
    available locally."""
    from ray._raylet import AuthenticationTokenLoader

    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.lower() != "token":
        return None
    if mode is None and (address != "auto" or os.environ.get("RAY_ADDRESS")):
        return None
    loader = AuthenticationTokenLoader.instance()
    if not loader.has_token(ignore_auth_mode=True):
        return None
    return loader.get_raw_token(ignore_auth_mode=True)


def _gcs_status(address: str, token: Optional[str]) -> tuple[Any, str]:
    """Ask the GCS at ``address`` for its cluster id: (None, "") if it answers, else (the gRPC
    status code, its first line)."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    metadata = [("authorization", f"Bearer {token}")] if token else []
    # No HTTP proxy: the head is reached directly, as the raylets and ray.init reach it.
    with grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)]) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=PROBE_TIMEOUT_S,
                              metadata=metadata, wait_for_ready=False)
        except grpc.RpcError as exc:
            detail = (exc.details() or "").strip().splitlines()
            return exc.code(), detail[0] if detail else exc.code().name
    return None, ""
