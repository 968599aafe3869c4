"""Comparisons of ablations over seeds: Holm's correction, t intervals and the ablation table
(the seed-paired, or Welch, difference of every ablation to the reference).

- :func:`ablation_table`: per ablation, mean and CI of a test metric over seeds, the paired
  difference to the reference (same seed), its t interval, a paired t-test (Welch's test for a
  variant with other seeds), Holm correction across the ablations, and an effect size. Failed
  trials are excluded and counted.
- :func:`usable_trials`: the rows every comparison uses (ok, the metric finite) and the names
  of the ok trials left out; :func:`dropped_note` names them in a line.
- :func:`holm`: Holm-Bonferroni adjusted p-values; :func:`t_interval`: a t confidence interval.
- :func:`ties_allowed`: scipy's t-tests on seeds that tied, without scipy's warning;
  :func:`paired_p`: the paired t test, p 1 where every seed ties (``contrasts.tied`` for Welch's).

Re-exported by :mod:`ablations.results.stats.analysis`.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator, Sequence

import numpy as np
import pandas as pd
from scipy import special, stats

from ablations.config.comparison import DEFAULT_METRIC, DEFAULT_REFERENCE
from ablations.config.statuses import TrialStatus
from ablations.results.stats.contrasts import tied
from ablations.results.stats.phases import evaluation_rows
from ablations.results.stats.seed_tables import seed_table


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


@contextlib.contextmanager
def ties_allowed() -> Iterator[None]:
    """Inside, scipy's t-tests take values that are (nearly) all equal, as the seeds of a
    deterministic program or a coarse metric give, without the warning scipy prints then
    ("Precision loss occurred in moment calculation"): the result stands as scipy computes it
    (p 0 for an exact constant difference; NaN for none, which :func:`paired_p` and the
    Welch test here read as p 1), and a console or report is no place for the warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Precision loss occurred in moment",
                                category=RuntimeWarning)
        yield


def paired_p(variant: np.ndarray | pd.Series, reference: np.ndarray | pd.Series) -> float:
    """Two-sided p-value of the paired t test of Δ = 0; 1 where every pair ties (no difference
    on any seed: scipy's 0/0 is NaN), as :meth:`Contrasts.p_value` has it, so that the
    comparison stays in Holm's family."""
    diff = np.asarray(variant, float) - np.asarray(reference, float)
    if not diff.any():
        return 1.0
    with ties_allowed():
        return float(stats.ttest_rel(variant, reference).pvalue)


def t_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided t confidence interval of the mean; NaN with fewer than two values."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    if n < 2:
        return float("nan"), float("nan")
    # stats.t.ppf(q, n - 1) * stats.sem(values) by the functions they call (scipy 1.17's sem
    # divides by n**0.5; older ones by np.sqrt(n), one ulp apart for some n above 2920): a
    # twentieth of their time (argument checks), which the simulations pay per arm and look
    q = 0.5 + float(confidence) / 2  # float64 whatever type the level came in
    half = special.stdtrit(n - 1, q) * (np.std(values, ddof=1) / n**0.5)
    return float(values.mean() - half), float(values.mean() + half)


def relative_share(diff: float, reference: float) -> float:
    """``diff`` as a share of the reference's mean; NaN for a mean of 0 (no warning)."""
    return diff / reference if reference != 0 else float("nan")


