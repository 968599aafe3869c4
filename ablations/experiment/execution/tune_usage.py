"""What Ray Tune's driver loads and does for nothing a run uses: the usage tag of the callbacks
a run passes, left out where Ray's usage statistics are switched off
(:func:`no_unsent_callback_tag`); torch, which Tune's TensorBoard logger loads through
tensorboardX (:func:`tensorboardx_without_torch`)."""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Any, Iterator


class _NoTorch:
    """A ``sys.meta_path`` finder under which ``import torch`` (and its submodules) raises
    ModuleNotFoundError, as where torch is not installed."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def tensorboardx_without_torch() -> None:
    """Import tensorboardX, which Tune's TensorBoard logger (``TBXLoggerCallback``) writes
    the trials' event files with, without torch: tensorboardX imports it at the top only for
    a type alias (``try: import torch`` in tensorboardX/writer.py) and imports it again where
    it converts a tensor, which Tune never passes (it logs the numbers of the trials'
    results). torch costs the driver some 3 CPU-s and 180 MiB (benchmarks/driver_cpu.py).
    Called before the Tuner starts, when no other thread of the runner imports (the cost
    estimates' has ended). Where torch or tensorboardX is already loaded (an estimate that
    counted FLOPs, a plugin) nothing changes; where tensorboardX cannot be imported so, what
    it loaded is unloaded and Tune imports it as usual; a later ``import torch`` loads it."""
    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        return
    before = set(sys.modules)
    blocker = _NoTorch()
    sys.meta_path.insert(0, blocker)
    try:
        importlib.import_module("tensorboardX")
    except ImportError:  # not installed, or a version that needs torch
        for name in set(sys.modules) - before:
            if name == "tensorboardX" or name.startswith("tensorboardX."):
                del sys.modules[name]
    finally:
        sys.meta_path.remove(blocker)


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
