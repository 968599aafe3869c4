"""The verdict table of an ablation: a verdict for every variant against the reference, and
the equivalence bound the data reach (:func:`verdict_table`, on a metric given with its
direction: a :class:`Metric`, or a built-in column's name); :func:`verdict_note` and
:func:`short_verdict_note` say what they mean.

The comparisons are one family of all variants but the reference, each given one verdict:

- ``worse`` / ``better``: the two-sided test of Δ = 0 rejects after Holm over the family
  (Δ = variant − reference; direction from the metric; ``higher`` / ``lower`` for a
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

The steps, each in its own module and re-exported here: the margin
(:mod:`ablations.results.stats.margins`: :func:`parse_margin`, :func:`resolve_margin`,
:func:`margin_text`); each arm's contrast against the reference
(:mod:`ablations.results.stats.arm_contrasts`: :func:`family_contrasts`, :func:`seed_contrast`,
:func:`aligned_contrast`); the verdicts from the contrasts' t statistics
(:mod:`ablations.results.stats.equivalence`: :func:`equivalence_tests`, :func:`holm_bound`,
:func:`verdict_labels`, which :mod:`ablations.results.stats.sequential` shares); the notes
(:mod:`ablations.results.stats.verdict_notes`); :class:`Metric`, :func:`metric_of`,
:func:`metric_direction` (:mod:`ablations.results.io.directions`).

Re-exported by :mod:`ablations.results.stats.analysis`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ablations.config.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    DEFAULT_METRIC,
    DEFAULT_REFERENCE,
)
from ablations.results.stats.arm_contrasts import (  # noqa: F401 (re-exported)
    aligned_contrast,
    family_contrasts,
    seed_contrast,
)
from ablations.results.stats.comparisons import ablation_table
from ablations.results.stats.contrasts import Contrasts
from ablations.results.stats.crossed import add_crossed_columns, crossed_cells
from ablations.results.stats.equivalence import (  # noqa: F401 (re-exported)
    comparison_columns,
    equivalence_tests,
    holm_bound,
    verdict_labels,
)
from ablations.results.stats.failures import (
    FailureTests,
    add_failure_columns,
    add_tolerance_reasons,
    failure_tests,
    over_tolerance,
)
from ablations.results.stats.margins import (  # noqa: F401 (re-exported)
    margin_text,
    parse_margin,
    resolve_margin,
)
from ablations.results.stats.phases import evaluation_rows
from ablations.results.stats.seed_ties import NO_VARIANCE_REASON, tied_arms
from ablations.results.stats.shared_variance import DEFAULT_TEST, SHARED_ROW, SharedContrasts
from ablations.results.stats.verdict_notes import (  # noqa: F401 (re-exported)
    short_verdict_note,
    verdict_note,
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
    with fewer than two shared), one family of all variants but the reference, each given
    one of the verdicts the module's docstring defines.

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
    _check_settings(margin, alpha)
    measure = metric_of(metric)
    trials = evaluation_rows(trials)  # a tuned ablation: the evaluation at the given config
    table = ablation_table(trials, metric=measure.name, reference=reference,
                           confidence=1 - alpha)
    is_reference = (table["ablation"] == reference).to_numpy()
    reference_mean = _reference_mean(table.loc[is_reference], reference, measure.name)
    value, relative = resolve_margin(margin, reference_mean)
    settings = _Settings(reference, measure, reference_mean, value, relative, str(margin), alpha,
                         max_failure_rate, test)
    compared = table.loc[~is_reference]
    family = _family_tests(trials, compared["ablation"].tolist(), settings)
    verdicts = _verdict_rows(table, compared.index, family, trials, settings)
    if crossed_cells(trials, reference) is not None:  # --cross-seeds: results/stats/crossed.py
        add_crossed_columns(verdicts, compared.index, family.contrasts, alpha)
    return verdicts


def _check_settings(margin: str | float, alpha: float) -> None:
    """Raises ValueError for an α outside (0, 0.5) or a margin that is not one, before any
    data is read."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha {alpha!r}: must lie in (0, 0.5), e.g. 0.05")
    parse_margin(margin)


def _reference_mean(rows: pd.DataFrame, reference: str, metric: str) -> float:
    """The reference's mean ``metric`` from its row of :func:`ablation_table`.

    Raises:
        ValueError: the reference has no ok trial.
    """
    reference_mean = float(rows[f"{metric}_mean"].iloc[0])
    if np.isnan(reference_mean):
        raise ValueError(f"reference {reference!r} has no ok trial: no verdict is possible")
    return reference_mean


