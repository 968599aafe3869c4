"""Analysis of an experiment: pure pandas/numpy/scipy functions, DataFrames in and out, no Ray.

- :func:`load_experiments`: one or several experiment folders -> trials, epochs, predictions.
- :func:`ablation_table`: per ablation, mean and CI of a test metric over seeds, the paired
  difference to the reference (same seed), its t interval, a paired t-test (Welch's test for a
  variant with other seeds), Holm correction across the ablations, and an effect size. Failed
  trials are excluded and counted.
- :func:`verdict_table`: per ablation a verdict against the reference (`worse`/`better`,
  `equivalent` by TOST against a margin, `negligible`, `inconclusive`; Holm over the family)
  and the equivalence bound the data reach; :func:`verdict_note` says what they mean.
- :func:`stratified_errors`: MAE, RMSE and bias per stratum and per ablation, with counts, and
  the difference to the reference per stratum.
- :func:`stratified_effects`: where it hurts: per ablation and stratum level the seed-paired
  difference to the reference with its t interval, and a Holm-corrected test of whether it
  differs from the ablation's overall effect.
- :func:`uncertainty_table`: NLL, CRPS, central-interval coverage, sharpness and spread-skill
  for models with a variance head; :func:`calibration_curve`; :func:`seed_ensemble`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import special, stats

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


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1) along the last
    axis, so a stack of families (one per row) is adjusted at once; NaN stays NaN and is not
    counted in the family."""
    p = np.asarray(p_values, dtype=float)
    missing = np.isnan(p)
    family = (~missing).sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(missing, np.inf, p), axis=-1, kind="stable")  # NaN last
    ranked = np.take_along_axis(p, order, axis=-1)
    factor = family - np.arange(p.shape[-1])  # k, k - 1, ..., 1 (then NaN rows)
    adjusted = np.minimum(1.0, np.fmax.accumulate(factor * ranked, axis=-1))
    adjusted[np.isnan(ranked)] = np.nan
    out = np.empty_like(p)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def t_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided t confidence interval of the mean; NaN with fewer than two values."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return float("nan"), float("nan")
    half = stats.t.ppf(0.5 + confidence / 2, len(values) - 1) * stats.sem(values)
    return float(values.mean() - half), float(values.mean() + half)


def _relative(diff: float, reference: float) -> float:
    """``diff`` as a share of the reference's mean; NaN for a mean of 0 (no warning)."""
    return diff / reference if reference != 0 else float("nan")


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
            "relative_change": _relative(diff.mean(), pair[reference].mean()),
            "se": sd / np.sqrt(len(diff)), "df": float(len(diff) - 1),
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
            "relative_change": _relative(diff, ref_values.mean()),
            "se": np.sqrt(np.var(values, ddof=1) / len(values)
                          + np.var(ref_values, ddof=1) / len(ref_values)),
            "df": float(welch.df),  # Welch-Satterthwaite
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
    variances). The ``test`` column says which; ``se`` and ``df`` are the standard error of
    the difference and the t distribution's degrees of freedom (n - 1 paired,
    Welch-Satterthwaite unpaired), from which :func:`verdict_table` tests equivalence."""
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
                   "effect_size", "relative_change", "se", "df"):
        if column not in table:
            table[column] = np.nan
    table["p_holm"] = holm(table["p_value"].to_numpy(dtype=float))
    return table


# ---------------------------------------------------------------------------------- verdicts

# +1: higher is better, -1: lower is better, keyed by the metric's name without its split
# prefix (test_mae -> mae). A metric not listed (coverage_90: best at its nominal level, neither
# higher nor lower) has no direction: its verdicts say `higher` / `lower` instead.
METRIC_DIRECTION: dict[str, int] = {
    "mae": -1, "rmse": -1, "nll": -1, "crps": -1, "loss": -1,
    "r2": +1,
    "wall_s": -1, "cpu_hours": -1, "gpu_hours": -1, "peak_mem_mb": -1, "mean_epoch_s": -1,
    "samples_per_s": +1,
}
DEFAULT_MARGIN = "5%"
DEFAULT_ALPHA = 0.05
VERDICTS = ("worse", "better", "higher", "lower", "equivalent", "negligible", "inconclusive")


def metric_direction(metric: str) -> int:
    """+1 if higher is better for ``metric``, -1 if lower is, 0 if neither
    (:data:`METRIC_DIRECTION`; ``test_``, ``val_`` and ``train_`` prefixes are ignored)."""
    for prefix in ("test_", "val_", "train_"):
        if metric.startswith(prefix) and metric.removeprefix(prefix) in METRIC_DIRECTION:
            return METRIC_DIRECTION[metric.removeprefix(prefix)]
    return METRIC_DIRECTION.get(metric, 0)


def parse_margin(margin: str | float) -> tuple[float, bool]:
    """``"5%"`` -> (0.05, True): relative to the reference's mean; ``"0.02"`` or 0.02 ->
    (0.02, False): in the metric's units.

    Raises:
        ValueError: not a positive finite number or percentage; the message says the form.
    """
    text = str(margin).strip()
    relative = text.endswith("%")
    try:
        value = float(text.removesuffix("%")) / (100 if relative else 1)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"margin {str(margin)!r}: give a positive number in the metric's units "
                         "(0.02) or a percentage of the reference's mean (5%)")
    return value, relative


def _t_cdf(x: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Student t CDF, elementwise (scipy.special.stdtr: what stats.t.cdf calls, minus its
    per-call overhead, which the bisection below would pay thousands of times)."""
    return special.stdtr(df, x)


