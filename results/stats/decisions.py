"""An experiment's verdicts as its design decided them: the one function the command line's
summary, ``report``, the library (``Experiment``), the notebook and the trackers call.

Which table decides depends on what experiment.json recorded before the data:

- a ``--seeds auto`` run (``sequential``): the sequential design's verdicts at each arm's
  last look (:func:`ablations.results.stats.sequential_table.sequential_verdict_table`);
- a fixed run planned as the pilot look of a design (``planned``'s ``design``): that look's
  verdicts, ``attrs["pilot"]`` True;
- any other fixed run (a table, crossed seeds, a factorial design's cells, a tuned
  ablation's evaluation at the configuration given): :func:`ablations.results.stats.verdicts.
  verdict_table` at full α.

A tuned ablation's search and tuned rows are left out (:func:`ablations.results.stats.phases.
evaluation_rows`); its side-by-side table is :mod:`ablations.results.stats.tuned`'s.

Each function reads the metric's direction (and unit) from ``meta``: the metrics an
experiment's own code declared (experiment.json's ``metrics``), else the built-in model's
(:func:`ablations.results.io.directions.metric_of`), and hands it to the table it calls.
"""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from ablations.config.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    DEFAULT_METRIC,
    DEFAULT_REFERENCE,
)
from ablations.results.io.directions import metric_of
from ablations.results.io.files import read_experiment, read_metadata
from ablations.results.stats.dataset_rows import DATASET, by_dataset, is_across_datasets
from ablations.results.stats.datasets import across_datasets
from ablations.results.stats.factorial_design import FactorialDesign
from ablations.results.stats.phases import evaluation_rows
from ablations.results.stats.planned import departures, pilot_design, recorded_settings
from ablations.results.stats.sequential import SeedDesign
from ablations.results.stats.sequential_table import sequential_verdict_table
from ablations.results.stats.tuned import side_by_side
from ablations.results.stats.verdicts import verdict_table


def decision_settings(meta: dict[str, Any], *, reference: Optional[str] = None,
                      metric: Optional[str] = None, margin: str | float | None = None,
                      alpha: Optional[float] = None) -> dict[str, Any]:
    """(reference, metric, margin, alpha) to decide with: each one given, else the one the
    experiment recorded before its data (:mod:`ablations.results.stats.planned`), else the defaults
    (the space's reference, test_mae, 5%, 0.05)."""
    planned = recorded_settings(meta) or {}
    return {
        "reference": reference or planned.get("reference") or meta.get("reference")
        or DEFAULT_REFERENCE,
        "metric": metric or planned.get("metric") or DEFAULT_METRIC,
        "margin": margin if margin is not None else planned.get("margin") or DEFAULT_MARGIN,
        "alpha": alpha if alpha is not None else float(planned.get("alpha") or DEFAULT_ALPHA),
    }


def with_declared_metric(meta: dict[str, Any], settings: dict[str, Any]
                         ) -> dict[str, Any]:
    """``settings`` (:func:`decision_settings`') with the metric as its
    :class:`~ablations.config.metrics.Metric`: the direction and unit the experiment's own code
    declared (``meta``'s ``metrics``), else the built-in model's."""
    return {**settings, "metric": metric_of(settings["metric"], meta.get("metrics"))}


