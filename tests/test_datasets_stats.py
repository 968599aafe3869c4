"""The verdicts across datasets (results/stats/datasets.py): the random-effects pool against
an implementation of its own, verdicts on planted data, the rank comparison against scipy
and Demšar's formula, and a small simulation of its error rates (tools/datasets_simulation.py;
docs/datasets.md has the full table)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

from ablations.results.stats.datasets import (NEW_SHARE, pool, rank_comparison, share_beyond,
                                              tau_upper_bound)
from ablations.results.stats.decisions import across_datasets_of, dataset_verdicts_of
from tools.datasets_simulation import ALPHA, scenario_rates

META = {"reference": "baseline"}
SETTINGS = {"reference": "baseline", "metric": "test_mae", "margin": "5%", "alpha": 0.05}


def paule_mandel_tau2(effects: np.ndarray, variances: np.ndarray) -> float:
    """τ² written out: the root of the generalised Q equation Σ w_i (y_i − ȳ_w)² = k − 1 with
    w_i = 1/(v_i + τ²), 0 where Q(0) is below k − 1."""
    k = len(effects)

    def q_minus_df(tau2: float) -> float:
        w = 1 / (variances + tau2)
        mean = np.sum(w * effects) / np.sum(w)
        return float(np.sum(w * (effects - mean) ** 2) - (k - 1))

    return 0.0 if q_minus_df(0.0) <= 0 else optimize.brentq(q_minus_df, 0.0, 100.0, xtol=1e-14)


@pytest.mark.parametrize("effects, variances", [
    ([0.10, 0.30, -0.05, 0.20], [0.010, 0.020, 0.015, 0.005]),  # heterogeneous: τ² > 0
    ([0.010, 0.020, 0.015], [0.010, 0.010, 0.020]),  # homogeneous: τ² = 0
    ([0.05, -0.02], [0.0004, 0.0009]),  # two datasets, t on 1 df
    ([0.02, 0.03, 0.01, 0.04, -0.01], [1e-4, 2e-4, 1.5e-4, 3e-4, 1e-4]),
])
def test_the_pool_is_a_t_test_over_datasets_with_paule_mandel_heterogeneity(effects,
                                                                            variances):
    """The test and interval are scipy's one-sample t test of the datasets' log ratios (the
    dataset the unit, unweighted); τ² is Paule-Mandel's, solved independently; the prediction
    interval is a normal sample's for one new value."""
    effects, variances = np.asarray(effects), np.asarray(variances)
    pooled = pool(effects, variances)
    k = len(effects)
    test = stats.ttest_1samp(effects, 0.0)
    assert pooled.k == k and pooled.df == k - 1
    assert pooled.mean == pytest.approx(effects.mean())
    assert pooled.p_value() == pytest.approx(test.pvalue, rel=1e-9)
    low, high = test.confidence_interval(0.95)
    assert pooled.interval(0.95) == pytest.approx((low, high), rel=1e-9)
    assert pooled.tau2 == pytest.approx(paule_mandel_tau2(effects, variances), rel=1e-5,
                                        abs=1e-10)
    half = stats.t.ppf(0.975, k - 1) * effects.std(ddof=1) * np.sqrt(1 + 1 / k)
    assert pooled.prediction(0.95) == pytest.approx((effects.mean() - half,
                                                     effects.mean() + half))
    # TOST against log(1 ± 5%): the larger of scipy's two one-sided tests
    bound = np.log(1.05)
    p_tost = max(stats.ttest_1samp(effects, -bound, alternative="greater").pvalue,
                 stats.ttest_1samp(effects, bound, alternative="less").pvalue)
    assert pooled.p_tost(-bound, bound) == pytest.approx(p_tost, rel=1e-9)