def _tost_p(diff: np.ndarray, se: np.ndarray, df: np.ndarray, margin: np.ndarray) -> np.ndarray:
    """TOST p-value: the larger of the one-sided p-values of H0 Δ ≤ −margin and H0 Δ ≥ +margin
    (Schuirmann 1987), each a t test of the difference ``diff`` with standard error ``se``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p_above = _t_cdf(-(diff + margin) / se, df)  # H0: Δ ≤ −margin, H1: Δ > −margin
        p_below = _t_cdf((diff - margin) / se, df)   # H0: Δ ≥ +margin, H1: Δ < +margin
    return np.maximum(p_above, p_below)


def _holm_equivalence_bound(diff: np.ndarray, se: np.ndarray, df: np.ndarray,
                            alpha: float) -> np.ndarray:
    """Per comparison (last axis = the family), the smallest margin, common to the family,
    above which Holm's procedure over the family's TOST p-values declares it equivalent.

    Comparison j's TOST p is below α/c exactly when the margin exceeds
    B[j, c] = |Δ_j| + t(1 − α/c)·se_j; :func:`holm_bound` does the rest.
    """
    valid = ~np.isnan(diff)
    size = diff.shape[-1]
    k = valid.sum(axis=-1, keepdims=True)  # (..., 1)
    step = np.arange(1, size + 1)  # Holm's steps s = 1..K: p below alpha / (k - s + 1)
    level = alpha / np.maximum(k - step + 1, 1)  # (..., K)
    with np.errstate(invalid="ignore"):
        bounds = np.abs(diff)[..., :, None] + special.stdtrit(
            df[..., :, None], 1 - level[..., None, :]) * se[..., :, None]  # (..., K_j, K_s)
    return holm_bound(bounds, valid)


def holm_bound(bounds: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The smallest margin, common to a family (axis -2 of ``bounds``), above which Holm's
    procedure declares each comparison equivalent, given ``bounds[..., j, s]``: the smallest
    margin at which comparison j's own test passes at Holm's step s + 1 (level α/(k − s),
    k = the number of ``valid`` comparisons), so it shrinks as s grows (a looser level needs
    a narrower margin); invalid comparisons get NaN.

    Exact, without evaluating p-values: at a margin m, Holm's step s rejects when at least s
    comparisons have B[·, s] < m; with R steps passed, comparison i is declared when
    B[i, R] < m. Being declared can only start at one of the k² values B, so the bound is
    the smallest B just above which comparison i is declared.
    """
    size = bounds.shape[-1]
    step = np.arange(1, size + 1)
    bounds = np.where(valid[..., :, None], bounds, np.inf)
    candidates = bounds.reshape(*bounds.shape[:-2], size * size)  # (..., M)
    # passed[..., m, s]: just above candidate m, at least s comparisons clear step s's level
    passed = (bounds[..., None, :, :] <= candidates[..., :, None, None]).sum(axis=-2) >= step
    steps = np.cumprod(passed, axis=-1).sum(axis=-1)  # (..., M): Holm's rejections
    level_index = np.broadcast_to(np.maximum(steps - 1, 0)[..., :, None, None],
                                  (*candidates.shape, size, 1))
    at_level = np.take_along_axis(
        np.broadcast_to(bounds[..., None, :, :], (*candidates.shape, size, size)),
        level_index, axis=-1)[..., 0]  # (..., M, K_i): B[i, step R]
    declared = (steps[..., None] >= 1) & (at_level <= candidates[..., None])
    bound = np.where(declared, candidates[..., None], np.inf).min(axis=-2)
    return np.where(valid & np.isfinite(bound), bound, np.nan)


