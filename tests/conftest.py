"""Shared fixtures: a tiny trial config, tiny data directories, one local Ray per module;
and the guard that keeps the unit loop (``pytest -m "not slow"``) free of Ray, subprocesses
and servers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablations.config import TrialConfig

# Tune must not try to reach the network or pop up anything.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")

REPO = Path(__file__).resolve().parents[1]


class EndToEndInUnitTest(RuntimeError):
    """A test not marked ``slow`` started Ray, a subprocess or a server."""


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise EndToEndInUnitTest(
            f"{what} in a test not marked slow: mark it `@pytest.mark.slow` (or its module "
            "`pytestmark = pytest.mark.slow`); the unit loop, `pytest -m 'not slow'`, starts no "
            "Ray, no subprocess and no server")
    return refuse


_GUARD = pytest.StashKey[pytest.MonkeyPatch]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """For a test not marked slow, refuse ``ray.init``, every subprocess (``Popen``, and so
    ``subprocess.run``, ``check_output`` and Ray's own processes) and every listening socket
    (moto's, MLflow's or any other server) from its setup to the end of its call. Installed
    here, before the test's fixtures, so that a module- or session-scoped fixture it is the
    first to request is refused too; undone before teardown. Importing Ray stays allowed."""
    if item.get_closest_marker("slow") is None:
        guard = pytest.MonkeyPatch()
        item.stash[_GUARD] = guard
        # _execute_child: the one place every Popen starts its child, even a Popen a module
        # imported by name before the guard.
        guard.setattr(subprocess.Popen, "_execute_child", _refuse("A subprocess"))
        guard.setattr(socket.socket, "listen", _refuse("A server (a listening socket)"))
        if "ray" in sys.modules:  # otherwise ray.init fails on its first subprocess
            guard.setattr(sys.modules["ray"], "init", _refuse("ray.init"))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item):
    guard = item.stash.get(_GUARD, None)
    if guard is not None:
        guard.undo()
    return (yield)


@pytest.fixture(scope="session", autouse=True)
def synthetic_cache(tmp_path_factory):
    """Synthetic sets cached in a folder of this test session, not in the user's cache (set
    before any local Ray starts, so its workers inherit it)."""
    from ablations.model.data import CACHE_DIR_ENV

    folder = tmp_path_factory.mktemp("synthetic-cache")
    previous = os.environ.get(CACHE_DIR_ENV)
    os.environ[CACHE_DIR_ENV] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop(CACHE_DIR_ENV, None)
    else:
        os.environ[CACHE_DIR_ENV] = previous


def tiny_config(**changes) -> TrialConfig:
    """A trial that trains in well under a second: small data, small widths."""
    base = TrialConfig.of(
        epochs=2, batch_size=16, synthetic_train=96, synthetic_val=32, synthetic_test=48,
        cnn_widths="8,16,16", embed_dim=16, num_heads=2, eval_batch_size=64,
    )
    return base.replace(**changes) if changes else base


def write_data_dir(root: Path, *, n: int = 40, frames: int = 3, channels: int = 2, size: int = 8,
                   split: bool = True, seed: int = 0) -> Path:
    """A valid file dataset: images.npy (N, T, C, H, W) and table.parquet."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    images = rng.standard_normal((n, frames, channels, size, size)).astype(np.float32)
    np.save(root / "images.npy", images)
    table = pd.DataFrame({
        "target": rng.uniform(0, 10, n),
        "scalar_a": rng.standard_normal(n),
        "scalar_b": rng.standard_normal(n),
        "site": rng.choice(["north", "south"], n),
        "season": rng.integers(1, 5, n),
    })
    if split:
        table["split"] = (["train"] * (n - 16)) + (["val"] * 8) + (["test"] * 8)
    table.to_parquet(root / "table.parquet", index=False)
    return root


@pytest.fixture(scope="module")
def ray_local():
    """One real local Ray per test module, as Ray Tune's own tests do."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def start_until(command: list[str], kw: dict, prefix: str, timeout: float):
    """Start the CLI in a session of its own (so a test can kill it and the Ray it starts) and
    read its output until a line starts with ``prefix``: (process, lines so far, deadline)."""
    import subprocess
    import time

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kw)
    seen, deadline = [], time.monotonic() + timeout
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(prefix) or time.monotonic() > deadline:
            break
    return proc, seen, deadline
