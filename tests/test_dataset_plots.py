"""The figures of an experiment across datasets (results/report/dataset_plots.py), drawn from
the real analysis (``dataset_effects``, ``across_datasets``, ``rank_comparison``) of a
planted trials table: five datasets whose scales differ tenfold, ``no_images`` 30% worse on
every one, ``no_scalars`` the same as the baseline, ``small`` 10% worse with one seed only on
the last dataset (so it has no ratio there)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ablations.results.report.dataset_plots import (
    critical_difference_diagram,
    dataset_forest_plots,
    draw_critical_difference,
    draw_dataset_forest,
    file_stem,
)
from ablations.results.report.plots import vector_files
from ablations.results.stats.datasets import across_datasets, dataset_effects, rank_comparison

ALPHA = 0.05
METRIC = "test_mae"
FACTORS = {"baseline": 1.0, "no_images": 1.3, "no_scalars": 1.0, "small": 1.1}
DATASETS = [f"dataset_{index}" for index in range(5)]


def planted_trials(datasets=DATASETS) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    rows = []
    for index, name in enumerate(datasets):
        for arm, factor in FACTORS.items():
            for seed in range(4):
                if name == "dataset_4" and arm == "small" and seed > 0:
                    continue  # one seed: no ratio on this dataset
                rows.append({"dataset": name, "ablation": arm, "seed": seed, "status": "ok",
                             METRIC: 10 * (index + 1) * factor
                             * (1 + 0.03 * rng.standard_normal())})
    return pd.DataFrame(rows)


def analysed(trials: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    per_dataset = {name: pd.DataFrame({"ablation": ["no_images", "no_scalars", "small"],
                                       "verdict": "inconclusive", "unstable": False})
                   for name in trials["dataset"].unique()}
    effects = dataset_effects(trials, reference="baseline", metric=METRIC)
    across = across_datasets(trials, per_dataset, reference="baseline", metric=METRIC,
                             margin="5%", alpha=ALPHA)
    return effects, across


@pytest.fixture(scope="module")
def tables():
    return analysed(planted_trials())


@pytest.fixture
def drawn(tables):
    """(ablation -> its forest plot's axes), closed after the test."""
    effects, across = tables
    figures = {row["ablation"]: draw_dataset_forest(effects[effects["ablation"] == row["ablation"]],
                                                    row, alpha=ALPHA, metric=METRIC)
               for _, row in across.iterrows()}
    yield {name: figure.axes[0] for name, figure in figures.items()}
    for figure in figures.values():
        plt.close(figure)


def tick_labels(ax) -> list[str]:
    return [label.get_text() for label in ax.get_yticklabels()]


def test_a_forest_plot_has_a_row_per_dataset_then_the_pooled_row(drawn, tables):
    _, across = tables
    ax = drawn["no_images"]
    labels = tick_labels(ax)
    assert [label.split("  ")[0] for label in labels] == [*DATASETS, "pooled"]
    assert list(ax.get_yticks()) == [5, 4, 3, 2, 1, 0]  # the pooled row at the bottom
    assert labels[-1] == "pooled  (5/5 same direction)"
    assert ax.get_title() == "no_images: worse across 5 datasets"
    row = across.set_index("ablation").loc["no_images"]
    diamond = next(p for p in ax.patches if p.get_label() == "pooled (t over the datasets)")
    xs, ys = diamond.get_xy()[:4].T
    np.testing.assert_allclose(sorted(xs), 100 * np.array(
        [row["ratio_ci_low"], row["ratio"], row["ratio"], row["ratio_ci_high"]]))
    assert set(ys) == {0.0, 0.3, -0.3}
    spread = next(c for c in ax.collections if c.get_label() == "prediction interval")
    np.testing.assert_allclose(spread.get_segments()[0][:, 0],
                               100 * row[["pi_low", "pi_high"]].to_numpy(float))
    assert ax.get_xlim()[0] < -5 and ax.get_xlim()[1] > 30  # the band and every interval


def test_each_datasets_point_is_its_ratio_with_its_t_interval(drawn, tables):
    effects, _ = tables
    ax = drawn["no_images"]
    mine = effects[effects["ablation"] == "no_images"]
    points = ax.containers[0].lines[0].get_xydata()
    np.testing.assert_allclose(points[:, 0], 100 * np.expm1(mine["log_ratio"]))
    np.testing.assert_array_equal(points[:, 1], [5, 4, 3, 2, 1])
    t = stats.t.ppf(1 - ALPHA / 2, mine["n_pairs"] - 1)
    half = t * np.sqrt(mine["variance"].to_numpy())
    segments = np.array([segment[:, 0] for segment in ax.containers[0].lines[2][0].get_segments()])
    np.testing.assert_allclose(segments[:, 0], 100 * np.expm1(mine["log_ratio"] - half))
    np.testing.assert_allclose(segments[:, 1], 100 * np.expm1(mine["log_ratio"] + half))
    band = next(p for p in ax.patches if p.get_label() == "margin ±5%")
    assert (band.get_x(), band.get_width()) == pytest.approx((-5, 10))  # ±margin, in %


def test_a_dataset_without_a_ratio_keeps_its_row_with_a_note_instead_of_a_point(drawn):
    ax = drawn["small"]
    labels = tick_labels(ax)
    assert labels[4] == "dataset_4  (1 seed pair)"
    assert len(labels) == 6
    notes = [text for text in ax.texts if text.get_text().startswith("no ratio")]
    assert [note.get_text() for note in notes] == ["no ratio: 1 seed pair (needs 2)"]
    assert notes[0].get_position()[1] == 1  # on dataset_4's row
    points = ax.containers[0].lines[0].get_xydata()
    assert list(points[:, 1]) == [5, 4, 3, 2]
    assert ax.get_title() == "small: worse across 4 datasets"


def test_with_two_datasets_no_prediction_interval_is_drawn():
    """Two datasets predict nothing about a third: the pooled ratio is drawn, no prediction
    interval."""
    effects, across = analysed(planted_trials(DATASETS[:2]))
    row = across.set_index("ablation", drop=False).loc["no_scalars"]
    assert row[["pi_low", "pi_high"]].isna().all()
    figure = draw_dataset_forest(effects[effects["ablation"] == "no_scalars"], row,
                                 alpha=ALPHA, metric=METRIC)
    ax = figure.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    plt.close(figure)
    assert "prediction interval" not in labels and "pooled (t over the datasets)" in labels
    assert ax.get_title().endswith("across 2 datasets")


def test_ratios_spanning_a_wide_range_are_drawn_on_a_log_axis_labelled_in_percent():
    effects, across = analysed(planted_trials(DATASETS[:2]))
    row = across.set_index("ablation", drop=False).loc["no_scalars"]
    wide = row.copy()
    wide["pi_low"], wide["pi_high"] = -0.8, 30.0  # a ratio of 0.2 to one of 31
    figure = draw_dataset_forest(effects[effects["ablation"] == "no_scalars"], wide,
                                 alpha=ALPHA, metric=METRIC)
    ax = figure.axes[0]
    figure.canvas.draw()
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    plt.close(figure)
    assert ax.get_xscale() == "log" and "log scale" in ax.get_xlabel()
    assert "+0" in ticks  # a ratio of 1 labelled as no change
    spread = next(c for c in ax.collections if c.get_label() == "prediction interval")
    np.testing.assert_allclose(spread.get_segments()[0][:, 0], [0.2, 31.0])


def test_forest_plots_write_a_png_per_ablation_named_by_it_with_its_vector_files(tables, tmp_path):
    effects, across = tables
    renamed = across.assign(ablation=across["ablation"].replace("small", "small/width 8"))
    paths = dataset_forest_plots(effects.replace("small", "small/width 8"), renamed.iloc[2:],
                                 tmp_path / "figures", alpha=ALPHA, metric=METRIC)
    assert paths == [tmp_path / "figures" / "forest-small_width_8.png"]  # one: each takes a second
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    files = vector_files(paths[-1])
    assert [path.name for path in files] == [
        "forest-small_width_8.pdf", "forest-small_width_8.svg",
        "forest-small_width_8-page.pdf", "forest-small_width_8-page.svg",
        "forest-small_width_8-column.pdf", "forest-small_width_8-column.svg"]
    for path in files:
        head = path.read_bytes()[:400]
        assert head.startswith(b"%PDF") if path.suffix == ".pdf" else b"<svg" in head


def test_file_stems_keep_letters_digits_and_dashes():
    assert file_stem("no_images") == "no_images"
    assert file_stem("lr=1e-3, wd 0") == "lr_1e-3_wd_0"
    assert file_stem("../x") == "x"


def test_the_critical_difference_diagram_names_friedmans_p_and_the_difference(tmp_path):
    ranks = rank_comparison(planted_trials(), metric=METRIC, alpha=ALPHA)
    assert ranks is not None
    figure = draw_critical_difference(ranks)
    ax = figure.axes[0]
    title, label = ax.get_title(), ax.get_xlabel()
    texts = [text.get_text() for text in ax.texts]
    plt.close(figure)
    assert label == "average rank (1 = best)"
    assert f"Friedman p = {ranks.friedman_p:.3g}" in title
    assert f"critical difference {ranks.critical_difference:.2f}" in title
    assert f"critical difference = {ranks.critical_difference:.2f}" in texts
    for arm in FACTORS:  # every arm labelled with its average rank
        assert any(arm in text for text in texts), (arm, texts)
    path = critical_difference_diagram(ranks, tmp_path / "cd.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert all(file.exists() for file in vector_files(path))
