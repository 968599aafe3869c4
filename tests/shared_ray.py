"""This test worker's one local Ray (tests/conftest.py: who shares it, who gets a Ray of its
own). A module of its own, not conftest's: pytest imports conftest.py under one name and the
tests import it as ``tests.conftest``, two modules; the state here is one for both."""

from __future__ import annotations

import sys
from typing import Optional

# The shared Ray's GCS address once started; whether the running test is marked own_ray (set
# by conftest's pytest_runtest_setup, before the test's fixtures).
STATE: dict = {"address": None, "own_ray": False}


def running_ray() -> Optional[str]:
    """The GCS address of the Ray this process is connected to, None if none."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return ray.get_runtime_context().gcs_address


def shared_ray():
    """This test worker's local Ray (1 CPU, no dashboard), started on first use and kept
    until the session ends; a Ray of another test's that is still running is stopped first."""
    import ray

    running = running_ray()
    if running is not None and running == STATE["address"]:
        return ray
    if running is not None:
        ray.shutdown()
    context = ray.init(address="local", num_cpus=1, include_dashboard=False,
                       log_to_driver=False)
    STATE["address"] = context.address_info["gcs_address"]
    return ray


def stop_shared_ray() -> None:
    if STATE["address"] is not None and running_ray() == STATE["address"]:
        sys.modules["ray"].shutdown()
    STATE["address"] = None
