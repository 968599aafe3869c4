"""The unit loop, `pytest -m "not slow"`: a test not marked slow that starts Ray, a subprocess or
a server fails, naming the mark (tests/conftest.py); a slow test may start them."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
import ray  # imported before the guard, as a test module that uses Ray imports it

# The guard's error (tests/conftest.py's EndToEndInUnitTest; pytest loads conftest.py as a module
# of its own, not as tests.conftest, so it is matched by its base class and message).
MARK_IT = "in a test not marked slow: mark it `@pytest.mark.slow`"


def test_a_unit_test_starts_no_subprocess():
    with pytest.raises(RuntimeError, match=MARK_IT):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    with pytest.raises(RuntimeError, match=MARK_IT):
        subprocess.check_output(["true"])


def test_a_unit_test_starts_no_server():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        with pytest.raises(RuntimeError, match=MARK_IT):
            sock.listen()


def test_a_unit_test_starts_no_ray():
    with pytest.raises(RuntimeError, match=f"ray.init {MARK_IT}"):
        ray.init(num_cpus=1)
    assert not ray.is_initialized()


@pytest.mark.slow
def test_a_slow_test_may_start_a_subprocess_and_a_server():
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True,
                          text=True, check=True).stdout == "1\n"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