def verdicts_of(trials: pd.DataFrame, meta: dict[str, Any], *,
                reference: Optional[str] = None, metric: Optional[str] = None,
                margin: str | float | None = None,
                alpha: Optional[float] = None) -> pd.DataFrame:
    """The verdict table of an experiment (``trials``: its trials.parquet, ``meta``: its
    experiment.json) as its design decided it (the module's docstring says which). Settings
    left None are those recorded before the data; a table decided on others is exploratory:
    ``attrs["exploratory"]`` lists what differs
    (:func:`ablations.results.stats.planned.departures`).

    An experiment over several datasets gets each dataset's table, one below the other, with
    a ``dataset`` column first (:func:`dataset_verdicts_of`; a dataset with no verdicts
    possible is left out and named in ``attrs["dataset_errors"]``).

    Raises:
        ValueError: no verdicts are possible (e.g. no ok trial of the reference, a relative
            margin of a mean of 0); the message says why.
    """
    if is_across_datasets(trials):
        return one_below_the_other(dataset_verdicts_of(
            trials, meta, reference=reference, metric=metric, margin=margin, alpha=alpha))
    settings = decision_settings(meta, reference=reference, metric=metric, margin=margin,
                                 alpha=alpha)
    given = with_declared_metric(meta, settings)
    trials = evaluation_rows(trials)
    record = meta.get("sequential")
    pilot = None if record else pilot_design(meta.get("planned"))
    if record:
        table = sequential_verdict_table(trials, SeedDesign.from_dict(record["design"]),
                                         record["seeds"], **given)
    elif pilot is not None:
        table = sequential_verdict_table(trials, pilot, meta["planned"]["seeds"], **given)
        table.attrs["pilot"] = True
    else:
        table = verdict_table(trials, **given)
    table.attrs["exploratory"] = departures(recorded_settings(meta) or {}, **settings)
    table.attrs["settings"] = settings
    return table


def one_below_the_other(per_dataset: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per-dataset verdict tables as one, with a ``dataset`` column first."""
    tables = {name: table for name, table in per_dataset.items() if len(table)}
    errors = {name: table.attrs["error"] for name, table in per_dataset.items()
              if not len(table)}
    if not tables:
        raise ValueError("no dataset has verdicts: " + "; ".join(
            f"{name}: {error}" for name, error in errors.items()))
    attrs = dict(next(iter(tables.values())).attrs)
    out = pd.concat([table.assign(**{DATASET: name}) for name, table in tables.items()],
                    ignore_index=True)
    out = out[[DATASET, *(c for c in out.columns if c != DATASET)]]
    for name, table in tables.items():  # attrs that differ by dataset: per dataset
        for key in ("reference_mean", "margin", "dropped_nan", "comparisons"):
            if key in table.attrs:
                attrs.setdefault(f"{key}_by_dataset", {})[name] = table.attrs[key]
    out.attrs.update(attrs, datasets=list(tables), dataset_errors=errors)
    return out


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
    if not meta.get("factorial"):
        return None
    from ablations.results.stats.factorial import factorial_effects  # statsmodels

    settings = with_declared_metric(meta, decision_settings(
        meta, reference=reference, metric=metric, margin=margin, alpha=alpha))
    return factorial_effects(trials, FactorialDesign.from_dict(meta["factorial"]),
                             metric=settings["metric"], margin=settings["margin"],
                             alpha=settings["alpha"])


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
    if not meta.get("tuned"):
        return None
    settings = with_declared_metric(meta, decision_settings(
        meta, reference=reference, metric=metric, margin=margin, alpha=alpha))
    return side_by_side(trials, keys=meta["tuned"].get("keys", []), **settings)


def dataset_verdicts_of(trials: pd.DataFrame, meta: dict[str, Any], *,
                        reference: Optional[str] = None, metric: Optional[str] = None,
                        margin: str | float | None = None,
                        alpha: Optional[float] = None) -> dict[str, pd.DataFrame]:
    """:func:`verdicts_of` on each dataset's trials, by dataset (trials.parquet's ``dataset``;
    one entry for an experiment on one dataset). A dataset whose verdicts are not possible
    (no ok trial of its reference) maps to an empty table whose ``attrs["error"]`` says why.
    """
    out = {}
    for name, rows in by_dataset(trials).items():
        try:
            out[name] = verdicts_of(rows, meta, reference=reference, metric=metric,
                                    margin=margin, alpha=alpha)
        except ValueError as exc:
            empty = pd.DataFrame(columns=["ablation", "verdict", "unstable"])
            empty.attrs["error"] = str(exc)
            out[name] = empty
    return out


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
    if not is_across_datasets(trials):
        return None
    settings = decision_settings(meta, reference=reference, metric=metric, margin=margin,
                                 alpha=alpha)
    if per_dataset is None:
        per_dataset = dataset_verdicts_of(trials, meta, **settings)
    usable = {name: table for name, table in per_dataset.items() if len(table)}
    return across_datasets(trials, usable, **with_declared_metric(meta, settings))
