"""Verdicts of an ablation against the reference: `worse`/`better` (a two-sided t test),
`equivalent` (TOST against a margin), `negligible` (both), `inconclusive` (neither), Holm over
the family of variants, and the equivalence bound the data reach.

- :func:`verdict_table`: per ablation a verdict against the reference and the equivalence
  bound, on a metric given with its direction (a :class:`Metric`, or a built-in column's
  name); :func:`verdict_note` says what they mean.
- :func:`equivalence_tests`: the verdicts from the differences' t statistics (also used by
  :mod:`ablations.results.stats.sequential`); :func:`holm_bound`, :func:`parse_margin`;
  :class:`Metric`, :func:`metric_of`, :func:`metric_direction`
  (:mod:`ablations.results.io.directions`).

Re-exported by :mod:`ablations.results.stats.analysis`.
"""

from __future__ import annotations

from dataclasses import replace


import numpy as np
import pandas as pd

from ablations.config.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    DEFAULT_METRIC,
    DEFAULT_REFERENCE,
)
from ablations.results.stats.comparisons import ablation_table, holm, usable_trials
from ablations.results.stats.contrasts import Contrasts, robust_outliers
from ablations.results.stats.crossed import (
    CROSSED_NOTE,
    add_crossed_columns,
    crossed_cells,
    crossed_family,
)
from ablations.results.stats.failures import (
    FailureTests,
    add_failure_columns,
    add_tolerance_reasons,
    failure_tests,
    over_tolerance,
)
from ablations.results.stats.phases import evaluation_rows
from ablations.results.stats.seed_tables import seed_table
from ablations.results.stats.seed_ties import NO_VARIANCE_REASON, tied_arms
from ablations.results.stats.shared_variance import (
    DEFAULT_TEST,
    PAIRED_TEST,
    SHARED_ROW,
    SHARED_TEST,
    SharedContrasts,
    pool_members,
    shared_contrasts,
)
from ablations.results.io.directions import (  # noqa: F401 (re-exported)
    METRIC_DIRECTION,
    Metric,
    MetricLike,
    metric_direction,
    metric_of,
)

VERDICTS = ("worse", "better", "higher", "lower", "significant", "equivalent", "negligible",
            "inconclusive")


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


def seed_contrast(variant: pd.Series, reference: pd.Series
                  ) -> tuple[Contrasts | None, pd.Series]:
    """One variant's :class:`Contrasts` against a reference, each a Series of values by seed
    (NaN: none): paired over the shared seeds where there are two or more, else Welch's (as
    :func:`ablation_table` pairs them), else None; and the paired differences by seed (empty
    when not paired), which the robustness rule reads."""
    variant, reference = variant.dropna(), reference.dropna()
    common = variant.index.intersection(reference.index)
    if len(common) >= 2:
        return (Contrasts.paired(variant[common].to_numpy(), reference[common].to_numpy()),
                variant[common] - reference[common])
    if len(variant) >= 2 and len(reference) >= 2:
        return Contrasts.unpaired(variant.to_numpy(), reference.to_numpy()), pd.Series(
            dtype=float)
    return None, pd.Series(dtype=float)


def aligned_contrast(variant: np.ndarray, reference: np.ndarray
                     ) -> tuple[Contrasts | None, np.ndarray]:
    """:func:`seed_contrast` of two arrays of values aligned by seed (NaN: none), as one
    table's columns are: the same choice and the same numbers, without a Series per arm (the
    simulations that validate the verdicts call it per arm and look); the paired differences
    aligned too (NaN where not paired)."""
    variant_ok, reference_ok = ~np.isnan(variant), ~np.isnan(reference)
    both = variant_ok & reference_ok
    if np.count_nonzero(both) >= 2:
        return (Contrasts.paired(variant[both], reference[both]),
                np.where(both, variant - reference, np.nan))
    unpaired = np.full(len(variant), np.nan)
    if np.count_nonzero(variant_ok) >= 2 and np.count_nonzero(reference_ok) >= 2:
        return Contrasts.unpaired(variant[variant_ok], reference[reference_ok]), unpaired
    return None, unpaired


