"""Shared fixtures: a tiny trial config, tiny data directories, one local Ray per module."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablations.config import TrialConfig

# Tune must not try to reach the network or pop up anything.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def synthetic_cache(tmp_path_factory):
    """Synthetic sets cached in a folder of this test session, not in the user's cache (set
    before any local Ray starts, so its workers inherit it)."""
    from model.data import CACHE_DIR_ENV

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
