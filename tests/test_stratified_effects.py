"""``stratified_effects`` (where an ablation hurts) against hand values, scipy, a null
simulation and a planted interaction; and its section of the report. No Ray."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ablations.results.stats.analysis import stratified_effects
from ablations.results.stats.strata import cell_tests

ALPHA = 0.05


def _hand_predictions() -> pd.DataFrame:
    # 4 samples (regime a, a, b, b; targets 1..4), 3 seeds. The baseline's |error| is 1
    # everywhere; single_frame's is, per seed, (a, b): (2, 1), (3, 1), (2, 2).
    abs_error = {0: (2.0, 1.0), 1: (3.0, 1.0), 2: (2.0, 2.0)}
    rows = []
    for seed in range(3):
        for sample, (target, regime) in enumerate(zip([1.0, 2.0, 3.0, 4.0], "aabb")):
            err = abs_error[seed][regime == "b"]
            for ablation, pred in (("baseline", target + 1), ("single_frame", target + err)):
                rows.append({"ablation": ablation, "seed": seed, "sample_index": sample,
                             "target": target, "pred_mean": pred, "pred_std": np.nan,
                             "stratum_regime": regime})
    return pd.DataFrame(rows)


def test_stratified_effects_against_hand_values():
    table = stratified_effects(_hand_predictions(), alpha=ALPHA)
    assert set(table["ablation"]) == {"single_frame"}  # the reference has no row
    regime = table[table["stratum"] == "regime"].set_index("level")
    # cell a: differences 1, 2, 1 -> mean 4/3, sd sqrt(1/3), se 1/3, t(0.975, 2) = 4.3027
    t975 = 4.302652729911275
    assert regime.loc["a", "n_seeds"] == 3
    assert regime.loc["a", "diff_mean"] == pytest.approx(4 / 3)
    assert regime.loc["a", "ci_low"] == pytest.approx(4 / 3 - t975 / 3)
    assert regime.loc["a", "ci_high"] == pytest.approx(4 / 3 + t975 / 3)
    assert regime.loc["b", "diff_mean"] == pytest.approx(1 / 3)
    # overall differences per seed 0.5, 1, 1 -> 5/6
    assert table["overall_diff"].to_numpy() == pytest.approx([5 / 6] * len(table))
    # cell a - overall: 0.5, 1, 0 -> mean 0.5, se 0.5/sqrt(3), t = sqrt(3) with 2 df:
    # p = 1 - t / sqrt(2 + t^2) = 1 - sqrt(3/5); cell b: the mirror, the same p
    p = 1 - np.sqrt(3 / 5)
    assert regime["interaction_p"].to_numpy() == pytest.approx([p, p])
    # the family: every cell of the ablation, the 4 target bins (one sample each, so the
    # same p as their regime) included: 6 x 0.2254 -> Holm 1
    assert len(table) == 6 and set(table["stratum"]) == {"regime", "target_bin"}
    assert table["interaction_p"].to_numpy() == pytest.approx([p] * 6)
    assert (table["interaction_p_holm"] == 1.0).all() and not table["differs"].any()
    assert list(table.columns) == ["ablation", "stratum", "level", "n_seeds", "diff_mean",
                                   "ci_low", "ci_high", "overall_diff", "interaction_p",
                                   "interaction_p_holm", "differs"]


def _random_predictions(rng: np.random.Generator, *, seeds: int = 4, samples: int = 240,
                        planted: float = 0.0) -> pd.DataFrame:
    """reference, `uniform` (+0.2 everywhere) and `planted` (+0.2, and ``planted`` more in
    the fastest quarter); per-seed offsets shared by all samples, per-sample noise."""
    speed = rng.uniform(0, 1.2, samples)
    target = rng.normal(3, 1, samples)
    regime = rng.choice(["clear", "hazy", "storm"], samples)
    frames = []
    for ablation, shift in (("baseline", 0.0), ("uniform", 0.2), ("planted", 0.2)):
        for seed in range(seeds):
            err = (np.abs(rng.normal(0, 0.5, samples)) + shift + rng.normal(0, 0.1)
                   + (planted * (speed > np.quantile(speed, 0.75)) if ablation == "planted"
                      else 0.0))
            frames.append(pd.DataFrame({
                "ablation": ablation, "seed": seed, "sample_index": np.arange(samples),
                "target": target, "pred_mean": target + err, "pred_std": np.nan,
                "stratum_regime": regime, "stratum_speed_px_per_frame": speed}))
    return pd.concat(frames, ignore_index=True)


def test_interaction_p_and_interval_match_scipy():
    predictions = _random_predictions(np.random.default_rng(3), seeds=5)
    table = stratified_effects(predictions, alpha=0.1).set_index(["ablation", "stratum",
                                                                   "level"])
    abs_error = (predictions["pred_mean"] - predictions["target"]).abs()
    overall = abs_error.groupby([predictions["ablation"], predictions["seed"]]).mean()
    clear = predictions["stratum_regime"] == "clear"
    cell = abs_error[clear].groupby([predictions["ablation"], predictions["seed"]]).mean()
    cell_diff = (cell["uniform"] - cell["baseline"]).to_numpy()
    excess = cell_diff - (overall["uniform"] - overall["baseline"]).to_numpy()
    row = table.loc[("uniform", "regime", "clear")]
    assert row["interaction_p"] == pytest.approx(stats.ttest_1samp(excess, 0.0).pvalue)
    low, high = stats.t.interval(0.9, 4, loc=cell_diff.mean(), scale=stats.sem(cell_diff))
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high))
    assert row["n_seeds"] == 5


@pytest.mark.slow  # a simulation of many experiments
def test_null_cells_flag_differs_at_most_alpha_of_experiments():
    # 4000 simulated experiments, 3 seeds, 200 samples in two strata of 4 levels (8 cells):
    # an ablation with no effect and one with a uniform effect (no interaction). Per-seed
    # offsets, heavy-tailed (t, 3 df) per-sample noise. Family-wise: any cell flagged.
    rng = np.random.default_rng(11)
    experiments, seeds, samples = 4000, 3, 200
    noise = rng.standard_t(3, (experiments, 3, seeds, samples)) * 0.3
    offsets = rng.normal(0, 0.2, (experiments, 3, seeds, 1))
    errors = 1.0 + noise + offsets + np.array([0.0, 0.0, 0.5])[None, :, None, None]
    by_block = errors.reshape(experiments, 3, seeds, 4, samples // 4).mean(-1)  # i // 50
    by_residue = errors.reshape(experiments, 3, seeds, samples // 4, 4).mean(-2)  # i % 4
    cells = np.concatenate([by_block, by_residue], axis=-1)  # (E, arms, seeds, 8)
    overall = errors.mean(-1)  # (E, arms, seeds)
    bound = ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / experiments)
    for arm in (1, 2):
        cell_diff = np.swapaxes(cells[:, arm] - cells[:, 0], -1, -2)  # (E, 8, seeds)
        tests = cell_tests(cell_diff, overall[:, arm] - overall[:, 0], ALPHA)
        rate = (tests["interaction_p_holm"] < ALPHA).any(-1).mean()
        assert rate <= bound, (arm, rate)
        # the interval still covers the true cell effect (0 or 0.5) at about 1 - alpha
        cover = (tests["ci_low"] <= 0.5 * (arm == 2)) & (0.5 * (arm == 2) <= tests["ci_high"])
        assert cover.mean() >= 1 - bound


def test_a_planted_cell_is_flagged_and_a_uniform_effect_is_not():
    predictions = _random_predictions(np.random.default_rng(5), seeds=3, planted=1.0)
    table = stratified_effects(predictions, alpha=ALPHA)
    planted = table[table["ablation"] == "planted"]
    speed = planted[planted["stratum"] == "speed_px_per_frame"]
    fastest = speed.iloc[-1]  # bins in order: the fastest quarter last
    assert fastest["differs"] and fastest["diff_mean"] == pytest.approx(1.2, abs=0.1)
    assert fastest["diff_mean"] == planted["diff_mean"].max()
    assert planted["overall_diff"].iloc[0] == pytest.approx(0.45, abs=0.1)
    assert not table.loc[table["ablation"] == "uniform", "differs"].any()


def test_bad_arguments_are_refused():
    predictions = _hand_predictions()
    with pytest.raises(ValueError, match="reference 'nope' has no predictions"):
        stratified_effects(predictions, reference="nope")
    with pytest.raises(ValueError, match="metric 'accuracy'"):
        stratified_effects(predictions, metric="accuracy")
    with pytest.raises(ValueError, match="alpha 1.5"):
        stratified_effects(predictions, alpha=1.5)


def test_report_has_a_where_it_hurts_section_after_the_strata(tmp_path):
    from ablations.results.report.build import write_report
    from tests.test_analysis import _experiment

    markdown = write_report(_experiment(tmp_path / "exp"), figures="png").markdown.read_text()
    assert markdown.index("### regime") < markdown.index("## Appendix") \
        < markdown.index("### Errors by stratum") < markdown.index("### Where it hurts")
    # two seeds of point_estimate: nothing can be shown to differ
    section = markdown[markdown.index("### Where it hurts"):]
    assert "No cell differs." in section and "(none)" in section
