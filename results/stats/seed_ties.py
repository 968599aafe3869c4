"""Arms whose seeds measured no variance: every ok seed gave the same metric.

A program that sets a constant seed whatever it is given (many published scripts do), or a
metric too coarse to move (an accuracy over a few samples), gives each seed of an arm the same
value. A t test on such an arm has no noise to weigh its difference against: p 0 for any
difference, an equivalence from one sample. The verdicts give such an arm no verdict (its
difference is shown, ``reason`` says why; ``no_seed_variance``), ``--seeds auto`` adds it no
seeds, trials.parquet flags its trials (``seed_tied``), and :func:`seed_tie_lines` says which
case it is:

- every arm tied on every metric the trials hold and every curve (epochs.parquet): the program
  ignores the seed it is given, and how to pass it (or, where its command line passes one,
  that the program seeds a constant of its own);
- some arms tied on the verdicts' metric alone: no seed variance was measured for them;
- an arm equal to the reference on every seed: the change may not have reached the program.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Optional

import numpy as np
import pandas as pd

from ablations.config.statuses import TrialStatus

SEED_FIELDS = ("{seed}", "{init_seed}", "{order_seed}", "{data_seed}")  # a command's seeds
NO_VARIANCE_REASON = "no seed variance: every seed gave the same value"


def _ok(trials: pd.DataFrame) -> pd.DataFrame:
    return trials[trials["status"] == TrialStatus.OK]


def tied_arms(trials: pd.DataFrame, metric: str) -> list[str]:
    """The arms (in the table's order) whose ok trials, two seeds or more, all give one finite
    value of ``metric``."""
    if metric not in trials:
        return []
    ok = _ok(trials)
    values = pd.to_numeric(ok[metric], errors="coerce")
    ok = ok.assign(_value=values)[np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))]
    found = []
    for arm, group in ok.groupby("ablation", sort=False):
        if group["seed"].nunique() >= 2 and group["_value"].nunique() == 1:
            found.append(arm)
    return found


def seed_tied_column(trials: pd.DataFrame, metric: str) -> pd.Series:
    """trials.parquet's ``seed_tied``: True on every trial of an arm of :func:`tied_arms`
    (per dataset in an experiment over several)."""
    tied = pd.Series(False, index=trials.index)
    groups = (trials.groupby("dataset", sort=False, dropna=False)
              if "dataset" in trials and trials["dataset"].nunique() > 1 else [(None, trials)])
    for _, part in groups:
        arms = tied_arms(part, metric)
        tied.loc[part.index[part["ablation"].isin(arms)]] = True
    return tied


def same_as_reference(trials: pd.DataFrame, metric: str, reference: str) -> list[str]:
    """The arms whose ``metric`` equals the reference's on every seed both ran ok (two or
    more)."""
    if metric not in trials:
        return []
    ok = _ok(trials)
    table = ok.pivot_table(index="seed", columns="ablation", values=metric, aggfunc="first")
    if reference not in table:
        return []
    ref = table[reference]
    found = []
    for arm in table.columns:
        if arm == reference:
            continue
        both = table[arm].notna() & ref.notna()
        if both.sum() >= 2 and (table.loc[both, arm] == ref[both]).all():
            found.append(arm)
    return found


def _numeric_metrics(trials: pd.DataFrame) -> list[str]:
    """The metric columns a trial reports: test_*/val_* numbers (the built-in model's and a
    program's own, recorded under their names)."""
    return [c for c in trials.columns if (c.startswith("test_") or c.startswith("val_"))
            and pd.api.types.is_numeric_dtype(trials[c])]


def ignores_seed(trials: pd.DataFrame, epochs: Optional[pd.DataFrame] = None) -> bool:
    """Whether every arm with two ok seeds or more gives the same value on every seed for
    every metric the trials hold, and the same curves (every numeric column of
    epochs.parquet, epoch by epoch): the program does not use the seed it is given."""
    ok = _ok(trials)
    metrics = _numeric_metrics(ok)
    arms = [arm for arm, group in ok.groupby("ablation") if group["seed"].nunique() >= 2]
    if not arms or not metrics:
        return False
    for arm in arms:
        group = ok[ok["ablation"] == arm]
        if any(group[m].nunique(dropna=False) > 1 for m in metrics):
            return False
    if epochs is not None and len(epochs) and {"ablation", "epoch", "seed"} <= set(epochs):
        curves = [c for c in epochs.columns if c not in ("epoch", "seed", "round")
                  and pd.api.types.is_numeric_dtype(epochs[c])
                  and not c.endswith("_s") and "time" not in c and "mem" not in c]
        runs = epochs[epochs["ablation"].isin(arms)]
        if curves and (runs.groupby(["ablation", "epoch"])[curves].nunique(dropna=False)
                       > 1).any().any():
            return False
    return True


def seed_tie_lines(trials: pd.DataFrame, *, metric: str, reference: str,
                   epochs: Optional[pd.DataFrame] = None) -> list[str]:
    """The lines under a verdict table that say which arms measured no seed variance, and
    why (see the module's docstring); empty when every arm did."""
    tied = tied_arms(trials, metric)
    lines = []
    if tied and ignores_seed(trials, epochs):
        fix = ("Its command line passes the seed ({seed}) and the program does not use it: "
               "it seeds a constant of its own (e.g. a fixed set_seed(42)); make it seed from "
               "the value it is given and run again." if passes_seed(trials) else
               "Pass the seed to it ({seed} in the command, e.g. --seed {seed}, or read the "
               "config's seed) and run again.")
        lines.append(
            "Every seed of every variant gave the same metrics and curves: the program ignores "
            f"the seed it is given, so no seed variance was measured and no verdict is given. "
            f"{fix}")
    elif tied:
        lines.append(f"No seed variance was measured for {_names(tied)}: {metric} is the same "
                     "on every seed (a program that sets its own seed, or a coarse metric), so "
                     "their differences are shown without a verdict.")
    same = [arm for arm in same_as_reference(trials, metric, reference)]
    if same and not (tied and ignores_seed(trials, epochs)):
        lines.append(f"{_names(same)} gave exactly {reference}'s {metric} on every seed: the "
                     "change may not have reached the program (check that it reads the flag "
                     "or config key the variant sets).")
    return lines


def passes_seed(trials: pd.DataFrame) -> bool:
    """Whether the trials ran a command line (trials.parquet's ``model``: ``command:`` and the
    space's JSON) that hands the program a seed field."""
    if "model" not in trials:
        return False
    for model in trials["model"].dropna().unique():
        if str(model).startswith("command:"):
            try:
                run = str(json.loads(str(model).removeprefix("command:"))["run"])
            except (ValueError, KeyError, TypeError):
                continue
            if any(field in run for field in SEED_FIELDS):
                return True
    return False


def _names(arms: Sequence[str]) -> str:
    return ", ".join(arms)
