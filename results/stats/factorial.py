"""The analysis of a two-level factorial run (docs/factorial.md); the designs themselves are
:mod:`ablations.results.stats.factorial_design` (``FactorialDesign`` is exported here too).

:func:`factorial_effects` fits one ordinary least-squares model (statsmodels) to every cell at
every seed: the ±1 columns of every alias chain (the cells, saturated) plus the seeds as
blocks, and reports the main effects and two-factor interactions with t intervals on the
residual degrees of freedom, Holm over the family of effects, and a verdict per effect at the
project's margin rules (:mod:`ablations.results.stats.verdicts`).
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ablations.config.comparison import DEFAULT_ALPHA, DEFAULT_MARGIN, DEFAULT_METRIC
from ablations.results.stats.comparisons import usable_trials
from ablations.results.stats.contrasts import OUTLIER_MIN_SEEDS, Contrasts, robust_outliers
from ablations.results.io.directions import MetricLike, metric_of
# FactorialDesign is exported here too (docs/factorial.md)
from ablations.results.stats.factorial_design import AliasChain, FactorialDesign
from ablations.results.stats.verdicts import (
    equivalence_tests,
    margin_text,
    parse_margin,
    resolve_margin,
)


def _model(design: FactorialDesign, cells: np.ndarray, seeds: np.ndarray, seed_levels
           ) -> np.ndarray:
    """Rows of the model matrix: intercept, seed blocks (treatment coding, the first seed the
    base), then one ±1 column per alias chain (the cells, saturated)."""
    blocks = (seeds[:, None] == np.asarray(seed_levels)[None, 1:]).astype(float)
    columns = [design.runs[cells][:, list(chain.words[0])].prod(axis=1)
               for chain in design.chains]
    return np.column_stack([np.ones(len(cells)), blocks, *columns]).astype(float)


EFFECT_SCALE = {"main": 2.0, "interaction": 4.0}
Effect = tuple[str, str, AliasChain]  # an effect reported: name, kind, alias chain


def factorial_effects(trials: pd.DataFrame, design: FactorialDesign, *,
                      metric: MetricLike = DEFAULT_METRIC, margin: str | float = DEFAULT_MARGIN,
                      alpha: float = DEFAULT_ALPHA) -> pd.DataFrame:
    """The main effects and two-factor interactions of a factorial run on ``metric`` (a
    :class:`~ablations.config.metrics.Metric`, whose direction turns an effect's
    ``higher`` / ``lower`` into ``worse`` / ``better``, or a built-in column's name).

    One OLS fit (statsmodels) of the ok trials of the design's cells: an intercept, the seeds
    as blocks, and the ±1 column of every alias chain (so the cells are saturated and the
    residual is the seed x cell interaction, with (cells − 1)(seeds − 1) degrees of freedom
    when every cell ran at every seed). From its coefficients β and their covariance:

    - a main effect is 2·β_A: the mean change of the metric when A is flipped from the
      reference cell's value, averaged over the other factors' levels;
    - a two-factor interaction is 4·β_AB = y(A and B flipped) − y(A) − y(B) + y(reference),
      averaged over the other factors: how far flipping both departs from the sum of flipping
      each (positive: worse than additive for a lower-is-better metric). In a fraction it is
      the sum over its alias chain (``aliases``).

    Each effect gets a t interval, a two-sided t test (``p_value``; Holm over the family of
    effects: ``p_holm``) and the TOST against the margin (Holm: ``p_tost_holm``), hence a
    verdict as :func:`ablations.results.stats.verdicts.equivalence_tests` gives one: worse/better,
    equivalent, negligible, inconclusive. A margin in the metric's units is used as it is; a
    percentage is that share of the reference cell's mean, tested as a ratio: the TOST contrasts are
    effect ∓ m·(reference cell's mean), both estimated by the one fit, so the reference
    mean's own error is inside the test (Fieller;
    :class:`ablations.results.stats.contrasts.Contrasts`). An effect whose per-seed estimates hold
    an outlier (the robustness rule) is never `equivalent`.

    Raises:
        ValueError: no ok trial in some cell, fewer than two seeds (no residual), a bad margin
            or α, a relative margin with a reference mean not above 0.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha {alpha!r}: must lie in (0, 0.5), e.g. 0.05")
    parse_margin(margin)
    measure = metric_of(metric)
    metric = measure.name
    ok, dropped = usable_trials(trials, metric)
    cells, seeds, y = _cell_rows(ok, design, metric)
    seed_levels = sorted(set(seeds.tolist()))
    x = _model(design, cells, seeds, seed_levels)
    fit = _fit(y, x, design, seed_levels)
    # the reference cell's fitted mean over the seeds run: its model row, averaged over seeds
    reference_row = _model(design, np.zeros(len(seed_levels), int), np.array(seed_levels),
                           seed_levels).mean(axis=0)
    effects = design.effects()
    first = 1 + len(seed_levels) - 1
    weights = _effect_weights(design, effects, x.shape[1], first)
    contrasts = _effect_contrasts(fit, weights, reference_row)
    reference_mean = float(reference_row @ np.asarray(fit.params))
    value, relative = resolve_margin(margin, reference_mean)
    direction = measure.sign
    outlier = robust_outliers(per_seed_effects(design, cells, seeds, y, seed_levels, weights,
                                               first))
    tests = equivalence_tests(contrasts, margin=value, relative=relative, alpha=alpha,
                              direction=direction, outlier=outlier)
    table = _effects_table(design, effects, contrasts, tests, alpha)
    table["margin"] = value
    table.attrs.update(metric=metric, reference=design.cells[0],
                       reference_mean=reference_mean, margin=value,
                       relative=relative, margin_given=str(margin), alpha=alpha,
                       direction=direction, unit=measure.unit, design=design.label,
                       seeds=len(seed_levels),
                       cells=len(design.cells), df=float(fit.df_resid),
                       comparisons=len(effects), dropped_nan=dropped)
    return table


def _cell_rows(ok: pd.DataFrame, design: FactorialDesign, metric: str
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ok trials of the design's cells as arrays: each one's cell index, seed and value.

    Raises:
        ValueError: a cell without an ok trial.
    """
    index = {name: i for i, name in enumerate(design.cells)}
    ok = ok[ok["ablation"].astype(str).isin(index)]
    missing = [name for name in design.cells if name not in set(ok["ablation"].astype(str))]
    if missing:
        raise ValueError(f"factorial cell {missing[0]} has no ok trial with a finite {metric}: "
                         "the effects cannot be estimated")
    cells = ok["ablation"].astype(str).map(index).to_numpy()
    return cells, ok["seed"].to_numpy(), ok[metric].to_numpy(dtype=float)


def _fit(y: np.ndarray, x: np.ndarray, design: FactorialDesign, seed_levels: Sequence[int]
         ) -> Any:
    """The OLS fit (statsmodels) of the values ``y`` on the model matrix ``x``.

    Raises:
        ValueError: no residual degree of freedom, or a model matrix short of full rank.
    """
    import statsmodels.api as sm

    fit = sm.OLS(y, x).fit()
    if fit.df_resid < 1 or np.linalg.matrix_rank(x) < x.shape[1]:
        raise ValueError("the factorial effects need every cell at two or more seeds "
                         f"(here {len(seed_levels)} seed(s), {len(y)} ok trials for "
                         f"{len(design.cells)} cells)")
    return fit


def _effect_weights(design: FactorialDesign, effects: list[Effect], columns: int,
                    first: int) -> np.ndarray:
    """Each effect as a row of weights on the fit's coefficients: its alias chain's column
    (from ``first``, past the intercept and the seed blocks) times its scale."""
    weights = np.zeros((len(effects), columns))
    for j, (_, kind, chain) in enumerate(effects):
        weights[j, first + design.chains.index(chain)] = EFFECT_SCALE[kind]
    return weights


def _effect_contrasts(fit: Any, weights: np.ndarray, reference_row: np.ndarray) -> Contrasts:
    """The effects and the reference cell's mean from the fit's coefficients and their
    covariance, with the fit's residual degrees of freedom."""
    beta, cov = np.asarray(fit.params), np.asarray(fit.cov_params())
    count = len(weights)
    return Contrasts(
        diff=weights @ beta, ref_mean=np.full(count, reference_row @ beta),
        var_diff=np.einsum("ij,jk,ik->i", weights, cov, weights),
        cov=weights @ cov @ reference_row,
        var_ref=np.full(count, reference_row @ cov @ reference_row),
        df=np.full(count, float(fit.df_resid)))


def _effects_table(design: FactorialDesign, effects: list[Effect], contrasts: Contrasts,
                   tests: dict[str, np.ndarray], alpha: float) -> pd.DataFrame:
    """One row per effect: its name, kind, factors and aliases, its estimate with the
    1 − α two-sided t interval, and the columns of its tests."""
    low, high = contrasts.interval(alpha / 2, False)  # the 1 − α two-sided t interval
    return pd.DataFrame({
        "effect": [name for name, _, _ in effects],
        "kind": [kind for _, kind, _ in effects],
        "factors": [" x ".join(design.factors[i] for i in chain.words[0])
                    for _, _, chain in effects],
        "aliases": [chain.text(max_order=3).partition(" = ")[2] for _, _, chain in effects],
        "estimate": contrasts.diff, "se": contrasts.se, "df": contrasts.df,
        "ci_low": low, "ci_high": high,
        **{name: tests[name] for name in (
            "tost_ci_low", "tost_ci_high", "ratio", "ratio_ci_low", "ratio_ci_high",
            "p_value", "p_holm", "p_tost", "p_tost_holm", "equivalence_bound_holm",
            "outlier", "verdict")},
    })


def per_seed_effects(design: FactorialDesign, cells: np.ndarray, seeds: np.ndarray,
                     y: np.ndarray, seed_levels: Sequence[int], weights: np.ndarray,
                     first: int) -> np.ndarray:
    """Each effect estimated within each seed alone (effects x seeds; NaN for a seed missing
    a cell): what the robustness rule reads."""
    out = np.full((len(weights), len(seed_levels)), np.nan)
    if len(seed_levels) < OUTLIER_MIN_SEEDS:  # no rule below that many seeds
        return out
    n_cells = len(design.cells)
    x = _model(design, np.arange(n_cells), np.full(n_cells, seed_levels[0]), seed_levels)
    # a seed's cell means -> the chains' coefficients (the cells saturate the model)
    solve = np.linalg.pinv(np.column_stack([np.ones(n_cells), x[:, first:]]))[1:]
    to_effects = weights[:, first:] @ solve  # effects x cells
    for s, seed in enumerate(seed_levels):
        mine = seeds == seed
        counts = np.bincount(cells[mine], minlength=n_cells)
        if (counts == 0).any():
            continue
        means = np.bincount(cells[mine], weights=y[mine], minlength=n_cells) / counts
        out[:, s] = to_effects @ means
    return out


def interaction_means(trials: pd.DataFrame, design: FactorialDesign, *,
                      metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """For each reported two-factor interaction A:B, the mean of ``metric`` over the ok
    trials at each of the four level combinations (averaged over the other factors and the
    seeds): columns effect, a, b (the two factors), a_level, b_level (-1: the reference's
    value, +1: flipped), a_value, b_value (the config values there), mean, n."""
    ok, _ = usable_trials(trials, metric)
    index = {name: i for i, name in enumerate(design.cells)}
    ok = ok[ok["ablation"].astype(str).isin(index)]
    runs = design.runs[ok["ablation"].astype(str).map(index).to_numpy()]
    rows = []
    for name, kind, chain in design.effects():
        if kind != "interaction":
            continue
        a, b = chain.words[0]
        for la, lb in itertools.product((-1, 1), repeat=2):
            mine = (runs[:, a] == la) & (runs[:, b] == lb)
            values = ok[metric].to_numpy(dtype=float)[mine]
            rows.append({"effect": name, "a": design.factors[a], "b": design.factors[b],
                         "a_level": la, "b_level": lb, "a_value": design.level(a, la),
                         "b_value": design.level(b, lb),
                         "mean": values.mean() if len(values) else np.nan,
                         "n": int(len(values))})
    return pd.DataFrame(rows)


def factorial_note(table: pd.DataFrame) -> str:
    """What the effects table's numbers and verdicts mean, with its margin and α."""
    a = table.attrs
    better = {-1: "lower is better", 1: "higher is better", 0: "no better direction"}
    return (f"{a['design']}, {a['cells']} cells x {a['seeds']} seeds; effects on "
            f"{a['metric']} ({better[a['direction']]}) by OLS on ±1-coded factors with the "
            f"seeds as blocks ({a['df']:.0f} residual df). A main effect: the mean change when "
            "the switch is flipped from the reference cell's value; an interaction A:B: "
            "y(both flipped) − y(A) − y(B) + y(reference), averaged over the other factors "
            "(with its aliases in a fraction). Margin "
            f"{margin_text(a)}, alpha {a['alpha']:g}, Holm over {a['comparisons']} effects: "
            "worse/better = differs (t test); equivalent = TOST, the "
            f"{1 - 2 * a['alpha']:.0%} interval inside the margin; negligible = both; "
            "inconclusive = neither.")


def effects_view(table: pd.DataFrame) -> pd.DataFrame:
    """The effects table as the console and the report show it (numbers as text)."""
    relative = table.attrs.get("relative")

    def fmt(value: float, digits: int = 3) -> str:
        return "-" if not np.isfinite(value) else f"{value:+.{digits}f}"

    rows = []
    for _, row in table.iterrows():
        bound = row["equivalence_bound_holm"]
        rows.append({
            "effect": row["effect"], "factors": row["factors"],
            "aliases": row["aliases"] or "-",
            "estimate": fmt(row["estimate"]),
            "ci": f"[{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]",
            "share_of_ref": fmt(100 * row["ratio"], 1) + "%",
            "p_holm": f"{row['p_holm']:.3g}",
            "verdict": row["verdict"],
            "equiv_bound": "-" if not np.isfinite(bound) else (
                f"{bound:.1%}" if relative else f"{bound:.3f}"),
        })
    return pd.DataFrame(rows)
