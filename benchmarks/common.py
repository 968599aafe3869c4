"""Helpers shared by the benchmarks: run the CLI or a plain trial in a subprocess, describe
the machine."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]

PLAIN_TRIAL = """
import json, sys, time
from ablations.config import TrialConfig
from ablations.trial.loop import train
config = TrialConfig.of(**json.loads(sys.argv[1]))
out = train(config)
print(json.dumps({"metrics": {k: v for k, v in out.metrics.items()
                              if isinstance(v, (int, float, str))},
                  "history": out.history, "exited_at": time.time()}))
"""


def run_python(code: str, *args: str) -> dict:
    """Run ``code`` in a fresh Python process (this repository importable) and return the JSON
    object on the last line of its output."""
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=_env(),
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"benchmark process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_plain(config: dict) -> dict:
    """``train(TrialConfig.of(**config))`` (flat keys) in a fresh Python process, no Ray.
    Returns its metrics, per-epoch history, and the process's start and end times (Unix
    seconds)."""
    launched = time.time()
    out = run_python(PLAIN_TRIAL, json.dumps(config))
    out["launched_at"], out["ended_at"] = launched, time.time()
    return out


def run_cli(args: list[str], storage: str | None = None) -> dict:
    """``python run_ablations.py ARGS --storage S --name bench --quiet`` in a fresh process;
    without ``storage``, S is a temporary folder removed afterwards (also on failure).
    Returns the trials and epochs tables, experiment.json and the process's start and end
    times."""
    with contextlib.ExitStack() as stack:
        if storage is None:
            storage = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-"))
        launched = time.time()
        done = subprocess.run(
            [sys.executable, "run_ablations.py", *args, "--storage", storage, "--name", "bench",
             "--quiet"], cwd=REPO, env=_env(), capture_output=True, text=True, check=False)
        ended = time.time()
        if done.returncode:
            raise RuntimeError(f"CLI run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        folder = Path(storage) / "bench"
        return {
            "trials": pd.read_parquet(folder / "trials.parquet"),
            "epochs": pd.read_parquet(folder / "epochs.parquet"),
            "metadata": json.loads((folder / "experiment.json").read_text()),
            "launched_at": launched, "ended_at": ended,
        }


def key_value(text: str) -> tuple[str, str]:
    """An argparse type for a ``--set KEY=VALUE`` flag: (KEY, VALUE)."""
    import argparse

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def machine() -> str:
    """CPU model and core count, memory, torch and ray versions."""
    import platform

    import ray
    import torch

    cpu = platform.processor() or "CPU"
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as handle:
            kib = int(next(line.split()[1] for line in handle if line.startswith("MemTotal")))
            memory = f", {kib / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{cpu}, {os.cpu_count()} cores{memory}, {gpu}; torch {torch.__version__}, "
            f"ray {ray.__version__}, Python {platform.python_version()}")


def markdown(header: list[str], rows: list[list[object]]) -> str:
    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