def equivalence_tests(diff: np.ndarray, se: np.ndarray, df: np.ndarray, *, margin: float,
                      alpha: float = DEFAULT_ALPHA, direction: int = -1
                      ) -> dict[str, np.ndarray]:
    """Verdicts from the differences' t statistics, a family of comparisons along the last
    axis (leading axes: independent families, e.g. simulated experiments). NaN ``diff``: no
    test (counted in no family).

    Args:
        diff: mean difference to the reference per comparison (variant − reference).
        se: its standard error.
        df: degrees of freedom of its t distribution.
        margin: the equivalence margin, in the metric's units, > 0.
        alpha: the family-wise error rate of each kind of verdict.
        direction: +1 if higher is better, -1 if lower is, 0 if neither.

    Returns:
        Arrays of ``diff``'s shape: ``p_value`` (two-sided t test of Δ = 0), ``p_holm``,
        ``tost_ci_low``/``tost_ci_high`` (the 1 − 2α interval), ``p_tost``, ``p_tost_holm``,
        ``equivalence_bound``, ``equivalence_bound_holm``, ``significant``, ``equivalent`` and
        ``verdict``; see :func:`verdict_table`.
    """
    diff, se, df = (np.asarray(a, dtype=float) for a in (diff, se, df))
    with np.errstate(divide="ignore", invalid="ignore"):
        p_value = 2 * _t_cdf(-np.abs(diff) / se, df)
        half = stats.t.ppf(1 - alpha, df) * se
    p_tost = _tost_p(diff, se, df, margin)
    out = {
        "p_value": p_value, "p_holm": holm(p_value),
        "tost_ci_low": diff - half, "tost_ci_high": diff + half,
        "p_tost": p_tost, "p_tost_holm": holm(p_tost),
        "equivalence_bound": np.abs(diff) + half,
        "equivalence_bound_holm": _holm_equivalence_bound(diff, se, df, alpha),
    }
    significant = out["p_holm"] < alpha
    equivalent = out["p_tost_holm"] < alpha
    worse, better = ("worse", "better") if direction else ("higher", "lower")
    up = diff > 0 if direction <= 0 else diff < 0  # the direction called `worse` (or `higher`)
    verdict = np.where(equivalent, "equivalent", "inconclusive").astype(object)
    verdict[significant] = np.where(up, worse, better)[significant]
    verdict[significant & equivalent] = "negligible"
    return {**out, "significant": significant, "equivalent": equivalent, "verdict": verdict}