def family_contrasts(trials: pd.DataFrame, arms: list[str], *, reference: str, metric: str,
                     seeds: set | None = None, test: str = PAIRED_TEST,
                     floor_diff: float = DEFAULT_ALPHA, floor_eq: float = DEFAULT_ALPHA
                     ) -> tuple[Contrasts | SharedContrasts, np.ndarray, np.ndarray]:
    """Per arm, its contrast against ``reference`` (:func:`aligned_contrast`) over the ok
    trials with a finite ``metric`` (among ``seeds`` if given); the robustness rule's flag
    (:func:`ablations.results.stats.contrasts.robust_outliers` on its paired differences); and the
    seeds paired (0 for Welch's comparison or none).

    ``test``: :data:`~ablations.results.stats.shared_variance.SHARED_TEST` gives
    :class:`~ablations.results.stats.shared_variance.SharedContrasts`: the arms that qualify
    (:func:`pool_members`) share the variance, each with its own test as the floor at
    ``floor_diff`` (worse/better) and ``floor_eq`` (equivalence)."""
    ok, _ = usable_trials(trials, metric)
    if seeds is not None:
        ok = ok[ok["seed"].isin(seeds)]
    by_seed = seed_table(ok, metric)
    empty = np.full(len(by_seed.index), np.nan)

    def column(arm: str) -> np.ndarray:  # in the metric's own float type (float32 stays)
        if arm not in by_seed:
            return empty
        dtype = getattr(by_seed[arm].dtype, "numpy_dtype", by_seed[arm].dtype)
        return by_seed[arm].to_numpy(dtype=dtype if dtype.kind == "f" else float,
                                     na_value=np.nan)

    ref = column(reference)
    items, differences = [], []
    for arm in arms:
        contrast, paired = aligned_contrast(column(arm), ref)
        items.append(contrast)
        differences.append(paired)
    contrasts = Contrasts.stack(items)
    crossed = crossed_family(trials, by_seed, arms, reference=reference)
    matrix = np.array(differences, dtype=float).reshape(len(arms), len(by_seed.index))
    outlier = robust_outliers(matrix) if matrix.size else np.zeros(len(arms), dtype=bool)
    pairs = np.array([np.count_nonzero(~np.isnan(row)) for row in matrix], dtype=float)
    if crossed is not None:  # --cross-seeds: cells that share a seed are not independent
        contrasts = crossed
    elif test == SHARED_TEST:
        values = np.array([column(arm) for arm in arms], dtype=float).reshape(
            len(arms), len(by_seed.index))
        # an arm with an outlying seed keeps its own test: one seed would widen every arm's
        members = pool_members(values, ref) & ~outlier
        keep = ~np.isnan(ref)
        contrasts = shared_contrasts(np.where(members[:, None], values, 0.0)[:, keep],
                                     ref[keep], members, floor_diff=floor_diff,
                                     floor_eq=floor_eq, own=contrasts)
    return contrasts, outlier & ~np.isnan(contrasts.diff), pairs


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
    p_value, p_tost = out["p_value"], out["p_tost"]
    diff = np.asarray(contrasts.diff, float)
    outlier = np.zeros(p_value.shape, bool) if outlier is None else np.asarray(outlier, bool)
    unstable = np.zeros(p_value.shape, bool)
    if failures is not None:
        # an arm that failed more often than the reference is never shown better (its failed
        # seeds are its worst outcomes): each half of its test counts only where it points
        # worse, and stays in the family at p = 1 where it points better
        rank_p = failures.p_value
        no_equivalence = np.asarray(failures.no_equivalence, bool)
        favourable = no_equivalence & (diff * direction > 0)
        with np.errstate(invalid="ignore"):
            rank_better = no_equivalence & (failures.worse_sign < 0) & (direction != 0)
        tested = failures if not rank_better.any() else replace(
            failures, p_value=np.where(rank_better, 1.0, failures.p_value))
        p_t = np.where(favourable, np.nan, p_value)
        p_value, rank_decides = tested.combined_p(p_t, alpha)
        p_value = np.where(favourable & np.isnan(p_value) & ~np.isnan(out["p_value"]), 1.0,
                           p_value)  # a t test dropped for its direction: still in the family
        out["p_value"] = p_value
        out["p_worst_rank"] = rank_p
        # the verdict's direction where the worst-rank part decided: its statistic's sign
        diff = np.where(rank_decides, failures.worse_sign * (-direction or 1), diff)
        unstable = np.asarray(failures.no_equivalence, bool)
        # an arm that diverged where the reference did not counts in the TOST family, never
        # rejected, even with no finished seed left to compute its p from
        p_tost = np.where(unstable, 1.0, p_tost)
    over = (np.zeros(p_value.shape, bool) if over_tolerance is None
            else np.asarray(over_tolerance, bool))
    if untested is not None:
        untested = np.asarray(untested, bool)
        p_value = np.where(untested & ~np.isnan(p_value), 1.0, p_value)
        out["p_value"] = p_value
        over = over | untested
    barred = outlier | unstable | over
    # a barred comparison stays in the family (Holm's divisor) at p = 1, never rejected,
    # as --seeds auto has it
    p_tost_barred = np.where(barred & ~np.isnan(p_tost), 1.0, p_tost)
    out.update({
        "p_holm": holm(p_value),
        "p_tost_holm": holm(p_tost_barred),
        "equivalence_bound_holm": _holm_equivalence_bound(contrasts, alpha, relative, barred),
        "outlier": outlier,
        "unstable": unstable,
    })
    significant = out["p_holm"] < alpha
    equivalent = out["p_tost_holm"] < alpha
    verdict = verdict_labels(significant, equivalent, diff, direction)
    # the robustness rule bars a claim about the size, not the difference: a significant arm
    # that would be within the margin but for an outlying seed reads `significant`
    unbarred = holm(np.where((unstable | over) & ~np.isnan(p_tost), 1.0, p_tost)) < alpha
    verdict[significant & outlier & ~unstable & unbarred] = "significant"
    return {**out, "significant": significant, "equivalent": equivalent, "verdict": verdict}


