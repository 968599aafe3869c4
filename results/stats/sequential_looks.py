"""The steps of the sequential procedure on arrays of contrasts, look by look
(:func:`ablations.results.stats.sequential.sequential_tests` runs them in order): each arm's
tests at each look as the procedure reads them (:func:`look_inputs`), Holm's steps within each
look for each kind of verdict, with the worst-rank test's banked share of the level
(:func:`decide_looks`), and each arm's verdict and the numbers of the look its row reports
(:func:`reported_verdicts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ablations.results.stats.contrasts import Contrasts
from ablations.results.stats.equivalence import verdict_labels


@dataclass(frozen=True)
class LookInputs:
    """Each arm's tests at each look (..., arms, looks), as the procedure reads them."""

    diff: np.ndarray  # Δ over the look's finished seeds
    looked: np.ndarray  # the arm was compared at the look
    composite: np.ndarray  # a discordant seed: the t test and the worst-rank test split the level
    p_t: np.ndarray  # the t test's p (1 without seed variance; NaN: not compared)
    raw_tost: np.ndarray  # TOST's p before any bar
    p_tost: np.ndarray  # TOST's p, 1 where a flag bars `equivalent`
    p_rank: np.ndarray  # the worst-rank test's p where a seed is discordant, else NaN
    favourable: np.ndarray  # an unstable arm's t test pointing better: it does not count
    outlier: np.ndarray
    unstable: np.ndarray
    over: np.ndarray


@dataclass(frozen=True)
class LookDecisions:
    """What the looks decided, per arm (..., arms): the two families' rejections, the index
    of the deciding look (-1: none) and of the look the row reports, the nominal level each
    test had there, and (..., arms, looks) where the worst-rank part decided."""

    significant: np.ndarray
    equivalent: np.ndarray
    decided: np.ndarray
    last: np.ndarray
    level_diff: np.ndarray
    level_eq: np.ndarray
    rank_decides: np.ndarray


def _flags(shape: tuple[int, ...], values: np.ndarray | None) -> np.ndarray:
    """``values`` as booleans; all False where None."""
    return np.zeros(shape, bool) if values is None else np.asarray(values, bool)


def look_inputs(contrasts: Contrasts, *, margin: float, relative: bool, direction: int,
                outlier: np.ndarray | None,
                worst_rank: tuple[np.ndarray, np.ndarray] | None,
                unstable: np.ndarray | None, over_tolerance: np.ndarray | None,
                untested: np.ndarray | None) -> LookInputs:
    """Each arm's p-values at each look, with the flags that keep an arm from a verdict
    applied (:func:`ablations.results.stats.sequential.sequential_tests` says what each
    argument is)."""
    diff = np.asarray(contrasts.diff, float)
    outlier, unstable = _flags(diff.shape, outlier), _flags(diff.shape, unstable)
    over = _flags(diff.shape, over_tolerance)
    p_rank = np.full(diff.shape, np.nan) if worst_rank is None else np.asarray(worst_rank[0])
    untested = (np.zeros(diff.shape, bool) if untested is None
                else np.broadcast_to(np.asarray(untested, bool), diff.shape))
    p_rank = np.where(untested, np.nan, p_rank)
    composite = ~np.isnan(p_rank)
    looked = (~np.isnan(diff) & ~np.isnan(contrasts.se)) | composite
    with np.errstate(invalid="ignore"):
        p_t = np.where(looked, contrasts.p_value(), np.nan)  # NaN: fewer than 2 finished
        p_t = np.where(untested & looked, 1.0, p_t)
        raw_tost = np.where(untested, 1.0, contrasts.p_tost(margin, relative))
        # a flagged or unstable arm stays in the family (in Holm's divisor), never rejected
        p_tost = np.where(looked, np.where(outlier | unstable | over, 1.0, raw_tost), np.nan)
    # an arm that failed more often than the reference by a look is not shown better there
    # (its failed seeds are its worst outcomes): each part of its test counts only where it
    # points worse
    favourable = unstable & (diff * direction > 0)
    if direction:  # nor by the worst-rank part where it ranks the arm better
        with np.errstate(invalid="ignore"):
            p_rank = np.where(unstable & (np.asarray(worst_rank[1] if worst_rank is not None
                                                     else np.nan) < 0), 1.0, p_rank)
    return LookInputs(diff, looked, composite, p_t, raw_tost, p_tost, p_rank, favourable,
                      outlier, unstable, over)