def compare_arms(values: np.ndarray, ref_values: np.ndarray, seeds: np.ndarray,
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
        p_value = paired_p(pair[ablation], pair[reference])
        return {
            "test": "paired t", "n_pairs": len(diff), "diff_mean": diff.mean(),
            "diff_ci_low": d_low, "diff_ci_high": d_high, "p_value": p_value,
            "effect_size": diff.mean() / sd if sd > 0 else np.nan,
            "relative_change": relative_share(diff.mean(), pair[reference].mean()),
            "se": sd / np.sqrt(len(diff)), "df": float(len(diff) - 1),
        }
    if len(values) >= 2 and len(ref_values) >= 2:
        with ties_allowed():
            welch = stats.ttest_ind(values, ref_values, equal_var=False)
            interval = welch.confidence_interval(confidence)
        # one value in both arms: no difference (means of unequal counts round apart)
        tie = tied(values, ref_values)
        diff = 0.0 if tie else values.mean() - ref_values.mean()
        pooled = np.sqrt((np.var(values, ddof=1) + np.var(ref_values, ddof=1)) / 2)
        return {
            "test": "Welch t", "n_pairs": 0, "diff_mean": diff,
            "diff_ci_low": 0.0 if tie else interval.low,
            "diff_ci_high": 0.0 if tie else interval.high,
            "p_value": 1.0 if tie else welch.pvalue,
            "effect_size": diff / pooled if pooled > 0 else np.nan,
            "relative_change": relative_share(diff, ref_values.mean()),
            "se": np.sqrt(np.var(values, ddof=1) / len(values)
                          + np.var(ref_values, ddof=1) / len(ref_values)),
            "df": float(welch.df),  # Welch-Satterthwaite
        }
    return {"test": "none (fewer than 2 seeds)"}


def usable_trials(trials: pd.DataFrame, metric: str) -> tuple[pd.DataFrame, list[str]]:
    """The rows every comparison of ``metric`` uses: trials with status ``ok`` whose
    ``metric`` is finite; and the names of the ok trials left out because it is NaN or ±inf
    (``trial_name``, or ``<ablation>-seed<seed>`` for a table without one).

    One rule for :func:`ablation_table` (so the verdicts), :mod:`ablations.results.stats.compare`
    and the sequential looks: a single NaN kept in an arm would make its mean, interval and test NaN
    (`inconclusive` whatever the other seeds say), and a silent drop would change the seeds
    compared without saying so, so the dropped trials are named (``.attrs["dropped_nan"]``,
    :func:`dropped_note`).
    """
    ok = trials[trials["status"] == TrialStatus.OK]
    finite = np.isfinite(ok[metric].to_numpy(dtype=float))
    dropped = ok[~finite]
    if "trial_name" in dropped:
        names = dropped["trial_name"].astype(str).tolist()
    else:
        names = [f"{a}-seed{s}" for a, s in zip(dropped["ablation"], dropped["seed"])]
    return ok[finite], names


def dropped_note(names: Sequence[str], metric: str, where: str = "") -> str:
    """The line that names the ok trials :func:`usable_trials` left out (``where``: of which
    experiment, e.g. " in A"); "" when none."""
    if not names:
        return ""
    return (f"Left out of the {metric} comparisons{where} (status ok, {metric} NaN or "
            f"infinite): {', '.join(names)}.")


def ablation_table(trials: pd.DataFrame, *, metric: str = DEFAULT_METRIC,
                   reference: str = DEFAULT_REFERENCE, confidence: float = 0.95) -> pd.DataFrame:
    """One row per ablation: mean and CI of ``metric`` over its ok seeds; the difference to
    ``reference`` (mean, CI, p-value, Holm-adjusted p across the ablations, effect size,
    relative change); and the counts of ok and excluded (failed, diverged, stopped, skipped,
    interrupted, not_started, and ok with a NaN or infinite ``metric``) trials. The ok trials
    left out for their ``metric`` are named in ``.attrs["dropped_nan"]`` (:func:`usable_trials`).

    The comparison is paired by seed (paired t-test; effect size Cohen's d_z = mean / sd of
    the paired differences) over the seeds both have ok. An ablation that shares fewer than two
    ok seeds with the reference, such as a repeat of the reference under other seeds, is
    compared unpaired (Welch's t-test; effect size Cohen's d with the mean of the two
    variances). The ``test`` column says which; ``se`` and ``df`` are the standard error of
    the difference and the t distribution's degrees of freedom (n - 1 paired,
    Welch-Satterthwaite unpaired), from which :func:`verdict_table` tests equivalence.

    Raises:
        ValueError: trials of several datasets (their seeds pair within a dataset only).
    """
    from ablations.results.stats.dataset_rows import require_one_dataset

    require_one_dataset(trials, "these trials are of several datasets: analyse each "
                        "(ablations.results.stats.datasets.by_dataset) or read the verdicts "
                        "across them (ablations.results.stats.decisions.across_datasets_of)")
    trials = evaluation_rows(trials)  # a tuned ablation: the evaluation at the given config
    if reference not in set(trials["ablation"]):
        raise ValueError(f"reference {reference!r} is not among the ablations")
    ok, dropped = usable_trials(trials, metric)
    by_seed = seed_table(ok, metric)
    ref_ok = ok[ok["ablation"] == reference]
    ref_values = ref_ok[metric].to_numpy(dtype=float)
    rows = []
    for ablation, group in trials.groupby("ablation", sort=False):
        mine = ok[ok["ablation"] == ablation]
        values = mine[metric].to_numpy(dtype=float)
        low, high = t_interval(values, confidence)
        row = {
            "ablation": ablation, "n_ok": len(values),
            "n_excluded": len(group) - len(values),
            f"{metric}_mean": values.mean() if len(values) else np.nan,
            f"{metric}_ci_low": low, f"{metric}_ci_high": high,
        }
        if ablation != reference:
            row.update(compare_arms(values, ref_values, mine["seed"].to_numpy(),
                                ref_ok["seed"].to_numpy(), by_seed, ablation, reference,
                                confidence))
        rows.append(row)
    table = pd.DataFrame(rows)
    for column in ("test", "n_pairs", "diff_mean", "diff_ci_low", "diff_ci_high", "p_value",
                   "effect_size", "relative_change", "se", "df"):
        if column not in table:
            table[column] = np.nan
    table["p_holm"] = holm(table["p_value"].to_numpy(dtype=float))
    table.attrs["dropped_nan"] = dropped
    return table
