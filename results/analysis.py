"""Analysis of an experiment: pure pandas/numpy/scipy functions, DataFrames in and out, no Ray.

- :func:`load_experiments`: one or several experiment folders -> trials, epochs, predictions.
- :func:`ablation_table`: per ablation, mean and CI of a test metric over seeds, the paired
  difference to the reference (same seed), its t interval, a paired t-test (Welch's test for a
  variant with other seeds), Holm correction across the ablations, and an effect size. Failed
  trials are excluded and counted.
- :func:`stratified_errors`: MAE, RMSE and bias per stratum and per ablation, with counts, and
  the difference to the reference per stratum.
- :func:`uncertainty_table`: NLL, CRPS, central-interval coverage, sharpness and spread-skill
  for models with a variance head; :func:`calibration_curve`; :func:`seed_ensemble`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from results.io import read_experiment

COVERAGE_LEVELS = (0.5, 0.8, 0.9, 0.95)
STRATUM_PREFIX = "stratum_"


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
        "predictions": ["experiment", "trial_name", "ablation", "seed", "sample_index", "target",
                        "pred_mean", "pred_std"],
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


# ------------------------------------------------------------------------------- statistics


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1); NaN stays NaN."""
    p = np.asarray(p_values, dtype=float)
    out = np.full_like(p, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    order = valid[np.argsort(p[valid], kind="stable")]
    m, running = len(order), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[index]))
        out[index] = running
    return out


def t_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided t confidence interval of the mean; NaN with fewer than two values."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return float("nan"), float("nan")
    half = stats.t.ppf(0.5 + confidence / 2, len(values) - 1) * stats.sem(values)
    return float(values.mean() - half), float(values.mean() + half)


def _compare(values: np.ndarray, ref_values: np.ndarray, seeds: np.ndarray,
             ref_seeds: np.ndarray, by_seed: pd.DataFrame, ablation: str, reference: str,
             confidence: float) -> dict:
    """Difference of ``ablation`` to ``reference``: paired over common seeds where there are
    two or more, else Welch's unpaired test over the two sets of seeds."""
    common = np.intersect1d(seeds, ref_seeds)
    if len(common) >= 2:
        pair = by_seed.loc[common, [ablation, reference]]
        diff = (pair[ablation] - pair[reference]).to_numpy()
        sd = diff.std(ddof=1)
        d_low, d_high = t_interval(diff, confidence)
        return {
            "test": "paired t", "n_pairs": len(diff), "diff_mean": diff.mean(),
            "diff_ci_low": d_low, "diff_ci_high": d_high,
            "p_value": stats.ttest_rel(pair[ablation], pair[reference]).pvalue,
            "effect_size": diff.mean() / sd if sd > 0 else np.nan,
            "relative_change": diff.mean() / pair[reference].mean(),
        }
    if len(values) >= 2 and len(ref_values) >= 2:
        diff = values.mean() - ref_values.mean()
        pooled = np.sqrt((np.var(values, ddof=1) + np.var(ref_values, ddof=1)) / 2)
        welch = stats.ttest_ind(values, ref_values, equal_var=False)
        interval = welch.confidence_interval(confidence)
        return {
            "test": "Welch t", "n_pairs": 0, "diff_mean": diff,
            "diff_ci_low": interval.low, "diff_ci_high": interval.high,
            "p_value": welch.pvalue,
            "effect_size": diff / pooled if pooled > 0 else np.nan,
            "relative_change": diff / ref_values.mean(),
        }
    return {"test": "none (fewer than 2 seeds)"}


