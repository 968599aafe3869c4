"""Figures for the report (matplotlib, Agg backend). Each takes analysis DataFrames and writes
the figure three times beside its path: PNG for the report's pages, and PDF and SVG for a
paper (:func:`ablations.results.report.figure_files.save_figure`, with the formats' switch
``figure_formats`` and ``copy_figures``, imported here too). Colours are Okabe and Ito's
palette, told apart with the common colour-vision deficiencies (:data:`PALETTE`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ablations.config.comparison import DEFAULT_ALPHA, DEFAULT_METRIC  # noqa: E402
from ablations.config.metrics import Metric  # noqa: E402
from ablations.results.io.directions import MetricLike, metric_of  # noqa: E402
from ablations.results.report.figure_files import (  # noqa: E402, F401 (imported from here too)
    FIGURES,
    copy_figures,
    figure_formats,
    save_figure,
    vector_files,
)
from ablations.results.report.formatting import with_unit  # noqa: E402


# Okabe & Ito (2008), "Color Universal Design": distinguishable with protanopia, deuteranopia
# and tritanopia; the lines of the learning curves cycle through it
PALETTE = {"orange": "#E69F00", "sky_blue": "#56B4E9", "green": "#009E73",
           "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00",
           "purple": "#CC79A7", "black": "#000000"}
plt.rcParams["axes.prop_cycle"] = plt.cycler(color=[
    PALETTE[name] for name in ("blue", "orange", "green", "vermillion", "purple", "sky_blue",
                               "yellow", "black")])


VERDICT_COLORS = {"worse": PALETTE["vermillion"], "higher": PALETTE["vermillion"],
                  "better": PALETTE["green"], "lower": PALETTE["green"],
                  "equivalent": PALETTE["blue"], "negligible": PALETTE["purple"],
                  "significant": PALETTE["orange"], "inconclusive": "0.55"}


def forest_plot(table: pd.DataFrame, path: str | Path, *,
                metric: MetricLike = DEFAULT_METRIC) -> Path:
    """:func:`forest_figure`, saved (:func:`save_figure`); the PNG's path."""
    return save_figure(forest_figure(table, metric=metric), path)


