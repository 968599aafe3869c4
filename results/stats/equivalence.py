"""Verdicts from the comparisons' contrasts: the two-sided test of Δ = 0 and TOST against the
margin, each with Holm over the family, and the verdict the two give (:func:`equivalence_tests`,
on arrays with any leading axes: one table's family, or many simulated experiments); one
comparison's numbers before any correction (:func:`comparison_columns`), the verdicts' words
(:func:`verdict_labels`) and the smallest margin at which Holm declares a comparison equivalent
(:func:`holm_bound`).

Re-exported by :mod:`ablations.results.stats.verdicts`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ablations.config.comparison import DEFAULT_ALPHA
from ablations.results.stats.comparisons import holm
from ablations.results.stats.contrasts import Contrasts
from ablations.results.stats.failures import FailureTests


def verdict_labels(significant: np.ndarray, equivalent: np.ndarray, diff: np.ndarray,
                   direction: int) -> np.ndarray:
    """worse/better (higher/lower without a direction), equivalent, negligible or
    inconclusive, from the two decisions and the sign of the difference they were made on."""
    worse, better = ("worse", "better") if direction else ("higher", "lower")
    up = diff > 0 if direction <= 0 else diff < 0  # the direction called `worse` (or `higher`)
    verdict = np.where(equivalent, "equivalent", "inconclusive").astype(object)
    verdict[significant] = np.where(up, worse, better)[significant]
    verdict[significant & equivalent] = "negligible"
    return verdict


def comparison_columns(contrasts: Contrasts, *, margin: float, relative: bool,
                       alpha: float) -> dict[str, np.ndarray]:
    """A comparison's own numbers, before any correction over the family: ``p_value``,
    ``tost_ci_low``/``tost_ci_high`` (the 1 − 2α interval of Δ), ``ratio`` and
    ``ratio_ci_low``/``ratio_ci_high`` (Fieller's, of the ratio minus 1), ``p_tost`` and
    ``equivalence_bound`` (at α). The fixed design's and each look's rows share them."""
    tost_low, tost_high = contrasts.interval(alpha, False)
    ratio_low, ratio_high = contrasts.interval(alpha, True)
    return {"p_value": contrasts.p_value(), "tost_ci_low": tost_low, "tost_ci_high": tost_high,
            "ratio": contrasts.ratio(), "ratio_ci_low": ratio_low, "ratio_ci_high": ratio_high,
            "p_tost": contrasts.p_tost(margin, relative),
            "equivalence_bound": contrasts.bound(alpha, relative)}


def equivalence_tests(contrasts: Contrasts, *, margin: float, relative: bool = False,
                      alpha: float = DEFAULT_ALPHA, direction: int = -1,
                      outlier: np.ndarray | None = None,
                      failures: FailureTests | None = None,
                      over_tolerance: np.ndarray | None = None,
                      untested: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Verdicts from the comparisons' contrasts, a family of comparisons along the last axis
    (leading axes: independent families, e.g. simulated experiments). NaN ``diff``: no test
    (counted in no family).

    Args:
        contrasts: each comparison's moments (:class:`ablations.results.stats.contrasts.Contrasts`).
        margin: the equivalence margin, > 0: in the metric's units, or a share of the
            reference's mean when ``relative`` (tested as a ratio).
        alpha: the family-wise error rate of each kind of verdict.
        direction: +1 if higher is better, -1 if lower is, 0 if neither.
        outlier: comparisons the robustness rule flags: never `equivalent`; a significant
            one whose equivalence test would have passed reads `significant` (a difference,
            no claim about its size) instead of `worse`/`better`.
        failures: the training failures of each comparison
            (:mod:`ablations.results.stats.failures`): where a seed is discordant the test
            of Δ = 0 is the t test of the finished seeds and the worst-rank test at half the
            level each (:meth:`FailureTests.combined_p`; the direction is that of the part
            that decided), and an arm with more failures than its reference is never
            `equivalent`.
        over_tolerance: comparisons whose failure-rate bound is not below the tolerance
            (``max_failure_rate``): never `equivalent` (a difference may still be shown).
        untested: comparisons with no seed variance (:mod:`ablations.results.stats.seed_ties`):
            in both families at p = 1, never rejected.

    Returns:
        Arrays of the comparisons' shape: ``p_value`` (two-sided t test of Δ = 0), ``p_holm``,
        ``tost_ci_low``/``tost_ci_high`` (the 1 − 2α interval of Δ), ``ratio_ci_low``/
        ``ratio_ci_high`` (Fieller's 1 − 2α interval of μ_v/μ_r − 1), ``p_tost``,
        ``p_tost_holm``, ``equivalence_bound``, ``equivalence_bound_holm`` (as a share for a
        relative margin), ``outlier``, ``unstable`` (more training failures than the
        reference), ``significant``, ``equivalent`` and ``verdict``; see
        :func:`verdict_table`.
    """
    out = comparison_columns(contrasts, margin=margin, relative=relative, alpha=alpha)
    shape = out["p_value"].shape
    diff = np.asarray(contrasts.diff, float)
    outlier = np.zeros(shape, bool) if outlier is None else np.asarray(outlier, bool)
    unstable = np.zeros(shape, bool)
    p_tost = out["p_tost"]
    if failures is not None:
        diff = _count_failures(out, failures, diff, direction=direction, alpha=alpha)
        unstable = np.asarray(failures.no_equivalence, bool)
        # an arm that diverged where the reference did not counts in the TOST family, never
        # rejected, even with no finished seed left to compute its p from
        p_tost = np.where(unstable, 1.0, p_tost)
    over = np.zeros(shape, bool) if over_tolerance is None else np.asarray(over_tolerance, bool)
    if untested is not None:
        untested = np.asarray(untested, bool)
        out["p_value"] = _never_rejected(out["p_value"], untested)
        over = over | untested
    return _holm_verdicts(out, contrasts, p_tost=p_tost, diff=diff, outlier=outlier,
                          unstable=unstable, over=over, alpha=alpha, relative=relative,
                          direction=direction)


def _never_rejected(p: np.ndarray, barred: np.ndarray) -> np.ndarray:
    """``p`` at 1 where ``barred`` (and tested): still in Holm's family, never rejected."""
    return np.where(barred & ~np.isnan(p), 1.0, p)


def _count_failures(out: dict[str, np.ndarray], failures: FailureTests, diff: np.ndarray, *,
                    direction: int, alpha: float) -> np.ndarray:
    """``out``'s ``p_value`` made the test of Δ = 0 that counts the training failures (the t
    test and the worst-rank test, each where it may decide), and its ``p_worst_rank`` added;
    returns the difference each verdict's direction is read from."""
    p_value = out["p_value"]
    # an arm that failed more often than the reference is never shown better (its failed
    # seeds are its worst outcomes): each half of its test counts only where it points
    # worse, and stays in the family at p = 1 where it points better
    no_equivalence = np.asarray(failures.no_equivalence, bool)
    favourable = no_equivalence & (diff * direction > 0)
    with np.errstate(invalid="ignore"):
        rank_better = no_equivalence & (failures.worse_sign < 0) & (direction != 0)
    tested = failures if not rank_better.any() else replace(
        failures, p_value=np.where(rank_better, 1.0, failures.p_value))
    combined, rank_decides = tested.combined_p(np.where(favourable, np.nan, p_value), alpha)
    out["p_value"] = np.where(favourable & np.isnan(combined) & ~np.isnan(p_value), 1.0,
                              combined)  # a t test dropped for its direction: still in the family
    out["p_worst_rank"] = failures.p_value
    # the verdict's direction where the worst-rank part decided: its statistic's sign
    return np.where(rank_decides, failures.worse_sign * (-direction or 1), diff)


def _holm_verdicts(out: dict[str, np.ndarray], contrasts: Contrasts, *, p_tost: np.ndarray,
                   diff: np.ndarray, outlier: np.ndarray, unstable: np.ndarray,
                   over: np.ndarray, alpha: float, relative: bool, direction: int
                   ) -> dict[str, np.ndarray]:
    """``out`` with Holm over the family of each kind of test, the decisions and the verdicts;
    a comparison ``outlier``, ``unstable`` or ``over`` (the tolerance) is never equivalent."""
    barred = outlier | unstable | over
    # a barred comparison stays in the family (Holm's divisor) at p = 1, never rejected,
    # as --seeds auto has it
    out.update({
        "p_holm": holm(out["p_value"]),
        "p_tost_holm": holm(_never_rejected(p_tost, barred)),
        "equivalence_bound_holm": _holm_equivalence_bound(contrasts, alpha, relative, barred),
        "outlier": outlier,
        "unstable": unstable,
    })
    significant = out["p_holm"] < alpha
    equivalent = out["p_tost_holm"] < alpha
    verdict = verdict_labels(significant, equivalent, diff, direction)
    # the robustness rule bars a claim about the size, not the difference: a significant arm
    # that would be within the margin but for an outlying seed reads `significant`
    unbarred = holm(_never_rejected(p_tost, unstable | over)) < alpha
    verdict[significant & outlier & ~unstable & unbarred] = "significant"
    return {**out, "significant": significant, "equivalent": equivalent, "verdict": verdict}


def _holm_equivalence_bound(contrasts: Contrasts, alpha: float, relative: bool,
                            outlier: np.ndarray) -> np.ndarray:
    """Per comparison (last axis = the family), the smallest margin, common to the family,
    above which Holm's procedure over the family's TOST p-values declares it equivalent.

    Comparison j's TOST p is below α/c exactly when the margin exceeds its bound at one-sided
    level α/c (:meth:`Contrasts.bound`): B[j, c]; :func:`holm_bound` does the rest. An
    ``outlier`` comparison is in the family but never declared.
    """
    valid = ~np.isnan(contrasts.diff)
    size = valid.shape[-1]
    k = valid.sum(axis=-1, keepdims=True)  # (..., 1)
    step = np.arange(1, size + 1)  # Holm's steps s = 1..K: p below alpha / (k - s + 1)
    level = alpha / np.maximum(k - step + 1, 1)  # (..., K)
    wide = contrasts.map(lambda values: values[..., :, None])
    bounds = wide.bound(level[..., None, :], relative)  # (..., K_j, K_s)
    # a flagged comparison counts in the family but never passes: no bound (NaN)
    bounds = np.where(np.asarray(outlier)[..., :, None], np.inf, bounds)
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
    if size == 0:  # a family of no comparison (the reference alone)
        return np.full(valid.shape, np.nan)
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
