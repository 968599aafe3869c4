"""Runs that training made fail are outcomes of the comparison, not missing values.

A trial's status says who failed it:

- **training** (:data:`TRAINING_FAILURES`): ``diverged``, a non-finite loss or a final
  validation error that exploded (ablations/trial/loop.py states the rule). A variant that
  diverges where the reference does not is the evidence that the component matters
  (clipping, normalisation, warm-up), so the seed counts;
- **the machinery**: ``failed`` (an exception in code, a lost node, an out-of-memory that
  recovery could not mend), ``timeout`` (past the trial's time limit: a hang is not a
  result), ``stopped``, ``skipped``, ``interrupted``, ``not_started``: no outcome of the
  variant, left out of the comparison and named by the summary.

How the verdicts use a training failure (:func:`failure_tests`, docs/verdicts.md):

- a seed where one arm diverged and the other finished (a *discordant* seed) brings the
  **worst-rank** test in beside the paired t test of the seeds both finished, each at half
  the level (:meth:`FailureTests.combined_p`): every seed's outcome is scored (the metric
  oriented so that higher is worse; a diverged run scores +∞, below every finished one), and
  the paired differences go to the exact sign-flip test of the Wilcoxon signed-rank statistic
  (ties and zeros as they are: two diverged runs tie). Without a discordant seed the paired t
  test decides alone (a seed where both diverged carries no contrast and is left out). The
  switch is valid: whether a seed is discordant does not change when its two runs swap, so
  under the null each test keeps its level given which one is used;
- an arm with more training failures than its reference (over the seeds both have an
  outcome on) is never `equivalent` (so never `negligible`): the seeds that finished cannot
  speak for the ones that did not. Its row says why:
  ``unstable: 3/10 seeds diverged (baseline: 0/10)``.

A metric without a better direction (a coverage) has no worst rank: its failures only bar
equivalence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ablations.config.statuses import TrialStatus
from ablations.results.stats.seed_tables import cells, plain_float, seed_table

TRAINING_FAILURES = (TrialStatus.DIVERGED,)
MACHINERY_FAILURES = (TrialStatus.FAILED, TrialStatus.TIMEOUT, TrialStatus.STOPPED,
                      TrialStatus.SKIPPED, TrialStatus.INTERRUPTED, TrialStatus.NOT_STARTED)


def outcome_tables(trials: pd.DataFrame, metric: str, seeds: set | None = None
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per seed (rows) and variant (columns): the metric of its ok trials with a finite value
    (NaN elsewhere), and whether training failed it (a ``diverged`` trial). A cell with
    neither has no outcome (a machinery failure, a NaN metric, or not run)."""
    rows = trials if seeds is None else trials[trials["seed"].isin(seeds)]
    float_metric = plain_float(rows[metric])
    if float_metric:  # placed by NumPy where no cell has two finished values
        v = rows[metric].to_numpy()
        has_value = (rows["status"] == TrialStatus.OK).to_numpy() & np.isfinite(v)
        diverged = rows["status"].isin(TRAINING_FAILURES).to_numpy()
        placed = cells(rows, has_value | diverged)
        if placed is not None and placed.unique(has_value):
            failed = placed.table(diverged, diverged, empty=False)
            finished = placed.table(v, has_value)
            finished[failed] = np.nan
            return placed.frame(finished), placed.frame(failed)
    values = rows[rows["status"] == TrialStatus.OK]
    values = values[np.isfinite(values[metric].to_numpy(dtype=float))]
    finished = seed_table(values, metric)
    diverged = rows[rows["status"].isin(TRAINING_FAILURES)].assign(_failed=1.0)
    failed = seed_table(diverged, "_failed", "max")
    index = finished.index.union(failed.index)
    columns = finished.columns.union(failed.columns)
    failed = failed.reindex(index=index, columns=columns).fillna(0.0) > 0
    # a seed with a finished and a diverged trial of one variant (a resumed run): diverged
    finished = finished.reindex(index=index, columns=columns).where(~failed)
    if float_metric:  # a column with no value keeps the metric's type too
        finished = finished.astype(rows[metric].dtype)
    return finished, failed