@dataclass(frozen=True)
class _Settings:
    """What one verdict table tests on: its reference and metric, the margin as tested (units,
    or the share for a percentage; ``margin_given``: as given), α, the tolerance for divergence
    and the test of Δ = 0."""

    reference: str
    measure: Metric
    reference_mean: float
    margin: float
    relative: bool
    margin_given: str
    alpha: float
    max_failure_rate: float | None
    test: str


@dataclass(frozen=True)
class _FamilyTests:
    """One family's tests: each arm's contrast, training failures, tolerance and seed-variance
    flags, and :func:`equivalence_tests`' columns from them."""

    contrasts: Contrasts | SharedContrasts
    failures: FailureTests
    over: np.ndarray | None
    untested: np.ndarray
    tests: dict[str, np.ndarray]


def _family_tests(trials: pd.DataFrame, arms: list[str], settings: _Settings) -> _FamilyTests:
    """Every arm tested against the reference as one family at full α."""
    reference, metric, direction = settings.reference, settings.measure.name, settings.measure.sign
    alpha = settings.alpha
    contrasts, outlier, _ = family_contrasts(trials, arms, reference=reference, metric=metric,
                                             test=settings.test, floor_diff=alpha,
                                             floor_eq=alpha)
    failures = failure_tests(trials, arms, reference=reference, metric=metric,
                             direction=direction)
    if crossed_cells(trials, reference) is not None:  # --cross-seeds: no per-cell sign flips
        failures = failures.without_rank_test(np.ones(len(arms), bool))
    over = over_tolerance(trials, arms, settings.max_failure_rate, alpha=alpha)
    untested = untested_arms(trials, arms, reference=reference, metric=metric)
    tests = equivalence_tests(contrasts, margin=settings.margin, relative=settings.relative,
                              alpha=alpha, direction=direction, outlier=outlier,
                              failures=failures, over_tolerance=over, untested=untested)
    return _FamilyTests(contrasts, failures, over, untested, tests)


def _verdict_rows(table: pd.DataFrame, index: pd.Index, family: _FamilyTests,
                  trials: pd.DataFrame, settings: _Settings) -> pd.DataFrame:
    """:func:`ablation_table`'s ``table`` with the family's tests on the rows of ``index``
    (the compared arms), each row's failures, tolerance and seed-variance columns and the
    margin, in the verdict table's column order, and the settings in ``.attrs``."""
    tests, alpha, margin = family.tests, settings.alpha, settings.margin
    columns = [*table.columns, *(c for c in tests if c not in table.columns), "n_diverged",
               "n_outcomes", "failure_rate_upper", "reason", "no_seed_variance", "margin"]
    # p-values: ablation_table's t tests, or the worst-rank test's where a seed is discordant
    verdicts = table.drop(columns=["p_value", "p_holm"]).join(pd.DataFrame(tests, index=index))
    verdicts["verdict"] = verdicts["verdict"].fillna("reference")
    for column in ("significant", "equivalent", "outlier", "unstable"):
        verdicts[column] = verdicts[column].astype("boolean")  # <NA> on the reference's row
    if isinstance(family.contrasts, SharedContrasts):
        add_shared_columns(verdicts, index, family.contrasts, alpha)
    add_failure_columns(verdicts, index, family.failures, trials=trials,
                        outlier=tests["outlier"], verdict=tests["verdict"], alpha=alpha)
    if family.over is not None:  # the tolerance kept these from `equivalent`: the row says so
        add_tolerance_reasons(verdicts, index[family.over], settings.max_failure_rate, margin)
    mark_untested(verdicts, index, family.untested, trials, settings.measure.name)
    verdicts["margin"] = margin
    verdicts = verdicts[columns]
    measure = settings.measure
    verdicts.attrs.update(metric=measure.name, reference=settings.reference,
                          reference_mean=settings.reference_mean, margin=margin,
                          relative=settings.relative, margin_given=settings.margin_given,
                          alpha=alpha, max_failure_rate=settings.max_failure_rate,
                          direction=measure.sign, unit=measure.unit,
                          comparisons=int(np.count_nonzero(~np.isnan(tests["p_value"]))),
                          variants_compared=len(index),
                          # the join above does not carry ablation_table's .attrs
                          dropped_nan=table.attrs["dropped_nan"], verdict_test=settings.test)
    return verdicts
