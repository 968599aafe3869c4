"""The phases of an experiment's trials (trials.parquet's ``phase``).

A plain run's trials are all ``evaluation``; a search space's are ``search``. A tuned ablation
(``--tune-each``, docs/tuned.md) has three: ``evaluation`` (the table at the configuration
given), ``tuning`` (every arm's search) and ``tuned`` (every arm at its own best). Every table
that compares arms (verdicts, strata, uncertainty, ``compare``) reads one evaluation at a time:
:func:`evaluation_rows` keeps the ``evaluation`` trials where an experiment has others;
:mod:`ablations.results.stats.tuned` puts the two evaluations' verdicts next to each other.
"""

from __future__ import annotations

from typing import Optional

import pandas as pd

EVALUATION, TUNING, TUNED = "evaluation", "tuning", "tuned"


def evaluation_rows(frame: pd.DataFrame, trials: Optional[pd.DataFrame] = None,
                    phase: str = EVALUATION) -> pd.DataFrame:
    """``frame``'s rows of the ``phase`` evaluation when the experiment has trials of other
    phases besides (a tuned ablation), else ``frame`` as it is. ``trials``: the trials table
    that says each trial's phase, for a frame without the column (epochs, predictions)."""
    source = frame if trials is None else trials
    if "phase" not in source or source.empty:
        return frame
    phases = set(source["phase"].dropna())
    if phases <= {EVALUATION} or phase not in phases:
        return frame
    keep = source["phase"] == phase
    if trials is None:
        return frame[keep.to_numpy()].reset_index(drop=True)
    names = set(trials.loc[keep, "trial_name"])
    return frame[frame["trial_name"].isin(names)].reset_index(drop=True)


def has_tuning(trials: pd.DataFrame) -> bool:
    return "phase" in trials and bool((trials["phase"] == TUNED).any())
