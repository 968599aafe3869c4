"""From an experiment's trials to the verdict table of ``--seeds auto``: each arm's contrasts
at each look (:func:`look_contrasts`, :func:`look_failures`), the decisions of
:func:`ablations.results.stats.sequential.sequential_tests` on them, and the table whose every row
tells the look that decided it (:func:`sequential_verdict_table`, with the repeated confidence
interval of :func:`repeated_interval`); what the rounds spent (:func:`compute_spent`) is
:mod:`ablations.results.stats.rounds_spent`' and re-exported here. Which table decides an
experiment is :mod:`ablations.results.stats.decisions`'.

:mod:`ablations.results.stats.sequential` holds the design and the procedure on arrays; this module
reads trials tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np
import pandas as pd
from scipy import special

from ablations.config.comparison import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    DEFAULT_METRIC,
    DEFAULT_REFERENCE,
)
from ablations.results.stats.arm_contrasts import family_contrasts
from ablations.results.stats.contrasts import Contrasts
from ablations.results.stats.equivalence import comparison_columns
from ablations.results.stats.shared_variance import (
    DEFAULT_TEST,
    PAIRED_TEST,
    SHARED_ROW,
    SharedContrasts,
)
from ablations.results.stats.failures import (
    add_tolerance_reasons,
    failure_tests,
    over_tolerance,
    verdict_reasons,
)
from ablations.results.stats.rounds_spent import (  # noqa: F401 (re-exported)
    compute_note,
    compute_spent,
)
from ablations.results.stats.sequential import SeedDesign, sequential_tests
from ablations.results.stats.verdicts import (
    Metric,
    MetricLike,
    mark_untested,
    metric_of,
    untested_arms,
    verdict_table,
)


def reached_look(trials: pd.DataFrame, arms: Sequence[str], added: set) -> np.ndarray:
    """Per arm, whether it reached the look that added the seeds ``added``: a trial of any
    status among them."""
    at_look = trials.loc[trials["seed"].isin(added), "ablation"]
    return np.isin(np.asarray(arms, dtype=object), at_look.unique())


def look_contrasts(trials: pd.DataFrame, design: SeedDesign, seeds: Sequence[int], *,
                   reference: str, metric: str, test: str = PAIRED_TEST,
                   alpha: float = DEFAULT_ALPHA
                   ) -> tuple[list[str], Contrasts | SharedContrasts, np.ndarray, np.ndarray]:
    """Per arm (every variant but ``reference``) and look: its contrasts against the reference
    over the look's seeds (``seeds[:n_k]``, the experiment's seed order), the robustness
    rule's flag and the seeds paired (0: Welch's comparison). An arm reached look k when it has
    a trial (of any status) among the seeds that look added; NaN where it did not.

    With the shared-variance ``test``, the pool of look k is the arms that reached it with
    every one of its seeds finished (an arm decided earlier has none of the seeds it added),
    each arm's own test the floor at the look's nominal level at ``alpha``."""
    arms = [a for a in dict.fromkeys(trials["ablation"]) if a != reference]
    per_look, flags, paired = [], [], []
    previous = 0
    floors_diff = design.levels(alpha, equivalence=False)
    floors_eq = design.levels(alpha, equivalence=True)
    for k, n in enumerate(design.looks):
        added = set(seeds[previous:n])
        previous = n
        contrasts, outlier, pairs = family_contrasts(
            trials, arms, reference=reference, metric=metric, seeds=set(seeds[:n]), test=test,
            floor_diff=floors_diff[k], floor_eq=floors_eq[k])
        reached = reached_look(trials, arms, added)
        if isinstance(contrasts, SharedContrasts):  # not reached: no comparison, no pool
            contrasts = replace(contrasts, shared=contrasts.shared & reached)
        per_look.append(contrasts.map(lambda values: np.where(reached, values, np.nan)))
        flags.append(outlier & reached)
        paired.append(np.where(reached, pairs, np.nan))
    shape = (len(arms), len(design.looks))
    joined = (SharedContrasts.join(per_look) if isinstance(per_look[0], SharedContrasts)
              else Contrasts.join(per_look))
    return (arms, joined.map(lambda values: values.reshape(shape)),
            np.stack(flags, axis=-1).reshape(shape), np.stack(paired, axis=-1).reshape(shape))


def look_failures(trials: pd.DataFrame, design: SeedDesign, seeds: Sequence[int],
                  arms: Sequence[str], *, reference: str, metric: str, direction: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per arm and look (arms, looks), over the look's seeds: the worst-rank test's p-value
    and sign where a seed is discordant (NaN elsewhere), and whether the arm had more
    training failures than the reference (:func:`ablations.results.stats.failures.failure_tests`);
    NaN / False where the arm did not reach the look (as :func:`look_contrasts`)."""
    shape = (len(arms), len(design.looks))
    p, sign, unstable = np.full(shape, np.nan), np.full(shape, np.nan), np.zeros(shape, bool)
    previous = 0
    for k, n in enumerate(design.looks):
        added = set(seeds[previous:n])
        previous = n
        tests = failure_tests(trials, arms, reference=reference, metric=metric,
                              direction=direction, seeds=set(seeds[:n]))
        reached = reached_look(trials, arms, added)
        p[:, k] = np.where(reached, tests.p_value, np.nan)
        sign[:, k] = np.where(reached, tests.worse_sign, np.nan)
        unstable[:, k] = reached & tests.no_equivalence
    return p, sign, unstable