def signed_rank_p(differences: np.ndarray) -> tuple[float, float]:
    """The exact two-sided sign-flip p-value of the Wilcoxon signed-rank statistic of paired
    differences (±inf allowed: they rank above every finite one, tied among themselves;
    zeros carry no sign and are left out), and the statistic W = Σ sign · rank.

    Exact over all 2^m sign patterns of the m non-zero differences, by the distribution of
    the subset sums of their (average, doubled to integers) ranks: what scipy's
    ``wilcoxon(method="exact")`` gives without ties, and its permutation method with them.
    """
    from scipy import stats  # loaded by the analysis only: planning a run needs none of it

    d = np.asarray(differences, float)
    d = d[~np.isnan(d) & (d != 0)]
    if d.size == 0:
        return 1.0, 0.0
    ranks = stats.rankdata(np.abs(d))  # +inf ranks last; tied infinities share their rank
    doubled = np.rint(2 * ranks).astype(int)
    w = float(np.sum(np.sign(d) * ranks))
    # counts[t]: the share of sign patterns whose positive ranks sum (doubled) to t
    counts = np.zeros(int(doubled.sum()) + 1)
    counts[0] = 1.0
    for r in doubled:  # each rank positive or negative with probability 1/2
        shifted = np.zeros_like(counts)
        shifted[r:] = counts[:counts.size - r]
        counts = 0.5 * (counts + shifted)
    total = doubled.sum()
    s = 2 * np.arange(counts.size) - total  # doubled W of each subset sum
    p = float(counts[np.abs(s) >= abs(2 * w) - 1e-9].sum())
    return min(1.0, p), w


