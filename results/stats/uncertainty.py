"""Uncertainty of models with a variance head: NLL, CRPS, central-interval coverage,
sharpness and spread-skill (:func:`uncertainty_table`), :func:`calibration_curve`, and the
seeds as an ensemble (:func:`seed_ensemble`).

Re-exported by :mod:`ablations.results.stats.analysis`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from ablations.results.stats.strata import stratum_columns

COVERAGE_LEVELS = (0.5, 0.8, 0.9, 0.95)


def gaussian_crps(mean: np.ndarray, std: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Closed-form CRPS of N(mean, std²) at ``target`` (Gneiting & Raftery 2007):
    σ [z (2Φ(z) − 1) + 2φ(z) − 1/√π], z = (y − μ)/σ."""
    z = (np.asarray(target) - np.asarray(mean)) / np.asarray(std)
    return np.asarray(std) * (z * (2 * stats.norm.cdf(z) - 1) + 2 * stats.norm.pdf(z)
                              - 1 / np.sqrt(np.pi))


def coverage(mean: np.ndarray, std: np.ndarray, target: np.ndarray, level: float) -> float:
    """Share of targets inside the central ``level`` interval of N(mean, std²)."""
    half = stats.norm.ppf(0.5 + level / 2) * np.asarray(std)
    return float((np.abs(np.asarray(target) - np.asarray(mean)) <= half).mean())


def uncertainty_metrics(frame: pd.DataFrame, levels: Sequence[float] = COVERAGE_LEVELS
                        ) -> dict[str, float]:
    """NLL, CRPS, coverage at ``levels``, sharpness (mean predicted std) and spread-skill
    (Spearman correlation of predicted std with |error|) of rows with a predicted std."""
    mean, std, target = (frame[c].to_numpy(dtype=float) for c in ("pred_mean", "pred_std",
                                                                  "target"))
    out = {
        "n": len(frame),
        "nll": float(-stats.norm.logpdf(target, mean, std).mean()),
        "crps": float(gaussian_crps(mean, std, target).mean()),
        "sharpness": float(std.mean()),
        # undefined when the predicted spread (or the error) does not vary
        "spread_skill": float(stats.spearmanr(std, np.abs(target - mean)).statistic)
        if len(frame) > 2 and np.ptp(std) > 0 and np.ptp(np.abs(target - mean)) > 0
        else float("nan"),
    }
    for level in levels:
        out[f"coverage_{round(level * 100)}"] = coverage(mean, std, target, level)
    return out


def uncertainty_table(predictions: pd.DataFrame, *, by: Sequence[str] = ("ablation",),
                      levels: Sequence[float] = COVERAGE_LEVELS) -> pd.DataFrame:
    """:func:`uncertainty_metrics` per group (default: per ablation, all seeds pooled).
    Ablations without a variance head (``pred_std`` all null) have no row: no made-up
    uncertainty."""
    with_std = predictions[predictions["pred_std"].notna()]
    rows = []
    for key, group in with_std.groupby(list(by), observed=True, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key)), **uncertainty_metrics(group, levels)})
    return pd.DataFrame(rows)


def calibration_curve(predictions: pd.DataFrame,
                      levels: Sequence[float] = tuple(np.round(np.arange(0.05, 1.0, 0.05), 2))
                      ) -> pd.DataFrame:
    """Nominal vs observed coverage of central intervals, per ablation with a variance head."""
    rows = []
    for ablation, group in predictions[predictions["pred_std"].notna()].groupby(
            "ablation", sort=False):
        mean, std, target = (group[c].to_numpy(dtype=float) for c in ("pred_mean", "pred_std",
                                                                      "target"))
        for level in levels:
            rows.append({"ablation": ablation, "nominal": float(level),
                         "observed": coverage(mean, std, target, level)})
    return pd.DataFrame(rows)


def one_draw(predictions: pd.DataFrame, trials: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The predictions of the ablations whose seeds all saw the same data draw (one
    ``data_seed`` in ``trials``), and the names of the others. A seed ensemble pools each test
    sample's predictions by ``sample_index``, which names the same sample only within one draw;
    with ``seed_sources`` varying the data, every seed drew its own samples (docs/seed-sources.md).
    """
    if predictions.empty:
        return predictions, []
    draws = trials.drop_duplicates(["ablation", "seed"]).groupby("ablation")["data_seed"].nunique()
    mixed = sorted(str(a) for a in draws[draws > 1].index)
    return predictions[~predictions["ablation"].astype(str).isin(mixed)], mixed


def seed_ensemble(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per ablation and test sample, the ensemble of its seeds: mean of the means, and the
    mixture variance mean(σ² + μ²) − (mean μ)² (with a variance head), or the spread of the
    means (without one). Columns as in predictions.parquet, seed = -1."""
    frame = predictions.copy()
    has_std = frame["pred_std"].notna()
    frame["second_moment"] = (np.where(has_std, frame["pred_std"] ** 2, 0.0)
                              + frame["pred_mean"] ** 2)
    strata = stratum_columns(frame)
    grouped = frame.groupby(["ablation", "sample_index"], sort=False)
    out = grouped.agg(target=("target", "first"), pred_mean=("pred_mean", "mean"),
                      second_moment=("second_moment", "mean"), members=("seed", "nunique"),
                      **{c: (c, "first") for c in strata}).reset_index()
    variance = (out["second_moment"] - out["pred_mean"] ** 2).clip(lower=0)
    out["pred_std"] = np.sqrt(variance)
    with_head = frame.groupby("ablation")["pred_std"].apply(lambda s: s.notna().any())
    no_uncertainty = ~out["ablation"].map(with_head).astype(bool) & (out["members"] < 2)
    out.loc[no_uncertainty, "pred_std"] = np.nan  # one point-head model: no spread to report
    out["seed"] = -1
    return out.drop(columns="second_moment")
