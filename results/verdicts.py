"""Verdicts of an ablation against the reference: `worse`/`better` (a two-sided t test),
`equivalent` (TOST against a margin), `negligible` (both), `inconclusive` (neither), Holm over
the family of variants, and the equivalence bound the data reach.

- :func:`verdict_table`: per ablation a verdict against the reference and the equivalence
  bound; :func:`verdict_note` says what they mean.
- :func:`equivalence_tests`: the verdicts from the differences' t statistics (also used by
  :mod:`results.sequential`); :func:`holm_bound`, :func:`parse_margin`,
  :func:`metric_direction`.

Re-exported by :mod:`results.analysis`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import special, stats

from results.comparisons import ablation_table, holm
from results.directions import METRIC_DIRECTION, metric_direction  # noqa: F401 (re-exported)

DEFAULT_MARGIN = "5%"
DEFAULT_ALPHA = 0.05
VERDICTS = ("worse", "better", "higher", "lower", "equivalent", "negligible", "inconclusive")


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
    dropped = table.attrs["dropped_nan"]  # the join below does not carry .attrs
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
                       direction=direction, comparisons=int(compared["diff_mean"].notna().sum()),
                       dropped_nan=dropped)
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