# a row without seed variance shows its difference, no test's numbers
UNTESTED_COLUMNS = ("p_value", "p_holm", "p_tost", "p_tost_holm", "equivalence_bound",
                    "equivalence_bound_holm", "tost_ci_low", "tost_ci_high", "ratio_ci_low",
                    "ratio_ci_high", "diff_ci_low", "diff_ci_high", "p_worst_rank")


def untested_arms(trials: pd.DataFrame, arms: list[str], *, reference: str,
                  metric: str) -> np.ndarray:
    """Per arm, whether its comparison has no seed variance to test against: the arm's seeds,
    or the reference's, all gave one value (:func:`ablations.results.stats.seed_ties.tied_arms`)."""
    tied = set(tied_arms(trials, metric))
    return np.array([arm in tied or reference in tied for arm in arms], dtype=bool)


def mark_untested(table: pd.DataFrame, index: pd.Index, untested: np.ndarray,
                  trials: pd.DataFrame, metric: str) -> None:
    """The rows of ``untested`` comparisons: ``no_seed_variance``, the reason, and no test's
    numbers (their difference stays); every other row, the reference's too, says whether its
    own seeds gave one value."""
    tied = set(tied_arms(trials, metric))
    table["no_seed_variance"] = pd.array(table["ablation"].isin(tied), dtype="boolean")
    table.loc[index, "no_seed_variance"] = untested
    rows = index[untested]
    if not len(rows):
        return
    for column in UNTESTED_COLUMNS:
        if column in table:
            table.loc[rows, column] = np.nan
    table.loc[rows, "reason"] = NO_VARIANCE_REASON


def add_shared_columns(table: pd.DataFrame, index: pd.Index, contrasts: SharedContrasts,
                       alpha: float) -> None:
    """The rows of the arms that shared the variance: their ``test``, and the difference's
    1 − α interval, ``se`` and ``df`` of the pooled test they got."""
    shared = np.asarray(contrasts.shared, bool)
    if not shared.any():
        return
    low, high = contrasts.interval(alpha / 2, False)
    rows = index[shared]
    table.loc[rows, "test"] = SHARED_ROW
    table.loc[rows, "diff_ci_low"] = low[shared]
    table.loc[rows, "diff_ci_high"] = high[shared]
    table.loc[rows, "se"] = contrasts.se[shared]
    table.loc[rows, "df"] = contrasts.df[shared]


