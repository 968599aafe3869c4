"""Figures of an experiment across datasets (:mod:`ablations.results.stats.datasets`): a forest plot
per ablation, one row per dataset and the pooled estimate at the bottom, and the critical-difference
diagram of the arms' average ranks. Drawn and saved as :mod:`ablations.results.report.plots` draws
its figures (the report's width, Okabe and Ito's colours, PNG with PDF and SVG beside it at the
report's, a page's and a column's size: :func:`ablations.results.report.plots.vector_files`)."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Polygon
from scipy import stats

from ablations.results.report.plots import PALETTE, VERDICT_COLORS, save_figure
from ablations.results.stats.dataset_rows import DATASET
from ablations.results.stats.datasets import Ranks

FIGURE_WIDTH = 7.5  # inches: the report's forest plot's
ROW_HEIGHT = 0.45  # inches per row of a forest plot
CD_UNIT_HEIGHT = 0.3  # inches per label row of the critical-difference diagram
CD_BAR_Y = 2.0  # the critical difference's bar, in label rows above the rank axis
CD_COLORS = ("blue", "orange", "green", "vermillion", "purple", "sky_blue", "black")


def dataset_intervals(effects: pd.DataFrame, *, alpha: float) -> pd.DataFrame:
    """Each dataset's ratio − 1 and its 1 − α t interval (t on n_pairs − 1 degrees of
    freedom), from :func:`ablations.results.stats.datasets.dataset_effects`'s log ratios: ``ratio``,
    ``ratio_ci_low``, ``ratio_ci_high`` (NaN where the dataset has no ratio)."""
    log_ratio = effects["log_ratio"].to_numpy(float)
    df = effects["n_pairs"].to_numpy(float) - 1
    with np.errstate(invalid="ignore"):
        half = stats.t.ppf(1 - alpha / 2, np.where(df >= 1, df, np.nan)) * np.sqrt(
            effects["variance"].to_numpy(float))
    return pd.DataFrame({"ratio": np.expm1(log_ratio),
                         "ratio_ci_low": np.expm1(log_ratio - half),
                         "ratio_ci_high": np.expm1(log_ratio + half)}, index=effects.index)


def _pairs(count: float) -> str:
    return f"{int(count)} seed pair{'' if int(count) == 1 else 's'}"


def _no_ratio_note(row: pd.Series) -> str:
    """Why a dataset has no ratio (:func:`ablations.results.stats.datasets.dataset_effects`)."""
    if int(row["n_pairs"]) < 2:
        return f"no ratio: {_pairs(row['n_pairs'])} (needs 2)"
    return "no ratio: a mean not above 0"


# ratios spanning more than this factor are drawn on a log axis (ticks still in %)
LOG_AXIS_SPAN = 3.0


def _axis(ax, shares: np.ndarray):
    """The forest plot's x coordinate of a ratio − 1 (``shares``: every value to draw): the
    percentage on a linear axis, or, where the ratios span more than :data:`LOG_AXIS_SPAN`
    times, the ratio on a log axis labelled in % (a ratio of 0.2 and one of 5 are as far from
    1), so that one wide interval does not squeeze the rest."""
    from matplotlib.ticker import FuncFormatter

    ratios = 1 + shares[shares > -1]
    if ratios.size and ratios.max() / ratios.min() > LOG_AXIS_SPAN:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{100 * (v - 1):+.0f}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        return lambda share: np.where(np.asarray(share, float) > -1, 1 + np.asarray(
            share, float), np.nan)
    return lambda share: 100 * np.asarray(share, float)


def draw_dataset_forest(effects: pd.DataFrame, across: pd.Series, *, alpha: float,
                        metric: str) -> Figure:
    """The figure of :func:`dataset_forest_plot`, unsaved: rows from the top in the order of
    ``effects``, the pooled row at y = 0."""
    count = len(effects)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, ROW_HEIGHT * (count + 1) + 1.6))
    y = np.arange(count, 0, -1, dtype=float)  # the first dataset on top
    intervals = dataset_intervals(effects, alpha=alpha)
    has_ratio = np.isfinite(intervals["ratio"].to_numpy(float))
    shares = np.r_[intervals.to_numpy(float).ravel(), [float(across[c]) for c in (
        "ratio", "ratio_ci_low", "ratio_ci_high", "pi_low", "pi_high")]]
    x = _axis(ax, shares[np.isfinite(shares)])  # ratio − 1 -> the axis' coordinate
    point = x(intervals["ratio"].to_numpy(float))
    low, high = (x(intervals[c].to_numpy(float)) for c in ("ratio_ci_low", "ratio_ci_high"))
    share = float(across["margin"])
    margin = x(-share), x(share)
    ax.axvspan(*margin, color=PALETTE["blue"], alpha=0.12, lw=0,
               label=f"margin ±{100 * share:.3g}%")
    for edge in margin:
        ax.axvline(edge, color=PALETTE["blue"], lw=0.8, ls="--")
    ax.axvline(x(0.0), color="0.2", lw=0.8)
    # a dataset with a ratio has two pairs or more, so its t interval is finite
    ax.errorbar(point[has_ratio], y[has_ratio],
                xerr=[point[has_ratio] - low[has_ratio], high[has_ratio] - point[has_ratio]],
                fmt="s", markersize=5, color=PALETTE["black"], ecolor="0.35", elinewidth=1.5,
                zorder=3, label="dataset, t interval")
    for row_y, (_, row) in zip(y[~has_ratio], effects[~has_ratio].iterrows()):
        ax.text(0.01, row_y, _no_ratio_note(row), transform=ax.get_yaxis_transform(),
                ha="left", va="center", fontsize=8, style="italic", color="0.35")
    verdict = str(across.get("verdict", "")) if pd.notna(across.get("verdict")) else ""
    color = VERDICT_COLORS.get(verdict, "0.55")
    ratio = float(x(float(across["ratio"])))
    ci = tuple(float(x(float(across[c]))) for c in ("ratio_ci_low", "ratio_ci_high"))
    pi = tuple(float(x(float(across[c]))) for c in ("pi_low", "pi_high"))
    if np.isfinite(pi).all():  # where a new dataset's ratio is expected
        ax.hlines(0, *pi, color=color, lw=1, label="prediction interval")
        ax.scatter(pi, [0, 0], marker="|", s=60, color=color, zorder=3)
    if np.isfinite([ratio, *ci]).all():
        ax.add_patch(Polygon([(ci[0], 0), (ratio, 0.3), (ci[1], 0), (ratio, -0.3)],
                             closed=True, facecolor=color, edgecolor="0.2", lw=0.8, zorder=4,
                             label="pooled (t over the datasets)"))
    else:
        ax.text(0.01, 0, "no pooled ratio: fewer than 2 datasets with a ratio",
                transform=ax.get_yaxis_transform(), ha="left", va="center", fontsize=8,
                style="italic", color="0.35")
    k = int(across["n_datasets"])
    labels = [f"{name}  ({_pairs(n)})" for name, n in zip(effects[DATASET], effects["n_pairs"])]
    same = int(across.get("n_same_direction", 0))
    ax.set_yticks([*y, 0], [*labels, f"pooled  ({same}/{k} same direction)"])
    ax.set_ylim(-0.7, count + 0.7)
    span = np.r_[point, low, high, ratio, ci, pi, margin]
    span = span[np.isfinite(span)]
    if ax.get_xscale() == "log":  # pad by a factor
        ax.set_xlim(span.min() / 1.15, span.max() * 1.15)
    else:
        pad = 0.08 * (span.max() - span.min()) if span.size else 1.0
        ax.set_xlim(span.min() - pad, span.max() + pad)
    ax.set_xlabel(f"{metric}: variant / reference − 1 (%), {1 - alpha:.0%} intervals"
                  + (", log scale" if ax.get_xscale() == "log" else ""))
    ax.set_title(f"{across['ablation']}: {verdict or 'no verdict'} across {k} datasets")
    ax.legend(fontsize=7, loc="best")  # labelled artists: _narrow moves them below
    return fig


def dataset_forest_plot(effects: pd.DataFrame, across: pd.Series, path: Path, *,
                        alpha: float, metric: str) -> Path:
    """One ablation's forest plot across datasets, as the ratio − 1 in %.

    Args:
        effects: that ablation's rows of :func:`ablations.results.stats.datasets.dataset_effects`
            (``dataset``, ``n_pairs``, ``log_ratio``, ``variance``); a row without a ratio
            is labelled with why instead of drawn.
        across: that ablation's row of :func:`ablations.results.stats.datasets.across_datasets`.
        path: the PNG to write (PDF and SVG beside it,
        :func:`ablations.results.report.plots.save_figure`). alpha: each dataset's interval is its 1
        − α t interval, as the pooled one is. metric: named in the axis label.

    Each dataset: its ratio with exp(log ratio ± t·√variance) − 1; at the bottom the pooled
    ratio as a diamond spanning its interval, coloured by the verdict, with the prediction
    interval as a thin line through it (three or more datasets); the ±margin band shaded.
    """
    return save_figure(draw_dataset_forest(effects, across, alpha=alpha, metric=metric), path)


def file_stem(name: str) -> str:
    """``name`` with every run of characters other than letters, digits, ``_``, ``-`` and
    ``.`` replaced by ``_`` (an ablation's name in a file name)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip("._") or "_"


def dataset_forest_plots(effects: pd.DataFrame, across: pd.DataFrame, directory: Path, *,
                         alpha: float, metric: str) -> list[Path]:
    """:func:`dataset_forest_plot` for every ablation of ``across``, as
    ``directory/forest-<ablation>.png``; the PNGs' paths, in ``across``'s order."""
    directory = Path(directory)
    paths = []
    for _, row in across.iterrows():
        mine = effects[effects["ablation"] == row["ablation"]]
        paths.append(dataset_forest_plot(
            mine, row, directory / f"forest-{file_stem(row['ablation'])}.png", alpha=alpha,
            metric=metric))
    return paths


def draw_critical_difference(ranks: Ranks) -> Figure:
    """The figure of :func:`critical_difference_diagram`, unsaved. scikit-posthocs draws the
    ranks on a top axis at y = 0 and the labels one unit apart below it; the critical
    difference is drawn here, above the axis label (scikit-posthocs' own bar sits on the
    tick labels), and the figure's height follows the number of label rows."""
    import scikit_posthocs

    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 3.0))
    drawn = scikit_posthocs.critical_difference_diagram(
        ranks.average, ranks.nemenyi, ax=ax, alpha=ranks.alpha,
        color_palette=[PALETTE[name] for name in CD_COLORS] * len(ranks.average))
    lowest = min(text.get_position()[1] for text in drawn["labels"])
    best = float(ranks.average.min())
    cd = ranks.critical_difference
    ax.plot([best, best + cd], [CD_BAR_Y, CD_BAR_Y], color=PALETTE["black"], lw=2)
    for end in (best, best + cd):
        ax.plot([end, end], [CD_BAR_Y - 0.15, CD_BAR_Y + 0.15], color=PALETTE["black"], lw=1)
    ax.text(best + cd / 2, CD_BAR_Y + 0.25, f"critical difference = {cd:.2f}", ha="center",
            va="bottom", fontsize=8)
    ax.set_ylim(lowest - 0.7, CD_BAR_Y + 1.0)
    ax.xaxis.set_label_position("top")  # above the tick labels, under the bar
    ax.set_xlabel("average rank (1 = best)", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.set_title(f"{len(ranks.scores)} datasets: Friedman p = {ranks.friedman_p:.3g}, "
                 f"critical difference {cd:.2f} (Nemenyi, α = {ranks.alpha:g}); joined: not "
                 "told apart", fontsize=9)
    fig.set_size_inches(FIGURE_WIDTH, CD_UNIT_HEIGHT * (CD_BAR_Y + 1.7 - lowest) + 0.4)
    return fig


def critical_difference_diagram(ranks: Ranks, path: Path) -> Path:
    """The arms' average ranks over the datasets (:func:`ablations.results.stats.datasets.
    rank_comparison`), those the Nemenyi test does not tell apart joined by a bar, the
    critical difference drawn above the axis (scikit-posthocs; Demšar 2006)."""
    return save_figure(draw_critical_difference(ranks), path)
