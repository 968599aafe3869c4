"""The report's tables as a reader sees them: the analysis tables (ablations.results.stats.verdicts,
ablations.results.stats.comparisons, ablations.results.stats.strata,
ablations.results.stats.compare) with readable column names, units and numbers
(:mod:`ablations.results.report.formatting`). The numbers themselves are the analysis's, unchanged.
"""

from __future__ import annotations

import math

import pandas as pd

from ablations.results.io.directions import MetricLike, metric_of
from ablations.results.report.formatting import (
    Column,
    decimals_for,
    interval,
    number,
    readable,
    with_unit,
)
from ablations.results.stats.failures import failure_bound_text
from ablations.results.stats.strata import interval_order

FLAG = "*"  # marks a stratum cell whose effect differs from the variant's overall effect


def verdict_view(ablation: pd.DataFrame, *, metric: MetricLike, alpha: float,
                 per_look: bool | None = None) -> pd.DataFrame:
    """The verdict table: per variant its seeds, mean, difference to the reference with the
    interval TOST reads (1 − 2α), the verdict, Holm p-values and the equivalence bound, in
    ``metric``'s unit (a :class:`~ablations.config.metrics.Metric`, or a built-in column's
    name). ``per_look``: the verdicts were reached at looks (the analysis's ``looks``; None:
    as the table's attrs say): each arm's p at its look, where it was decided and how many
    looks it reached."""
    measure = metric_of(metric)
    metric, unit = measure.name, measure.unit
    if per_look is None:  # a --seeds auto table says so (ablations.results.stats.sequential)
        per_look = bool(ablation.attrs.get("sequential"))
    relative = bool(ablation.attrs.get("relative"))
    if relative:  # shares of the reference's mean, read as percentages
        ablation = ablation.assign(**{c: 100 * ablation[c] for c in (
            "ratio", "ratio_ci_low", "ratio_ci_high", "equivalence_bound_holm") if c in ablation})
    p_columns = [Column("p at that look", "p_value", "p"),
                 Column("p equivalence at that look", "p_tost", "p")] if per_look else [
        Column("p (Holm)", "p_holm", "p"), Column("p equivalence (Holm)", "p_tost_holm", "p")]
    columns = [
        Column("Variant", "ablation", "text"),
        Column("Seeds", "n_ok", "count"),
        Column(with_unit(f"Mean {metric}", unit), f"{metric}_mean"),
        Column(with_unit("Δ vs reference", unit), "diff_mean", "difference"),
        Column(f"{1 - 2 * alpha:.0%} interval of Δ", ("tost_ci_low", "tost_ci_high"),
               "interval", decimals_from="diff_mean"),
        *([Column(f"{1 - 2 * alpha:.0%} interval of the ratio − 1 (%)",
                  ("ratio_ci_low", "ratio_ci_high"), "interval", decimals_from="ratio")]
          if relative and "ratio_ci_low" in ablation else []),
        Column("Verdict", "verdict", "text"),
        *p_columns,
        Column("Equivalent within ± (% of the reference's mean)", "equivalence_bound_holm",
               decimals_from="ratio") if relative and "ratio" in ablation else
        Column(with_unit("Equivalent within ±", unit), "equivalence_bound_holm"),
    ]
    if "dataset" in ablation:  # an experiment over several datasets: each one's rows
        columns.insert(0, Column("Dataset", "dataset", "text"))
    if per_look and "decided_at" in ablation:
        columns.append(Column("Decided at (seeds)", "decided_at", "count"))
    if per_look and "looks" in ablation:
        columns.append(Column("Looks", "looks", "count"))
    if "failure_rate_upper" in ablation:  # every arm: its diverged runs, its rate's bound
        ablation = ablation.assign(failure_text=[
            failure_bound_text(int(k), int(n), float(b)) for k, n, b in zip(
                ablation["n_diverged"].fillna(0), ablation["n_outcomes"].fillna(0),
                ablation["failure_rate_upper"].astype(float))])
        columns.insert(2, Column(f"Diverged (failure rate ≤, {1 - alpha:.0%})", "failure_text",
                                 "text"))
    elif "n_diverged" in ablation and ablation["n_diverged"].fillna(0).gt(0).any():
        columns.insert(2, Column("Diverged", "n_diverged", "count"))
    if "reason" in ablation and ablation["reason"].fillna("").ne("").any():
        columns.append(Column("Why", "reason", "text"))
    return readable(ablation, columns)


def declared_metrics_view(trials: pd.DataFrame, declared: dict) -> pd.DataFrame:
    """Own code's declared metrics per variant: the ok seeds, and each metric's mean ± standard
    deviation over them, in its declared unit."""
    ok = trials[trials["status"] == "ok"]
    names = [name for name in declared if name in trials]
    table = ok.groupby("ablation", sort=False)[names].agg(["mean", "std"])
    table.columns = [f"{name}_{stat}" for name, stat in table.columns]
    table = table.reindex(list(dict.fromkeys(trials["ablation"]))).reset_index()
    table["n_ok"] = table["ablation"].map(ok.groupby("ablation").size()).fillna(0)
    columns = [Column("Variant", "ablation", "text"), Column("Seeds", "n_ok", "count")]
    for name in names:
        unit = metric_of(name, declared).unit
        columns += [Column(with_unit(f"{name} mean", unit), f"{name}_mean"),
                    Column(with_unit(f"{name} sd", unit), f"{name}_std")]
    return readable(table, columns)