def planted(ratios: dict[str, list[float]], *, seeds: int = 3, spread: float = 0.01,
            diverged: dict[tuple[str, str], int] | None = None, seed: int = 0,
            means: tuple[float, ...] = (0.5, 1.2, 3.0, 10.0, 40.0)) -> pd.DataFrame:
    """A trials table over ``len(ratios[arm])`` datasets: arm a's run at seed s of dataset d is
    ``means[d] · ratios[a][d] · (1 + u_s) · (1 + spread · e)`` (the seed effect u shared by the
    arms); ``diverged[(dataset, arm)]``: that many of its last seeds diverged."""
    rng = np.random.default_rng(seed)
    count = len(next(iter(ratios.values())))
    rows = []
    for d in range(count):
        u = 0.05 * rng.standard_normal(seeds)
        for arm, arm_ratios in {"baseline": [1.0] * count, **ratios}.items():
            lost = (diverged or {}).get((f"dataset_{d}", arm), 0)
            for s in range(seeds):
                value = means[d] * arm_ratios[d] * (1 + u[s]) * (1 + spread
                                                                  * rng.standard_normal())
                failed = s >= seeds - lost
                rows.append({"dataset": f"dataset_{d}", "ablation": arm, "seed": s,
                             "status": "diverged" if failed else "ok",
                             "test_mae": np.nan if failed else value})
    return pd.DataFrame(rows)


def across(trials: pd.DataFrame, **overrides) -> pd.DataFrame:
    return across_datasets_of(trials, META, **{**SETTINGS, **overrides}).set_index("ablation")


def test_a_big_effect_on_three_datasets_is_worse_and_a_null_variant_is_not_significant():
    trials = planted({"no_dropout": [1.3, 1.25, 1.35], "no_norm": [1.0, 1.0, 1.0]}, seeds=3,
                     spread=0.03)
    table = across(trials)
    assert table.loc["no_dropout", "verdict"] == "worse"
    assert table.loc["no_dropout", "ratio"] == pytest.approx(0.3, abs=0.05)
    assert table.loc["no_dropout", "n_same_direction"] == 3
    assert table.loc["no_norm", "verdict"] not in ("worse", "better", "negligible")
    assert table.loc["no_norm", "p_holm"] > 0.05


def test_five_datasets_each_inconclusive_alone_pool_to_equivalent():
    trials = planted({"no_norm": [1.0, 1.002, 0.998, 1.001, 0.999]}, seeds=3, spread=0.03,
                     seed=3)
    per_dataset = dataset_verdicts_of(trials, META, **SETTINGS)
    assert all(table.set_index("ablation").loc["no_norm", "verdict"] == "inconclusive"
               for table in per_dataset.values())
    table = across(trials)
    assert table.loc["no_norm", "verdict"] == "equivalent"
    assert table.loc["no_norm", "n_datasets"] == 5
    low, high = table.loc["no_norm", ["tost_ci_low", "tost_ci_high"]]
    assert -0.05 < low < high < 0.05


def test_an_arm_that_diverged_more_than_the_reference_on_one_dataset_is_never_equivalent():
    ratios = {"steady": [1.0] * 5, "shaky": [1.0] * 5}
    trials = planted(ratios, seeds=5, spread=0.002, diverged={("dataset_2", "shaky"): 1})
    table = across(trials)
    assert table.loc["steady", "verdict"] == "equivalent"  # the data would allow it
    assert table.loc["shaky", "unstable"]
    assert table.loc["shaky", "verdict"] not in ("equivalent", "negligible")
    assert "dataset_2" in table.loc["shaky", "reason"]


def test_a_margin_in_the_metrics_units_is_refused_across_datasets():
    trials = planted({"no_norm": [1.0, 1.0]})
    with pytest.raises(ValueError, match="percentage"):
        across(trials, margin="0.02")


def ranked_trials(datasets: int, *, seed: int = 1) -> pd.DataFrame:
    """Four arms whose order changes from dataset to dataset; ``exploding`` finishes one seed
    of three, at the best value, and diverges on the other two."""
    rng = np.random.default_rng(seed)
    rows = []
    for d in range(datasets):
        for arm, ratio in {"baseline": 1.0, "no_norm": 1.02, "no_dropout": 1.05,
                           "exploding": 0.5}.items():
            for s in range(3):
                failed = arm == "exploding" and s > 0
                value = 2.0 * (d + 1) * ratio * (1 + 0.03 * rng.standard_normal())
                rows.append({"dataset": f"dataset_{d}", "ablation": arm, "seed": s,
                             "status": "diverged" if failed else "ok",
                             "test_mae": np.nan if failed else value})
    return pd.DataFrame(rows)


