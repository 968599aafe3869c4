"""The tests' fault injection: the built-in model as a training function whose own config
keys add faults, and the loop's hooks (ablations.trial.step.LoopHooks) that inject them.

- ``FAULTY`` (``--model tests.faulty:FAULTY``, ``Experiment(model="tests.faulty:FAULTY")``,
  ``TrialConfig.of(model=FAULTY_SPEC, ...)``): every key of the built-in model (data, model,
  optimisation and systems keys, with the built-in defaults) plus the fault keys of
  :class:`Faults`; it trains through the runner's own :func:`builtin_fit` with those faults'
  hooks, so a trial on Ray's workers fails, runs out of memory or compiles as a test asks.
  :func:`faulty` turns a built-in trial's config into FAULTY's.
- :func:`hooks`: the same faults for a test that calls ``train(...)`` or the auto-batch probe
  directly; :func:`oom_probe`: the probe a test hands ``auto_batch(..., probe=)``.

Tests run from the checkout's root, so ``tests`` imports on a local Ray's workers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch

from ablations.config import TrialConfig
from ablations.config.code import OWN_CODE_RUNNER_KEYS, RESERVED
from ablations.contract import TrainingFunction
from ablations.trial.builtin_fit import builtin_fit
from ablations.trial.memory import probe_max_batch
from ablations.trial.step import LoopHooks

FAULTY_SPEC = "tests.faulty:FAULTY"


class InjectedFailure(RuntimeError):
    """Raised on purpose as epoch ``fail_at_epoch`` starts."""


@dataclasses.dataclass(frozen=True)
class Faults:
    """What a test injects into one trial (all off by default)."""

    # Raise InjectedFailure as this epoch starts (1-based, 0 = never), only in a run that did
    # not continue from a saved state, so that a retry or a resume gets past it.
    fail_at_epoch: int = 0
    # Raise torch.OutOfMemoryError for micro-batches above this (0 = never), in training,
    # evaluation and the auto-batch probe: what CUDA raises, on a CPU.
    oom_above_batch: int = 0
    # torch.compile's backend: "eager" or "aot_eager" compile without a C++ compiler and in a
    # fraction of inductor's time (LoopHooks.compile_backend says why it is no config key).
    compile_backend: str = "inductor"

    def hooks(self) -> LoopHooks:
        """The loop's hooks that inject these faults."""
        return LoopHooks(on_epoch_start=self._epoch_start if self.fail_at_epoch else None,
                         on_memory_peak=self._memory_peak if self.oom_above_batch else None,
                         compile_backend=self.compile_backend)

    def _epoch_start(self, epoch: int, resumed: bool) -> None:
        if epoch == self.fail_at_epoch and not resumed:
            raise InjectedFailure(f"injected failure at epoch {epoch} (fail_at_epoch)")

    def _memory_peak(self, batch: int, where: str) -> None:
        if batch > self.oom_above_batch:
            raise torch.OutOfMemoryError(f"CUDA out of memory (injected {where}: batch {batch} "
                                         f"> oom_above_batch={self.oom_above_batch})")


def hooks(**faults: Any) -> LoopHooks:
    """The loop's hooks for ``faults`` (:class:`Faults`' fields): ``hooks(oom_above_batch=5)``."""
    return Faults(**faults).hooks()


def oom_probe(above: int) -> Callable[..., dict[str, Any]]:
    """The auto-batch probe as a Ray task runs it, with every batch above ``above`` out of
    memory (a closure: Ray ships it by value)."""
    def probe(config: TrialConfig, *, limit: int, gpu_fraction: float) -> dict[str, Any]:
        return probe_max_batch(config, limit=limit, gpu_fraction=gpu_fraction,
                               hooks=hooks(oom_above_batch=above))
    return probe


# ---------------------------------------------------------------------- the training function

FAULT_KEYS = tuple(field.name for field in dataclasses.fields(Faults))


def _builtin_keys() -> dict[str, Any]:
    """The built-in model's keys a training function's config can hold, with their defaults:
    every data, model, optimisation and systems key but those the runner gives own code itself
    (the switches, the device, the threads) and those that are trials.parquet's own columns
    (``data_seed``: the trial's seeds come from the runner)."""
    defaults = TrialConfig()
    keys = {}
    for section in (defaults.data, defaults.model, defaults.optim, defaults.systems):
        for field in dataclasses.fields(section):
            if field.name not in OWN_CODE_RUNNER_KEYS and field.name not in RESERVED:
                keys[field.name] = getattr(section, field.name)
    return keys


BUILTIN_KEYS = _builtin_keys()
FaultyConfig = dataclasses.make_dataclass(
    "FaultyConfig",
    [*((name, type(value), dataclasses.field(default=value))
       for name, value in BUILTIN_KEYS.items()),
     *((field.name, field.type, dataclasses.field(default=field.default))
       for field in dataclasses.fields(Faults))],
    frozen=True)
FaultyConfig.__module__ = __name__  # pickled by reference, as a module-level class is

# the built-in model's verdict metric first; a trial that diverged before its test split has
# no test metrics, which stay NaN so that it ends diverged, as the built-in model's does
METRICS = {"test_mae": "lower km", "val_mae": "lower km"}


def fit(config: Any, trial: Any) -> dict[str, Any]:
    """The built-in model's trial with the faults of ``config``'s fault keys: the trial's own
    config (identity, seeds, switches, device, threads) with the built-in model and ``config``'s
    keys, through the runner's :func:`builtin_fit`."""
    keys = dataclasses.asdict(config)
    faults = Faults(**{name: keys.pop(name) for name in FAULT_KEYS})
    runner = trial.switches.config  # the trial's TrialConfig, as the runner planned it
    builtin = runner.replace(model="", **keys)
    final = builtin_fit(builtin, trial, hooks=faults.hooks())
    return {**{name: math.nan for name in METRICS}, **final}


FAULTY = TrainingFunction(name="faulty", config=FaultyConfig, fit=fit, metrics=METRICS)


def faulty(config: TrialConfig, **faults: Any) -> TrialConfig:
    """The built-in trial ``config`` as FAULTY's, with ``faults`` (:class:`Faults`' fields):
    the same identity, switches and keys, so that it trains as ``config`` would."""
    flat = config.flat()
    if flat["model"]:
        raise ValueError(f"faulty() takes a built-in model's config, not {flat['model']!r}")
    kept = {key: flat[key] for key in ("ablation", "dataset", "seed", "seed_offset",
                                       "seed_sources", "data_seed")}
    if kept.pop("data_seed"):
        raise ValueError("FAULTY trains at data_seed 0: the runner owns own code's seeds")
    runner = {key: flat[key] for key in OWN_CODE_RUNNER_KEYS if key in flat and key not in kept}
    own = {key: flat[key] for key in BUILTIN_KEYS}
    return TrialConfig.of(model=FAULTY_SPEC, **kept, **runner, **own, **faults)
