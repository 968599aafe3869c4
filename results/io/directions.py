"""Which way is better, and the unit, per numeric column of trials.parquet: what turns a
verdict's `higher` / `lower` into `worse` / `better`, and what the tables print beside a value.

- :data:`METRIC_DIRECTION`: +1 higher is better, -1 lower is better.
- :data:`NO_DIRECTION`: the numeric columns that have none, each with the reason (a coverage
  is best at its nominal level; a setting or a record of how the trial ran is not a result).
- :data:`KM_METRICS`: the built-in model's metrics in the target's unit, km.
- :func:`metric_of`: a column's :class:`~ablations.config.metrics.Metric` (name, direction,
  unit), from the metrics an experiment's own code declared (experiment.json's ``metrics``,
  passed as ``declared``) or else the tables above: what the verdicts, the report and the
  summary are given for an experiment's metric.
- :func:`metric_direction`: a column's direction as a sign, 0 for none.

Every numeric column documented in :mod:`ablations.results.io.schema` is in one of the two tables (a
test walks the schema), so a new column gets a direction, or a reason for none, when it is added.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Union

from ablations.config.metrics import Metric

# A metric as the analysis functions take it: a Metric, or a column's name, whose Metric is
# metric_of(name): the built-in model's direction and unit
MetricLike = Union[str, Metric]
# An experiment's declared metrics: experiment.json's ``metrics`` (name -> {direction, unit}),
# or own code's as it holds them (name -> Metric)
Declared = Mapping[str, Union[Metric, Mapping[str, Any]]]

# Keyed by the name without its split prefix (test_mae -> mae, train_samples_per_s ->
# samples_per_s) and with every peak_mem_<what>_mb read as peak_mem_mb.
METRIC_DIRECTION: dict[str, int] = {
    "mae": -1, "rmse": -1, "nll": -1, "crps": -1, "loss": -1,
    "r2": +1,
    "wall_s": -1, "cpu_hours": -1, "gpu_hours": -1, "mean_epoch_s": -1, "compile_s": -1,
    "peak_mem_mb": -1,  # and peak_mem_train_mb, peak_mem_eval_mb, peak_mem_reserved_mb
    "samples_per_s": +1,
    "oom_retries": -1,  # each retry is a run that ran out of memory and halved its micro-batch
}

_NOT_A_RESULT = "a record of how the trial ran, not a result to rank"
_SETTING = "a setting of the trial (a config column): what was run, not what came out"
# The numeric columns with no better direction: their verdicts say `higher` / `lower`.
NO_DIRECTION: dict[str, str] = {
    "coverage_90": "best at its nominal level (0.9): neither higher nor lower is better",
    **dict.fromkeys(("mae_mean_predictor", "rmse_mean_predictor"),
                    "the training mean's error: a property of the data and its split, the "
                    "same for every variant, not a result of the trial's model"),
    "compiled_graphs": "0 with compile on means it ran eager, many mean recompilations: read, "
                       "not ranked",
    **dict.fromkeys(("round", "epochs_run", "resumed_from_epoch", "torch_threads",
                     "started_at", "eval_batch_used", "final_micro_batch",
                     "final_accum_steps"), _NOT_A_RESULT),
    **dict.fromkeys(("seed", "seed_offset", "data_seed", "init_seed", "order_seed",
                     "synthetic_train", "synthetic_val", "synthetic_test",
                     "max_train_examples", "max_eval_examples",
                     "temporal_frames", "embed_dim", "num_heads", "dropout", "epochs",
                     "batch_size", "grad_accum_steps", "lr", "lr_reference_batch",
                     "weight_decay", "grad_clip", "eval_batch_size", "num_threads",
                     "num_workers", "min_micro_batch", "checkpoint_every"), _SETTING),
}

_SPLIT_PREFIXES = ("test_", "val_", "train_")
_PEAK_MEMORY = re.compile(r"peak_mem_\w+_mb")


def direction_key(metric: str) -> str:
    """The name ``metric`` is looked up under: without a split prefix where the rest is
    listed (``test_mae`` -> ``mae``), ``peak_mem_<what>_mb`` -> ``peak_mem_mb``."""
    if _PEAK_MEMORY.fullmatch(metric):
        return "peak_mem_mb"
    for prefix in _SPLIT_PREFIXES:
        rest = metric.removeprefix(prefix)
        if metric.startswith(prefix) and (rest in METRIC_DIRECTION or rest in NO_DIRECTION):
            return rest
    return metric


KM_METRICS = ("mae", "rmse", "crps", "bias", "sharpness")  # metrics in the target's unit
_WORDS = {1: "higher", -1: "lower", 0: None}


def metric_of(metric: MetricLike, declared: Optional[Declared] = None) -> Metric:
    """The :class:`Metric` of column ``metric`` (a ``Metric`` is returned as it is).

    ``declared``: the metrics an experiment's own code declared (experiment.json's
    ``metrics``, name -> ``{direction, unit}`` or ``Metric``; None or empty for the built-in
    model and plugins). A declared metric has its declared direction and unit. Any other
    column has :data:`METRIC_DIRECTION`'s direction, looked up by :func:`direction_key`
    (none for a name in neither table, e.g. a plugin's own column); its unit is the built-in
    model's (``km`` for an error in the target's unit: :data:`KM_METRICS`), or "" in an
    experiment of own code, which prints the units it declared and no other.
    """
    if isinstance(metric, Metric):
        return metric
    if declared and metric in declared:
        entry = declared[metric]
        if isinstance(entry, Metric):
            return entry
        return Metric(metric, entry.get("direction"), str(entry.get("unit") or ""))
    direction = _WORDS[METRIC_DIRECTION.get(direction_key(metric), 0)]
    if declared:
        return Metric(metric, direction, "")
    return Metric(metric, direction,
                  "km" if metric.lower().split("_")[-1] in KM_METRICS else "")


def metric_direction(metric: MetricLike, declared: Optional[Declared] = None) -> int:
    """+1 if higher is better for ``metric``, -1 if lower is, 0 if neither: the sign of
    :func:`metric_of`'s direction."""
    return metric_of(metric, declared).sign