def verdict_table(trials: pd.DataFrame, *, reference: str = "baseline",
                  metric: str = "test_mae", margin: str | float = DEFAULT_MARGIN,
                  alpha: float = DEFAULT_ALPHA) -> pd.DataFrame:
    """A verdict for every variant against ``reference`` on ``metric``: the question an
    ablation answers (does this component matter, and if not, how sure are we?). Works on any
    trials table, fixed seeds or not.

    The comparisons are :func:`ablation_table`'s (seed-paired t over the shared ok seeds, Welch
    with fewer than two shared), one family of all variants but the reference:

    - ``worse`` / ``better``: the two-sided test of Δ = 0 rejects after Holm over the family
      (Δ = variant − reference; direction from :func:`metric_direction`; ``higher`` /
      ``lower`` for a metric without one);
    - ``equivalent``: both one-sided tests against the margin reject (TOST: the 1 − 2α interval
      of Δ lies inside ±margin), after Holm over the family;
    - ``negligible``: both of the above: a real difference, smaller than the margin (its sign is
      ``diff_mean``'s);
    - ``inconclusive``: neither, at the seeds spent (or no test: fewer than 2 ok seeds).

    Each kind of verdict has family-wise error at most ``alpha``: calling any variant that
    equals the reference `worse`/`better`, or any variant at least a margin away `equivalent`.

    Args:
        trials: trials.parquet's rows (status, ablation, seed, ``metric``).
        reference: the variant the others are compared with.
        metric: a numeric column of ``trials``.
        margin: the smallest difference that matters: ``"0.02"`` (or 0.02) in the metric's
            units, or ``"5%"`` of the reference's mean.
        alpha: family-wise error rate of each kind of verdict, in (0, 0.5).

    Returns:
        :func:`ablation_table`'s columns (the difference's ``diff_ci_*`` at 1 − α) and:
        ``tost_ci_low``/``tost_ci_high`` (1 − 2α interval of Δ, the one TOST reads),
        ``p_tost`` (the larger one-sided p against ±margin) and ``p_tost_holm``; ``margin``
        (in the metric's units); ``equivalence_bound`` (|Δ| + t(1 − α)·se: the smallest margin
        TOST alone would declare equivalent, the far end of the 1 − 2α interval) and
        ``equivalence_bound_holm`` (the smallest margin at which Holm over the family would:
        `equivalent` exactly when it is below ``margin``); ``significant`` and ``equivalent``
        (the two Holm decisions); ``verdict`` (``reference`` on the reference's row). The
        metric, reference, margin (also as given), α and direction are in ``.attrs``;
        :func:`verdict_note` words them.

    Raises:
        ValueError: a reference that is not a variant or has no ok trial, a bad margin or α.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha {alpha!r}: must lie in (0, 0.5), e.g. 0.05")
    value, relative = parse_margin(margin)
    table = ablation_table(trials, metric=metric, reference=reference, confidence=1 - alpha)
    is_reference = (table["ablation"] == reference).to_numpy()
    reference_mean = float(table.loc[is_reference, f"{metric}_mean"].iloc[0])
    if np.isnan(reference_mean):
        raise ValueError(f"reference {reference!r} has no ok trial: no verdict is possible")
    absolute = value * abs(reference_mean) if relative else value
    if not absolute > 0:
        raise ValueError(f"margin {margin!r} of the reference's mean {reference_mean:g} is 0: "
                         "give the margin in the metric's units (e.g. 0.02)")
    direction = metric_direction(metric)
    compared = table.loc[~is_reference]
    tests = equivalence_tests(compared["diff_mean"].to_numpy(dtype=float),
                              compared["se"].to_numpy(dtype=float),
                              compared["df"].to_numpy(dtype=float),
                              margin=absolute, alpha=alpha, direction=direction)
    columns = [*table.columns, *(c for c in tests if c not in table.columns), "margin"]
    table = table.drop(columns=["p_value", "p_holm"]).join(
        pd.DataFrame(tests, index=compared.index))  # p-values: the same as ablation_table's
    table["verdict"] = table["verdict"].fillna("reference")
    for column in ("significant", "equivalent"):
        table[column] = table[column].astype("boolean")  # <NA> on the reference's row
    table["margin"] = absolute
    table = table[columns]
    table.attrs.update(metric=metric, reference=reference, reference_mean=reference_mean,
                       margin=absolute, margin_given=str(margin), alpha=alpha,
                       direction=direction, comparisons=int(compared["diff_mean"].notna().sum()))
    return table


def verdict_note(table: pd.DataFrame) -> str:
    """Two lines saying what :func:`verdict_table`'s verdicts mean, with its margin and α."""
    a = table.attrs
    given = a["margin_given"].strip()
    of = f" over {a['margin_of']} seeds" if a.get("margin_of") else ""
    margin = f"±{a['margin']:.3g}" + (f" ({given} of {a['reference']}'s mean "
                                      f"{a['reference_mean']:.3g}{of})" if given.endswith("%")
                                      else "")
    better = {-1: "lower is better", 1: "higher is better", 0: "no better direction"}
    return (f"Verdicts on {a['metric']} ({better[a['direction']]}) against {a['reference']}, "
            f"margin {margin}, alpha {a['alpha']:g}, Holm over {a['comparisons']} comparisons: "
            "worse/better = differs (two-sided t test);\nequivalent = TOST, the "
            f"{1 - 2 * a['alpha']:.0%} interval of the difference inside the margin; negligible "
            "= both; inconclusive = neither. equivalence_bound_holm: the smallest margin the "
            "data support.")


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


