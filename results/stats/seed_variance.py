"""How much of a variant's seed variance each source of randomness explains.

A run with ``--cross-seeds`` trains every variant on a grid of two seed sources (by default
init × order: every weight initialisation with every data order, one trial per cell;
docs/seed-sources.md). Per variant, the metric then follows the two-way crossed random-effects
model

    y_ij = μ + a_i + b_j + e_ij,   a_i ~ N(0, σ²_a), b_j ~ N(0, σ²_b), e_ij ~ N(0, σ²_e),

with ``a`` the first source's seed, ``b`` the second's and ``e`` the residual: their interaction
and whatever neither seed sets (non-deterministic GPU kernels). With one trial per cell the
interaction cannot be told apart from that noise.

The components are the ANOVA (method of moments) estimates of a balanced design:
σ²_a = (MS_a − MS_e) / n_b, σ²_b = (MS_b − MS_e) / n_a, σ²_e = MS_e; a negative estimate
(the source explains less than the noise shows) is reported as it is, its share as 0.
Intervals: σ²_e's is the exact χ² interval; σ²_a's and σ²_b's, differences of two mean
squares, are the modified large-sample (MLS) intervals of Ting, Burdick, Graybill,
Jeyaratnam and Lu (1990), Burdick & Graybill (1992, "Confidence intervals on variance
components", §3.3), whose coverage stays near the nominal level even at 3 × 3 cells, where
Satterthwaite's does not: over 2,000 simulated 3 × 3 grids at 90%, MLS covered 0.88-0.95 of
the time for each planted setting tried, Satterthwaite 0.41 for a source whose variance is a
fifth of the residual's (tests/test_seed_sources.py checks the MLS coverage).

An arm qualifies when its ok trials cover a complete grid of two sources' seeds (each at two
levels or more, one trial per cell) and hold the third source fixed; otherwise (a default run,
where init and order move together, or a grid with a failed cell) it gets no rows.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Optional

import numpy as np
import pandas as pd
from scipy import stats

from ablations.config.comparison import DEFAULT_METRIC
from ablations.config.statuses import TrialStatus

# trials.parquet's column of each source's seed (results/io/schema.py).
SOURCE_COLUMNS: dict[str, str] = {"init": "init_seed", "order": "order_seed", "data": "data_seed"}
RESIDUAL = "residual"
COMPONENT_COLUMNS = ["ablation", "source", "levels", "trials", "variance", "std", "share",
                     "ci_low", "ci_high"]


def crossed_sources(trials: pd.DataFrame) -> Optional[tuple[str, str]]:
    """The two sources whose seeds ``trials`` (one arm's) cross in a complete grid, one
    trial per cell, the third source held; None when they do not."""
    present = [s for s in SOURCE_COLUMNS if SOURCE_COLUMNS[s] in trials]
    levels = {s: trials[SOURCE_COLUMNS[s]].nunique() for s in present}
    for first, second in combinations(present, 2):
        others = [s for s in present if s not in (first, second)]
        if levels[first] < 2 or levels[second] < 2 or any(levels[s] > 1 for s in others):
            continue
        cells = trials.groupby([SOURCE_COLUMNS[first], SOURCE_COLUMNS[second]]).size()
        if len(cells) == levels[first] * levels[second] and (cells == 1).all():
            return first, second
    return None


def two_way_components(grid: np.ndarray, *, alpha: float = 0.05) -> pd.DataFrame:
    """Variance components of a balanced two-way crossed grid (rows: the first source's seeds,
    columns: the second's; one value per cell): one row per component (``first``, ``second``,
    ``residual`` as sources 0, 1, 2) with the estimate and its ``1 − alpha`` interval."""
    grid = np.asarray(grid, dtype=float)
    rows, cols = grid.shape
    mean = grid.mean()
    row_means, col_means = grid.mean(axis=1), grid.mean(axis=0)
    df_a, df_b, df_e = rows - 1, cols - 1, (rows - 1) * (cols - 1)
    ms_a = cols * np.sum((row_means - mean) ** 2) / df_a
    ms_b = rows * np.sum((col_means - mean) ** 2) / df_b
    residual = grid - row_means[:, None] - col_means[None, :] + mean
    ms_e = np.sum(residual**2) / df_e
    out = [
        (0, (ms_a - ms_e) / cols, *mls_interval(ms_a, df_a, ms_e, df_e, 1 / cols, alpha)),
        (1, (ms_b - ms_e) / rows, *mls_interval(ms_b, df_b, ms_e, df_e, 1 / rows, alpha)),
        (2, ms_e, df_e * ms_e / stats.chi2.ppf(1 - alpha / 2, df_e),
         df_e * ms_e / stats.chi2.ppf(alpha / 2, df_e)),
    ]
    return pd.DataFrame(out, columns=["component", "variance", "ci_low", "ci_high"])


def mls_interval(ms_1: float, df_1: int, ms_2: float, df_2: int, scale: float,
                 alpha: float) -> tuple[float, float]:
    """The MLS interval of ``scale · (ms_1 − ms_2)`` (two independent mean squares with
    ``df_1``, ``df_2`` degrees of freedom) at level ``1 − alpha``, the lower end at least 0
    (Burdick & Graybill 1992, eq. 3.8-3.9, with c_1 = c_2 = ``scale``)."""
    tail = alpha / 2
    estimate = scale * (ms_1 - ms_2)
    f_high = stats.f.ppf(1 - tail, df_1, df_2)
    f_low = stats.f.ppf(tail, df_1, df_2)
    g_1 = 1 - df_1 / stats.chi2.ppf(1 - tail, df_1)
    h_1 = df_1 / stats.chi2.ppf(tail, df_1) - 1
    g_2 = 1 - df_2 / stats.chi2.ppf(1 - tail, df_2)
    h_2 = df_2 / stats.chi2.ppf(tail, df_2) - 1
    g_12 = ((f_high - 1) ** 2 - g_1**2 * f_high**2 - h_2**2) / f_high
    h_12 = ((1 - f_low) ** 2 - h_1**2 * f_low**2 - g_2**2) / f_low
    c_1, c_2 = scale * ms_1, scale * ms_2
    v_low = g_1**2 * c_1**2 + h_2**2 * c_2**2 + g_12 * c_1 * c_2
    v_high = h_1**2 * c_1**2 + g_2**2 * c_2**2 + h_12 * c_1 * c_2
    low = estimate - math.sqrt(max(v_low, 0.0))
    high = estimate + math.sqrt(max(v_high, 0.0))
    return max(low, 0.0), max(high, 0.0)


def seed_variance_table(trials: pd.DataFrame, *, metric: str = DEFAULT_METRIC,
                        alpha: float = 0.05) -> pd.DataFrame:
    """Per arm whose ok trials cross two seed sources (:func:`crossed_sources`): one row per
    source and one for the residual, with the variance component of ``metric`` (its unit
    squared), its standard deviation, its share of the arm's seed variance (the components
    cut at 0, summed) and its ``1 − alpha`` interval. Empty when no arm crosses sources."""
    ok = trials[trials["status"] == TrialStatus.OK].dropna(subset=[metric])
    rows = []
    for arm, group in ok.groupby("ablation", sort=False):
        sources = crossed_sources(group)
        if sources is None:
            continue
        first, second = (SOURCE_COLUMNS[s] for s in sources)
        grid = group.pivot(index=first, columns=second, values=metric).sort_index(
            axis=0).sort_index(axis=1)
        components = two_way_components(grid.to_numpy(), alpha=alpha)
        total = components["variance"].clip(lower=0).sum()
        names = [*sources, RESIDUAL]
        for row in components.itertuples(index=False):
            variance = float(row.variance)
            rows.append({
                "ablation": arm, "source": names[int(row.component)],
                "levels": grid.shape[int(row.component)] if row.component < 2 else None,
                "trials": len(group), "variance": variance,
                "std": math.sqrt(max(variance, 0.0)),
                "share": max(variance, 0.0) / total if total > 0 else math.nan,
                "ci_low": float(row.ci_low), "ci_high": float(row.ci_high),
            })
    return pd.DataFrame(rows, columns=COMPONENT_COLUMNS)


def seed_variance_note(table: pd.DataFrame, *, metric: str, alpha: float) -> str:
    """What the decomposition table says, for the report."""
    crossed = " × ".join(s for s in table["source"].unique() if s != RESIDUAL)
    return (f"The variants ran a grid of seeds ({crossed}, --cross-seeds): per variant, how much "
            f"of the seed-to-seed variance of {metric} each source explains. Variance: the "
            "two-way random-effects ANOVA estimate (method of moments, in the metric's unit "
            f"squared; negative: less than the residual shows, share 0); {1 - alpha:.0%} "
            "intervals: MLS for a source, χ² for the residual (results/stats/seed_variance.py). "
            "Residual: the sources' interaction and what neither seed sets. The verdicts "
            "test the grid as crossed: the variance of the mean of the cells' paired "
            "differences from this two-way ANOVA, Satterthwaite df (results/stats/crossed.py).")
