"""The CLI's local Ray has the dashboard on 127.0.0.1 with token authentication left on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _token() -> str:
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"]
    return (Path.home() / ".ray" / "auth_token").read_text().strip()


def _get(url: str, token: str | None) -> int:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_dashboard_on_loopback_refuses_requests_without_the_token(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    command = [sys.executable, "-u", str(REPO / "run_ablations.py"), "--space", "components",
               "--only", "baseline", "--seeds", "2", "--epochs", "6",
               "--set", "synthetic_train=256", "--set", "cnn_widths=8,16,16",
               "--set", "embed_dim=16", "--name", "dash"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        match = re.search(r"Ray dashboard: (http://[\d.]+:\d+)", line)
        if match:
            url = match.group(1)
            break
    try:
        assert url is not None, "".join(lines)
        assert url.startswith("http://127.0.0.1:")
        deadline = time.monotonic() + 30
        while _get(f"{url}/api/version", _token()) != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _get(f"{url}/api/version", _token()) == 200
        assert _get(f"{url}/api/version", None) == 401
        assert _get(f"{url}/api/version", "not-the-token") in (401, 403)
    finally:
        rest = proc.stdout.read()  # through the same buffer the loop read from
        proc.wait(timeout=300)
    assert proc.returncode == 0, rest[-3000:]
    assert "TensorBoard: tensorboard --logdir" in "".join(lines) + rest