def _interval_order(level: str) -> tuple[float, str]:
    """Sort key: a quantile bin such as ``(0.5, 1.2]`` by its left edge, other levels after,
    by name."""
    if level.startswith("(") and "," in level:
        try:
            return float(level[1:level.index(",")]), level
        except ValueError:
            pass
    return float("inf"), level


def _cell_tests(cell_diff: np.ndarray, overall_diff: np.ndarray, alpha: float
                ) -> dict[str, np.ndarray]:
    """Seed-paired statistics of cells, vectorised over any leading axes.

    Args:
        cell_diff: (..., cells, seeds) ablation − reference error in each cell per seed; NaN
            where a seed has no sample in the cell.
        overall_diff: (..., seeds) the same difference over all samples per seed.
        alpha: the interval is (1 − alpha); Holm runs over the ``cells`` axis.

    Returns: arrays of shape (..., cells): n_seeds, diff_mean, ci_low, ci_high, interaction_p
    (one-sample t-test of cell − overall difference per seed against 0, as
    ``scipy.stats.ttest_1samp``; NaN with fewer than two seeds or no spread), interaction_p_holm.
    """
    present = ~np.isnan(cell_diff)
    n = present.sum(axis=-1)
    df = np.where(n >= 2, n - 1, np.nan)

    def mean_sd(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = np.where(present, values, 0.0)
        mean = values.sum(axis=-1) / np.where(n > 0, n, np.nan)
        squares = np.where(present, (values - mean[..., None]) ** 2, 0.0).sum(axis=-1)
        return mean, np.sqrt(squares / df)

    diff_mean, diff_sd = mean_sd(cell_diff)
    half = stats.t.ppf(1 - alpha / 2, df) * diff_sd / np.sqrt(n)
    excess_mean, excess_sd = mean_sd(cell_diff - overall_diff[..., None, :])
    with np.errstate(divide="ignore", invalid="ignore"):
        t = excess_mean / (excess_sd / np.sqrt(n))
    t = np.where(excess_sd > 0, t, np.nan)  # no spread: no test (scipy gives NaN or ±inf)
    p = 2 * stats.t.sf(np.abs(t), df)
    return {"n_seeds": n, "diff_mean": diff_mean, "ci_low": diff_mean - half,
            "ci_high": diff_mean + half, "interaction_p": p, "interaction_p_holm": holm(p)}


def stratified_effects(predictions: pd.DataFrame, *, reference: str = "baseline",
                       metric: str = "abs_error", bins: int = 4,
                       alpha: float = DEFAULT_ALPHA) -> pd.DataFrame:
    """Where an ablation hurts: its seed-paired effect per stratum level, and the levels where
    that effect differs from its overall effect.

    Every sample's error (``metric``: ``abs_error`` = |pred_mean − target|, ``squared_error``,
    or a numeric column of ``predictions``) is averaged per ablation, seed and cell (a level of
    a stratum column; numeric strata and the target cut into ``bins`` quantile bins by
    :func:`with_stratum_bins`, edges shared by all ablations), and over all samples per seed.
    Over the seeds an ablation shares with ``reference``: ``diff_mean`` is the mean of the
    per-seed differences ablation − reference in the cell, with its (1 − alpha) t interval
    (``ci_low``, ``ci_high``); ``overall_diff`` is the mean difference over all samples. The
    interaction test is a one-sample t-test over seeds of (cell difference − overall
    difference), so seed-to-seed noise shared by the whole test set cancels;
    ``interaction_p_holm`` is Holm-adjusted over the family of every cell tested for that
    ablation (all levels of all strata, the target bins included), and ``differs`` is
    ``interaction_p_holm < alpha``. Cells with fewer than two shared seeds, or no spread (a
    stratum with one level), get NaN and are not counted in the family.

    Returns: one row per ablation (the reference excluded) x stratum x level, numeric bins in
    order: ablation, stratum, level, n_seeds, diff_mean, ci_low, ci_high, overall_diff,
    interaction_p, interaction_p_holm, differs.

    Raises:
        ValueError: a ``reference`` with no predictions, an unknown ``metric``, an ``alpha``
            outside (0, 1).
    """
    columns = ["ablation", "stratum", "level", "n_seeds", "diff_mean", "ci_low", "ci_high",
               "overall_diff", "interaction_p", "interaction_p_holm", "differs"]
    if not 0 < alpha < 1:
        raise ValueError(f"alpha {alpha!r} must lie in (0, 1)")
    ablations = list(dict.fromkeys(predictions["ablation"].astype(str)))
    if reference not in ablations:
        raise ValueError(f"reference {reference!r} has no predictions "
                         f"(ablations: {', '.join(ablations) or 'none'})")
    binned = with_stratum_bins(predictions, bins=bins)
    residual = binned["pred_mean"] - binned["target"]
    if metric == "abs_error":
        binned[metric] = residual.abs()
    elif metric == "squared_error":
        binned[metric] = residual**2
    elif metric not in binned or not pd.api.types.is_numeric_dtype(binned[metric]):
        raise ValueError(f"metric {metric!r}: use abs_error, squared_error or a numeric "
                         "column of the predictions")
    binned["ablation"] = binned["ablation"].astype(str)
    overall = binned.pivot_table(index="seed", columns="ablation", values=metric,
                                 aggfunc="mean")
    cells = []
    for column in stratum_columns(binned):
        cell = binned.groupby(["ablation", "seed", column], observed=True)[metric].mean()
        cell = cell.reset_index().rename(columns={column: "level"})
        cell["level"] = cell["level"].astype(str)
        cell["stratum"] = column.removeprefix(STRATUM_PREFIX)
        cells.append(cell)
    long = pd.concat(cells, ignore_index=True)
    matrix = long.pivot_table(index=["stratum", "level"], columns=["ablation", "seed"],
                              values=metric, aggfunc="mean")
    order = sorted(matrix.index, key=lambda key: (
        list(dict.fromkeys(long["stratum"])).index(key[0]), _interval_order(key[1])))
    matrix = matrix.loc[order]
    ref_seeds = overall[reference].dropna().index
    frames = []
    for ablation in ablations:
        if ablation == reference:
            continue
        seeds = overall[ablation].dropna().index.intersection(ref_seeds)
        cell_diff = (matrix[ablation].reindex(columns=seeds)
                     - matrix[reference].reindex(columns=seeds)).to_numpy(dtype=float)
        overall_diff = (overall.loc[seeds, ablation] - overall.loc[seeds, reference]
                        ).to_numpy(dtype=float)
        tests = _cell_tests(cell_diff.reshape(len(matrix), len(seeds)), overall_diff, alpha)
        frame = pd.DataFrame({"ablation": ablation,
                              "stratum": matrix.index.get_level_values("stratum"),
                              "level": matrix.index.get_level_values("level"), **tests})
        frame["overall_diff"] = overall_diff.mean() if len(seeds) else np.nan
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=columns)
    table = pd.concat(frames, ignore_index=True)
    table["n_seeds"] = table["n_seeds"].astype("int64")
    table["differs"] = (table["interaction_p_holm"] < alpha).to_numpy(dtype=bool)
    return table[columns]


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
