"""`compare`: two experiments, variant by variant (results/stats/compare.py), checked against scipy
and a hand-written Holm, by simulation of the procedure, and end to end on the command line
with two real runs of the same command."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ablations.results.stats.compare import compare_experiments, compare_note

VARIANTS = ["baseline", "no_images", "single_frame", "no_scalars"]


def _trials(means: dict[str, float], seeds, rng, noise=0.01, seed_effect=None) -> pd.DataFrame:
    rows = []
    for variant, mean in means.items():
        for seed in seeds:
            shared = 0.0 if seed_effect is None else seed_effect[seed]
            rows.append({"ablation": variant, "seed": seed, "status": "ok",
                         "test_mae": mean + shared + rng.normal(0, noise)})
    return pd.DataFrame(rows)


def test_paired_differences_and_verdicts_match_scipy_and_holm():
    rng = np.random.default_rng(0)
    seeds = range(6)
    effect = {s: rng.normal(0, 0.05) for s in seeds}  # shared by A and B: pairing removes it
    a = _trials(dict(zip(VARIANTS, (0.55, 0.95, 0.82, 0.96))), seeds, rng, noise=0.004,
                seed_effect=effect)
    b = _trials(dict(zip(VARIANTS, (0.55, 0.95, 0.90, 0.96))), seeds, rng, noise=0.004,
                seed_effect=effect)
    table = compare_experiments(a, b, margin="0.02").set_index("ablation")
    assert list(table.index) == VARIANTS and (table["test"] == "paired t").all()
    p_values = []
    for variant in VARIANTS:
        xa = a[a["ablation"] == variant].sort_values("seed")["test_mae"].to_numpy()
        xb = b[b["ablation"] == variant].sort_values("seed")["test_mae"].to_numpy()
        d = xb - xa
        assert table.loc[variant, "diff_mean"] == pytest.approx(d.mean())
        assert table.loc[variant, "se"] == pytest.approx(d.std(ddof=1) / np.sqrt(len(d)))
        assert table.loc[variant, "p_value"] == pytest.approx(stats.ttest_rel(xb, xa).pvalue)
        p_values.append(stats.ttest_rel(xb, xa).pvalue)
        # TOST by hand: the larger one-sided p against ±0.02
        t_low = (d.mean() + 0.02) / (d.std(ddof=1) / np.sqrt(len(d)))
        t_high = (d.mean() - 0.02) / (d.std(ddof=1) / np.sqrt(len(d)))
        table.loc[variant, "p_tost_by_hand"] = max(stats.t.sf(t_low, len(d) - 1),
                                                   stats.t.cdf(t_high, len(d) - 1))
    order = np.argsort(p_values)  # Holm, written out
    holm = np.empty(len(p_values))
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        holm[index] = running
    assert table["p_holm"].to_numpy() == pytest.approx(holm)
    tost = table["p_tost_by_hand"].to_numpy()
    order = np.argsort(tost)
    holm_tost, running = np.empty(len(tost)), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(tost) - rank) * tost[index]))
        holm_tost[index] = running
    assert table["p_tost_holm"].to_numpy() == pytest.approx(holm_tost)
    assert table.loc["single_frame", "verdict"] == "worse"  # +0.08 km, noise 0.004
    assert (table.drop(index="single_frame")["verdict"] == "equivalent").all()
    assert "Changed: single_frame." in compare_note(table.reset_index())


def test_the_same_numbers_twice_are_equivalent_everywhere():
    """Deterministic training: the same command twice gives the same numbers, Δ = 0 with no
    spread; that is `equivalent` (within any margin), not a division by zero."""
    rng = np.random.default_rng(1)
    a = _trials(dict(zip(VARIANTS, (0.55, 0.95, 0.82, 0.96))), range(3), rng)
    table = compare_experiments(a, a.copy())
    assert (table["verdict"] == "equivalent").all() and (table["diff_mean"] == 0).all()
    assert "No variant changed by more than the margin" in compare_note(table)
    assert table["identical"].all()
    assert "Identical to the last digit at every shared seed: the same code" in \
        compare_note(table)


def test_another_cpu_is_equivalent_but_not_identical():
    """Another CPU model: the third decimal differs (about 1%), the verdicts say equivalent
    and the note does not claim a bit-for-bit match; one variant rerun bit for bit is named."""
    rng = np.random.default_rng(2)
    a = _trials(dict(zip(VARIANTS, (0.55, 0.95, 0.82, 0.96))), range(5), rng)
    b = a.copy()
    other = b["ablation"] != VARIANTS[0]
    b.loc[other, "test_mae"] *= 1 + rng.normal(0, 0.004, other.sum())
    table = compare_experiments(a, b, margin="5%")
    assert (table["verdict"] == "equivalent").all(), table[["ablation", "verdict"]]
    assert table["identical"].tolist() == [True, False, False, False]
    note = compare_note(table)
    assert "the same code, data and machine" not in note
    assert f"Identical to the last digit at every shared seed: {VARIANTS[0]}." in note


def test_a_negligible_change_is_named_as_a_change():
    """`negligible`: significant, within the margin. The note must not say no variant
    changed. no_images moves by 0.005 (margin 0.02, noise 0.0005)."""
    rng = np.random.default_rng(5)
    a = _trials(dict(zip(VARIANTS, (0.55, 0.95, 0.82, 0.96))), range(6), rng, noise=0.0005)
    b = _trials(dict(zip(VARIANTS, (0.55, 0.955, 0.82, 0.96))), range(6), rng, noise=0.0005)
    table = compare_experiments(a, b, margin="0.02")
    assert table.set_index("ablation")["verdict"].to_dict() == {
        "baseline": "equivalent", "no_images": "negligible", "single_frame": "equivalent",
        "no_scalars": "equivalent"}
    note = compare_note(table)
    assert ("Changed: no_images (negligible: a significant change within the margin)."
            in note), note
    assert "No variant changed" not in note


def test_different_variant_sets_compare_the_common_ones_with_a_note():
    rng = np.random.default_rng(2)
    a = _trials({"baseline": 0.55, "no_images": 0.95, "single_frame": 0.8}, range(3), rng)
    b = _trials({"baseline": 0.55, "no_images": 0.95, "reduced_width": 0.6}, range(3, 6), rng)
    table = compare_experiments(a, b)
    assert table["ablation"].tolist() == ["baseline", "no_images"]
    assert (table["test"] == "Welch t").all()  # no seed in common
    note = compare_note(table)
    assert "Only in A (not compared): single_frame." in note
    assert "Only in B (not compared): reduced_width." in note and "Welch" in note
    with pytest.raises(ValueError, match="no variant in common"):
        compare_experiments(a[a["ablation"] == "single_frame"], b)


def test_an_ok_trial_whose_metric_is_nan_or_inf_is_left_out_and_named():
    """The rule of the verdicts (ablations.results.stats.comparisons.usable_trials): such a trial is
    dropped, as if it were not there, and named in the note with its experiment."""
    rng = np.random.default_rng(6)
    a = _trials(dict(zip(VARIANTS, (0.55, 0.95, 0.82, 0.96))), range(6), rng, noise=0.004)
    b = _trials(dict(zip(VARIANTS, (0.55, 0.95, 0.90, 0.96))), range(6), rng, noise=0.004)
    a["trial_name"] = a["ablation"] + "-seed" + a["seed"].astype(str)
    b["trial_name"] = b["ablation"] + "-seed" + b["seed"].astype(str)
    broken_a, broken_b = a.copy(), b.copy()
    broken_a.loc[broken_a["trial_name"] == "no_images-seed1", "test_mae"] = np.nan
    broken_b.loc[broken_b["trial_name"] == "single_frame-seed3", "test_mae"] = np.inf
    got = compare_experiments(broken_a, broken_b, margin="0.02")
    expected = compare_experiments(a[a["trial_name"] != "no_images-seed1"],
                                   b[b["trial_name"] != "single_frame-seed3"], margin="0.02")
    pd.testing.assert_frame_equal(got, expected)
    assert got.set_index("ablation").loc["single_frame", "verdict"] == "worse"
    assert (got.attrs["dropped_nan_a"], got.attrs["dropped_nan_b"]) == (
        ["no_images-seed1"], ["single_frame-seed3"])
    note = compare_note(got, a="before", b="after").splitlines()
    assert ("Left out of the test_mae comparisons in before (status ok, test_mae NaN or "
            "infinite): no_images-seed1.") in note
    assert ("Left out of the test_mae comparisons in after (status ok, test_mae NaN or "
            "infinite): single_frame-seed3.") in note
    assert not any("Left out" in line for line in compare_note(expected).splitlines())


def _array_verdicts(a: np.ndarray, b: np.ndarray, margin: float, relative: bool = False
                    ) -> np.ndarray:
    """The procedure on arrays (experiments, variants, seeds): each variant's B against its
    own A, paired by seed, then ablations.results.stats.verdicts.equivalence_tests over the
    variants, as compare_experiments does (tools.simulation.fixed_verdicts)."""
    from tools.simulation import fixed_verdicts

    return fixed_verdicts(a, b, margin=margin, relative=relative)["verdict"]


@pytest.mark.parametrize("shift", [0.0, 0.02])
@pytest.mark.slow  # a simulation of many experiments
def test_error_rates_by_simulation(shift):
    """4000 simulated pairs of experiments, 8 variants, 5 paired seeds: with no change, some
    variant is called worse/better/negligible in at most α (+ 3 Monte Carlo s.e.); with every
    variant changed by exactly the margin, some variant is called equivalent in at most α. The array
    path simulated here gives compare_experiments' verdicts exactly (checked on 100)."""
    rng = np.random.default_rng(3 if shift else 4)
    experiments, seeds, variants, margin = 4000, 5, 8, 0.02
    noise = rng.uniform(0.005, 0.02, size=(experiments, variants, 1))
    a = rng.normal(0.5, noise, size=(experiments, variants, seeds))
    b = a + shift + rng.normal(0, noise, size=a.shape) * np.sqrt(2)
    verdicts = _array_verdicts(a, b, margin)
    for k in range(100):
        ta = pd.DataFrame([{"ablation": f"v{v}", "seed": s, "status": "ok",
                            "test_mae": a[k, v, s]} for v in range(variants)
                           for s in range(seeds)])
        tb = ta.assign(test_mae=b[k].reshape(-1))
        table = compare_experiments(ta, tb, margin=margin)
        assert table["verdict"].tolist() == list(verdicts[k]), k
        if k < 20:  # a percentage: each variant's ratio B / A, the same on both paths
            ratio = compare_experiments(ta, tb, margin="4%")
            assert ratio["verdict"].tolist() == list(
                _array_verdicts(a[k:k + 1], b[k:k + 1], 0.04, relative=True)[0]), k
    # with no change, `negligible` (a significant change within the margin) is a false
    # difference too: compare_note names it under "Changed"
    wrong = ("worse", "better", "negligible") if shift == 0 else ("equivalent", "negligible")
    rate = np.isin(verdicts, wrong).any(axis=1).mean()
    print(f"shift {shift}: any wrong verdict in {rate:.1%} of experiments")
    assert rate <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / experiments), rate
    if shift == 0:  # and the test has power: a real change of 2 margins is mostly found
        moved = _array_verdicts(a, b + 2 * margin, margin)
        assert (moved == "worse").mean() > 0.6


def test_the_table_shows_each_sides_seeds_beside_the_pairs_its_difference_rests_on():
    """B ran 10 seeds, A 5 of them: the means are over 10 and 5, Δ over the 5 shared; the
    table a reader sees gives all three counts."""
    from ablations.results.report.tables import comparison_view

    rng = np.random.default_rng(4)
    a = _trials({"baseline": 0.55, "no_images": 0.95}, range(5), rng)
    b = _trials({"baseline": 0.55, "no_images": 0.95}, range(10), rng)
    view = comparison_view(compare_experiments(a, b), metric="test_mae", alpha=0.05)
    row = view.set_index("Variant").loc["no_images"]
    assert (row["Seeds A"], row["Seeds B"], row["Pairs (Δ's seeds)"]) == ("5", "10", "5")