def ablation_table(trials: pd.DataFrame, *, metric: str = "test_mae",
                   reference: str = "baseline", confidence: float = 0.95) -> pd.DataFrame:
    """One row per ablation: mean and CI of ``metric`` over its ok seeds; the difference to
    ``reference`` (mean, CI, p-value, Holm-adjusted p across the ablations, effect size,
    relative change); and the counts of ok and excluded (failed, diverged, stopped, skipped,
    interrupted, not_started) trials.

    The comparison is paired by seed (paired t-test; effect size Cohen's d_z = mean / sd of
    the paired differences) over the seeds both have ok. An ablation that shares fewer than two
    ok seeds with the reference, such as a repeat of the reference under other seeds, is
    compared unpaired (Welch's t-test; effect size Cohen's d with the mean of the two
    variances). The ``test`` column says which."""
    if reference not in set(trials["ablation"]):
        raise ValueError(f"reference {reference!r} is not among the ablations")
    ok = trials[trials["status"] == "ok"]
    by_seed = ok.pivot_table(index="seed", columns="ablation", values=metric, aggfunc="mean")
    ref_ok = ok[ok["ablation"] == reference]
    ref_values = ref_ok[metric].to_numpy(dtype=float)
    rows = []
    for ablation, group in trials.groupby("ablation", sort=False):
        mine = ok[ok["ablation"] == ablation]
        values = mine[metric].to_numpy(dtype=float)
        low, high = t_interval(values, confidence)
        row = {
            "ablation": ablation, "n_ok": len(values),
            "n_excluded": int((group["status"] != "ok").sum()),
            f"{metric}_mean": values.mean() if len(values) else np.nan,
            f"{metric}_ci_low": low, f"{metric}_ci_high": high,
        }
        if ablation != reference:
            row.update(_compare(values, ref_values, mine["seed"].to_numpy(),
                                ref_ok["seed"].to_numpy(), by_seed, ablation, reference,
                                confidence))
        rows.append(row)
    table = pd.DataFrame(rows)
    for column in ("test", "n_pairs", "diff_mean", "diff_ci_low", "diff_ci_high", "p_value",
                   "effect_size", "relative_change"):
        if column not in table:
            table[column] = np.nan
    table["p_holm"] = holm(table["p_value"].to_numpy(dtype=float))
    return table


# ---------------------------------------------------------------------------- stratification


def stratum_columns(predictions: pd.DataFrame) -> list[str]:
    return [c for c in predictions.columns if c.startswith(STRATUM_PREFIX)]


def with_stratum_bins(predictions: pd.DataFrame, *, bins: int = 4) -> pd.DataFrame:
    """Numeric strata (and the target, as ``stratum_target_bin``) cut into quantile bins,
    computed once over all rows so every ablation shares the same edges."""
    out = predictions.copy()
    numeric = [c for c in stratum_columns(out)
               if pd.api.types.is_numeric_dtype(out[c]) and out[c].nunique() > bins]
    for column in numeric:
        out[column] = pd.qcut(out[column], bins, duplicates="drop").astype(str)
    out[f"{STRATUM_PREFIX}target_bin"] = pd.qcut(out["target"], bins,
                                                 duplicates="drop").astype(str)
    return out


def stratified_errors(predictions: pd.DataFrame, *, bins: int = 4,
                      reference: str = "baseline") -> pd.DataFrame:
    """Per ablation x stratum column x stratum value: n, MAE, RMSE, bias (mean of
    prediction - target), over every ok trial's test predictions; and ``mae_diff``, the MAE
    minus the reference's in the same stratum."""
    binned = with_stratum_bins(predictions, bins=bins)
    binned["error"] = binned["pred_mean"] - binned["target"]
    frames = []
    for column in stratum_columns(binned):
        grouped = binned.groupby(["ablation", column], observed=True)["error"]
        frame = grouped.agg(
            n="size",
            mae=lambda e: float(np.abs(e).mean()),
            rmse=lambda e: float(np.sqrt((e**2).mean())),
            bias="mean",
        ).reset_index().rename(columns={column: "stratum_value"})
        frame.insert(1, "stratum", column.removeprefix(STRATUM_PREFIX))
        frame["stratum_value"] = frame["stratum_value"].astype(str)
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    ref = table[table["ablation"] == reference].set_index(["stratum", "stratum_value"])["mae"]
    key = pd.MultiIndex.from_frame(table[["stratum", "stratum_value"]])
    table["mae_diff"] = table["mae"].to_numpy() - ref.reindex(key).to_numpy()
    return table


# ------------------------------------------------------------------------------- uncertainty


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


def seed_ensemble(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per ablation and test sample, the ensemble of its seeds: mean of the means, and the
    mixture variance mean(σ² + μ²) − (mean μ)² (with a variance head), or the spread of the
    means (without one). Columns as in predictions.parquet, seed = -1."""
    frame = predictions.copy()
    has_std = frame["pred_std"].notna()
    frame["second_moment"] = np.where(has_std, frame["pred_std"] ** 2, 0.0) + frame["pred_mean"] ** 2
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
