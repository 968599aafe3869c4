"""Estimated cost of a trial, to start the longest trials first.

With more trials than slots, the order decides how long the last slot runs alone: 9 trials of
the `components` space on 2 slots in table order left `point_estimate` (17 s) running alone
at the end (`docs/benchmarks.md`). Starting the most expensive trials first (the classic
longest-processing-time rule) leaves the short ones to fill the gaps.

The estimate: the model's training FLOPs per sample (forward and backward, counted by
``torch.utils.flop_counter`` on the meta device, so no memory and no real compute) x epochs
x training samples. Systems switches (compile, precision) do not enter; nor does fixed cost.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
import math
from typing import Optional, Sequence

from ablations.config import TrialConfig
from ablations.config.safety import installed_torch
from ablations.model import config as model_switches
from ablations.model.cache import keep_record, read_record, source_digest
from ablations.model.config import ModelConfig
from ablations.model.data import SyntheticSpec, check_directory
from ablations.trial.loading import scalar_columns
from ablations.trial.model_config import builtin_model_config

FLOPS_KIND = "flops"  # the kept counts' files in the cache folder


@functools.lru_cache(maxsize=256)
def training_flops_per_sample(model_config: ModelConfig) -> float:
    """FLOPs of one forward + backward pass for one sample. Kept in the cache folder
    (ablations.model.cache) under the model's configuration, the built-in model's source and
    torch's version: counting them imports torch and builds the model on the meta device under
    ``FlopCounterMode``, which imports torch._dynamo (about 2 s of every run's start); a kept
    count is read without importing torch."""
    key = {"model": dataclasses.asdict(model_config), "source": _model_source_digest(),
           "torch": installed_torch()}
    kept = read_record(FLOPS_KIND, key)
    if isinstance(kept, float):
        return kept
    flops = counted_flops_per_sample(model_config)
    keep_record(FLOPS_KIND, key, flops)
    return flops


def counted_flops_per_sample(model_config: ModelConfig) -> float:
    """:func:`training_flops_per_sample`, counted (not read from the cache folder)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from ablations.model.model import build_model

    config = model_config
    with torch.device("meta"):
        model = build_model(config)
        frames = torch.empty(1, config.temporal_frames, config.in_channels, config.image_height,
                             config.image_width) if config.use_images else None
        scalars = torch.empty(1, config.num_scalars) if config.use_scalars else None
    with FlopCounterMode(display=False) as counter:
        mean, variance = model(frames, scalars)
        loss = mean.sum() if variance is None else mean.sum() + variance.sum()
        loss.backward()
    return float(counter.get_total_flops())


@functools.cache
def _model_source_digest() -> str:
    """The built-in model's code (its module and the switches' module it reads) and the
    counting recipe (:func:`counted_flops_per_sample`)."""
    model_file = importlib.util.find_spec("ablations.model.model").origin  # not imported
    return source_digest(model_file, model_switches.__file__,
                         extra=inspect.getsource(counted_flops_per_sample))


@functools.lru_cache(maxsize=256)
def plugin_flops_per_sample(config: TrialConfig, image_shape: tuple[int, int, int],
                            scalars: int) -> float:
    """The same for a model plugin's model (``config.plugin``)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from ablations.trial.model_builder import build_trial_model

    config = config.replace(gradient_checkpointing=False, channels_last=False)
    with torch.device("meta"):
        model = build_trial_model(config, image_shape, scalars)
        frames = torch.empty(1, config.data.temporal_frames, *image_shape) \
            if config.data.use_images else torch.empty(0)
        features = torch.empty(1, scalars) if config.data.use_scalars else torch.empty(0)
    with FlopCounterMode(display=False) as counter:
        mean, variance = model(frames, features)
        loss = mean.sum() if variance is None else mean.sum() + variance.sum()
        loss.backward()
    return float(counter.get_total_flops())


def _data_shape(config: TrialConfig) -> tuple[tuple[int, int, int], int, int]:
    """((C, H, W), number of scalars the model sees, training samples), without loading the
    data."""
    if not config.data.data_dir:
        spec = SyntheticSpec()
        image_shape = (spec.channels, spec.height, spec.width)
        samples = config.data.synthetic_train
    else:
        (samples, _, *image_shape), _ = check_directory(config.data.data_dir)
    if config.data.max_train_examples:
        samples = min(samples, config.data.max_train_examples)
    scalars = sum(1 for c in scalar_columns(config) if c not in config.data.dropped_scalars)
    return tuple(image_shape), scalars, samples  # type: ignore[return-value]


def estimated_cost(config: TrialConfig) -> float:
    """Relative cost of a trial (FLOPs); NaN when it cannot be estimated here (e.g. the data
    directory exists only on the cluster's workers)."""
    if config.own_code is not None:  # its cost is its own business: unknown here
        return math.nan
    try:
        image_shape, scalars, samples = _data_shape(config)
        if config.plugin:
            flops = plugin_flops_per_sample(config, image_shape, scalars)
        else:
            flops = training_flops_per_sample(builtin_model_config(config, image_shape, scalars))
        return flops * config.optim.epochs * samples
    except Exception:  # noqa: BLE001 - an estimate only: keep the given order
        return math.nan


def longest_first(configs: Sequence[TrialConfig],
                  costs: Optional[Sequence[float]] = None) -> list[int]:
    """Indices of ``configs`` ordered by estimated cost (``costs``, else
    :func:`estimated_cost`), largest first; ties (e.g. seeds of one variant) and trials
    without an estimate keep their order, the latter at the end."""
    costs = list(costs) if costs is not None else [estimated_cost(c) for c in configs]
    return sorted(range(len(configs)),
                  key=lambda i: (math.isnan(costs[i]), -costs[i] if costs[i] == costs[i] else 0))


def planned_epochs(config: TrialConfig) -> int:
    """The epochs a trial is planned to train: the runner's ``epochs``; own code's ``epochs``
    key if it has one, else 0 (unknown)."""
    if config.own_code is not None:
        epochs = getattr(config.model, "epochs", 0)
        return int(epochs) if isinstance(epochs, int) and not isinstance(epochs, bool) else 0
    return config.optim.epochs
