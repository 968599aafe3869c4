"""Verdicts across datasets: does a component matter on datasets like these, not on one?

An experiment over several datasets (trials.parquet's ``dataset`` column) gets the usual
verdicts on each dataset (:func:`ablations.results.stats.decisions.dataset_verdicts_of`), and here
one row per ablation across them:

- **the pooled ratio**: each dataset's effect is the log of the variant's mean over the
  reference's on the seeds both finished (a ratio has no unit, so datasets measured in km and in
  kelvin pool), with its variance from the seed-paired differences (the delta method:
  var(v_s/m_v − r_s/m_r)/n). The datasets are a sample of datasets and the unit of the test:
  the pooled log ratio is the mean of theirs, tested with t on k − 1 degrees of freedom from
  their spread (which holds both the seeds' noise and the datasets' differences), unweighted:
  with a few seeds per dataset, inverse-variance weights (a random-effects meta-analysis, even
  with the Knapp-Hartung interval) rest on variances estimated from 2 degrees of freedom and
  called about twice α of null ablations `worse`/`better` at 5 datasets (docs/datasets.md).
  The between-dataset τ and I² are statsmodels' ``combine_effects`` (Paule-Mandel), as a
  description. The prediction interval is where a new dataset's ratio, measured the same way,
  is expected: t on k − 1 degrees of freedom times s·√(1 + 1/k). The Q-profile upper bound on
  τ, with the pooled ratio at the worse end of its interval, bounds the share of datasets like
  these whose true ratio lies beyond the margin: an equivalence where that share may exceed
  :data:`NEW_SHARE` carries the 'on average' reason.
- **the verdict across datasets**: the per-dataset rules on the pooled log ratio: `worse` /
  `better` when the t test of a ratio of 1 rejects after Holm over the ablations, `equivalent`
  when both one-sided tests against the (percentage) margin reject after Holm, `negligible`
  both, else `inconclusive`. An arm that diverged on more seeds than the reference on any
  dataset is never `equivalent` (its per-dataset row is ``unstable``).
- **the datasets' own verdicts**: how many datasets point the pooled way (the
  consistent-direction count) and each per-dataset verdict, counted; ``on_every_dataset`` is a
  verdict reached on every dataset, a claim about these datasets whose level is each
  per-dataset test's (an intersection-union test needs no correction).
- **ranks** (:func:`rank_comparison`, ≥ 5 datasets): every arm ranked on each dataset by its
  median over seeds (a diverged seed counts as the worst value), Friedman's test, and the
  Nemenyi critical difference for the critical-difference diagram (Demšar 2006).

The pooling of one variant's log ratios, with its bound on τ, is
:mod:`ablations.results.stats.dataset_pool`. docs/datasets.md has the error rates of these
claims at 2, 3 and 5 datasets, simulated with these functions (tools/datasets_simulation.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np
import pandas as pd
from scipy import stats

from ablations.config.statuses import TrialStatus
from ablations.results.io.directions import MetricLike, metric_of
from ablations.results.io.table_columns import ACROSS_COLUMNS
from ablations.results.stats.comparisons import holm
from ablations.results.stats.dataset_pool import NEW_SHARE, pool, share_beyond
from ablations.results.stats.dataset_pool import tau_upper_bound as tau_upper_bound
from ablations.results.stats.dataset_rows import DATASET, by_dataset, dataset_names
from ablations.results.stats.phases import evaluation_rows
from ablations.results.stats.seed_tables import seed_table
from ablations.results.stats.verdicts import parse_margin, verdict_labels

# Under each dataset's verdicts: the design they were tested in, and why the same trials alone
# can read otherwise (a run on one dataset is the pilot look of a sequential design).
FULL_ALPHA_NOTE = ("Each dataset's verdicts are the fixed design's at full alpha: the same "
                   "trials run as an experiment on that dataset alone are the pilot look of a "
                   "sequential design, tested at the pilot's lower levels. Full alpha decides "
                   "more: a difference that run leaves inconclusive, or negligible here where "
                   "that run says worse or better (the pilot gives equivalence a small share "
                   "of alpha).")
MIN_RANK_DATASETS = 5  # ranks and the critical-difference diagram from this many datasets
# per-dataset verdicts that claim something (``on_every_dataset`` names one of these)
CLAIMS = ("worse", "better", "higher", "lower", "equivalent", "negligible")


def dataset_effects(trials: pd.DataFrame, *, reference: str, metric: str) -> pd.DataFrame:
    """Each (dataset, variant)'s log ratio of means to the reference on the seeds both ran ok
    with a finite metric, and its delta-method variance from the seed-paired differences.

    Returns:
        One row per dataset and variant (the reference left out): ``dataset``, ``ablation``,
        ``n_pairs``, ``variant_mean``, ``reference_mean``, ``log_ratio``, ``variance`` (NaN
        with fewer than 2 pairs or a mean that is not above 0: the ratio has no log).
    """
    trials = evaluation_rows(trials)
    ok = trials[(trials["status"] == TrialStatus.OK)
                & np.isfinite(pd.to_numeric(trials[metric], errors="coerce"))]
    rows = []
    for name, frame in by_dataset(ok).items():
        values = seed_table(frame, metric)
        for variant in dict.fromkeys(trials.loc[trials["ablation"] != reference, "ablation"]):
            row = {DATASET: name, "ablation": variant, "n_pairs": 0,
                   "variant_mean": np.nan, "reference_mean": np.nan, "log_ratio": np.nan,
                   "variance": np.nan}
            if variant in values and reference in values:
                pairs = values[[variant, reference]].dropna().to_numpy(float)
                row.update(n_pairs=len(pairs))
                if len(pairs) >= 2:
                    m_v, m_r = pairs.mean(axis=0)
                    row.update(variant_mean=m_v, reference_mean=m_r)
                    if m_v > 0 and m_r > 0:
                        linear = pairs[:, 0] / m_v - pairs[:, 1] / m_r
                        row.update(log_ratio=np.log(m_v / m_r),
                                   variance=linear.var(ddof=1) / len(pairs))
            rows.append(row)
    return pd.DataFrame(rows, columns=[DATASET, "ablation", "n_pairs", "variant_mean",
                                       "reference_mean", "log_ratio", "variance"])


def across_datasets(trials: pd.DataFrame, per_dataset: Mapping[str, pd.DataFrame], *,
                    reference: str, metric: MetricLike, margin: str | float,
                    alpha: float) -> pd.DataFrame:
    """One row per variant: its verdict across the datasets (the module's docstring says how).

    Args:
        trials: trials.parquet's rows of every dataset (``dataset``, ``status``, ``ablation``,
            ``seed``, ``metric``).
        per_dataset: each dataset's verdict table (``verdict``, ``unstable``).
        metric: a :class:`~ablations.config.metrics.Metric` (its direction makes a pooled
            ``higher`` / ``lower`` ``worse`` / ``better``), or a built-in column's name.
        margin: a percentage (``"5%"``): the across-dataset effect is a ratio; a margin in the
            metric's units has no common meaning across datasets.

    Raises:
        ValueError: a margin in the metric's units, or α outside (0, 0.5).
    """
    value, relative = parse_margin(margin)
    if not relative:
        raise ValueError(f"margin {margin!r}: across datasets the effect is a ratio; give a "
                         "percentage (e.g. 5%)")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha {alpha!r}: must lie in (0, 0.5), e.g. 0.05")
    measure = metric_of(metric)
    metric, direction = measure.name, measure.sign
    effects = dataset_effects(trials, reference=reference, metric=metric)
    names = dataset_names(trials)  # every dataset, with verdicts or not
    bounds = (np.log1p(-value), np.log1p(value))
    tolerance = _tolerance(per_dataset)
    table = pd.DataFrame([_variant_row(variant, frame, per_dataset, names=names,
                                       tolerance=tolerance, alpha=alpha, bounds=bounds)
                          for variant, frame in effects.groupby("ablation", sort=False)])
    if table.empty:
        return table
    _decide(table, alpha, direction)
    _add_caveats(table, alpha, value)
    table["margin"] = value
    table.attrs.update(metric=metric, reference=reference, margin=value, relative=True,
                       margin_given=str(margin), alpha=alpha, direction=direction,
                       unit=measure.unit, datasets=names)
    return table[[name for name, _, _ in ACROSS_COLUMNS]]


# a variant's pooled columns, NaN where fewer than two datasets give it a ratio
POOLED_COLUMNS = ("ratio", "ratio_ci_low", "ratio_ci_high", "tost_ci_low", "tost_ci_high",
                  "pi_low", "pi_high", "tau", "tau_upper", "new_beyond_upper", "i2", "df",
                  "p_value", "p_tost")


def _tolerance(per_dataset: Mapping[str, pd.DataFrame]) -> Optional[float]:
    """The run's tolerance for divergence (each dataset's table records it): an arm whose
    failure-rate bound is not below it on some dataset is not equivalent across them either;
    None: none."""
    return next((table.attrs["max_failure_rate"] for table in per_dataset.values()
                 if table.attrs.get("max_failure_rate") is not None), None)


def _variant_row(variant: str, frame: pd.DataFrame, per_dataset: Mapping[str, pd.DataFrame],
                 *, names: list[str], tolerance: Optional[float], alpha: float,
                 bounds: tuple[float, float]) -> dict[str, Any]:
    """One variant's row across the datasets (``frame``: its rows of
    :func:`dataset_effects`): the datasets' own verdicts, what bars a claim, and its pooled
    ratio where two or more datasets give one (``bounds``: the margin's log ratios)."""
    usable = frame[np.isfinite(frame["log_ratio"]) & np.isfinite(frame["variance"])]
    verdicts = {name: table.set_index("ablation").loc[variant]
                for name, table in per_dataset.items()
                if variant in set(table["ablation"])}
    labels = [str(row["verdict"]) for row in verdicts.values()]
    unstable = [name for name, row in verdicts.items()  # numpy's True is not `True`
                if pd.notna(row.get("unstable")) and bool(row.get("unstable"))]
    over = [] if tolerance is None else [
        name for name, row in verdicts.items()
        if float(row.get("failure_rate_upper", np.nan)) >= tolerance]
    row = {"ablation": variant, "n_datasets": len(usable),
           **dict.fromkeys(POOLED_COLUMNS, np.nan), "n_same_direction": 0,
           "dataset_verdicts": ", ".join(f"{label} {labels.count(label)}"
                                         for label in dict.fromkeys(labels)),
           "on_every_dataset": labels[0] if labels and len(set(labels)) == 1
           and len(labels) == len(names) and labels[0] in CLAIMS else "",
           "unstable": bool(unstable), "over_tolerance": bool(over),
           "reason": _reason(len(usable), names, verdicts, unstable, over, tolerance)}
    if len(usable) >= 2:
        row.update(_pooled_columns(usable, alpha, *bounds))
    return row


def _reason(usable: int, names: list[str], verdicts: Mapping[str, pd.Series],
            unstable: list[str], over: list[str], tolerance: Optional[float]) -> str:
    """Why a variant's row across the datasets makes no claim, or a narrower one ("" for
    none): instability, a failure rate over the tolerance, fewer than two ratios to pool, or
    datasets without its verdicts (``usable``: the datasets with a ratio)."""
    if unstable:
        return "unstable: more diverged seeds than the reference on " + ", ".join(unstable)
    if over:
        return (f"failure rate not bounded below the tolerance {tolerance:.0%} on "
                + ", ".join(over) + ": no equivalence claim")
    if usable < 2:
        return (f"a ratio on {usable} of {len(names)} datasets (it needs two seed pairs "
                "with means above 0 on each): nothing to pool")
    missing = [name for name in names if name not in verdicts]
    return "no verdicts on " + ", ".join(missing) if missing else ""


def _pooled_columns(usable: pd.DataFrame, alpha: float, log_low: float, log_high: float
                    ) -> dict[str, Any]:
    """The pooled columns of a variant's row from its datasets' log ratios (``usable``, two
    or more), and how many of those point the pooled way."""
    pooled = pool(usable["log_ratio"].to_numpy(), usable["variance"].to_numpy(),
                  level=1 - alpha)
    ci = pooled.interval(1 - alpha)
    tost = pooled.interval(1 - 2 * alpha)
    # two datasets give one degree of freedom for their spread: no claim about a
    # third, whose ratio such an interval covers far less often than it says
    pi = pooled.prediction(1 - alpha) if len(usable) >= 3 else (np.nan, np.nan)
    return dict(ratio=np.expm1(pooled.mean), ratio_ci_low=np.expm1(ci[0]),
                ratio_ci_high=np.expm1(ci[1]), tost_ci_low=np.expm1(tost[0]),
                tost_ci_high=np.expm1(tost[1]), pi_low=np.expm1(pi[0]),
                pi_high=np.expm1(pi[1]), tau=np.sqrt(pooled.tau2), i2=pooled.i2,
                tau_upper=pooled.tau_upper,
                # the worse end of the mean's interval, with τ at its bound
                new_beyond_upper=max(share_beyond(end, pooled.tau_upper, log_low,
                                                  log_high) for end in tost),
                df=pooled.df, p_value=pooled.p_value(),
                p_tost=pooled.p_tost(log_low, log_high),
                n_same_direction=int(np.count_nonzero(
                    np.sign(usable["log_ratio"]) == np.sign(pooled.mean))))


def _decide(table: pd.DataFrame, alpha: float, direction: int) -> None:
    """The verdicts across the datasets, Holm over the variants, added to ``table``."""
    table["p_holm"] = holm(table["p_value"].to_numpy(float))
    unstable = table["unstable"].to_numpy(bool)
    barred = unstable | table["over_tolerance"].to_numpy(bool)
    p_tost = table["p_tost"].to_numpy(float)
    # an unstable arm (or one over the tolerance) is never equivalent: its p is 1 in the
    # family, as on one dataset
    table["p_tost_holm"] = holm(np.where(barred & ~np.isnan(p_tost), 1.0, p_tost))
    significant = (table["p_holm"] < alpha).to_numpy()
    equivalent = (table["p_tost_holm"] < alpha).to_numpy() & ~barred
    table["significant"], table["equivalent"] = significant, equivalent
    table["verdict"] = verdict_labels(significant, equivalent, table["ratio"].to_numpy(float),
                                      direction)
    # the pooled ratio is of finished seeds: an arm that diverged more often than the reference
    # somewhere is not called better (its diverged seeds are its worst outcomes)
    better = "better" if direction else None
    favourable = unstable & (table["verdict"] == better).to_numpy()
    table.loc[favourable, "verdict"] = "inconclusive"


def _add_caveats(table: pd.DataFrame, alpha: float, margin: float) -> None:
    """The reasons that narrow a verdict across the datasets, added to ``table``'s: two
    datasets only, and an equivalence that holds on average only."""
    # from two datasets a verdict is about those two: no estimate of how a new one varies
    two = (table["n_datasets"] == 2).to_numpy()
    note = "about these 2 datasets only: two give no prediction for a new dataset"
    table.loc[two, "reason"] = [f"{reason}; {note}" if reason else note
                                for reason in table.loc[two, "reason"]]
    # equivalence is a claim about the mean over datasets; say where the spread between
    # datasets, at its upper bound, leaves more than NEW_SHARE of new datasets' true ratios
    # beyond the margin
    on_average = table["verdict"].isin(["equivalent", "negligible"]) & (
        table["new_beyond_upper"] > NEW_SHARE) & (table["reason"] == "")
    table.loc[on_average, "reason"] = [
        f"on average: the spread between datasets is bounded only by τ ≤ {tau:.3g} "
        f"({1 - alpha:.0%}), so up to {share:.0%} of new datasets may see a ratio beyond "
        f"±{100 * margin:.3g}%"
        for tau, share in zip(table.loc[on_average, "tau_upper"],
                              table.loc[on_average, "new_beyond_upper"])]


@dataclass(frozen=True)
class Ranks:
    """Every arm's average rank over the datasets and what tells them apart."""

    average: pd.Series  # arm -> mean rank (1 = best), best first
    scores: pd.DataFrame  # dataset x arm: the median the ranks are of
    friedman_p: float
    critical_difference: float  # Nemenyi's at alpha
    nemenyi: pd.DataFrame  # arm x arm p-values (scikit-posthocs)
    alpha: float


def rank_comparison(trials: pd.DataFrame, *, metric: MetricLike, alpha: float
                    ) -> Ranks | None:
    """Friedman's test of the arms' ranks over the datasets and the Nemenyi critical
    difference (None below :data:`MIN_RANK_DATASETS` datasets, or fewer than 3 arms on every
    one). An arm's score on a dataset is its median over seeds, a diverged seed counting as the
    worst value; a failed or missing trial is left out. ``metric``: a
    :class:`~ablations.config.metrics.Metric` or a built-in column's name; its direction says
    which end ranks first (lower, for a metric without one)."""
    import scikit_posthocs

    trials = evaluation_rows(trials)
    measure = metric_of(metric)
    metric = measure.name
    direction = measure.sign or -1  # no direction: rank as lower is better
    worst = -np.inf if direction > 0 else np.inf
    values = pd.to_numeric(trials[metric], errors="coerce").where(
        trials["status"] == TrialStatus.OK)
    values = values.where(trials["status"] != TrialStatus.DIVERGED, worst)
    scored = trials.assign(_score=values).dropna(subset=["_score"])
    scores = scored.pivot_table(index=DATASET, columns="ablation", values="_score",
                                aggfunc="median").dropna(axis=1)
    if len(scores) < MIN_RANK_DATASETS or scores.shape[1] < 3:
        return None
    ranks = (scores * -direction).rank(axis=1, method="average")  # 1 = best
    average = ranks.mean().sort_values()
    k, n = scores.shape[1], len(scores)
    friedman = stats.friedmanchisquare(*(ranks[c].to_numpy() for c in ranks.columns))
    q = stats.studentized_range.ppf(1 - alpha, k, np.inf) / np.sqrt(2)
    nemenyi = scikit_posthocs.posthoc_nemenyi_friedman(ranks.to_numpy())
    nemenyi.index = nemenyi.columns = ranks.columns
    return Ranks(average=average, scores=scores, friedman_p=float(friedman.pvalue),
                 critical_difference=float(q * np.sqrt(k * (k + 1) / (6 * n))),
                 nemenyi=nemenyi, alpha=alpha)


def across_note(table: pd.DataFrame) -> str:
    """What the across-dataset verdicts mean, in one paragraph."""
    attrs = table.attrs
    alpha, margin = attrs.get("alpha", 0.05), attrs.get("margin", 0.05)
    return (f"Across {len(attrs.get('datasets', []))} datasets, the dataset the unit: each "
            f"variant's ratio to `{attrs.get('reference')}` on each dataset (seed-paired), "
            f"their mean on the log scale with a t test on k − 1 degrees of freedom from their "
            f"spread ({1 - alpha:.0%} interval; the prediction interval is where a new "
            f"dataset's ratio is expected). The verdict is the pooled ratio's: worse/better "
            f"where the t test rejects, equivalent where its {1 - 2 * alpha:.0%} interval lies "
            f"within ±{100 * margin:.3g}% (Holm over the variants, α = {alpha:g}). 'Same "
            f"direction': datasets whose ratio points the pooled way; '(every dataset)': the "
            f"verdict each dataset reached on its own.")
