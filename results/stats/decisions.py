"""An experiment's verdicts as its design decided them: the one set of functions the command
line's summary, ``report``, the library (``Experiment``), the notebook and the trackers call.

Each asks the experiment's analysis (:func:`ablations.results.stats.analyses.analysis_of`:
the design experiment.json records, e.g. a ``--seeds auto`` run's sequential verdicts at each
arm's last look, a fixed run planned as the pilot look of a design, a table at full α), and
reads the metric's direction (and unit) from ``meta``: the metrics an experiment's own code
declared (experiment.json's ``metrics``), else the built-in model's
(:func:`ablations.results.io.directions.metric_of`).

A tuned ablation's search and tuned rows are left out of the verdicts
(:func:`ablations.results.stats.phases.evaluation_rows`); its side-by-side table is
:func:`tuned_comparison_of`.
"""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from ablations.config.comparison import NOT_GIVEN, Decision
from ablations.results.io.files import read_experiment, read_metadata
from ablations.results.stats.analyses import DatasetsAnalysis, Analysis, analysis_of
from ablations.results.stats.analyses import one_below_the_other as one_below_the_other


def decision_of(meta: dict[str, Any], given: Decision = NOT_GIVEN) -> Decision:
    """The :class:`~ablations.config.comparison.Decision` to decide with: each setting
    ``given``, else the one the experiment recorded before its data
    (:mod:`ablations.results.stats.planned`), else the defaults (the space's reference,
    test_mae, 5%, 0.05)."""
    return analysis_of(meta).decision(given)


def with_declared_metric(meta: dict[str, Any], decision: Decision) -> Decision:
    """``decision`` (:func:`decision_of`'s) with the metric as its
    :class:`~ablations.config.metrics.Metric`: the direction and unit the experiment's own code
    declared (``meta``'s ``metrics``), else the built-in model's."""
    return Analysis(meta).with_metric(decision)


def verdicts_of(trials: pd.DataFrame, meta: dict[str, Any], *,
                reference: Optional[str] = None, metric: Optional[str] = None,
                margin: str | float | None = None,
                alpha: Optional[float] = None) -> pd.DataFrame:
    """The verdict table of an experiment (``trials``: its trials.parquet, ``meta``: its
    experiment.json) as its design decided it (:meth:`ablations.results.stats.analyses.
    Analysis.verdicts`). Settings left None are those recorded before the data; a table
    decided on others is exploratory: ``attrs["exploratory"]`` lists what differs
    (:func:`ablations.results.stats.planned.departures`).

    An experiment over several datasets gets each dataset's table, one below the other, with
    a ``dataset`` column first (:func:`dataset_verdicts_of`; a dataset with no verdicts
    possible is left out and named in ``attrs["dataset_errors"]``).

    Raises:
        ValueError: no verdicts are possible (e.g. no ok trial of the reference, a relative
            margin of a mean of 0); the message says why.
    """
    return analysis_of(meta, trials).verdicts(trials, Decision(
        reference=reference, metric=metric, margin=margin, alpha=alpha))


def experiment_verdicts(directory: str, trials: Optional[pd.DataFrame] = None, *,
                        reference: Optional[str] = None, metric: Optional[str] = None,
                        margin: str | float | None = None,
                        alpha: Optional[float] = None) -> pd.DataFrame:
    """:func:`verdicts_of` the experiment in ``directory`` (``trials``: its trials.parquet if
    already loaded)."""
    if trials is None:
        trials = read_experiment(directory)["trials"]
    return verdicts_of(trials, read_metadata(directory) or {}, reference=reference,
                       metric=metric, margin=margin, alpha=alpha)


def factorial_effects_of(trials: pd.DataFrame, meta: dict[str, Any], *,
                         reference: Optional[str] = None, metric: Optional[str] = None,
                         margin: str | float | None = None,
                         alpha: Optional[float] = None) -> Optional[pd.DataFrame]:
    """A factorial design's main effects and interactions
    (:func:`ablations.results.stats.factorial.factorial_effects`) at the settings
    :func:`verdicts_of` decides with; None for an experiment whose experiment.json records no
    factorial design.

    Raises:
        ValueError: no effects are possible (the message says why).
    """
    return analysis_of(meta).table("effects", trials, Decision(
        reference=reference, metric=metric, margin=margin, alpha=alpha))


def tuned_comparison_of(trials: pd.DataFrame, meta: dict[str, Any], *,
                        reference: Optional[str] = None, metric: Optional[str] = None,
                        margin: str | float | None = None,
                        alpha: Optional[float] = None) -> Optional[pd.DataFrame]:
    """A tuned ablation's verdicts at the configuration given and at each arm's own best, side
    by side (:func:`ablations.results.stats.tuned.side_by_side`) at the settings :func:`verdicts_of`
    decides with; None for an experiment run without ``tune_each``.

    Raises:
        ValueError: no comparison is possible (the message says why).
    """
    return analysis_of(meta).table("tuned", trials, Decision(
        reference=reference, metric=metric, margin=margin, alpha=alpha))


def dataset_verdicts_of(trials: pd.DataFrame, meta: dict[str, Any], *,
                        reference: Optional[str] = None, metric: Optional[str] = None,
                        margin: str | float | None = None,
                        alpha: Optional[float] = None) -> dict[str, pd.DataFrame]:
    """:func:`verdicts_of` on each dataset's trials, by dataset (trials.parquet's ``dataset``;
    one entry for an experiment on one dataset). A dataset whose verdicts are not possible
    (no ok trial of its reference) maps to an empty table whose ``attrs["error"]`` says why.
    """
    return DatasetsAnalysis(analysis_of(meta)).per_dataset(trials, Decision(
        reference=reference, metric=metric, margin=margin, alpha=alpha))


def across_datasets_of(trials: pd.DataFrame, meta: dict[str, Any],
                       per_dataset: Optional[dict[str, pd.DataFrame]] = None, *,
                       reference: Optional[str] = None, metric: Optional[str] = None,
                       margin: str | float | None = None,
                       alpha: Optional[float] = None) -> Optional[pd.DataFrame]:
    """Each variant's verdict across the datasets (:func:`ablations.results.stats.datasets.
    across_datasets`) at the settings :func:`verdicts_of` decides with; None for an
    experiment on one dataset. ``per_dataset``: :func:`dataset_verdicts_of`'s, if computed.

    Raises:
        ValueError: a margin in the metric's units (the message says to give a percentage).
    """
    return analysis_of(meta, trials).across(trials, per_dataset, Decision(
        reference=reference, metric=metric, margin=margin, alpha=alpha))
