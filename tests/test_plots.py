"""The report's figures as a reviewer reads them, checked on the drawn figure: the forest plot's
axis scaled to the intervals and the margin (a far equivalence bound drawn as an arrow at the
edge, with its value), its legend outside the data; the learning curves telling ten variants
apart, the reference highlighted, whole epochs, the legend outside; no figure without epochs."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from ablations.results.report import plots
from ablations.results.stats.verdicts import verdict_table


def _trials(effects: dict[str, float], seeds: int = 3) -> pd.DataFrame:
    """Trials whose test_mae is the baseline's 0.5 times 1 + each arm's effect, with seed noise
    of 1% shared by the arms (so the intervals are narrow)."""
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.005, seeds)
    rows = [{"ablation": arm, "seed": seed, "status": "ok",
             "test_mae": 0.5 * (1 + effect) + noise[seed] + rng.normal(0, 0.002)}
            for arm, effect in {"baseline": 0.0, **effects}.items() for seed in range(seeds)]
    return pd.DataFrame(rows)


def _boxes(fig, ax):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return ax.get_window_extent(renderer), ax.get_legend().get_window_extent(renderer)


def test_the_forest_axis_spans_the_intervals_and_a_far_bound_is_an_arrow_with_its_value():
    table = verdict_table(_trials({"close": 0.01, "far": 0.8}), reference="baseline",
                          metric="test_mae", margin="5%")
    # an undecided arm whose equivalence bound lies far beyond every interval (a pilot look's
    # bounds do: the main job's reach 365%)
    close = table["ablation"] == "close"
    assert table.loc[close, "verdict"].item() in ("equivalent", "negligible", "inconclusive")
    table.loc[close, "equivalence_bound_holm"] = 2.0
    bounds = 100 * table.loc[close, "equivalence_bound_holm"]
    fig = plots.forest_figure(table, metric="test_mae")
    ax = fig.axes[0]
    left, right = ax.get_xlim()
    ends = 100 * table[["ratio_ci_low", "ratio_ci_high"]].to_numpy(dtype=float)
    assert right < bounds.max() and right <= 1.2 * np.nanmax(ends)  # not the bound's scale
    assert left >= -0.2 * np.nanmax(ends) - 5 * 1.1  # the margin band and 0, padded
    band = 2 * 5 / (right - left)  # the ±5% band's share of the axis
    assert band > 0.05, band
    arrows = [text.get_text() for text in ax.texts]
    assert f"±{bounds.max():.3g}%" in arrows
    axes_box, legend_box = _boxes(fig, ax)
    assert legend_box.y1 <= axes_box.y0  # below the axes, over no row
    plt.close(fig)


def test_a_margin_in_units_keeps_the_thin_whiskers_on_the_axis():
    trials = _trials({"close": 0.0, "other": 0.0})
    trials.loc[trials["seed"] == 0, "test_mae"] += np.where(  # one seed apart: wide intervals
        trials.loc[trials["seed"] == 0, "ablation"] == "baseline", 0.0, 0.02)
    table = verdict_table(trials, reference="baseline", metric="test_mae", margin=0.001)
    fig = plots.forest_figure(table, metric="test_mae")
    left, right = fig.axes[0].get_xlim()
    ends = table[["diff_ci_low", "diff_ci_high"]].to_numpy(dtype=float)
    assert left <= np.nanmin(ends) and right >= np.nanmax(ends)  # the 1 − α interval, whole
    plt.close(fig)


def test_ten_variants_are_told_apart_the_reference_stands_out_and_epochs_are_whole():
    arms = [f"arm{i}" for i in range(10)]
    epochs = pd.DataFrame([{"ablation": arm, "seed": 0, "epoch": epoch,
                            "val_mae": 1.0 / epoch + 0.01 * index}
                           for index, arm in enumerate(["baseline", *arms])
                           for epoch in (1, 2, 3)])
    fig = plots.learning_figure(epochs, metric="val_mae", reference="baseline")
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    styles = {(line.get_color(), line.get_linestyle(), line.get_marker())
              for name, line in lines.items() if name != "baseline (reference)"}
    assert len(styles) == 10  # every variant its own look, past the 7 colours too
    reference = lines["baseline (reference)"]
    assert reference.get_linewidth() > max(line.get_linewidth() for name, line in
                                           lines.items() if name != "baseline (reference)")
    fig.canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    axes_box, legend_box = _boxes(fig, ax)
    assert legend_box.x0 >= axes_box.x1  # right of the axes, over no curve
    plt.close(fig)


def test_code_that_reports_no_epochs_gets_no_learning_curve_figure(tmp_path):
    epochs = pd.DataFrame({"ablation": ["baseline"], "seed": [0], "epoch": [np.nan],
                           "val_mae": [np.nan]})
    assert plots.learning_curves(epochs, tmp_path / "curves.png") is None
    assert not list(tmp_path.iterdir())


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")
