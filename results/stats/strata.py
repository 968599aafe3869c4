"""Errors and effects per stratum of the data: where an ablation hurts.

- :func:`stratified_errors`: MAE, RMSE and bias per stratum and per ablation, with counts, and
  the difference to the reference per stratum.
- :func:`stratified_effects`: where it hurts: per ablation and stratum level the seed-paired
  difference to the reference with its t interval, and a Holm-corrected test of whether it
  differs from the ablation's overall effect.
- :func:`with_stratum_bins`, :func:`stratum_columns`: the strata (``stratum_*`` columns),
  numeric ones in quantile bins.

Re-exported by :mod:`ablations.results.stats.analysis`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from ablations.config.comparison import DEFAULT_ALPHA, DEFAULT_REFERENCE
from ablations.results.stats.comparisons import holm
from ablations.results.stats.seed_tables import seed_table

STRATUM_PREFIX = "stratum_"


def stratum_columns(predictions: pd.DataFrame) -> list[str]:
    return [c for c in predictions.columns if c.startswith(STRATUM_PREFIX)]


def with_stratum_bins(predictions: pd.DataFrame, *, bins: int = 4) -> pd.DataFrame:
    """Numeric strata (and the target, as ``stratum_target_bin``) cut into quantile bins,
    computed once over all rows so every ablation shares the same edges."""
    out = predictions.copy()
    numeric = [c for c in stratum_columns(out)
               if pd.api.types.is_numeric_dtype(out[c]) and out[c].nunique() > bins]
    for column in numeric:
        out[column] = quantile_bins(out[column], bins)
    out[f"{STRATUM_PREFIX}target_bin"] = quantile_bins(out["target"], bins)
    return out


def quantile_bins(values: pd.Series, bins: int) -> pd.Series:
    """``values`` in ``bins`` quantile bins labelled by their range, ``0.00–0.34`` (not
    pandas' ``(-0.0006050000000000001, 0.336]``): the outer edges are the data's min and max,
    with as many decimals as give the narrowest bin two significant digits (more where two
    labels would be the same). Missing values are ``nan``."""
    codes, edges = pd.qcut(values, bins, labels=False, retbins=True, duplicates="drop")
    edges = np.asarray(edges, dtype=float)
    edges[0], edges[-1] = np.nanmin(values), np.nanmax(values)
    widths = np.diff(edges)
    narrowest = widths[widths > 0].min() if (widths > 0).any() else 1.0
    decimals = int(np.clip(1 - np.floor(np.log10(narrowest)), 0, 8))
    if len(edges) < 2:  # a constant column: one bin, its value
        edges = np.array([edges[0], edges[0]])
        codes = np.where(values.notna(), 0, np.nan)

    def edge(value: float) -> str:
        text = f"{value:.{decimals}f}"
        return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.00"

    while True:
        labels = [f"{edge(lo)}–{edge(hi)}" for lo, hi in zip(edges, edges[1:])]
        if len(set(labels)) == len(labels) or decimals >= 8:
            break
        decimals += 1
    return pd.Series(codes, index=values.index).map(dict(enumerate(labels))).astype(str)


def stratified_errors(predictions: pd.DataFrame, *, bins: int = 4,
                      reference: str = DEFAULT_REFERENCE) -> pd.DataFrame:
    """Per ablation x stratum column x stratum value: n, MAE, RMSE, bias (mean of
    prediction - target), over every ok trial's test predictions; and ``mae_diff``, the MAE
    minus the reference's in the same stratum."""
    binned = with_stratum_bins(predictions, bins=bins)
    binned["error"] = binned["pred_mean"] - binned["target"]
    frames = []
    for column in stratum_columns(binned):
        grouped = binned.groupby(["ablation", column], observed=True)["error"]
        frame = grouped.agg(
            n="size",
            mae=lambda e: float(np.abs(e).mean()),
            rmse=lambda e: float(np.sqrt((e**2).mean())),
            bias="mean",
        ).reset_index().rename(columns={column: "stratum_value"})
        frame.insert(1, "stratum", column.removeprefix(STRATUM_PREFIX))
        frame["stratum_value"] = frame["stratum_value"].astype(str)
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    ref = table[table["ablation"] == reference].set_index(["stratum", "stratum_value"])["mae"]
    key = pd.MultiIndex.from_frame(table[["stratum", "stratum_value"]])
    table["mae_diff"] = table["mae"].to_numpy() - ref.reindex(key).to_numpy()
    return table


def interval_order(level: str) -> tuple[float, str]:
    """Sort key: a quantile bin such as ``0.50–1.20`` (:func:`quantile_bins`) by its left
    edge, other levels after, by name."""
    left = level.split("–", 1)[0] if "–" in level else None
    try:
        return (float(left), level) if left is not None else (float("inf"), level)
    except ValueError:
        return float("inf"), level


def cell_tests(cell_diff: np.ndarray, overall_diff: np.ndarray, alpha: float
                ) -> dict[str, np.ndarray]:
    """Seed-paired statistics of cells, vectorised over any leading axes.

    Args:
        cell_diff: (..., cells, seeds) ablation − reference error in each cell per seed; NaN
            where a seed has no sample in the cell.
        overall_diff: (..., seeds) the same difference over all samples per seed.
        alpha: the interval is (1 − alpha); Holm runs over the ``cells`` axis.

    Returns: arrays of shape (..., cells): n_seeds, diff_mean, ci_low, ci_high, interaction_p
    (one-sample t-test of cell − overall difference per seed against 0, as
    ``scipy.stats.ttest_1samp``; NaN with fewer than two seeds or no spread), interaction_p_holm.
    """
    present = ~np.isnan(cell_diff)
    n = present.sum(axis=-1)
    df = np.where(n >= 2, n - 1, np.nan)

    def mean_sd(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = np.where(present, values, 0.0)
        mean = values.sum(axis=-1) / np.where(n > 0, n, np.nan)
        squares = np.where(present, (values - mean[..., None]) ** 2, 0.0).sum(axis=-1)
        return mean, np.sqrt(squares / df)

    diff_mean, diff_sd = mean_sd(cell_diff)
    half = stats.t.ppf(1 - alpha / 2, df) * diff_sd / np.sqrt(n)
    excess_mean, excess_sd = mean_sd(cell_diff - overall_diff[..., None, :])
    with np.errstate(divide="ignore", invalid="ignore"):
        t = excess_mean / (excess_sd / np.sqrt(n))
    t = np.where(excess_sd > 0, t, np.nan)  # no spread: no test (scipy gives NaN or ±inf)
    p = 2 * stats.t.sf(np.abs(t), df)
    return {"n_seeds": n, "diff_mean": diff_mean, "ci_low": diff_mean - half,
            "ci_high": diff_mean + half, "interaction_p": p, "interaction_p_holm": holm(p)}


def stratified_effects(predictions: pd.DataFrame, *, reference: str = DEFAULT_REFERENCE,
                       metric: str = "abs_error", bins: int = 4,
                       alpha: float = DEFAULT_ALPHA) -> pd.DataFrame:
    """Where an ablation hurts: its seed-paired effect per stratum level, and the levels where
    that effect differs from its overall effect.

    Every sample's error (``metric``: ``abs_error`` = |pred_mean − target|, ``squared_error``,
    or a numeric column of ``predictions``) is averaged per ablation, seed and cell (a level of
    a stratum column; numeric strata and the target cut into ``bins`` quantile bins by
    :func:`with_stratum_bins`, edges shared by all ablations), and over all samples per seed.
    Over the seeds an ablation shares with ``reference``: ``diff_mean`` is the mean of the
    per-seed differences ablation − reference in the cell, with its (1 − alpha) t interval
    (``ci_low``, ``ci_high``); ``overall_diff`` is the mean difference over all samples. The
    interaction test is a one-sample t-test over seeds of (cell difference − overall
    difference), so seed-to-seed noise shared by the whole test set cancels;
    ``interaction_p_holm`` is Holm-adjusted over the family of every cell tested for that
    ablation (all levels of all strata, the target bins included), and ``differs`` is
    ``interaction_p_holm < alpha``. Cells with fewer than two shared seeds, or no spread (a
    stratum with one level), get NaN and are not counted in the family.

    Returns: one row per ablation (the reference excluded) x stratum x level, numeric bins in
    order: ablation, stratum, level, n_seeds, diff_mean, ci_low, ci_high, overall_diff,
    interaction_p, interaction_p_holm, differs.

    Raises:
        ValueError: a ``reference`` with no predictions, an unknown ``metric``, an ``alpha``
            outside (0, 1).
    """
    columns = ["ablation", "stratum", "level", "n_seeds", "diff_mean", "ci_low", "ci_high",
               "overall_diff", "interaction_p", "interaction_p_holm", "differs"]
    if not 0 < alpha < 1:
        raise ValueError(f"alpha {alpha!r} must lie in (0, 1)")
    ablations = list(dict.fromkeys(predictions["ablation"].astype(str)))
    if reference not in ablations:
        raise ValueError(f"reference {reference!r} has no predictions "
                         f"(ablations: {', '.join(ablations) or 'none'})")
    binned = _with_errors(with_stratum_bins(predictions, bins=bins), metric)
    overall = seed_table(binned, metric)
    matrix = _cell_matrix(binned, metric)
    frames = [_ablation_cells(matrix, overall, ablation, reference=reference, alpha=alpha)
              for ablation in ablations if ablation != reference]
    if not frames:
        return pd.DataFrame(columns=columns)
    table = pd.concat(frames, ignore_index=True)
    table["n_seeds"] = table["n_seeds"].astype("int64")
    table["differs"] = (table["interaction_p_holm"] < alpha).to_numpy(dtype=bool)
    return table[columns]


def _with_errors(binned: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``binned`` with every sample's error as ``metric`` (``abs_error``, ``squared_error``,
    or a numeric column it has) and its ablations as strings.

    Raises:
        ValueError: any other ``metric``.
    """
    residual = binned["pred_mean"] - binned["target"]
    if metric == "abs_error":
        binned[metric] = residual.abs()
    elif metric == "squared_error":
        binned[metric] = residual**2
    elif metric not in binned or not pd.api.types.is_numeric_dtype(binned[metric]):
        raise ValueError(f"metric {metric!r}: use abs_error, squared_error or a numeric "
                         "column of the predictions")
    binned["ablation"] = binned["ablation"].astype(str)
    return binned


def _cell_matrix(binned: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The mean ``metric`` per cell (rows: stratum and level, the strata in their columns'
    order, each one's levels by :func:`interval_order`) and per ablation and seed (columns)."""
    cells = []
    for column in stratum_columns(binned):
        cell = binned.groupby(["ablation", "seed", column], observed=True)[metric].mean()
        cell = cell.reset_index().rename(columns={column: "level"})
        cell["level"] = cell["level"].astype(str)
        cell["stratum"] = column.removeprefix(STRATUM_PREFIX)
        cells.append(cell)
    long = pd.concat(cells, ignore_index=True)
    matrix = long.pivot_table(index=["stratum", "level"], columns=["ablation", "seed"],
                              values=metric, aggfunc="mean")
    order = sorted(matrix.index, key=lambda key: (
        list(dict.fromkeys(long["stratum"])).index(key[0]), interval_order(key[1])))
    return matrix.loc[order]


def _ablation_cells(matrix: pd.DataFrame, overall: pd.DataFrame, ablation: str, *,
                    reference: str, alpha: float) -> pd.DataFrame:
    """One ablation's rows: :func:`cell_tests` of its cells against ``reference`` over the
    seeds both have (``overall``: the mean error per seed and ablation), and its overall
    difference."""
    ref_seeds = overall[reference].dropna().index
    seeds = overall[ablation].dropna().index.intersection(ref_seeds)
    cell_diff = (matrix[ablation].reindex(columns=seeds)
                 - matrix[reference].reindex(columns=seeds)).to_numpy(dtype=float)
    overall_diff = (overall.loc[seeds, ablation] - overall.loc[seeds, reference]
                    ).to_numpy(dtype=float)
    tests = cell_tests(cell_diff.reshape(len(matrix), len(seeds)), overall_diff, alpha)
    frame = pd.DataFrame({"ablation": ablation,
                          "stratum": matrix.index.get_level_values("stratum"),
                          "level": matrix.index.get_level_values("level"), **tests})
    frame["overall_diff"] = overall_diff.mean() if len(seeds) else np.nan
    return frame