def decide_looks(inputs: LookInputs, thresholds: dict[bool, np.ndarray], *,
                 looks: Sequence[int], diff_spend: Sequence[float],
                 alpha_diff: float) -> LookDecisions:
    """The looks in order: at each, Holm's steps for `worse`/`better` (False) and for
    `equivalent` (True) over the arms not yet decided, at ``thresholds[family][k, j]`` (look
    k's nominal level at Holm's level α/j, j = 1..arms); an arm's verdict is frozen at the look
    that decided it.

    A look with a discordant seed splits its share of Holm's level α/r: half to the t test
    of the finished seeds, spent there, half banked for the worst-rank test. The bank is
    spent at a look whose seeds could reach it at α/m (an exact test of n seeds has no p
    below 2^(1-n)): fixed by the design and the family alone, so a larger Holm level only
    raises both parts, and the levels an arm spends add up to at most α/r (no correlation
    between looks used)."""
    batch = inputs.diff.shape[:-1]
    m = batch[-1]  # the family, fixed before any data: every arm
    shares = np.asarray(diff_spend, float)
    smallest_p = 2.0 ** (1 - np.asarray(looks, float))
    holm_level = np.concatenate([[0.0], alpha_diff / np.arange(1, m + 1)])
    bank = np.zeros(batch)
    rank_decides = np.zeros(inputs.diff.shape, bool)
    significant, equivalent = np.zeros(batch, bool), np.zeros(batch, bool)
    decided = np.full(batch, -1)
    last = np.zeros(batch, dtype=int)
    level = {False: np.full(batch, np.nan), True: np.full(batch, np.nan)}
    for k in range(len(looks)):
        active = (decided < 0) & inputs.looked[..., k]
        values_diff, rank_decides[..., k], bank = _diff_values(
            inputs, k, bank, share=shares[k], smallest_p=smallest_p[k], level=holm_level[m])
        last = np.where(active, k, last)
        new_diff, level[False] = _step_down(
            values_diff, significant, active, thresholds[False][k], level[False],
            composite=inputs.composite[..., k], holm_level=holm_level)
        new_eq, level[True] = _step_down(inputs.p_tost[..., k], equivalent, active,
                                         thresholds[True][k], level[True])
        decided = np.where(new_diff | new_eq, k, decided)
    return LookDecisions(significant, equivalent, decided, last, level[False], level[True],
                         rank_decides)


def _diff_values(inputs: LookInputs, k: int, bank: np.ndarray, *, share: float,
                 smallest_p: float, level: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Look k's values for the `worse`/`better` family (a discordant look's: the smaller of
    its two parts' p over their shares of the level), where the worst-rank part is the one
    that decides, and the worst-rank bank after the look (``level``: Holm's α/m)."""
    composite, favourable = inputs.composite[..., k], inputs.favourable[..., k]
    p_t = inputs.p_t[..., k]
    # a look without a discordant seed spends its share on the t test (the bank with it)
    bank = np.where(composite, bank + share / 2, 0.0)
    spend = composite & (smallest_p <= level * bank)
    with np.errstate(divide="ignore", invalid="ignore"):
        # each part's p over its share of the level: the arm rejects at Holm's α/r when
        # the smaller one is below it
        ratio_t = np.where(np.isnan(p_t) | favourable, np.inf, p_t / (share / 2))
        ratio_rank = np.where(spend, inputs.p_rank[..., k] / np.where(spend, bank, 1.0), np.inf)
    scaled = np.minimum(ratio_t, ratio_rank)
    values = np.where(composite, scaled, np.where(favourable, np.inf, p_t))
    return values, composite & (ratio_rank < ratio_t), np.where(spend, 0.0, bank)


def _step_down(values: np.ndarray, rejected: np.ndarray, active: np.ndarray,
               thresholds: np.ndarray, level: np.ndarray, *,
               composite: np.ndarray | None = None, holm_level: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Holm's steps within one look for one family: the ``active`` arms whose ``values`` are
    below the look's level at α/(the arms not yet ``rejected``), added to ``rejected`` in
    place; returns them, and ``level`` with the level each open arm had. ``composite``: the
    arms whose level is Holm's own (``holm_level``), their values already scaled to it."""
    fresh = np.zeros(rejected.shape, bool)
    m = rejected.shape[-1]
    for _ in range(m):
        remaining = np.maximum(m - rejected.sum(axis=-1), 1)  # (...)
        threshold = thresholds[remaining][..., None]  # (..., 1)
        if composite is not None:
            threshold = np.where(composite, holm_level[remaining][..., None], threshold)
        level = np.where(active & ~rejected, threshold, level)
        step = active & ~rejected & (values < threshold)
        if not step.any():
            break
        rejected |= step
        fresh |= step
    return fresh, level


def reported_verdicts(inputs: LookInputs, decisions: LookDecisions, *,
                      worst_rank: tuple[np.ndarray, np.ndarray] | None,
                      direction: int) -> dict[str, np.ndarray]:
    """Each arm's verdict and the flags of the look its row reports (the deciding one, else
    the last it reached), as :func:`ablations.results.stats.sequential.sequential_tests`
    returns them."""
    index = decisions.last[..., None]

    def at_last(values: np.ndarray) -> np.ndarray:
        return np.take_along_axis(values, index, axis=-1)[..., 0]

    # the direction of the part that decided: the rank statistic's, or the finished seeds' Δ
    signed = inputs.diff if worst_rank is None else np.where(
        decisions.rank_decides, np.asarray(worst_rank[1]) * (-direction or 1), inputs.diff)
    deciding_diff = at_last(np.where(inputs.looked, signed, 0.0))
    significant = decisions.significant
    verdict = verdict_labels(significant, decisions.equivalent, deciding_diff, direction)
    # an outlying seed bars a claim about the size, not the difference (as the fixed design)
    with np.errstate(invalid="ignore"):
        within = at_last(np.where(inputs.looked, inputs.raw_tost, np.nan)) < decisions.level_eq
    verdict[significant & at_last(inputs.outlier) & ~at_last(inputs.unstable)
            & ~at_last(inputs.over) & within] = "significant"
    return {"verdict": verdict, "significant": significant, "equivalent": decisions.equivalent,
            "decided": decisions.decided, "last": decisions.last,
            "looks": inputs.looked.sum(axis=-1), "level_diff": decisions.level_diff,
            "level_eq": decisions.level_eq, "outlier": at_last(inputs.outlier),
            "unstable": at_last(inputs.unstable), "composite": at_last(inputs.composite)}
