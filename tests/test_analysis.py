"""The analysis functions against hand-computed values and scipy."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

from ablations.results.stats.analysis import (
    ablation_table,
    calibration_curve,
    coverage,
    gaussian_crps,
    holm,
    load_experiments,
    seed_ensemble,
    stratified_errors,
    t_interval,
    uncertainty_metrics,
    uncertainty_table,
)
from ablations.results.io.files import write_parquet_atomic


def test_holm_against_hand_values():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 -> 0.02, 0.03, 0.06, max(0.06, 0.04)
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    adjusted = holm([0.5, np.nan, 0.01])
    assert np.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)
    assert adjusted[0] == pytest.approx(0.5)
    np.testing.assert_allclose(holm([0.9, 0.8]), [1.0, 1.0])  # capped at 1, monotone


def test_t_interval_matches_scipy():
    values = np.array([1.0, 1.4, 0.7, 1.1])
    expected = stats.t.interval(0.95, 3, loc=values.mean(), scale=stats.sem(values))
    np.testing.assert_allclose(t_interval(values), expected)
    assert np.isnan(t_interval(np.array([1.0]))[0])
    rng = np.random.default_rng(3)  # bit for bit scipy's quantile times its standard error
    for n in [2, 3, 5, 10, 40] * 20:
        values = rng.standard_normal(n) * rng.uniform(0.01, 100) + rng.uniform(-50, 50)
        if rng.random() < 0.05:
            values[0] = rng.choice([np.nan, np.inf])
        confidence = rng.choice([0.9, 0.95, 0.99])
        half = stats.t.ppf(0.5 + confidence / 2, n - 1) * stats.sem(values)
        if rng.random() < 0.2:  # a level given in float32 is the same level
            confidence = np.float32(confidence)
            half = stats.t.ppf(0.5 + float(confidence) / 2, n - 1) * stats.sem(values)
        expected = (float(values.mean() - half), float(values.mean() + half))
        np.testing.assert_array_equal(t_interval(values, confidence), expected)


def _trials():
    rows = []
    for seed, (base, abl) in enumerate([(1.0, 1.2), (1.1, 1.4), (0.9, 1.0)]):
        rows.append({"ablation": "baseline", "seed": seed, "status": "ok", "test_mae": base})
        rows.append({"ablation": "no_x", "seed": seed, "status": "ok", "test_mae": abl})
    rows.append({"ablation": "baseline", "seed": 3, "status": "ok", "test_mae": 1.0})
    rows.append({"ablation": "no_x", "seed": 3, "status": "failed", "test_mae": np.nan})
    return pd.DataFrame(rows)


def test_ablation_table_paired_against_hand_values():
    table = ablation_table(_trials()).set_index("ablation")
    row = table.loc["no_x"]
    # paired diffs 0.2, 0.3, 0.1: mean 0.2, sd 0.1; the failed seed 3 is excluded and counted
    assert row["n_pairs"] == 3 and row["n_ok"] == 3 and row["n_excluded"] == 1
    assert row["diff_mean"] == pytest.approx(0.2)
    assert row["effect_size"] == pytest.approx(2.0)
    half = stats.t.ppf(0.975, 2) * 0.1 / np.sqrt(3)
    assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx((0.2 - half, 0.2 + half))
    expected_p = stats.ttest_rel([1.2, 1.4, 1.0], [1.0, 1.1, 0.9]).pvalue
    assert row["p_value"] == pytest.approx(expected_p)
    assert row["p_holm"] == pytest.approx(expected_p)  # one comparison
    assert row["relative_change"] == pytest.approx(0.2 / 1.0)
    assert table.loc["baseline", "n_ok"] == 4 and np.isnan(table.loc["baseline", "p_value"])


def test_ablation_table_needs_the_reference():
    with pytest.raises(ValueError, match="reference 'full'"):
        ablation_table(_trials(), reference="full")


def test_gaussian_crps_matches_numerical_integration():
    for mean, std, target in [(0.0, 1.0, 0.3), (2.0, 0.5, 0.9), (-1.0, 2.0, 4.0)]:
        def integrand(x):
            return (stats.norm.cdf(x, mean, std) - (x >= target)) ** 2
        numeric = integrate.quad(integrand, -np.inf, target)[0] + \
            integrate.quad(integrand, target, np.inf)[0]
        assert gaussian_crps(np.array([mean]), np.array([std]), np.array([target]))[0] == \
            pytest.approx(numeric, rel=1e-6)


def test_coverage_hand_values():
    mean, std = np.zeros(4), np.ones(4)
    target = np.array([0.5, -1.0, 1.7, 3.0])  # 90% half-width 1.645
    assert coverage(mean, std, target, 0.9) == pytest.approx(0.5)
    assert coverage(mean, std, target, 0.5) == pytest.approx(0.25)  # half-width 0.674


def test_calibrated_predictions_give_the_nominal_coverage():
    rng = np.random.default_rng(0)
    n = 20000
    mean, std = rng.normal(size=n), rng.uniform(0.5, 2.0, size=n)
    frame = pd.DataFrame({"ablation": "a", "pred_mean": mean, "pred_std": std,
                          "target": rng.normal(mean, std)})
    curve = calibration_curve(frame)
    assert (curve["observed"] - curve["nominal"]).abs().max() < 0.02
    metrics = uncertainty_metrics(frame)
    assert metrics["coverage_90"] == pytest.approx(0.9, abs=0.01)
    assert metrics["nll"] == pytest.approx(-stats.norm.logpdf(frame.target, mean, std).mean())
    assert metrics["sharpness"] == pytest.approx(std.mean())
    assert metrics["spread_skill"] == pytest.approx(
        stats.spearmanr(std, np.abs(frame.target - mean)).statistic)
    assert metrics["spread_skill"] > 0.2  # bigger predicted spread, bigger errors


def _predictions():
    return pd.DataFrame({
        "ablation": ["baseline"] * 4 + ["point_estimate"] * 4,
        "seed": [0, 0, 1, 1] * 2,
        "sample_index": [0, 1, 0, 1] * 2,
        "target": [1.0, 2.0, 1.0, 2.0] * 2,
        "pred_mean": [1.0, 3.0, 3.0, 2.0, 1.5, 2.5, 0.5, 2.0],
        "pred_std": [1.0, 1.0, 1.0, 1.0] + [np.nan] * 4,
        "stratum_regime": ["clear", "storm"] * 4,
    })


def test_uncertainty_table_has_no_rows_for_a_point_head():
    table = uncertainty_table(_predictions())
    assert table["ablation"].tolist() == ["baseline"]


def test_seed_ensemble_mixture_against_hand_values():
    ensemble = seed_ensemble(_predictions()).set_index(["ablation", "sample_index"])
    # baseline sample 0: means 1 and 3, std 1: mean 2, variance (1+1 + 1+9)/2 - 4 = 2
    assert ensemble.loc[("baseline", 0), "pred_mean"] == pytest.approx(2.0)
    assert ensemble.loc[("baseline", 0), "pred_std"] == pytest.approx(np.sqrt(2.0))
    # point head: the spread of the means, 1.5 and 0.5 -> variance 0.25
    assert ensemble.loc[("point_estimate", 0), "pred_std"] == pytest.approx(0.5)
    one = seed_ensemble(_predictions()[lambda f: f.seed == 0]).set_index(
        ["ablation", "sample_index"])
    assert np.isnan(one.loc[("point_estimate", 0), "pred_std"])  # one model: nothing made up
    assert one.loc[("baseline", 0), "pred_std"] == pytest.approx(1.0)


def test_seed_ensembles_keep_only_the_arms_whose_seeds_drew_the_same_data():
    from ablations.results.stats.uncertainty import one_draw

    trials = pd.DataFrame({"ablation": ["baseline"] * 2 + ["point_estimate"] * 2,
                           "seed": [0, 1] * 2, "data_seed": [0, 0, 0, 1]})
    kept, mixed = one_draw(_predictions(), trials)
    assert mixed == ["point_estimate"]
    assert set(kept["ablation"]) == {"baseline"} and len(kept) == 4


def test_stratified_errors_against_hand_values():
    table = stratified_errors(_predictions())
    regime = table[table["stratum"] == "regime"].set_index(["ablation", "stratum_value"])
    # baseline clear: errors 0 and 2 -> MAE 1, RMSE sqrt(2), bias 1
    assert regime.loc[("baseline", "clear"), "n"] == 2
    assert regime.loc[("baseline", "clear"), "mae"] == pytest.approx(1.0)
    assert regime.loc[("baseline", "clear"), "rmse"] == pytest.approx(np.sqrt(2.0))
    assert regime.loc[("baseline", "clear"), "bias"] == pytest.approx(1.0)
    # point_estimate clear: errors 0.5 and -0.5 -> MAE 0.5, bias 0, diff to baseline -0.5
    assert regime.loc[("point_estimate", "clear"), "mae"] == pytest.approx(0.5)
    assert regime.loc[("point_estimate", "clear"), "bias"] == pytest.approx(0.0)
    assert regime.loc[("point_estimate", "clear"), "mae_diff"] == pytest.approx(-0.5)
    assert "target_bin" in set(table["stratum"])


def test_load_experiments_concatenates_and_names_missing_files(tmp_path):
    for name in ("a", "b"):
        root = tmp_path / name
        write_parquet_atomic(_trials().assign(experiment=name, trial_name="t"),
                             root / "trials.parquet")
        write_parquet_atomic(pd.DataFrame({"experiment": [name], "epoch": [1]}),
                             root / "epochs.parquet")
        write_parquet_atomic(_predictions().assign(experiment=name, trial_name="t"),
                             root / "predictions.parquet")
    tables = load_experiments([tmp_path / "a", tmp_path / "b"])
    assert len(tables["trials"]) == 2 * len(_trials())
    assert tables["trials"]["experiment"].dtype == "string"
    assert tables["trials"]["seed"].dtype == "int64"
    (tmp_path / "b" / "epochs.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="epochs.parquet: missing"):
        load_experiments([tmp_path / "a", tmp_path / "b"])


def _experiment(root):
    trials = _trials().assign(experiment="exp", data_seed=0, trial_name=lambda f: f.ablation
                              + "-" + f.seed.astype(str))
    epochs = pd.DataFrame({"experiment": "exp", "ablation": ["baseline", "baseline", "no_x",
                                                              "no_x"],
                           "seed": 0, "epoch": [1, 2, 1, 2], "val_mae": [1.2, 1.0, 1.3, 1.2]})
    predictions = _predictions().assign(experiment="exp", trial_name="t")
    for name, frame in (("trials", trials), ("epochs", epochs), ("predictions", predictions)):
        write_parquet_atomic(frame, root / f"{name}.parquet")
    return root


def test_report_writes_markdown_html_and_figures(tmp_path):
    from ablations.results.report.build import write_report

    report = write_report(_experiment(tmp_path / "exp"), figures="png")
    markdown = report.markdown.read_text()
    assert "## Ablation table" in markdown and "| no_x |" in markdown
    # it leads with the verdicts: no_x is +0.2 but p = 0.07 over 3 seeds, and its 90% interval
    # reaches 0.37, beyond the default margin of 5% of the baseline's mean 1.0
    assert markdown.index("## Verdicts") < markdown.index("## Ablation table")
    verdicts = markdown[:markdown.index("## Differences to the reference")]
    # readable: mean 1.20 km, Δ +0.200 km, its 90% interval, the verdict, p to 3 decimals
    assert ("| no_x | 3 | 0/3 (≤63%) | 1.20 | +0.200 | [0.031, 0.369] | [3.8, 31.5] | "
            "inconclusive | 0.074 | 0.944 | 31.5 |") in verdicts  # the ratio's interval beside Δ's
    # one line under the table; what would decide the inconclusive row (Holm's p against α,
    # the margin the data support) a section away, in the appendix
    assert "Verdicts on test_mae (lower is better) against baseline: 1 inconclusive;" in verdicts
    decided = markdown[markdown.index("### How the verdicts were decided"):]
    assert ("- no_x: inconclusive: a difference needs p below 0.05 after Holm (it has 0.0742); "
            "equivalence needs a margin of ±31.5% (the margin is ±5.0%)") in decided
    assert "needs p below" not in verdicts
    assert "Mean test_mae (km)" in verdicts
    assert "margin ±5% of baseline's mean (1), tested as a ratio," in markdown
    # per stratum, a variant x level grid of differences to the reference, before the appendix
    grid = markdown[markdown.index("### regime"):markdown.index("## Appendix")]
    assert "| Variant | clear | storm |" in grid
    assert re.search(r"\| point_estimate \| -0\.50 \[-13\.21, 12\.21\] \| -0\.25 \[", grid), grid
    assert markdown.index("## Verdicts") < markdown.index("### regime") \
        < markdown.index("## Appendix") < markdown.index("### Errors by stratum")
    assert "![Calibration](report_files/calibration.png)" in markdown
    page = report.html.read_text()
    assert page.count("src='data:image/png;base64,") == 4  # self-contained: figures embedded
    assert "<table" in page and "Errors by stratum" in page
    assert page.index("<h2>Verdicts</h2>") < page.index("<summary>Ablation table</summary>")
    assert page.index("<h2>Verdicts</h2>") < page.index("<img")  # the forest plot comes next
    for name in ("forest", "learning_curves", "strata", "calibration"):
        assert (tmp_path / "exp" / "report_files" / f"{name}.png").stat().st_size > 1000


def test_report_command(tmp_path, capsys):
    from ablations.cli.main import main

    assert main(["report", str(_experiment(tmp_path / "exp")), "--figures", "png"]) == 0
    out = capsys.readouterr().out
    assert "| no_x | 3 |" in out and "report.html" in out
    assert "| inconclusive |" in out and "margin ±5%" in out
    assert main(["report", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "trials.parquet: missing" in err


def test_variant_under_other_seeds_gets_welch_against_scipy():
    trials = _trials()
    repeat = pd.DataFrame({"ablation": "repeat", "seed": [10, 11, 12], "status": "ok",
                           "test_mae": [1.05, 0.95, 1.2]})
    row = ablation_table(pd.concat([trials, repeat])).set_index("ablation").loc["repeat"]
    base = np.array([1.0, 1.1, 0.9, 1.0])
    mine = repeat["test_mae"].to_numpy()
    assert row["test"] == "Welch t" and row["n_pairs"] == 0
    assert row["p_value"] == pytest.approx(stats.ttest_ind(mine, base, equal_var=False).pvalue)
    assert row["diff_mean"] == pytest.approx(mine.mean() - base.mean())
    # scipy >= 1.10 gives the Welch interval of the difference
    ci = stats.ttest_ind(mine, base, equal_var=False).confidence_interval(0.95)
    assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx((ci.low, ci.high))
    pooled = np.sqrt((mine.var(ddof=1) + base.var(ddof=1)) / 2)
    assert row["effect_size"] == pytest.approx((mine.mean() - base.mean()) / pooled)


@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.slow  # a simulation of many experiments
def test_holm_table_keeps_the_family_wise_error_rate_under_the_null(paired):
    """Eight ablations that change nothing, 3 seeds each: the chance that the table flags any of
    them (Holm p < 0.05) must stay at or under 5% (500 simulated experiments; without the
    correction it would be ~1 - 0.95**8 = 34%)."""
    rng = np.random.default_rng(0)
    flagged = 0
    ablations = ["baseline"] + [f"null_{i}" for i in range(8)]
    for _ in range(500):
        rows = []
        for k, ablation in enumerate(ablations):
            seeds = range(3) if paired or k == 0 else range(3 * k, 3 * k + 3)
            for seed in seeds:  # every trial an independent draw of the same configuration
                rows.append({"ablation": ablation, "seed": seed, "status": "ok",
                             "test_mae": 0.55 + 0.01 * rng.standard_normal()})
        table = ablation_table(pd.DataFrame(rows))
        assert set(table["test"].dropna()) == {"paired t" if paired else "Welch t"}
        flagged += bool((table["p_holm"] < 0.05).any())
    assert flagged / 500 <= 0.07  # 0.05 + 2 Monte Carlo standard errors (0.0097)


def test_a_sections_lines_stay_lines_and_its_paragraphs_paragraphs_in_html():
    """The report's text in HTML: a blank line starts a paragraph, a line break stays a line
    (the appendix's one line per undecided variant), and the text is escaped."""
    from ablations.results.report.page import Section, html_body

    body = html_body(Section("Verdicts", "one <line>\n- a: inconclusive\n- b: inconclusive\n\n"
                                          "another paragraph"))
    assert body == ("<p>one &lt;line&gt;<br>- a: inconclusive<br>- b: inconclusive</p>"
                    "<p>another paragraph</p>")
