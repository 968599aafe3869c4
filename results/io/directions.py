"""Which way is better, per numeric column of trials.parquet: what turns a verdict's `higher` /
`lower` into `worse` / `better`.

- :data:`METRIC_DIRECTION`: +1 higher is better, -1 lower is better.
- :data:`NO_DIRECTION`: the numeric columns that have none, each with the reason (a coverage
  is best at its nominal level; a setting or a record of how the trial ran is not a result).
- :func:`metric_direction`: a column's direction, 0 for none.
- :func:`declared_metrics`: within it, the metrics an experiment's own code declared
  (experiment.json's ``metrics``) give their direction, and their unit to
  :func:`declared_unit`; the report, the verdicts and the summary read an experiment inside it.

Every numeric column documented in :mod:`ablations.results.io.schema` is in one of the two tables (a
test walks the schema), so a new column gets a direction, or a reason for none, when it is added.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Mapping, Optional

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


def metric_direction(metric: str) -> int:
    """+1 if higher is better for ``metric``, -1 if lower is, 0 if neither: a declared
    metric's direction (:func:`declared_metrics`), else :data:`METRIC_DIRECTION`'s, looked up
    by :func:`direction_key`; a name in neither, e.g. a plugin's own column, has none."""
    declared = _DECLARED.get()
    if declared is not None and metric in declared:
        return 1 if declared[metric].get("direction") == "higher" else -1
    return METRIC_DIRECTION.get(direction_key(metric), 0)


# name -> {"direction": "higher" | "lower", "unit": str}, while an experiment of own code is read
_DECLARED: ContextVar[Optional[Mapping[str, Mapping[str, Any]]]] = ContextVar(
    "declared_metrics", default=None)


@contextmanager
def declared_metrics(declared: Optional[Mapping[str, Mapping[str, Any]]]) -> Iterator[None]:
    """Read an experiment whose code declared ``declared`` (experiment.json's ``metrics``;
    None: the built-in model's or a plugin's, whose columns the tables above describe)."""
    token = _DECLARED.set(dict(declared) if declared else None)
    try:
        yield
    finally:
        _DECLARED.reset(token)


def declared_unit(metric: str) -> Optional[str]:
    """The unit own code declared for ``metric`` ("" for none, or for a metric it did not
    declare); None outside :func:`declared_metrics` of own code (the built-in model's units
    apply)."""
    declared = _DECLARED.get()
    if declared is None:
        return None
    return str((declared.get(metric) or {}).get("unit") or "")