def look_tolerance(trials: pd.DataFrame, design: SeedDesign, seeds: Sequence[int],
                   arms: Sequence[str], tolerance: Optional[float], *, alpha: float
                   ) -> Optional[np.ndarray]:
    """Per arm and look (arms, looks): whether its failure-rate bound over the look's seeds is
    not below ``tolerance`` (:func:`ablations.results.stats.failures.over_tolerance`); None
    without a tolerance."""
    if tolerance is None:
        return None
    over = np.zeros((len(arms), len(design.looks)), bool)
    for k, n in enumerate(design.looks):
        over[:, k] = over_tolerance(trials, arms, tolerance, alpha=alpha,
                                    seeds=set(seeds[:n]))
    return over


def repeated_interval(contrasts: Contrasts, look: np.ndarray, *, design: SeedDesign,
                      alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The repeated confidence interval of Δ at each comparison's look (Jennison and Turnbull
    2000, ch. 9): Δ ± c_k·se, c_k the critical value (at the contrast's df) of look k's nominal
    level in the two-sided group-sequential boundary of overall level ``alpha``, without Holm's
    division. The intervals of every look hold Δ at once with probability at least 1 − α, so
    the one at the look where an arm stopped keeps that coverage whatever stopped it; the
    fixed 1 − α interval read there covers less, and sits away from 0 for an arm stopped as
    `worse`/`better` (its Δ is biased away from 0 by the stopping).

    Args:
        contrasts: the comparisons at their reported looks.
        look: the index of each comparison's look (``sequential_tests``' ``last``).
        design: the planned looks and α shares.
        alpha: the interval's 1 − coverage, over all looks together.
    """
    nominal = np.array(design.levels(alpha, equivalence=False))[look]
    with np.errstate(invalid="ignore"):
        half = special.stdtrit(contrasts.df, 1 - nominal / 2) * contrasts.se
    return contrasts.diff - half, contrasts.diff + half


def sequential_verdict_table(trials: pd.DataFrame, design: SeedDesign, seeds: Sequence[int], *,
                             reference: str = DEFAULT_REFERENCE,
                             metric: MetricLike = DEFAULT_METRIC,
                             margin: str | float = DEFAULT_MARGIN,
                             alpha: float = DEFAULT_ALPHA,
                             max_failure_rate: Optional[float] = None,
                             test: str = DEFAULT_TEST) -> pd.DataFrame:
    """:func:`ablations.results.stats.analysis.verdict_table` for an experiment run with ``--seeds
    auto`` (``metric``: a :class:`~ablations.config.metrics.Metric`, or a built-in column's
    name, as there).

    One verdict, one story: every inferential column of an arm (``diff_mean``, ``diff_ci_*``,
    ``se``, ``df``, ``n_pairs``, ``p_value``, ``tost_ci_*``, ``ratio_ci_*``, ``p_tost``,
    ``equivalence_bound``, ``outlier``, ``verdict``) is from the look that decided it
    (``decided_at``: its seeds), else from the last look it reached. ``equivalence_bound_holm``
    is the smallest margin at which that look's TOST would have passed at the nominal level the
    arm had there (``level_eq``), the other arms' decisions as they were: unlike the fixed
    design's, not the margin at which the whole procedure would have declared it (another
    margin changes which arms stop); NaN for an arm never compared. ``{metric}_mean`` and its
    interval (and ``n_ok``) are descriptive, over every ok seed the arm ran.
    ``p_holm``/``p_tost_holm`` have no sequential counterpart and are left empty;
    ``level_diff``/``level_eq`` give the nominal levels the arm's tests had at its reported
    look, ``looks`` how many looks it reached. ``seeds``: the experiment's seed order
    (experiment.json's ``rounds.seeds``).

    ``diff_ci_low``/``diff_ci_high`` are the repeated confidence interval at the reported look
    (``attrs["diff_ci"] == "repeated"``): 1 − α coverage of Δ whichever look stopped the arm
    (the fixed design's 1 − α interval at a look chosen by the data covers less); the
    ``tost_ci_*`` and ``ratio_ci_*`` intervals are that look's unadjusted 1 − 2α ones, the
    intervals its TOST reads."""
    seeds = list(seeds)
    measure = metric_of(metric)
    table = verdict_table(trials, reference=reference, metric=measure, margin=margin,
                          alpha=alpha, test=test)
    value, relative = table.attrs["margin"], table.attrs["relative"]
    rounds = _rounds(trials, design, seeds, reference=reference, measure=measure, margin=value,
                     relative=relative, alpha=alpha, max_failure_rate=max_failure_rate,
                     test=test)
    columns = _reported_columns(rounds, trials, design, seeds, reference=reference,
                                measure=measure, margin=value, relative=relative, alpha=alpha)
    position = {arm: i for i, arm in enumerate(rounds.arms)}
    mapped = table["ablation"].map(position)
    compared = mapped.notna().to_numpy()
    index = mapped[compared].astype(int).to_numpy()
    _write_rows(table, columns, compared, index)
    if rounds.over is not None:  # the tolerance kept these from `equivalent` at their look
        add_tolerance_reasons(table, table.index[compared][rounds.over_at_last()[index]],
                              max_failure_rate, value)
    mark_untested(table, table.index[compared], rounds.untested[index], trials, measure.name)
    table.attrs.update(design=design.to_dict(), seeds=list(seeds), sequential=True,
                       diff_ci="repeated", max_failure_rate=max_failure_rate)
    return table


@dataclass(frozen=True)
class _Rounds:
    """What the rounds tested, per arm (every variant but the reference) and look (arms,
    looks): its contrasts, the seeds paired and the worst-rank test's p; the tolerance's flags
    (None: no tolerance); the arms without seed variance; and :func:`sequential_tests`'
    decisions on them."""

    arms: list[str]
    contrasts: Contrasts | SharedContrasts
    pairs: np.ndarray
    p_rank: np.ndarray
    over: Optional[np.ndarray]
    untested: np.ndarray
    tests: dict[str, np.ndarray]

    def over_at_last(self) -> np.ndarray:
        """Per arm, whether the tolerance barred `equivalent` at the look its row reports."""
        if self.over is None:
            return np.zeros(len(self.arms), bool)
        return self.over[np.arange(len(self.arms)), self.tests["last"]]


def _rounds(trials: pd.DataFrame, design: SeedDesign, seeds: list[int], *, reference: str,
            measure: Metric, margin: float, relative: bool, alpha: float,
            max_failure_rate: Optional[float], test: str) -> _Rounds:
    """Every arm's contrasts, failures and flags at each look, and the sequential design's
    decisions on them."""
    metric, direction = measure.name, measure.sign
    arms, contrasts, outlier, pairs = look_contrasts(trials, design, seeds,
                                                     reference=reference, metric=metric,
                                                     test=test, alpha=alpha)
    p_rank, sign, unstable = look_failures(trials, design, seeds, arms, reference=reference,
                                           metric=metric, direction=direction)
    over = look_tolerance(trials, design, seeds, arms, max_failure_rate, alpha=alpha)
    untested = untested_arms(trials, arms, reference=reference, metric=metric)
    tests = sequential_tests(contrasts, design=design, margin=margin, relative=relative,
                             alpha=alpha, direction=direction, outlier=outlier,
                             worst_rank=(p_rank, sign), unstable=unstable, over_tolerance=over,
                             untested=untested[:, None])
    return _Rounds(arms, contrasts, pairs, p_rank, over, untested, tests)


def _reported_columns(rounds: _Rounds, trials: pd.DataFrame, design: SeedDesign,
                      seeds: list[int], *, reference: str, measure: Metric, margin: float,
                      relative: bool, alpha: float) -> dict[str, np.ndarray]:
    """Per arm, the verdict table's columns from the look its row reports (the deciding one,
    else the last it reached), in the table's column order."""
    tests, rows = rounds.tests, np.arange(len(rounds.arms))
    reported = rounds.contrasts.take((rows, tests["last"]))
    level_eq = tests["level_eq"]
    low, high = repeated_interval(reported, tests["last"], design=design, alpha=alpha)
    columns = {
        "diff_mean": reported.diff, "diff_ci_low": low,
        "diff_ci_high": high, "se": reported.se, "df": reported.df,
        "n_pairs": rounds.pairs[rows, tests["last"]],
        **comparison_columns(reported, margin=margin, relative=relative, alpha=alpha),
        "p_holm": np.full(len(rows), np.nan), "p_tost_holm": np.full(len(rows), np.nan),
        # no margin is supported where an outlying seed or more diverged seeds bar the claim
        "equivalence_bound_holm": np.where(
            (level_eq > 0) & ~tests["unstable"] & ~tests["outlier"] & ~rounds.over_at_last(),
            reported.bound(np.where(level_eq > 0, level_eq, 0.5), relative), np.nan),
        "outlier": tests["outlier"], "unstable": tests["unstable"],
        "significant": tests["significant"],
        "equivalent": tests["equivalent"], "verdict": tests["verdict"],
        "decided_at": np.where(tests["decided"] >= 0,
                               np.array(design.looks)[np.maximum(tests["decided"], 0)], np.nan),
        "looks": tests["looks"], "level_diff": tests["level_diff"],
        "level_eq": tests["level_eq"],
    }
    # the worst-rank test's p where the reported look had a discordant seed (p_value: the t
    # test's of the finished seeds; the two split the look's level)
    columns["p_worst_rank"] = rounds.p_rank[rows, tests["last"]]
    reasons = _look_reasons(trials, rounds, design, seeds, reference=reference,
                            metric=measure.name, direction=measure.sign)
    columns["reason"] = np.array(verdict_reasons(reasons, tests["outlier"], tests["verdict"]),
                                 dtype=object)
    columns["test"] = _test_names(reported, rounds.pairs[rows, tests["last"]],
                                  tests["composite"])
    return columns


def _look_reasons(trials: pd.DataFrame, rounds: _Rounds, design: SeedDesign,
                  seeds: list[int], *, reference: str, metric: str, direction: int
                  ) -> list[str]:
    """Each arm's failures over the seeds of the look its row reports, as a reason."""
    last = rounds.tests["last"]
    reasons = [""] * len(rounds.arms)
    for look in set(last.tolist()):
        at_look = failure_tests(trials, rounds.arms, reference=reference, metric=metric,
                                direction=direction, seeds=set(seeds[:design.looks[look]]))
        for i in np.flatnonzero(last == look):
            reasons[i] = at_look.reason[i]
    return reasons


def _test_names(reported: Contrasts | SharedContrasts, pairs: np.ndarray,
                composite: np.ndarray) -> np.ndarray:
    """Per arm, the test of Δ = 0 at its reported look, as the ``test`` column names it."""
    t_test = np.where(np.isnan(reported.diff), "none (fewer than 2 seeds)",
                      np.where(pairs > 0, "paired t", "Welch t"))
    if isinstance(reported, SharedContrasts):
        t_test = np.where(reported.shared, SHARED_ROW, t_test)
    return np.where(composite, "t + worst-rank", t_test).astype(object)


def _write_rows(table: pd.DataFrame, columns: dict[str, np.ndarray], compared: np.ndarray,
                index: np.ndarray) -> None:
    """``columns`` (per arm) onto the ``compared`` rows of ``table`` (arm ``index[i]`` on the
    i-th of them), each decision column replaced whole; the reference's row keeps no
    decision."""
    for column, values in columns.items():
        values = np.asarray(values)[index]
        if column not in table or column in ("significant", "equivalent", "outlier", "unstable",
                                             "verdict", "reason", "test"):
            table[column] = pd.Series([None] * len(table), index=table.index, dtype=object) \
                if values.dtype == object or values.dtype == bool else np.nan
        table.loc[compared, column] = values
    for column in ("significant", "equivalent", "outlier", "unstable"):
        table[column] = table[column].astype("boolean")
    table["verdict"] = table["verdict"].fillna("reference")
    table["reason"] = table["reason"].fillna("")


def active_arms(table: pd.DataFrame) -> list[str]:
    """The arms of :func:`sequential_verdict_table` still without a verdict."""
    return table.loc[table["verdict"] == "inconclusive", "ablation"].tolist()