def test_ranks_need_five_datasets():
    assert rank_comparison(ranked_trials(4), metric="test_mae", alpha=0.05) is None
    assert rank_comparison(ranked_trials(5), metric="test_mae", alpha=0.05) is not None


def test_friedman_and_the_critical_difference_are_scipys_and_demsars():
    trials = ranked_trials(7)
    ranks = rank_comparison(trials, metric="test_mae", alpha=0.05)
    medians = trials.assign(score=trials["test_mae"].fillna(np.inf)).pivot_table(
        index="dataset", columns="ablation", values="score", aggfunc="median")
    by_hand = medians.rank(axis=1)  # lower test MAE is better: rank 1
    assert ranks.average.to_dict() == pytest.approx(by_hand.mean().to_dict())
    expected = stats.friedmanchisquare(*(by_hand[arm] for arm in by_hand.columns)).pvalue
    assert ranks.friedman_p == pytest.approx(expected, rel=1e-9)
    # Demšar (2006), table 5: q_0.05 = 2.569 for four arms (the studentized range over √2)
    k, n = 4, 7
    assert ranks.critical_difference == pytest.approx(2.569 * np.sqrt(k * (k + 1) / (6 * n)),
                                                      rel=1e-3)


def test_an_arm_that_diverged_on_most_seeds_ranks_last_despite_its_best_finished_seed():
    ranks = rank_comparison(ranked_trials(6), metric="test_mae", alpha=0.05)
    assert ranks.average.index[-1] == "exploding"
    assert ranks.average["exploding"] == 4.0


@pytest.mark.slow  # a simulation of many experiments
def test_simulated_error_rates_at_three_datasets_stay_within_alpha():
    reps = 30  # 30 experiments of each kind: about 5 s
    null = scenario_rates(np.random.default_rng(37), noise="gaussian", tau=0.02, reps=reps,
                          kinds=("null",), datasets=(3,), seeds=(3,))[(3, 3)]
    # tight noise: the null arms are equivalent, so the arm at the margin is Holm's last step
    margin = scenario_rates(np.random.default_rng(38), noise="tight", tau=0.0, reps=reps,
                            kinds=("margin",), datasets=(3,), seeds=(3,))[(3, 3)]
    slack = 3 * np.sqrt(ALPHA * (1 - ALPHA) / reps)  # 3 Monte-Carlo s.e.
    assert null["false difference"] <= ALPHA + slack
    assert null["false on every dataset"] <= ALPHA + slack
    assert margin["false equivalent"] <= ALPHA + slack


def test_two_datasets_give_verdicts_about_those_two_and_no_prediction_for_a_new_one():
    """From two datasets the spread between datasets rests on one degree of freedom: no
    prediction interval, and every row says its verdict is about these two; from three, the
    prediction interval is there."""
    two = across(planted({"no_dropout": [1.3, 1.25], "no_norm": [1.0, 1.0]}, seeds=3))
    assert two[["pi_low", "pi_high"]].isna().all().all()
    assert (two["reason"] == "about these 2 datasets only: two give no prediction for a new "
            "dataset").all()
    three = across(planted({"no_dropout": [1.3, 1.25, 1.35], "no_norm": [1.0, 1.0, 1.0]},
                           seeds=3))
    assert np.isfinite(three[["pi_low", "pi_high"]].to_numpy(float)).all()
    assert not three["reason"].str.startswith("about these").any()


def q_by_least_squares(effects: np.ndarray, variances: np.ndarray, tau2: float) -> float:
    """The generalised Q statistic as the residual sum of squares of a weighted least-squares
    fit of the intercept (numpy's lstsq on rows scaled by 1/√(v + τ²))."""
    scale = 1 / np.sqrt(variances + tau2)
    design = scale[:, None]
    _, residual, _, _ = np.linalg.lstsq(design, effects * scale, rcond=None)
    return float(residual[0])


