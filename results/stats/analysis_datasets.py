"""The analysis of an experiment over several datasets (docs/datasets.md): its design's analysis
on each dataset's rows, the datasets' verdict tables as one (:func:`one_below_the_other`) and
each variant's verdict across them (:mod:`ablations.results.stats.datasets`)."""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from ablations.config.comparison import NOT_GIVEN, Decision
from ablations.results.stats.analysis_table import Analysis, Cite
from ablations.results.stats.dataset_rows import DATASET, by_dataset
from ablations.results.stats.datasets import MIN_RANK_DATASETS, across_datasets


class DatasetsAnalysis(Analysis):
    """An experiment over several datasets (docs/datasets.md): the design's analysis on each
    dataset's rows (``inner``), one verdict table below the other, and each variant's verdict
    across the datasets (:meth:`across`)."""

    name = "datasets"

    def __init__(self, inner: Analysis, datasets: tuple[str, ...] = ()) -> None:
        super().__init__(inner.meta)
        self.inner = inner
        self.pilot = inner.pilot
        self.datasets = tuple(datasets)  # their names, where the trials were seen

    def baseline_check(self, trials: pd.DataFrame, epochs: Optional[pd.DataFrame], *,
                       reference: str) -> Any:
        """A check of the reference on each dataset (a ``DatasetChecks``)."""
        from ablations.results.stats.baseline_check import dataset_baseline_checks

        return dataset_baseline_checks(trials, epochs, reference=reference)

    def methods_sentences(self, cite: Cite) -> list[str]:
        k = len(self.datasets)
        named = f"{k} datasets ({', '.join(self.datasets)})" if k else "the datasets"
        words = [
            f"These comparisons were made on each of the {named} separately. Across them, "
            "an ablation's effect on a dataset was the ratio of its mean to the reference's "
            "over the seeds both finished, and the mean of the datasets' log ratios was "
            "tested with t on k − 1 degrees of freedom from their spread (the dataset the "
            "unit, unweighted), with the same rules for a difference and for equivalence "
            "within the margin as a percentage, and Holm's correction over the ablations; "
            "an arm that diverged on more seeds than the reference on any dataset was "
            "called neither equivalent nor better across them."]
        if k >= MIN_RANK_DATASETS:
            words.append("Every arm was also ranked on each dataset by its median over seeds "
                         "(a diverged seed the worst), with Friedman's test and Nemenyi's "
                         f"critical difference{cite('demsar2006')}.")
        return [*self.inner.methods_sentences(cite), *words]

    @property
    def verdict_test(self) -> str:
        return self.inner.verdict_test

    def recorded_settings(self) -> Optional[dict[str, Any]]:
        return self.inner.recorded_settings()

    def verdicts(self, trials: pd.DataFrame, given: Decision = NOT_GIVEN) -> pd.DataFrame:
        """Each dataset's verdicts, one below the other, with a ``dataset`` column first (a
        dataset with no verdicts possible is left out and named in
        ``attrs["dataset_errors"]``)."""
        return one_below_the_other(self.per_dataset(trials, given))

    def per_dataset(self, trials: pd.DataFrame,
                    given: Decision = NOT_GIVEN) -> dict[str, pd.DataFrame]:
        """The design's verdicts on each dataset's trials, by dataset. A dataset whose
        verdicts are not possible (no ok trial of its reference) maps to an empty table
        whose ``attrs["error"]`` says why."""
        out = {}
        for name, rows in by_dataset(trials).items():
            try:
                out[name] = self.inner.verdicts(rows, given)
            except ValueError as exc:
                empty = pd.DataFrame(columns=["ablation", "verdict", "unstable"])
                empty.attrs["error"] = str(exc)
                out[name] = empty
        return out

    def across(self, trials: pd.DataFrame,
               per_dataset: Optional[dict[str, pd.DataFrame]] = None,
               given: Decision = NOT_GIVEN) -> Optional[pd.DataFrame]:
        """Each variant's verdict across the datasets (:func:`ablations.results.stats.
        datasets.across_datasets`); ``per_dataset``: :meth:`per_dataset`'s, if computed.

        Raises:
            ValueError: a margin in the metric's units (the message says to give a
                percentage).
        """
        decision = self.decision(given)
        if per_dataset is None:
            per_dataset = self.per_dataset(trials, decision)
        usable = {name: table for name, table in per_dataset.items() if len(table)}
        return across_datasets(trials, usable, **self.with_metric(decision).terms())


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
