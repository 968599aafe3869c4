"""The rows of each dataset in a table of an experiment over several datasets
(docs/datasets.md): trials.parquet's, epochs.parquet's and predictions.parquet's ``dataset``
column. Imported by the analysis that must not mix datasets (ablations.results.stats.comparisons)
and by the verdicts across them (ablations.results.stats.datasets)."""

from __future__ import annotations

import pandas as pd

DATASET = "dataset"  # the tables' column naming the dataset of a row


def dataset_names(trials: pd.DataFrame) -> list[str]:
    """The datasets of an experiment, in the order its trials list them ([] for a table
    without a ``dataset`` column)."""
    if DATASET not in trials.columns:
        return []
    return list(dict.fromkeys(trials[DATASET].dropna().astype(str)))


def is_across_datasets(trials: pd.DataFrame) -> bool:
    """Whether the trials cover more than one dataset."""
    return len(dataset_names(trials)) > 1


def require_one_dataset(trials: pd.DataFrame, refusal: str) -> None:
    """Raise ``ValueError(refusal)`` where ``trials`` cover more than one dataset: an analysis
    that pairs seeds, or variants, within one dataset refuses to mix them."""
    if len(dataset_names(trials)) > 1:
        raise ValueError(refusal)


def by_dataset(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``frame``'s rows per dataset (a table of one dataset, or without the column: itself
    under its one name, or ``""``)."""
    names = dataset_names(frame)
    if len(names) <= 1:
        return {names[0] if names else "": frame}
    column = frame[DATASET].astype(str)
    return {name: frame[column == name] for name in names}
