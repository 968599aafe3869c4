"""What the rounds of ``--seeds auto`` spent against a fixed design of as many seeds for every
variant: per variant (:func:`compute_spent`), and in one line (:func:`compute_note`).

Re-exported by :mod:`ablations.results.stats.sequential_table`.
"""

from __future__ import annotations

from typing import Optional

import pandas as pd

from ablations.config.statuses import TrialStatus


def compute_spent(trials: pd.DataFrame, max_seeds: int) -> pd.DataFrame:
    """Per variant: the trials it ran (skipped cells not counted), the rounds they took, the
    CPU- and GPU-hours they held, and what a fixed design of ``max_seeds`` seeds for every
    variant would have held (the variant's mean per trial times ``max_seeds``: an estimate
    for the seeds it did not run)."""
    rows = []
    for arm, group in trials.groupby("ablation", sort=False):
        ran = group[group["status"] != TrialStatus.SKIPPED]
        n = len(ran)
        mean = ran[["cpu_hours", "gpu_hours"]].mean() if n else pd.Series(
            {"cpu_hours": 0.0, "gpu_hours": 0.0})
        rows.append({
            "ablation": arm, "trials": n,
            "rounds": int(ran["round"].max()) if n and "round" in ran else 0,
            "cpu_hours": float(ran["cpu_hours"].sum()),
            "gpu_hours": float(ran["gpu_hours"].sum()),
            "fixed_trials": max_seeds if n else 0,
            "fixed_cpu_hours": float(mean["cpu_hours"]) * max_seeds if n else 0.0,
            "fixed_gpu_hours": float(mean["gpu_hours"]) * max_seeds if n else 0.0,
        })
    return pd.DataFrame(rows)


def compute_note(spent: pd.DataFrame, trials_table: Optional[pd.DataFrame] = None) -> str:
    """One line: what :func:`compute_spent`'s table adds up to, against the fixed design;
    with ``trials_table``, how many of them this experiment took from others (trial_store.py),
    whose hours were spent there (the console's summary counts the hours trained here)."""
    trials, fixed = int(spent["trials"].sum()), int(spent["fixed_trials"].sum())
    cpu, fixed_cpu = spent["cpu_hours"].sum(), spent["fixed_cpu_hours"].sum()
    gpu, fixed_gpu = spent["gpu_hours"].sum(), spent["fixed_gpu_hours"].sum()
    hours = (f"{gpu:.3g} GPU-hours (fixed: ~{fixed_gpu:.3g})" if fixed_gpu > 0 else
             f"{cpu:.3g} CPU-hours (fixed: ~{fixed_cpu:.3g})")
    share = f"{trials / fixed:.0%} of the trials" if fixed else "no trials"
    note = (f"Compute spent: {trials} trials, {hours}; a fixed design at "
            f"{int(spent['fixed_trials'].max())} seeds for every variant: {fixed} trials "
            f"({share}).")
    if trials_table is not None and "reused_from" in trials_table:
        ran = trials_table[trials_table["status"] != TrialStatus.SKIPPED]
        reused = ran[ran["reused_from"].fillna("") != ""]
        if len(reused):
            gpu_used = fixed_gpu > 0
            spent_there = reused["gpu_hours" if gpu_used else "cpu_hours"].sum()
            note += (f" {len(reused)} of these trials were reused from other experiments; "
                     f"their {spent_there:.3g} {'GPU' if gpu_used else 'CPU'}-hours were spent "
                     "there, not here.")
    return note

