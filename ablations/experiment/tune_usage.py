"""Ray Tune's usage tag of the callbacks a run passes, left out where Ray's usage statistics
are switched off."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Iterator


@contextlib.contextmanager
def no_unsent_callback_tag() -> Iterator[None]:
    """While open, and only where Ray's usage statistics are switched off
    (``RAY_USAGE_STATS_ENABLED=0`` or ``ray disable-usage-stats``), ``Tuner.fit`` does not tag
    the callbacks it is given (``ray.air._internal.usage.tag_callbacks``). The tag names them
    by importing Ray's MLflow, W&B, Comet and Aim integrations, mlflow and wandb among them
    where they are installed: 1.1 of the 8.7 CPU-s a tiny run's driver spends
    (docs/benchmarks.md), for statistics that are not sent. With them on, or with a Ray that
    has neither function, Tune is left as it is."""
    try:
        usage = importlib.import_module("ray.air._internal.usage")
        from ray._common.usage.usage_lib import usage_stats_enabled

        tag = usage.tag_callbacks
    except (ImportError, AttributeError):
        yield
        return
    if usage_stats_enabled():
        yield
        return

    def untagged(callbacks: Any) -> bool:
        return False  # what the tag returns when it records nothing

    usage.tag_callbacks = untagged
    try:
        yield
    finally:
        usage.tag_callbacks = tag