@pytest.mark.parametrize("effects, variances", [
    ([0.10, 0.30, -0.05, 0.20], [0.010, 0.020, 0.015, 0.005]),
    ([0.02, 0.03, 0.01, 0.04, -0.01], [1e-4, 2e-4, 1.5e-4, 3e-4, 1e-4]),
    ([0.05, -0.02], [0.0004, 0.0009]),
])
def test_the_tau_bound_is_where_q_crosses_chi_squares_lower_quantile(effects, variances):
    """The Q-profile bound: at τ_u², Q (computed here as a least-squares residual) equals the
    α-quantile of χ² on k − 1 df, and Q is above it at every smaller τ² on a grid."""
    effects, variances = np.asarray(effects), np.asarray(variances)
    tau = tau_upper_bound(effects, variances, 0.95)
    target = stats.chi2.ppf(0.05, len(effects) - 1)
    assert tau > 0
    assert q_by_least_squares(effects, variances, tau ** 2) == pytest.approx(target, rel=1e-6)
    grid = np.linspace(0, tau ** 2, 50)[:-1]
    assert all(q_by_least_squares(effects, variances, t2) > target for t2 in grid)
    # datasets that agree more closely than their noise predicts: the bound is 0
    assert tau_upper_bound(np.array([0.01, 0.0101, 0.0099]), np.full(3, 0.01), 0.95) == 0


@pytest.mark.parametrize("k, tau", [(3, 0.05), (5, 0.1), (5, 0.0)])
@pytest.mark.slow  # a simulation of many experiments
def test_the_tau_bound_covers_the_true_spread_in_95_percent_of_samples(k, tau):
    """Datasets whose true log ratios are N(0, τ²) measured with known variances: the 95%
    bound lies at or above τ in at least 95% of 2000 samples (minus 3 s.e.)."""
    rng = np.random.default_rng(k)
    variances = np.linspace(0.5, 2.0, k) * 0.03 ** 2
    covers = [tau_upper_bound(tau * rng.standard_normal(k) + np.sqrt(variances)
                              * rng.standard_normal(k), variances, 0.95) >= tau
              for _ in range(2000)]
    assert np.mean(covers) >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / 2000)


def test_equivalence_over_datasets_that_differ_carries_the_on_average_reason():
    """Five datasets whose ratios straddle 1 by ±1.4%, measured tightly: the mean is within
    ±5% (equivalent), and so is the prediction interval, but five datasets bound τ only at
    about 2.7 times their s.d.: at that bound more than 10% of new datasets lie beyond the
    margin, and the row says so with the bound; five that agree carry no such reason."""
    trials = planted({"spread": [0.986, 1.014, 1.0, 0.986, 1.014],
                      "agree": [1.0, 1.001, 0.999, 1.0, 1.0]}, seeds=5, spread=0.002)
    table = across(trials)
    assert (table["verdict"] == "equivalent").all()
    assert -0.05 < table.loc["spread", "pi_low"] < table.loc["spread", "pi_high"] < 0.05
    assert table.loc["spread", "tau_upper"] > 0.02
    assert table.loc["spread", "new_beyond_upper"] > NEW_SHARE
    assert table.loc["spread", "reason"].startswith(
        f"on average: the spread between datasets is bounded only by τ ≤ "
        f"{table.loc['spread', 'tau_upper']:.3g} (95%)")
    assert table.loc["agree", "new_beyond_upper"] <= NEW_SHARE
    assert table.loc["agree", "reason"] == ""
    # the share is the normal tails at the bound, from the worse end of the 1 − 2α interval
    ends = np.log1p(table.loc["spread", ["tost_ci_low", "tost_ci_high"]].to_numpy(float))
    worst = max(stats.norm.cdf(np.log(0.95), end, table.loc["spread", "tau_upper"])
                + stats.norm.sf(np.log(1.05), end, table.loc["spread", "tau_upper"])
                for end in ends)
    assert table.loc["spread", "new_beyond_upper"] == pytest.approx(worst)
    assert share_beyond(0.0, 0.0, np.log(0.95), np.log(1.05)) == 0