def ablation_view(ablation: pd.DataFrame, *, metric: MetricLike, alpha: float
                  ) -> pd.DataFrame:
    """The ablation table: means with t intervals, paired differences, tests, effect sizes, in
    ``metric``'s unit."""
    measure = metric_of(metric)
    metric, unit = measure.name, measure.unit
    level = f"{1 - alpha:.0%}"
    return readable(ablation, [
        Column("Variant", "ablation", "text"),
        Column("Seeds", "n_ok", "count"),
        Column("Excluded", "n_excluded", "count"),
        Column(with_unit(f"Mean {metric}", unit), f"{metric}_mean"),
        Column(f"{level} interval", (f"{metric}_ci_low", f"{metric}_ci_high"), "interval",
               decimals_from=f"{metric}_mean"),
        Column("Test", "test", "text"),
        Column(with_unit("Δ vs reference", unit), "diff_mean", "difference"),
        Column(f"{level} repeated interval of Δ" if ablation.attrs.get("diff_ci") == "repeated"
               else f"{level} interval of Δ", ("diff_ci_low", "diff_ci_high"), "interval",
               decimals_from="diff_mean"),
        Column("p", "p_value", "p"),
        Column("p (Holm)", "p_holm", "p"),
        Column("Effect size (d)", "effect_size", "difference"),
    ])


def seed_variance_view(table: pd.DataFrame, *, metric: MetricLike, alpha: float
                       ) -> pd.DataFrame:
    """ablations.results.stats.seed_variance's table: per variant and source of randomness, its
    variance component, standard deviation, share of the seed variance and interval, in
    ``metric``'s unit."""
    unit = metric_of(metric).unit
    share = [f"{value:.0%}" if math.isfinite(value) else "" for value in table["share"]]
    return readable(table.assign(share_text=share), [
        Column("Variant", "ablation", "text"),
        Column("Source", "source", "text"),
        Column("Seeds", "levels", "count"),
        Column(with_unit("Variance", f"{unit}²" if unit else ""), "variance"),
        Column(f"{1 - alpha:.0%} interval", ("ci_low", "ci_high"), "interval",
               decimals_from="variance"),
        Column(with_unit("Std", unit), "std"),
        Column("Share of the seed variance", "share_text", "text"),
    ])


def comparison_view(table: pd.DataFrame, *, metric: MetricLike, alpha: float
                    ) -> pd.DataFrame:
    """ablations.results.stats.compare's table: B − A per variant, in ``metric``'s unit."""
    unit = metric_of(metric).unit
    return readable(table, [
        Column("Variant", "ablation", "text"),
        Column("Seeds A", "n_a", "count"),
        Column("Seeds B", "n_b", "count"),
        Column("Pairs (Δ's seeds)", "n_pairs", "count"),
        Column(with_unit("Mean A", unit), "a_mean", decimals_from="a_mean"),
        Column(with_unit("Mean B", unit), "b_mean", decimals_from="a_mean"),
        Column(with_unit("Δ B − A", unit), "diff_mean", "difference"),
        Column(f"{1 - 2 * alpha:.0%} interval of Δ", ("tost_ci_low", "tost_ci_high"),
               "interval", decimals_from="diff_mean"),
        Column("p (Holm)", "p_holm", "p"),
        Column("p equivalence (Holm)", "p_tost_holm", "p"),
        Column("Verdict", "verdict", "text"),
    ])


def strata_grids(effects: pd.DataFrame, strata: pd.DataFrame, *, reference: str,
                 variants: list[str]) -> dict[str, pd.DataFrame]:
    """Per stratum, a variant × level grid of the difference of the MAE to ``reference`` in
    that level (km): ``+0.47 [0.40, 0.55]`` with the seed-paired t interval where a variant has
    two seeds or more (:func:`ablations.results.stats.strata.stratified_effects`), the point
    difference otherwise; a cell marked ``*`` is one whose effect differs from the variant's overall
    effect (Holm). Without the reference's predictions, the MAE differences of
    :func:`ablations.results.stats.strata.stratified_errors`."""
    grids: dict[str, pd.DataFrame] = {}
    if len(effects):
        long = effects.rename(columns={"level": "value"})
    elif len(strata):
        long = strata[strata["ablation"] != reference].rename(
            columns={"stratum_value": "value", "mae_diff": "diff_mean"})
    else:
        return grids
    for stratum, rows in long.groupby("stratum", sort=False):
        decimals = decimals_for(rows["diff_mean"], significant=2)  # this grid's own scale
        levels = sorted(rows["value"].astype(str).unique(), key=interval_order)
        cells = {}
        for row in rows.itertuples(index=False):
            text = number(row.diff_mean, decimals, signed=True)
            low, high = getattr(row, "ci_low", math.nan), getattr(row, "ci_high", math.nan)
            if getattr(row, "n_seeds", 0) >= 2 and text:
                text = f"{text} {interval(low, high, decimals)}".strip()
            if bool(getattr(row, "differs", False)):
                text = FLAG + text
            cells[(row.ablation, str(row.value))] = text
        present = list(dict.fromkeys(key[0] for key in cells))
        order = [v for v in variants if v in present] + [
            v for v in present if v not in variants]
        grid = pd.DataFrame([[cells.get((variant, level), "") for level in levels]
                             for variant in order], columns=levels)
        grid.insert(0, "Variant", order)
        grids[str(stratum)] = grid
    return grids
