"""Analysis of an experiment: pure pandas/numpy/scipy functions, DataFrames in and out, no Ray.

This module loads the tables (:func:`load_experiments`) and re-exports the analysis functions
from the modules they live in, so ``from ablations.results.stats.analysis import ...`` gives all
of them:

- :mod:`ablations.results.stats.comparisons`: :func:`ablation_table` (per ablation, mean and CI of a
  test
  metric over seeds, the paired difference to the reference (same seed), its t interval, a
  paired t-test (Welch's test for a variant with other seeds), Holm correction across the
  ablations, and an effect size; failed trials are excluded and counted), :func:`holm`,
  :func:`t_interval`, :func:`usable_trials` (ok trials with a finite metric, and the names of
  the ok ones left out), :func:`dropped_note`.
- :mod:`ablations.results.stats.verdicts`: :func:`verdict_table` (per ablation a verdict against the
  reference, the trials tested as one fixed design: `worse`/`better`, `equivalent` by TOST
  against a margin, `negligible`, `inconclusive`; Holm over the family; and the equivalence
  bound the data reach; a ``--seeds auto`` experiment's verdicts as its rounds decided them are
  :func:`ablations.results.stats.decisions.experiment_verdicts`'), :func:`verdict_note` (what they
  mean), :func:`equivalence_tests`, :func:`holm_bound`, :func:`parse_margin`,
  :class:`Metric` (a metric's name, direction and unit: what the verdicts take for own code's
  metric), :func:`metric_of`, :func:`metric_direction`, ``METRIC_DIRECTION`` (all from
  :mod:`ablations.results.io.directions`), ``DEFAULT_MARGIN``, ``DEFAULT_ALPHA``, ``VERDICTS``.
- :mod:`ablations.results.stats.strata`: :func:`stratified_errors` (MAE, RMSE and bias per stratum
  and per
  ablation, with counts, and the difference to the reference per stratum),
  :func:`stratified_effects` (where it hurts: per ablation and stratum level the seed-paired
  difference to the reference with its t interval, and a Holm-corrected test of whether it
  differs from the ablation's overall effect), :func:`with_stratum_bins`,
  :func:`stratum_columns`, ``STRATUM_PREFIX``.
- :mod:`ablations.results.stats.uncertainty`: :func:`uncertainty_table` (NLL, CRPS, central-interval
  coverage,
  sharpness and spread-skill for models with a variance head), :func:`uncertainty_metrics`,
  :func:`gaussian_crps`, :func:`coverage`, :func:`calibration_curve`, :func:`seed_ensemble`,
  ``COVERAGE_LEVELS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from ablations.results.stats.comparisons import (  # noqa: F401 (re-exported)
    ablation_table,
    dropped_note,
    holm,
    t_interval,
    usable_trials,
)
from ablations.results.io.files import read_experiment
from ablations.results.stats.strata import (  # noqa: F401 (re-exported)
    STRATUM_PREFIX,
    stratified_effects,
    stratified_errors,
    stratum_columns,
    with_stratum_bins,
)
from ablations.results.stats.uncertainty import (  # noqa: F401 (re-exported)
    COVERAGE_LEVELS,
    calibration_curve,
    coverage,
    gaussian_crps,
    seed_ensemble,
    uncertainty_metrics,
    uncertainty_table,
)
from ablations.results.stats.verdicts import (  # noqa: F401 (re-exported)
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    METRIC_DIRECTION,
    VERDICTS,
    Metric,
    equivalence_tests,
    holm_bound,
    metric_direction,
    metric_of,
    parse_margin,
    short_verdict_note,
    verdict_note,
    verdict_table,
)


# ------------------------------------------------------------------------------------ loading


def load_experiments(directories: str | Path | Iterable[str | Path]) -> dict[str, pd.DataFrame]:
    """The trials, epochs and predictions of one or several experiment folders, concatenated.

    Raises:
        FileNotFoundError: naming the missing file.
        ValueError: if a table lacks the columns the analysis needs.
    """
    if isinstance(directories, (str, Path)):
        directories = [directories]
    parts: dict[str, list[pd.DataFrame]] = {"trials": [], "epochs": [], "predictions": []}
    for directory in directories:
        tables = read_experiment(directory)
        for key, frame in tables.items():
            parts[key].append(frame)
    if not parts["trials"]:
        raise ValueError("no experiment folder given")
    out = {key: pd.concat(frames, ignore_index=True) for key, frames in parts.items()}
    needed = {
        "trials": ["experiment", "ablation", "seed", "status"],
        # a regression's (the built-in model's, a plugin's) with its target and mean; own
        # code's predictions are what it handed over, with the keys
        "predictions": ["experiment", "trial_name", "ablation", "seed", "sample_index"]
        + (["target", "pred_mean", "pred_std"] if "pred_mean" in out["predictions"] else []),
    }
    for key, columns in needed.items():
        missing = [c for c in columns if c not in out[key].columns]
        if missing:
            raise ValueError(f"{key} table lacks columns {missing}")
    for key in ("trials", "epochs", "predictions"):
        frame = out[key]
        for column in ("experiment", "ablation", "trial_name", "status"):
            if column in frame:
                frame[column] = frame[column].astype("string")
        if "seed" in frame:
            frame["seed"] = frame["seed"].astype("int64")
    return out
