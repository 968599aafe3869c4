"""Verdicts of a ``--cross-seeds`` run: the comparisons as the crossed design has them.

A crossed run trains every variant on an a × b grid of two seed sources (by default init ×
order; docs/seed-sources.md), cell (i, j) the same pairing seed for every variant. A cell's
paired difference then follows the two-way crossed model without replication

    d_ij = δ + α_i + β_j + ε_ij,

the α_i shared by the cells of the first source's i-th seed, the β_j by those of the second's
j-th seed: the a·b cells are not a·b independent replicates, and treating them as such makes
the intervals too narrow (false `worse`/`better` 0.42-0.87 on the simulated grids of
tools/crossed_simulation.py). The variance of the mean d̄ is σ²_α/a + σ²_β/b + σ²_ε/(ab),
estimated without bias by the mean squares of the two-way ANOVA (E MS_a = σ²_ε + b·σ²_α,
E MS_b = σ²_ε + a·σ²_β, E MS_e = σ²_ε):

    var(d̄) = (MS_a + MS_b − MS_e) / (ab).

The contrast of a relative margin, v − ρ·r = d − x·r (x = ρ − 1), is linear in the cells, so
its variance is A − 2x·B + x²·C with A, B, C the same formula on the mean cross products of d
and r (:func:`mean_squares`): :class:`ablations.results.stats.contrasts.Contrasts`' moments.

- Floor: the estimate can fall below the residual's share MS_e/(ab), even below 0, when a
  source's mean square falls below the residual's. Each source's part, MS_a − MS_e and
  MS_b − MS_e, is cut at 0 as a 2 × 2 matrix over (d, r) (its positive semi-definite part
  [·]₊), so every contrast's variance comes from (MS_e + [MS_a − MS_e]₊ + [MS_b − MS_e]₊)/(ab):
  the formula above where both sources show, never below MS_e/(ab).
- Degrees of freedom: Satterthwaite's for the difference d over the mean squares kept:
  (MS_a + MS_b − MS_e)² / (MS_a²/(a−1) + MS_b²/(b−1) + MS_e²/((a−1)(b−1))) with both
  sources, MS_a's a − 1 (or MS_b's b − 1) with one, MS_e's (a−1)(b−1) with none; one df per
  arm, used for its relative contrasts at ρ = 1 ± margin too (an approximation
  tools/crossed_simulation.py checks). Measured per arm on its grids (40,000 each, six
  mixes of the parts, 2026-11-25), the t test of Δ = 0 rejected at 0.02-1.13 times its level
  at α/8 (Holm's first step for eight arms) at 3 × 3 and 4 × 4; the cells' naive variance as
  the floor, with their a·b − 1 degrees of freedom there, rejected at up to 2.3 (3 × 3) and
  2.9 (4 × 4) times it.
- A grid needs 3 seeds of each source: at 2 × 2 each source's mean square has 1 degree of
  freedom; such an arm gets no test (``--cross-seeds --seeds 2`` is refused before any trial).
  A failed cell: the arm is compared on its largest complete sub-grid left by dropping the
  rows, or the columns, that hold a failed cell.

Validated by tools/crossed_simulation.py (``python -m tools.crossed_simulation``;
docs/seed-sources.md has the rates) and against statsmodels' ANOVA in tests/test_seed_sources.py.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from ablations.results.stats.contrasts import Contrasts
from ablations.results.stats.seed_variance import SOURCE_COLUMNS, crossed_sources

MIN_LEVELS = 3  # seeds per source for a test: at 2 the variance has 1 degree of freedom
CROSSED_NOTE = ("A crossed grid of seeds (--cross-seeds): the tests use the crossed "
                "design's variance of the mean (two-way ANOVA of the cells' paired "
                "differences, Satterthwaite df; results/stats/crossed.py), not the cells as "
                "independent seeds; a grid below 3 x 3 gets no test.")


def mean_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two-way ANOVA's mean (cross) products of grids ``x`` and ``y`` (..., a, b), one
    value per cell: MS_a (between the rows), MS_b (between the columns), MS_e (residual); of
    x alone for ``y`` = ``x``."""
    rows, cols = x.shape[-2:]

    def parts(z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        grand = z.mean(axis=(-2, -1), keepdims=True)
        row = z.mean(axis=-1, keepdims=True) - grand  # (..., a, 1)
        col = z.mean(axis=-2, keepdims=True) - grand  # (..., 1, b)
        return row, col, z - grand - row - col

    (row_x, col_x, res_x), (row_y, col_y, res_y) = parts(x), parts(y)
    ms_a = cols * (row_x * row_y).sum(axis=(-2, -1)) / (rows - 1)
    ms_b = rows * (col_x * col_y).sum(axis=(-2, -1)) / (cols - 1)
    ms_e = (res_x * res_y).sum(axis=(-2, -1)) / ((rows - 1) * (cols - 1))
    return ms_a, ms_b, ms_e


def _positive_part(p: np.ndarray, q: np.ndarray, s: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The positive semi-definite part of the symmetric 2 × 2 matrices [[p, q], [q, s]]
    (their negative eigenvalues set to 0), as (p, q, s)."""
    matrix = np.stack([np.stack([p, q], -1), np.stack([q, s], -1)], -2)
    values, vectors = np.linalg.eigh(matrix)
    kept = (vectors * np.maximum(values, 0.0)[..., None, :]) @ np.swapaxes(vectors, -1, -2)
    return kept[..., 0, 0], kept[..., 0, 1], kept[..., 1, 1]


def crossed_contrasts(variant: np.ndarray, reference: np.ndarray) -> Contrasts:
    """The comparisons of complete grids ``variant`` and ``reference`` (..., a, b), cell (i,
    j) of both the same pair of seeds, with the crossed design's variance (module docstring);
    a or b below :data:`MIN_LEVELS`: no test (NaN)."""
    variant, reference = np.broadcast_arrays(np.asarray(variant, float),
                                             np.asarray(reference, float))
    rows, cols = variant.shape[-2:]
    cells = rows * cols
    d = variant - reference
    # (MS_a, MS_b, MS_e), each a 2 x 2 matrix over (d, r) as its three elements (dd, dr, rr)
    ms = [np.stack(m) for m in zip(mean_squares(d, d), mean_squares(d, reference),
                                   mean_squares(reference, reference))]
    source_a = np.stack(_positive_part(*(ms[0] - ms[2])))
    source_b = np.stack(_positive_part(*(ms[1] - ms[2])))
    var_diff, cov, var_ref = (ms[2] + source_a + source_b) / cells
    # Satterthwaite on d: the mean squares its variance is made of, each source's only where
    # it exceeds the residual's (where it does not, that source's part is 0)
    df_a, df_b, df_e = rows - 1.0, cols - 1.0, (rows - 1.0) * (cols - 1.0)
    ms_a, ms_b, ms_e = ms[0][0], ms[1][0], ms[2][0]
    keep_a, keep_b = ms_a > ms_e, ms_b > ms_e
    with np.errstate(divide="ignore", invalid="ignore"):
        # weights of MS_a, MS_b, MS_e: 1, 1, -1 with both sources; 1, 0, 0 with one; 0, 0, 1
        w_a, w_b = keep_a.astype(float), keep_b.astype(float)
        w_e = np.where(keep_a & keep_b, -1.0, np.where(keep_a | keep_b, 0.0, 1.0))
        df = (w_a * ms_a + w_b * ms_b + w_e * ms_e) ** 2 / (
            (w_a * ms_a) ** 2 / df_a + (w_b * ms_b) ** 2 / df_b + (w_e * ms_e) ** 2 / df_e)
    df = np.where(np.isfinite(df), df, df_e)  # every cell the same: no spread at all
    contrasts = Contrasts(d.mean(axis=(-2, -1)), reference.mean(axis=(-2, -1)), var_diff, cov,
                          var_ref, df)
    if rows < MIN_LEVELS or cols < MIN_LEVELS:
        return contrasts.map(lambda values: np.full(values.shape, np.nan))
    return contrasts


def crossed_cells(trials: pd.DataFrame, reference: str) -> Optional[pd.DataFrame]:
    """Where each pairing seed sits in a ``--cross-seeds`` grid: ``row`` and ``col`` (0-based
    ranks of the two crossed sources' seeds) by ``seed``, read from the reference's trials of
    any status (the grid as planned); None when the reference's seeds do not cross two
    sources (:func:`ablations.results.stats.seed_variance.crossed_sources`)."""
    planned = trials[trials["ablation"] == reference].drop_duplicates("seed")
    sources = crossed_sources(planned) if len(planned) else None
    if sources is None:
        return None
    first, second = (SOURCE_COLUMNS[s] for s in sources)
    return pd.DataFrame({"row": planned[first].rank(method="dense").astype(int) - 1,
                         "col": planned[second].rank(method="dense").astype(int) - 1}
                        ).set_axis(planned["seed"].to_numpy())


def complete_subgrid(present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows and columns kept of a grid whose cells ``present`` (a, b) says: every row and
    column where no cell is missing, dropping rows or columns, whichever keeps more cells."""
    full_rows, full_cols = present.all(axis=1), present.all(axis=0)
    all_rows, all_cols = np.ones(present.shape[0], bool), np.ones(present.shape[1], bool)
    if full_rows.sum() * present.shape[1] >= full_cols.sum() * present.shape[0]:
        return full_rows, all_cols
    return all_rows, full_cols


def crossed_family(trials: pd.DataFrame, by_seed: pd.DataFrame, arms: list[str], *,
                   reference: str) -> Optional[Contrasts]:
    """Per arm, :func:`crossed_contrasts` against ``reference`` on the grid of
    :func:`crossed_cells` (``by_seed``: the usable values, seeds × arms); None when ``trials``
    is not a crossed run, so the caller keeps its seed-paired comparisons."""
    cells = crossed_cells(trials, reference)
    if cells is None:
        return None
    shape = (cells["row"].max() + 1, cells["col"].max() + 1)

    def grid(arm: str) -> np.ndarray:
        values = np.full(shape, np.nan)
        if arm in by_seed:
            column = by_seed[arm].dropna()
            placed = cells.loc[cells.index.intersection(column.index)]
            values[placed["row"], placed["col"]] = column[placed.index].to_numpy()
        return values

    ref = grid(reference)
    items = []
    for arm in arms:
        mine = grid(arm)
        rows, cols = complete_subgrid(~np.isnan(mine) & ~np.isnan(ref))
        if rows.sum() < MIN_LEVELS or cols.sum() < MIN_LEVELS:
            items.append(None)
            continue
        items.append(crossed_contrasts(mine[np.ix_(rows, cols)], ref[np.ix_(rows, cols)]))
    return Contrasts.stack(items)


def add_crossed_columns(table: pd.DataFrame, index: pd.Index, contrasts: Contrasts,
                        alpha: float) -> None:
    """The difference columns of a verdict (or compare) table's rows ``index`` from their
    crossed comparisons ``contrasts``, in place: ``se``, ``df``, the 1 − α interval
    ``diff_ci_low``/``diff_ci_high``, ``test`` (``crossed t``; a row another test decided,
    such as ``worst-rank``, keeps its name); ``.attrs["crossed"]`` True."""
    low, high = contrasts.interval(alpha / 2, False)
    tested = ~np.isnan(np.asarray(contrasts.diff, float))
    table.loc[index, "se"] = np.where(tested, contrasts.se, np.nan)
    table.loc[index, "df"] = np.where(tested, contrasts.df, np.nan)
    table.loc[index, "diff_ci_low"], table.loc[index, "diff_ci_high"] = low, high
    if "test" in table:
        paired = table.loc[index, "test"].isin(["paired t", "Welch t"]).to_numpy()
        named = np.where(tested, "crossed t", f"none (grid below {MIN_LEVELS} x {MIN_LEVELS})")
        table.loc[index[paired], "test"] = named[paired]
    table.attrs["crossed"] = True