def forest_limits(values: np.ndarray, margin: float) -> tuple[float, float]:
    """The forest plot's x range: every interval's ends and the margin band, padded by 8%;
    not the equivalence bounds, which may lie far outside (drawn at the edge as arrows)."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    low = min([-margin, 0.0, *finite]) if margin > 0 else min([0.0, *finite])
    high = max([margin, 0.0, *finite])
    pad = 0.08 * (high - low or 1.0)
    return low - pad, high + pad


def forest_figure(table: pd.DataFrame, *, metric: MetricLike = DEFAULT_METRIC):
    """Difference to the reference per ablation with its confidence interval, on ``metric``
    (a :class:`~ablations.config.metrics.Metric`, or a built-in column's name: the axis names
    it, with its unit).

    Given a verdict table (:func:`ablations.results.stats.verdicts.verdict_table`, or the sequential
    one): the margin band shaded, ticks at ± the equivalence bound reached after Holm on the rows
    `equivalent`, `negligible` or `inconclusive` (`equivalent` when they lie inside the band),
    each point coloured by its verdict. With a margin in units, Δ with its 1 − α interval thin
    (``diff_ci_*``) and its 1 − 2α interval (the one TOST reads) thick; with a percentage
    margin (``attrs["relative"]``), the ratio − 1 in % with its 1 − 2α Fieller interval only.
    Given :func:`ablations.results.stats.comparisons.ablation_table`'s: the interval, red where Holm
    p < 0.05.
    """
    measure = metric_of(metric)
    rows = table[table["diff_mean"].notna()].iloc[::-1]
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.4))
    y = np.arange(len(rows))
    mean = rows["diff_mean"].to_numpy(dtype=float)
    lower = np.nan_to_num(mean - rows["diff_ci_low"].to_numpy(dtype=float))
    upper = np.nan_to_num(rows["diff_ci_high"].to_numpy(dtype=float) - mean)
    ax.errorbar(mean, y, xerr=[lower, upper], fmt="none", ecolor="0.4", capsize=3, lw=1)
    ax.axvline(0, color="0.2", lw=0.8)
    if "verdict" not in rows:
        _significance_marks(ax, rows, y, mean, measure)
    else:
        _verdict_marks(ax, table, rows, y, mean, [mean - lower, mean + upper], measure.name)
    return fig


def _significance_marks(ax, rows: pd.DataFrame, y: np.ndarray, mean: np.ndarray,
                        measure: Metric) -> None:
    """An ablation table's points, red where Holm's p < 0.05, each labelled with its p."""
    significant = rows["p_holm"].to_numpy(dtype=float) < 0.05
    ax.scatter(mean, y, c=np.where(significant, PALETTE["vermillion"], PALETTE["blue"]),
               zorder=3)
    ax.set_yticks(y, [f"{a}  (Holm p={p:.3g})"
                      for a, p in zip(rows["ablation"], rows["p_holm"])])
    ax.set_xlabel(f"{with_unit(f'{measure.name}: difference to the reference', measure.unit)}"
                  ", 95% CI")
    ax.set_title("red: Holm-adjusted p < 0.05", fontsize=9)


def _verdict_marks(ax, table: pd.DataFrame, rows: pd.DataFrame, y: np.ndarray,
                   mean: np.ndarray, whiskers: list[np.ndarray], metric: str) -> None:
    """A verdict table's marks: the margin band, the interval TOST reads (thick; with a
    percentage margin, the ratio − 1 in % alone, the axes cleared of Δ's ``whiskers``), each
    point coloured by its verdict, the equivalence bounds reached, the labels."""
    alpha = table.attrs.get("alpha", DEFAULT_ALPHA)
    margin = float(table["margin"].iloc[0])
    relative = bool(table.attrs.get("relative")) and "ratio" in rows
    if relative:  # a percentage margin is tested as a ratio: draw the ratio − 1, in %
        ax.cla()
        mean = 100 * rows["ratio"].to_numpy(dtype=float)
        low, high = (100 * rows[c].to_numpy(dtype=float) for c in ("ratio_ci_low",
                                                                    "ratio_ci_high"))
        margin *= 100
        ax.axvline(0, color="0.2", lw=0.8)
        whiskers = []
    else:
        low, high = (rows[c].to_numpy(dtype=float) for c in ("tost_ci_low", "tost_ci_high"))
    ax.axvspan(-margin, margin, color=PALETTE["blue"], alpha=0.12, lw=0)
    for edge in (-margin, margin):
        ax.axvline(edge, color=PALETTE["blue"], lw=0.8, ls="--")
    ax.hlines(y, low, high, color="0.25", lw=4)
    for verdict in dict.fromkeys(rows["verdict"]):
        mine = (rows["verdict"] == verdict).to_numpy()
        ax.scatter(mean[mine], y[mine], color=VERDICT_COLORS.get(verdict, "0.55"), zorder=3,
                   label=verdict)
    bound = rows["equivalence_bound_holm"].to_numpy(dtype=float) * (100 if relative else 1)
    # the x range: the 1 − α interval (thin) too, where it is drawn
    left, right = forest_limits(np.concatenate([low, high, mean, *whiskers]), margin)
    ax.set_xlim(left, right)
    _bound_marks(ax, rows, y, bound, right=right, inner=min(-left, right), relative=relative)
    unit = "%" if relative else ""
    ax.set_yticks(y, [f"{a}  (|{'ratio − 1' if relative else 'Δ'}| < {b:.3g}{unit})"
                      for a, b in zip(rows["ablation"], bound)])
    if relative:
        ax.set_xlabel(f"{metric}: variant / reference − 1 (%), Fieller {1 - 2 * alpha:.0%} "
                      "interval")
    else:
        ax.set_xlabel(f"{metric}: difference to the reference; {1 - alpha:.0%} CI thin, "
                      f"{1 - 2 * alpha:.0%} thick")
    ax.set_title(f"shaded: the margin ±{margin:.3g}{unit}; colour: verdict (Holm over the "
                 "family)", fontsize=9)
    _legend_outside(ax, below=True)


def _bound_marks(ax, rows: pd.DataFrame, y: np.ndarray, bound: np.ndarray, *, right: float,
                 inner: float, relative: bool) -> None:
    """Ticks at ± the equivalence bound reached on the rows `equivalent`, `negligible` or
    `inconclusive`; a bound past ``inner`` (the axis' nearer edge) an arrow at the right edge
    with its value."""
    open_question = rows["verdict"].isin(["equivalent", "negligible", "inconclusive"]).to_numpy()
    shown = open_question & np.isfinite(bound)
    inside = shown & (bound < inner)
    if inside.any():
        ax.scatter(np.r_[-bound, bound][np.r_[inside, inside]],
                   np.r_[y, y][np.r_[inside, inside]], marker="|", s=120, color="0.2",
                   zorder=3, label="±bound reached (Holm)")
    beyond = shown & ~inside  # a bound outside the axis: an arrow at its edge, with its value
    if beyond.any():
        ax.scatter(np.full(beyond.sum(), right), y[beyond], marker=">", s=30, color="0.2",
                   zorder=3, clip_on=False, label="±bound beyond the axis")
        for row, b in zip(y[beyond], bound[beyond]):
            ax.annotate(f"±{b:.3g}{'%' if relative else ''}", (right, row),
                        xytext=(-6, 5), textcoords="offset points", ha="right",
                        fontsize=6, color="0.2")


def _legend_outside(ax, *, below: bool) -> None:
    """The axes' legend outside its data: below the axes (under the x label) or to its
    right; tight_layout then makes room for it."""
    handles, names = ax.get_legend_handles_labels()
    if not handles:
        return
    if below:
        ax.legend(handles, names, fontsize=7, loc="upper center", frameon=False,
                  bbox_to_anchor=(0.5, -0.16), ncol=min(len(handles), 3))
    else:
        ax.legend(handles, names, fontsize=7, loc="upper left", frameon=False,
                  bbox_to_anchor=(1.01, 1.0))


def stratum_heatmap(strata: pd.DataFrame, path: str | Path, *, stratum: str = "regime",
                    value: str = "mae") -> Path:
    """Ablation x stratum value heatmap of ``value`` (MAE by default), annotated."""
    grid = strata[strata["stratum"] == stratum].pivot(index="ablation", columns="stratum_value",
                                                       values=value)
    fig, ax = plt.subplots(figsize=(1.3 * grid.shape[1] + 3, 0.45 * grid.shape[0] + 1.5))
    image = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", aspect="auto")
    ax.set_xticks(range(grid.shape[1]), grid.columns, rotation=30, ha="right")
    ax.set_yticks(range(grid.shape[0]), grid.index)
    for (i, j), v in np.ndenumerate(grid.to_numpy(dtype=float)):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.3f}", ha="center", va="center", color="white", fontsize=8)
    fig.colorbar(image, ax=ax, label=f"{value} (km)")
    ax.set_title(f"{value} by {stratum}")
    return save_figure(fig, path)


def calibration_plot(curve: pd.DataFrame, path: str | Path) -> Path:
    """Observed vs nominal coverage of central intervals, one line per ablation."""
    fig, ax = plt.subplots(figsize=(5, 5))
    for ablation, group in curve.groupby("ablation", sort=False):
        ax.plot(group["nominal"], group["observed"], marker=".", label=ablation)
    ax.plot([0, 1], [0, 1], color="0.3", ls="--", lw=0.8)
    ax.set_xlabel("nominal coverage")
    ax.set_ylabel("observed coverage")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def curve_metric(epochs: pd.DataFrame, metric: str) -> str:
    """The per-epoch metric of the learning curves: the verdicts' metric's validation
    counterpart (test_acc: val_acc), else the metric itself, else val_mae."""
    for name in (metric.replace("test_", "val_", 1), metric):
        if name in epochs and epochs[name].notna().any():
            return name
    return "val_mae"


# past the 7 colours (the palette less its black, the reference's), each variant's line differs
# in its dash and marker too
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = (".", "s", "^", "D")


def learning_curves(epochs: pd.DataFrame, path: str | Path, *,
                    metric: MetricLike = "val_mae", reference: Optional[str] = None
                    ) -> Optional[Path]:
    """:func:`learning_figure`, saved; None (no figure) where no epoch has ``metric``."""
    fig = learning_figure(epochs, metric=metric, reference=reference)
    return None if fig is None else save_figure(fig, path)


def learning_figure(epochs: pd.DataFrame, *, metric: MetricLike = "val_mae",
                    reference: Optional[str] = None):
    """Mean over seeds of ``metric`` per epoch, one line per ablation (``metric``: a
    :class:`~ablations.config.metrics.Metric`, or a built-in column's name; the axis prints
    its unit): the reference black and thick, the others by colour, then past 7 also by dash
    and marker; whole epochs on the axis; the legend right of the axes. None when no epoch
    has ``metric`` (code that reports no epochs)."""
    measure = metric_of(metric)
    metric = measure.name
    if metric not in epochs or not epochs[metric].notna().any():
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4))
    means = epochs.groupby(["ablation", "epoch"], sort=False)[metric].mean().reset_index()
    # the palette without its black, the reference's
    colours = [c for c in plt.rcParams["axes.prop_cycle"].by_key()["color"]
               if c != PALETTE["black"]]
    others = 0
    for ablation, group in means.groupby("ablation", sort=False):
        if ablation == reference:
            ax.plot(group["epoch"], group[metric], color="0.1", lw=2.4, zorder=3,
                    label=f"{ablation} (reference)")
            continue
        turn = others // len(colours)
        ax.plot(group["epoch"], group[metric], color=colours[others % len(colours)],
                ls=LINE_STYLES[turn % len(LINE_STYLES)], marker=MARKERS[turn % len(MARKERS)],
                markersize=4, label=ablation)
        others += 1
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel(with_unit(f"{metric}, mean over seeds", measure.unit))
    _legend_outside(ax, below=False)
    return fig


def interaction_plot(means: pd.DataFrame, effects: pd.DataFrame, path: str | Path, *,
                     metric: str = DEFAULT_METRIC, limit: int = 8) -> Path:
    """One panel per two-factor interaction (at most ``limit``, the largest |estimate|
    first): the mean of ``metric`` at the reference cell's value and the other value of the
    first factor, one line per value of the second. Parallel lines: no interaction. Given
    the tables of :func:`ablations.results.stats.factorial.interaction_means` and
    :func:`ablations.results.stats.factorial.factorial_effects`; each panel's title has the effect's
    verdict."""
    rows = effects[effects["kind"] == "interaction"].copy()
    rows = rows.reindex(rows["estimate"].abs().sort_values(ascending=False).index)[:limit]
    count = max(len(rows), 1)
    columns = min(count, 4)
    lines = -(-count // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(3.1 * columns, 2.7 * lines + 0.3),
                             squeeze=False)
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    for ax, (_, effect) in zip(axes.flat, rows.iterrows()):
        cells = means[means["effect"] == effect["effect"]]
        a, b = cells["a"].iloc[0], cells["b"].iloc[0]
        for level, style in ((-1, "-"), (1, "--")):
            mine = cells[cells["b_level"] == level].sort_values("a_level")
            ax.plot([0, 1], mine["mean"].to_numpy(dtype=float), style, marker="o",
                    color=PALETTE["blue"] if level < 0 else PALETTE["vermillion"],
                    label=f"{b}={str(mine['b_value'].iloc[0]).lower()}"
                    + (" (reference)" if level < 0 else ""))
        values = cells.sort_values("a_level").drop_duplicates("a_level")["a_value"]
        ax.set_xticks([0, 1], [f"{str(v).lower()}{' (reference)' if i == 0 else ''}"
                               for i, v in enumerate(values)])
        ax.set_xlabel(a, fontsize=8)
        ax.set_ylabel(f"{metric} (mean)", fontsize=8)
        verdict = effect["verdict"]
        ax.set_title(f"{effect['effect']}"
                     + (f" = {effect['aliases']}" if effect["aliases"] else "")
                     + f": {verdict}", fontsize=8,
                     color=VERDICT_COLORS.get(verdict, "0.2") if verdict != "inconclusive"
                     else "0.2")
        ax.legend(fontsize=6)
        ax.tick_params(labelsize=7)
    fig.suptitle("Interactions: the mean at each pair of levels (parallel lines: additive)",
                 fontsize=9)
    return save_figure(fig, path)