@dataclass(frozen=True)
class FailureTests:
    """Per comparison: the training failures each side had, the worst-rank test where a seed
    is discordant, and whether equivalence is barred."""

    failed: np.ndarray  # the variant's diverged seeds (among the seeds considered)
    ref_failed: np.ndarray  # the reference's
    seeds: np.ndarray  # the variant's seeds with an outcome (finished or diverged)
    ref_seeds: np.ndarray
    pairs: np.ndarray  # seeds where both have an outcome: what the worst-rank test ranks
    p_value: np.ndarray  # worst-rank p where a seed is discordant, else NaN (the t test's)
    worse_sign: np.ndarray  # +1: the variant ranks worse (W > 0), -1 better, 0 tie, NaN none
    no_equivalence: np.ndarray  # more training failures than the reference: never equivalent
    reason: tuple[str, ...]  # "unstable: 3/10 seeds diverged (baseline: 0/10)", or ""

    @property
    def composite(self) -> np.ndarray:
        """Where a discordant seed brings the worst-rank test in beside the t test."""
        return ~np.isnan(self.p_value)

    def without_rank_test(self, where: np.ndarray) -> FailureTests:
        """The same, without the worst-rank test ``where`` (a crossed grid of seeds: its
        cells share seeds, so flipping them one by one is no null distribution); their
        failures still bar equivalence."""
        return replace(self, p_value=np.where(where, np.nan, self.p_value),
                       worse_sign=np.where(where, np.nan, self.worse_sign))

    def combined_p(self, p_t: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
        """The test of Δ = 0 of a fixed design (one look) where a seed is discordant: the t
        test of the finished seeds and the worst-rank test each at half the level (the
        smaller p, doubled: Bonferroni within the arm), the worst-rank half only where its
        seeds can reach α/(2m) at all (an exact test of n seeds has no p below 2^(1-n)), m
        the comparisons in the family. The t test's p elsewhere; and where the worst-rank
        part decided (its sign is then the direction)."""
        p_t = np.asarray(p_t, float)
        composite = self.composite
        # the family along the last axis (leading axes: independent families)
        family = np.maximum((composite | ~np.isnan(p_t)).sum(axis=-1, keepdims=True), 1)
        reachable = 2.0 ** (1 - self.pairs) <= alpha / family / 2
        with np.errstate(invalid="ignore"):
            doubled_t = np.where(np.isnan(p_t), np.inf, 2 * p_t)
            doubled_rank = np.where(reachable, 2 * self.p_value, np.inf)
            combined = np.minimum(1.0, np.minimum(doubled_t, doubled_rank))
        # a discordant comparison stays in the family (p = 1 where neither part can test)
        p = np.where(composite, combined, p_t)
        return p, composite & (doubled_rank < doubled_t)


def paired_failure_test(variant: pd.Series, variant_failed: pd.Series, reference: pd.Series,
                        reference_failed: pd.Series, direction: int
                        ) -> tuple[float, float]:
    """The worst-rank test of one variant against the reference, Series by seed (values: the
    finished metric or NaN; failed: bool). (p, worse sign) over the seeds where both have an
    outcome; (NaN, NaN) without a discordant seed or without a direction."""
    seeds = variant.index.union(variant_failed.index).union(reference.index)
    return _worst_rank(
        variant.reindex(seeds).to_numpy(dtype=float),
        variant_failed.reindex(seeds, fill_value=False).astype(bool).to_numpy(),
        reference.reindex(seeds).to_numpy(dtype=float),
        reference_failed.reindex(seeds, fill_value=False).astype(bool).to_numpy(), direction)


def _worst_rank(v: np.ndarray, vf: np.ndarray, r: np.ndarray, rf: np.ndarray,
                direction: int) -> tuple[float, float]:
    """:func:`paired_failure_test` on arrays aligned by seed (NaN: no finished value)."""
    both = (vf | ~np.isnan(v)) & (rf | ~np.isnan(r))
    discordant = both & (vf != rf)
    if direction == 0 or not discordant.any():
        return float("nan"), float("nan")
    orient = -1.0 if direction > 0 else 1.0  # score: higher is worse
    score_v = np.where(vf, np.inf, orient * v)[both]
    score_r = np.where(rf, np.inf, orient * r)[both]
    with np.errstate(invalid="ignore"):
        d = score_v - score_r  # inf - inf: NaN, a tie, left out
    p, w = signed_rank_p(d)
    return p, float(np.sign(w))


def failure_tests(trials: pd.DataFrame, arms: Sequence[str], *, reference: str, metric: str,
                  direction: int, seeds: set | None = None) -> FailureTests:
    """:class:`FailureTests` of each arm against ``reference`` over ``trials`` (among
    ``seeds`` if given), as :func:`ablations.results.stats.verdicts.verdict_table` and the
    sequential looks use them."""
    finished, failed = outcome_tables(trials, metric, seeds)
    empty_values = np.full(len(finished.index), np.nan)
    empty_failed = np.zeros(len(finished.index), dtype=bool)

    def column(frame: pd.DataFrame, name: str, empty: np.ndarray) -> np.ndarray:
        return frame[name].to_numpy(dtype=empty.dtype) if name in frame else empty

    ref_values = column(finished, reference, empty_values)
    ref_failed = column(failed, reference, empty_failed)
    ref_outcome = ref_failed | ~np.isnan(ref_values)
    out: dict[str, list] = {k: [] for k in ("failed", "ref_failed", "seeds", "pairs", "p",
                                            "sign")}
    for arm in arms:
        values = column(finished, arm, empty_values)
        arm_failed = column(failed, arm, empty_failed)
        # counted over the seeds where both have an outcome, so a seed the reference lost
        # to the machinery is no failure of either
        both = (arm_failed | ~np.isnan(values)) & ref_outcome
        p, sign = _worst_rank(values, arm_failed, ref_values, ref_failed, direction)
        out["failed"].append(int((arm_failed & both).sum()))
        out["ref_failed"].append(int((ref_failed & both).sum()))
        out["seeds"].append(int(both.sum()))
        out["pairs"].append(int(both.sum()))
        out["p"].append(p)
        out["sign"].append(sign)
    count, ref_count = np.array(out["failed"]), np.array(out["ref_failed"])
    reasons = tuple(failure_reason(c, r, n, reference) for c, r, n in
                    zip(count, ref_count, out["seeds"]))
    return FailureTests(count.astype(float), ref_count.astype(float),
                        np.array(out["seeds"], float), np.array(out["seeds"], float),
                        np.array(out["pairs"], float), np.array(out["p"], float),
                        np.array(out["sign"], float), count > ref_count, reasons)


def failure_reason(count: int, ref_count: int, seeds: int, reference: str,
                   where: str = "") -> str:
    """The ``reason`` words for a comparison's diverged seeds, over the ``seeds`` both have
    an outcome on: ``unstable`` only with more than the reference (what bars equivalence)."""
    if count > ref_count:
        return (f"unstable: {count}/{seeds} seeds diverged{where} ({reference}: "
                f"{ref_count}/{seeds})")
    if count:
        return (f"{count}/{seeds} seeds diverged{where}, no more than {reference}'s "
                f"{ref_count}/{seeds}")
    if ref_count:
        return f"{reference} diverged on {ref_count}/{seeds} seeds, this variant on none"
    return ""


def failure_rate_upper(diverged: np.ndarray | int, runs: np.ndarray | int,
                       alpha: float) -> np.ndarray:
    """The one-sided 1 − ``alpha`` upper confidence bound on the rate at which an arm's
    training diverges, from ``diverged`` of ``runs`` runs with an outcome (Clopper and Pearson's
    exact bound: the rate at which ``diverged`` or fewer failures have probability ``alpha``;
    0 of 7 gives 0.348 at 95%, the rule of three's 3/n for large n). 1 where every run
    diverged, NaN without a run."""
    from scipy import stats  # loaded by the analysis only

    k = np.asarray(diverged, float)
    n = np.asarray(runs, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = np.where(k >= n, 1.0, stats.beta.ppf(1 - alpha, k + 1, np.maximum(n - k, 1)))
    return np.where(n > 0, bound, np.nan)


def failure_bound_text(diverged: int, runs: int, bound: float) -> str:
    """``0/7 (≤35%)``: an arm's diverged runs and its failure rate's upper bound."""
    if not runs or not np.isfinite(bound):
        return ""
    return f"{diverged}/{runs} (≤{bound:.0%})"


def seeds_for_tolerance(tolerance: float, alpha: float) -> int:
    """The fewest runs, none diverged, whose :func:`failure_rate_upper` is below
    ``tolerance``: ln α / ln(1 − tolerance), rounded up past equality (0 of n bounds the rate
    at 1 − α^(1/n))."""
    import math

    n = max(1, math.ceil(math.log(alpha) / math.log1p(-tolerance)) - 1)
    while float(failure_rate_upper(0, n, alpha)) >= tolerance:  # the bound decides, not rounding
        n += 1
    return n


def arm_failure_counts(trials: pd.DataFrame, arms: Sequence[str], *,
                       seeds: set[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per arm (``arms``' order): its seeds whose training diverged, and its seeds that ended
    ok or diverged (the machinery's failures are no outcome of the arm); ``seeds``: those
    only."""
    rows = trials if seeds is None else trials[trials["seed"].isin(seeds)]
    diverged = rows[rows["status"].isin(TRAINING_FAILURES)].groupby("ablation")["seed"].nunique()
    ended = rows[rows["status"].isin((TrialStatus.OK, *TRAINING_FAILURES))]
    runs = ended.groupby("ablation")["seed"].nunique()
    return (np.array([int(diverged.get(arm, 0)) for arm in arms]),
            np.array([int(runs.get(arm, 0)) for arm in arms]))


def over_tolerance(trials: pd.DataFrame, arms: Sequence[str], tolerance: float | None, *,
                   alpha: float, seeds: set[int] | None = None) -> np.ndarray | None:
    """Per arm: whether its failure-rate bound (:func:`failure_rate_upper` at 1 − ``alpha``)
    is not below ``tolerance`` (``max_failure_rate``): such an arm is never `equivalent`.
    None without a tolerance."""
    if tolerance is None:
        return None
    diverged, runs = arm_failure_counts(trials, arms, seeds=seeds)
    return failure_rate_upper(diverged, runs, alpha) >= tolerance


def tolerance_reason(bound: float, tolerance: float) -> str:
    """The ``reason`` of an arm kept from `equivalent` by the tolerance."""
    return (f"failure rate ≤{bound:.0%} not below the tolerance {tolerance:.0%}: no "
            "equivalence claim")


def add_tolerance_reasons(table: pd.DataFrame, index: pd.Index, tolerance: float,
                          margin: float) -> None:
    """Append :func:`tolerance_reason` to the ``reason`` of the rows ``index`` (their
    ``failure_rate_upper`` beside it) whose own TOST would have passed (``equivalence_bound``
    below ``margin``): where the tolerance is what withheld `equivalent`, in place."""
    for row in index:
        if not float(table.at[row, "equivalence_bound"]) < margin:
            continue  # the data alone do not show it within the margin: nothing withheld
        text = tolerance_reason(float(table.at[row, "failure_rate_upper"]), tolerance)
        table.at[row, "reason"] = f"{table.at[row, 'reason']}; {text}" if table.at[
            row, "reason"] else text


def add_failure_columns(table: pd.DataFrame, index: pd.Index, failures: FailureTests, *,
                        trials: pd.DataFrame, outlier: np.ndarray, verdict: np.ndarray,
                        alpha: float) -> None:
    """``n_diverged`` (every row: its diverged seeds), ``n_outcomes`` (its runs that ended ok
    or diverged: the machinery's failures say nothing of the arm) and
    ``failure_rate_upper`` (:func:`failure_rate_upper` at 1 − ``alpha``), ``reason`` (why a
    row's verdict is what it is where the numbers beside it do not say: training failures, an
    outlying seed) and ``test`` (``t + worst-rank`` where a discordant seed made it so), in
    place."""
    table["n_diverged"], table["n_outcomes"] = arm_failure_counts(trials, table["ablation"])
    table["failure_rate_upper"] = failure_rate_upper(table["n_diverged"].to_numpy(),
                                                     table["n_outcomes"].to_numpy(), alpha)
    table["reason"] = ""
    table.loc[index, "reason"] = verdict_reasons(failures.reason, outlier, verdict)
    if "test" in table:
        table.loc[index[failures.composite], "test"] = "t + worst-rank"


def verdict_reasons(failure_reasons: Sequence[str], outlier: np.ndarray,
                    verdict: np.ndarray) -> list[str]:
    """Per comparison, the ``reason`` column: its training failures
    (:class:`ablations.results.stats.failures.FailureTests`'s words) and what an outlying seed
    barred."""
    reasons = list(failure_reasons)
    for i, (flag, label) in enumerate(zip(np.asarray(outlier, bool), verdict)):
        if label == "significant":
            extra = "significant; no margin claim (outlier)"
        elif flag:
            extra = "outlying seed: no margin claim"
        else:
            continue
        reasons[i] = f"{reasons[i]}; {extra}" if reasons[i] else extra
    return reasons