def resolve_margin(margin: str | float, reference_mean: float) -> tuple[float, bool]:
    """The margin as tested: (share, True) for a percentage, tested as a ratio against the
    reference's mean (which must be above 0), else (units, False).

    Raises:
        ValueError: a bad margin, or a relative one against a mean that is not above 0.
    """
    value, relative = parse_margin(margin)
    if relative and not reference_mean > 0:
        raise ValueError(f"margin {margin!r}: a percentage is tested as a ratio to the "
                         f"reference's mean, here {reference_mean:g} (not above 0): give the "
                         "margin in the metric's units (e.g. 0.02)")
    return value, relative


def verdict_table(trials: pd.DataFrame, *, reference: str = DEFAULT_REFERENCE,
                  metric: MetricLike = DEFAULT_METRIC, margin: str | float = DEFAULT_MARGIN,
                  alpha: float = DEFAULT_ALPHA, max_failure_rate: float | None = None,
                  test: str = DEFAULT_TEST) -> pd.DataFrame:
    """A verdict for every variant against ``reference`` on ``metric``: the question an
    ablation answers (does this component matter, and if not, how sure are we?), with the
    trials tested as one fixed design at full α. For a ``--seeds auto`` experiment these are
    not the verdicts its rounds decided:
    :func:`ablations.results.stats.decisions.experiment_verdicts` gives an experiment's verdicts as
    its design decided them.

    The comparisons are :func:`ablation_table`'s (seed-paired t over the shared ok seeds, Welch
    with fewer than two shared), one family of all variants but the reference:

    - ``worse`` / ``better``: the two-sided test of Δ = 0 rejects after Holm over the family
      (Δ = variant − reference; direction from ``metric``; ``higher`` / ``lower`` for a
      metric without one);
    - ``equivalent``: both one-sided tests against the margin reject after Holm over the
      family (TOST). A margin in units: the 1 − 2α interval of Δ inside ±margin. A percentage:
      tested as a ratio, the 1 − 2α Fieller interval of μ_v/μ_r inside 1 ± margin (TOST on the
      seed-paired contrasts v − (1 ± m)·r; :mod:`ablations.results.stats.contrasts`). A variant with
      an outlying seed (the robustness rule, ``outlier``) or with more diverged seeds than the
      reference (``unstable``) is never `equivalent`;
    - ``negligible``: both of the above: a real difference, smaller than the margin (its sign is
      ``diff_mean``'s);
    - ``significant``: the difference test rejects and the equivalence test would have
      passed but for an outlying seed: a difference, no claim about its size;
    - ``inconclusive``: neither, at the seeds spent (or no test: fewer than 2 ok seeds).

    A seed where one arm diverged and the other finished makes the arm's test of Δ = 0 the
    worst-rank test (:mod:`ablations.results.stats.failures`): a diverged run is an outcome, ranked
    below every finished one, not a missing value.

    Each kind of verdict has family-wise error at most ``alpha`` under the paired t test's
    assumptions (docs/verdicts.md: which noise the simulations cover).

    Args:
        trials: trials.parquet's rows (status, ablation, seed, ``metric``).
        reference: the variant the others are compared with.
        metric: a numeric column of ``trials``: its :class:`Metric` (own code's:
            ``Metric("test_acc", "higher")``, or :func:`metric_of` with the experiment's
            declared metrics), or its name for a column of the built-in model (its direction
            from :func:`metric_of`; a name it does not know has none).
        margin: the smallest difference that matters: ``"0.02"`` (or 0.02) in the metric's
            units, or ``"5%"`` of the reference's mean.
        alpha: family-wise error rate of each kind of verdict, in (0, 0.5).
        max_failure_rate: the tolerance for divergence: a variant is `equivalent` only where
            its failure-rate bound (``failure_rate_upper``) is below it (None: no tolerance).

    Returns:
        :func:`ablation_table`'s columns (the difference's ``diff_ci_*`` at 1 − α) and:
        ``tost_ci_low``/``tost_ci_high`` (1 − 2α interval of Δ), ``ratio_ci_low``/
        ``ratio_ci_high`` (1 − 2α Fieller interval of the ratio minus 1), ``p_tost`` (the larger
        one-sided p against the margin) and ``p_tost_holm``; ``margin`` (in the metric's units,
        or the share for a percentage); ``equivalence_bound`` (the smallest margin TOST alone
        would declare equivalent) and ``equivalence_bound_holm`` (the smallest margin at which
        Holm over the family would: `equivalent` exactly when it is below ``margin`` and no
        seed is an outlier), both in the margin's terms; ``outlier``; ``unstable`` (more
        diverged seeds than the reference: never equivalent); ``significant`` and
        ``equivalent`` (the two Holm decisions); ``verdict`` (``reference`` on the reference's
        row); ``n_diverged`` (seeds whose training diverged,
        :mod:`ablations.results.stats.failures`) and ``reason`` (why a row reads as it does where
        its numbers do not say: diverged seeds, an outlying seed; else ""). ``test`` reads ``t +
        worst-rank`` where a seed on which one arm diverged and the other finished made the test of
        Δ = 0 combine the t test with the worst-rank test (``p_value`` is then the combined p,
        ``p_worst_rank`` the worst-rank test's). The metric's name, reference, margin (also as
        given), ``relative``, α, direction (+1, -1, 0) and the metric's unit are in
        ``.attrs``; :func:`verdict_note` words them.
        results/README.md lists every column.

    Raises:
        ValueError: a reference that is not a variant or has no ok trial, a bad margin or α.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha {alpha!r}: must lie in (0, 0.5), e.g. 0.05")
    parse_margin(margin)
    measure = metric_of(metric)
    metric = measure.name
    trials = evaluation_rows(trials)  # a tuned ablation: the evaluation at the given config
    table = ablation_table(trials, metric=metric, reference=reference, confidence=1 - alpha)
    dropped = table.attrs["dropped_nan"]  # the join below does not carry .attrs
    is_reference = (table["ablation"] == reference).to_numpy()
    reference_mean = float(table.loc[is_reference, f"{metric}_mean"].iloc[0])
    if np.isnan(reference_mean):
        raise ValueError(f"reference {reference!r} has no ok trial: no verdict is possible")
    value, relative = resolve_margin(margin, reference_mean)
    direction = measure.sign
    compared = table.loc[~is_reference]
    arms = compared["ablation"].tolist()
    contrasts, outlier, _ = family_contrasts(trials, arms, reference=reference, metric=metric,
                                             test=test, floor_diff=alpha, floor_eq=alpha)
    failures = failure_tests(trials, arms, reference=reference, metric=metric,
                             direction=direction)
    if crossed_cells(trials, reference) is not None:  # --cross-seeds: no per-cell sign flips
        failures = failures.without_rank_test(np.ones(len(arms), bool))
    over = over_tolerance(trials, arms, max_failure_rate, alpha=alpha)
    untested = untested_arms(trials, arms, reference=reference, metric=metric)
    tests = equivalence_tests(contrasts, margin=value, relative=relative, alpha=alpha,
                              direction=direction, outlier=outlier, failures=failures,
                              over_tolerance=over, untested=untested)
    columns = [*table.columns, *(c for c in tests if c not in table.columns), "n_diverged",
               "n_outcomes", "failure_rate_upper", "reason", "no_seed_variance", "margin"]
    # p-values: ablation_table's t tests, or the worst-rank test's where a seed is discordant
    table = table.drop(columns=["p_value", "p_holm"]).join(
        pd.DataFrame(tests, index=compared.index))
    table["verdict"] = table["verdict"].fillna("reference")
    for column in ("significant", "equivalent", "outlier", "unstable"):
        table[column] = table[column].astype("boolean")  # <NA> on the reference's row
    if isinstance(contrasts, SharedContrasts):
        add_shared_columns(table, compared.index, contrasts, alpha)
    add_failure_columns(table, compared.index, failures, trials=trials,
                        outlier=tests["outlier"], verdict=tests["verdict"], alpha=alpha)
    if over is not None:  # the tolerance kept these from `equivalent`: the row says so
        add_tolerance_reasons(table, compared.index[over], max_failure_rate, value)
    mark_untested(table, compared.index, untested, trials, metric)
    table["margin"] = value
    table = table[columns]
    table.attrs.update(metric=metric, reference=reference, reference_mean=reference_mean,
                       margin=value, relative=relative, margin_given=str(margin), alpha=alpha,
                       max_failure_rate=max_failure_rate,
                       direction=direction, unit=measure.unit,
                       comparisons=int(np.count_nonzero(~np.isnan(tests["p_value"]))),
                       variants_compared=len(compared), dropped_nan=dropped,
                       verdict_test=test)
    if crossed_cells(trials, reference) is not None:  # --cross-seeds: results/stats/crossed.py
        add_crossed_columns(table, compared.index, contrasts, alpha)
    return table


def margin_text(attrs: dict, unit: str = "") -> str:
    """The margin as the verdicts tested it: ``±5% of baseline's mean (0.552), tested as a
    ratio`` or ``±0.02 km``."""
    if attrs.get("relative"):
        return (f"±{attrs['margin'] * 100:.3g}% of {attrs['reference']}'s mean "
                f"({attrs['reference_mean']:.3g}), tested as a ratio")
    return f"±{attrs['margin']:.3g}{f' {unit}' if unit else ''}"


def short_verdict_note(table: pd.DataFrame) -> str:
    """One line under a verdict table where it is read at a glance (the console's summary):
    what was tested, with which test, and where the rest is (:func:`verdict_note` words every
    verdict; the report carries it)."""
    a = table.attrs
    if not a.get("variants_compared", a["comparisons"]):
        return verdict_note(table)
    better = {-1: "lower is better", 1: "higher is better", 0: "no better direction"}
    family = (f"Holm over {a['comparisons']} comparisons" if a["comparisons"] != 1
              else "one comparison")
    counts = table.loc[table["verdict"] != "reference", "verdict"].value_counts()
    told = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
    return (f"Verdicts on {a['metric']} ({better[a['direction']]}) against {a['reference']}: "
            f"{told}; margin {margin_text(a)}, alpha {a['alpha']:g} for each kind, {family}, "
            f"{a.get('verdict_test', DEFAULT_TEST)} test (what each verdict means and what would "
            "decide the inconclusive ones: the report's appendix, docs/verdicts.md).")


def verdict_note(table: pd.DataFrame) -> str:
    """Two lines saying what :func:`verdict_table`'s verdicts mean, with its margin and α."""
    a = table.attrs
    # the reference ran alone (e.g. --only with its name)
    if not a.get("variants_compared", a["comparisons"]):
        return (f"Only the reference {a['reference']} ran: there is no variant to compare with "
                f"it, so no verdict on {a['metric']}; its numbers are in the table.")
    better = {-1: "lower is better", 1: "higher is better", 0: "no better direction"}
    bound = ("as a share of the reference's mean" if a.get("relative") else
             "in the metric's units")
    family = (f"Holm over {a['comparisons']} comparisons" if a["comparisons"] != 1
              else "one comparison")
    return (f"Verdicts on {a['metric']} ({better[a['direction']]}) against {a['reference']}, "
            f"margin {margin_text(a)}, alpha {a['alpha']:g}, {family}: worse/better = differs "
            "(two-sided t test);\nequivalent = TOST, the "
            f"{1 - 2 * a['alpha']:.0%} interval inside the margin (a percentage is tested as a "
            "ratio), never with an outlying seed or more diverged seeds than the reference "
            "(nor is such a variant better); "
            "negligible = both; inconclusive = neither; a diverged seed ranks below every "
            "finished one (worst-rank test). "
            f"equivalence_bound_holm: the smallest margin the data support, {bound}."
            + (f" Equivalent also needs the variant's failure-rate bound (diverged column) "
               f"below the tolerance {a['max_failure_rate']:.0%}."
               if a.get("max_failure_rate") is not None else "")
            + (f" {CROSSED_NOTE}" if a.get("crossed") else ""))
