"""A run that training made fail is an outcome: the worst-rank test, equivalence barred for an
arm that diverges more than the reference, and the error rates with failures, on the runner's
own functions (results/stats/failures.py, tools/failure_simulation.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ablations.experiment.core.design_options import Rounds
from ablations.experiment.designs.rounds import next_arms
from ablations.results.stats.compare import compare_experiments
from tools.failure_simulation import bound_coverage, case_rate
from ablations.results.stats.failures import signed_rank_p
from ablations.results.stats.sequential import SeedDesign
from ablations.results.stats.sequential_table import sequential_verdict_table
from ablations.results.stats.verdicts import verdict_table
from ablations.results.report.tables import verdict_view

ALPHA = 0.05


def trials_table(seeds: int, arms: dict[str, tuple[float, set[int]]], *, sd: float = 0.005,
                 seed: int = 0) -> pd.DataFrame:
    """A trials table: baseline at 0.55 km (seed spread 0.01) and per arm (ratio, the seeds
    where it diverged)."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(seeds):
        base = 0.55 + rng.normal(0, 0.01)
        rows.append({"ablation": "baseline", "seed": s, "status": "ok", "test_mae": base})
        for arm, (ratio, diverged) in arms.items():
            value = base * ratio + rng.normal(0, sd)
            status = "diverged" if s in diverged else "ok"
            rows.append({"ablation": arm, "seed": s, "status": status,
                         "test_mae": np.nan if status == "diverged" else value})
    return pd.DataFrame(rows)


EQUAL_ARMS = {f"same{i}": (1.0, set()) for i in range(6)}


def test_signed_rank_p_is_scipys_exact_wilcoxon_and_its_permutation_test_with_ties():
    rng = np.random.default_rng(3)
    for n in (3, 5, 6, 9, 12):
        d = rng.normal(0.4, 1.0, n)
        assert signed_rank_p(d)[0] == pytest.approx(stats.wilcoxon(d, method="exact").pvalue)
    # ties, zeros and diverged seeds (inf ranks above every finite difference, tied)
    d = np.array([np.inf, np.inf, -np.inf, 0.3, -0.3, 0.0, 0.1, 0.7, 0.2])
    finite = np.where(np.isinf(d), np.sign(d) * 1e6, d)
    expected = stats.wilcoxon(finite[finite != 0], method=stats.PermutationMethod(
        n_resamples=np.inf)).pvalue
    assert signed_rank_p(d)[0] == pytest.approx(expected)
    assert signed_rank_p(np.full(6, np.inf)) == (pytest.approx(2 / 64), 21.0)


def test_a_variant_diverging_on_3_of_10_seeds_is_never_equivalent_fixed_auto_or_compare():
    """Diverged on 3 of 10 seeds, equal to the baseline on the other 7 (the survivors alone
    would make it `equivalent`): never `equivalent`, and the row says why."""
    trials = trials_table(10, {**EQUAL_ARMS, "flaky": (1.0, {2, 5, 8})})
    fixed = verdict_table(trials).set_index("ablation")
    assert fixed.loc["same0", "verdict"] == "equivalent"  # the survivors alone would be
    assert fixed.loc["flaky", "verdict"] not in ("equivalent", "negligible")
    assert fixed.loc["flaky", "reason"] == "unstable: 3/10 seeds diverged (baseline: 0/10)"
    assert fixed.loc["flaky", "n_diverged"] == 3 and fixed.loc["flaky", "test"] == "t + worst-rank"
    assert np.isnan(fixed.loc["flaky", "equivalence_bound_holm"])
    auto = sequential_verdict_table(trials, SeedDesign.plan(3, 10), list(range(10)))
    auto = auto.set_index("ablation")
    assert auto.loc["flaky", "verdict"] not in ("equivalent", "negligible")
    assert auto.loc["flaky", "reason"].startswith("unstable: 3/10")
    # compare: B's flaky against A's stable run of the same variant
    a = trials.assign(status="ok", test_mae=trials["test_mae"].fillna(0.55))
    table = compare_experiments(a, trials).set_index("ablation")
    assert table.loc["flaky", "verdict"] not in ("equivalent", "negligible")
    assert table.loc["flaky", "reason"].startswith("unstable: 3/10 seeds diverged in B")


def test_a_variant_diverging_on_every_seed_is_worse_once_the_seeds_can_show_it():
    """All 10 seeds diverged, none of the reference's: `worse` in a family of eight, fixed
    and with --seeds auto (where the exact test cannot reach its level at 3, 5 or 7 seeds and
    banks their shares); not an arm left out for having no finished seed."""
    trials = trials_table(10, {**EQUAL_ARMS, "big": (1.5, set()),
                               "broken": (1.0, set(range(10)))})
    fixed = verdict_table(trials).set_index("ablation")
    assert fixed.loc["broken", "verdict"] == "worse"
    # the worst-rank half of the level: its p doubled (the t half has no finished seed)
    assert fixed.loc["broken", "p_worst_rank"] == pytest.approx(2 / 1024)
    assert fixed.loc["broken", "p_value"] == pytest.approx(4 / 1024)
    auto = sequential_verdict_table(trials, SeedDesign.plan(3, 10), list(range(10)))
    auto = auto.set_index("ablation")
    assert auto.loc["broken", "verdict"] == "worse"
    assert auto.loc["broken", "decided_at"] == 10
    # a failure is never read as a better run: higher-is-better metrics rank it worst too
    r2 = trials.assign(test_r2=-trials["test_mae"])
    assert verdict_table(r2, metric="test_r2", margin="0.02").set_index("ablation").loc[
        "broken", "verdict"] == "worse"


def test_a_reference_that_diverged_on_some_seeds_leaves_a_clear_difference_worse():
    """The reference diverged on 2 of 10 seeds; the variant is 20% worse on the 8 both
    finished: the t half of the level decides it `worse`, fixed and --seeds auto, and the
    row says the reference diverged, not that the variant is unstable."""
    trials = trials_table(10, {**EQUAL_ARMS, "clearly_worse": (1.2, set())})
    reference = (trials["ablation"] == "baseline") & trials["seed"].isin([1, 6])
    trials.loc[reference, ["status", "test_mae"]] = ["diverged", np.nan]
    fixed = verdict_table(trials).set_index("ablation")
    assert fixed.loc["clearly_worse", "verdict"] == "worse"
    assert fixed.loc["clearly_worse", "reason"] == (
        "baseline diverged on 2/10 seeds, this variant on none")
    auto = sequential_verdict_table(trials, SeedDesign.plan(3, 10), list(range(10)))
    assert auto.set_index("ablation").loc["clearly_worse", "verdict"] == "worse"


def test_seeds_where_both_arms_diverged_carry_no_contrast_and_keep_the_t_test():
    trials = trials_table(10, {**EQUAL_ARMS, "both": (1.0, {4})})
    trials.loc[(trials["ablation"] == "baseline") & (trials["seed"] == 4),
               ["status", "test_mae"]] = ["diverged", np.nan]
    row = verdict_table(trials).set_index("ablation").loc["both"]
    assert row["test"] == "paired t" and row["n_pairs"] == 9
    assert row["verdict"] == "equivalent"  # no more failures than the reference


def test_an_arm_whose_seeds_diverge_keeps_getting_seeds_in_seeds_auto():
    table = pd.DataFrame({"ablation": ["baseline", "a", "b"], "n_ok": [3, 1, 1],
                          "n_diverged": [0, 2, 0],
                          "verdict": ["reference", "inconclusive", "inconclusive"]})
    assert next_arms(table, {"baseline", "a", "b"}) == ["a"]  # b: 1 outcome


def test_an_outlying_seed_bars_the_margin_claim_not_the_difference():
    """At a ratio of 1.01 with one seed 15 s.d. out: `significant` (no margin claim), not
    `worse` (which would read as a component that matters)."""
    rng = np.random.default_rng(7)
    base = 0.55 + rng.normal(0, 0.01, 10)
    values = base * 1.01 + rng.normal(0, 0.0005, 10)
    values[3] += 15 * 0.0005
    rows = [{"ablation": arm, "seed": s, "status": "ok", "test_mae": v}
            for arm, vals in (("baseline", base), ("near", values)) for s, v in enumerate(vals)]
    row = verdict_table(pd.DataFrame(rows)).set_index("ablation").loc["near"]
    assert bool(row["outlier"]) and bool(row["significant"])
    assert row["verdict"] == "significant"
    assert row["reason"] == "significant; no margin claim (outlier)"


@pytest.mark.parametrize("auto", [False, True])
@pytest.mark.slow  # a simulation of many experiments
def test_failures_that_do_not_depend_on_the_arm_are_called_worse_or_better_within_alpha(auto):
    """Eight arms equal to the reference, every run of every arm diverging with probability
    0.3: family-wise false worse/better/negligible at most α + 3 MC s.e. (600 experiments)."""
    rate = case_rate("null, every run diverges 30%", experiments=600, seeds=10, auto=auto,
                     rng=np.random.default_rng(11))
    assert rate <= ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / 600)


def test_an_arm_at_the_margin_that_diverges_is_falsely_equivalent_within_alpha():
    rate = case_rate("at the margin, diverges 10%, tight", experiments=600, seeds=10, auto=False,
                     rng=np.random.default_rng(12))
    assert rate <= ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / 600)


def test_an_arm_equal_when_it_finishes_is_equivalent_only_where_no_seed_showed_it_diverge():
    """Diverging on 30% of runs, equal to the reference when it finishes: `equivalent` (or
    `negligible`) only in experiments where none of its 10 seeds diverged (0.7^10 = 0.028 of
    them); the survivors alone made it equivalent in most."""
    rate = case_rate("equal when it finishes, diverges 30%", experiments=600, seeds=10,
                     auto=False, rng=np.random.default_rng(13))
    assert rate <= 0.7 ** 10 + 3 * np.sqrt(0.7 ** 10 * (1 - 0.7 ** 10) / 600)


UNSTABLE_SPACE = """\
name: unstable
description: the default model against a learning rate ten times too high without clipping
reference: baseline
variants:
  baseline: {}
  unstable: {lr: 0.02, grad_clip: 0}
"""


@pytest.mark.slow
def test_real_training_that_diverges_on_most_seeds_is_worse_and_never_equivalent(tmp_path):
    """The built-in model at 10x its learning rate without clipping (256 training samples,
    2 epochs), measured at 2026-11-25: on 6 of its first 7 seeds at most one finishes; the
    others explode (val MAE 7-300 km against a mean predictor's 1.2-1.35) and the survivors
    end far above the baseline's ~1.0 km. Every seed ranks below the baseline's, so the
    worst-rank half of the level calls it `worse` at 7 seeds (p = 2/128, doubled, against
    α = 0.05; one look: --max-seeds 7); at no prefix of the seeds is it `equivalent`."""
    from tests.conftest import run_here

    space = tmp_path / "unstable.yaml"
    space.write_text(UNSTABLE_SPACE)
    result = run_here("--space", str(space), "--epochs", "2", "--max-train-examples", "256",
                      "--max-eval-examples", "128", "--seeds", "7", "--max-seeds", "7",
                      "--quiet", "--no-dashboard", "--storage", str(tmp_path), "--name", "run")
    assert result.returncode == 0, result.stderr[-2000:]
    trials = pd.read_parquet(tmp_path / "run" / "trials.parquet")
    unstable = trials[trials["ablation"] == "unstable"]
    assert (unstable["status"] == "diverged").sum() >= 3
    assert (trials.loc[trials["ablation"] == "baseline", "status"] == "ok").all()
    row = verdict_table(trials).set_index("ablation").loc["unstable"]
    assert row["verdict"] == "worse" and row["test"] == "t + worst-rank", row.to_dict()
    assert row["reason"].startswith("unstable: ")
    assert "unstable: worse: unstable: " in result.stdout  # the console says why
    for n in range(2, 8):
        prefix = verdict_table(trials[trials["seed"] < n]).set_index("ablation")
        assert prefix.loc["unstable", "verdict"] not in ("equivalent", "negligible")


@pytest.mark.parametrize("auto", [False, True])
def test_simulated_arms_that_diverge_on_every_seed_are_worse_at_10_seeds(auto):
    """In a family of eight, the worst-rank half reaches p = 2/1024 < 0.05/8/2 at 10 seeds,
    fixed or at --seeds auto's last look, in every experiment."""
    rate = case_rate("diverges on every seed", experiments=40, seeds=10, auto=auto,
                     rng=np.random.default_rng(14))
    assert rate == 1.0


def test_an_arm_that_diverged_more_than_the_reference_is_never_better_however_good_its_rest():
    """An arm 30% better on the seeds it finished that diverged on 2 of 10 (the reference on
    none): its finished seeds alone would make it `better`; fixed and with --seeds auto it is
    not, and the row says it is unstable."""
    # one failure among the pilot's seeds: unstable from --seeds auto's first look
    arms = {**EQUAL_ARMS, "fast": (0.7, {1, 7}), "steady": (0.7, set())}
    trials = trials_table(10, arms)
    fixed = verdict_table(trials).set_index("ablation")
    assert fixed.loc["steady", "verdict"] == "better"  # the same gain, no failure
    assert fixed.loc["fast", "verdict"] not in ("better", "equivalent", "negligible")
    assert fixed.loc["fast", "reason"].startswith("unstable: 2/10 seeds diverged")
    auto = sequential_verdict_table(trials, SeedDesign.plan(3, 10), list(range(10)))
    auto = auto.set_index("ablation")
    assert auto.loc["steady", "verdict"] == "better"
    assert auto.loc["fast", "verdict"] not in ("better", "equivalent", "negligible")
    # higher is better: the same arm, its metric mirrored
    r2 = trials.assign(test_r2=-trials["test_mae"])
    mirrored = verdict_table(r2, metric="test_r2", margin="0.02").set_index("ablation")
    assert mirrored.loc["steady", "verdict"] == "better"
    assert mirrored.loc["fast", "verdict"] != "better"
    # at 20 seeds the worst-rank test alone could reach its level: one diverged seed and
    # 19 better ones rank the arm better, and it is still not called so
    many = trials_table(20, {"fast": (0.8, {0}), "steady": (0.8, set())})
    fixed = verdict_table(many).set_index("ablation")
    assert fixed.loc["steady", "verdict"] == "better"
    assert fixed.loc["fast", "verdict"] != "better" and bool(fixed.loc["fast", "unstable"])
    auto = sequential_verdict_table(many, SeedDesign.plan(3, 20), list(range(20)))
    assert auto.set_index("ablation").loc["fast", "verdict"] != "better"
    # docs/verdicts.md's row: in 300 simulated --seeds auto experiments, never once
    assert case_rate("10% better when it finishes, diverges 20%", experiments=300, seeds=10,
                     auto=True, rng=np.random.default_rng(13)) == 0.0


def test_each_arm_carries_its_diverged_runs_and_a_clopper_pearson_bound_on_the_rate():
    """Beside each verdict: the diverged seeds of the seeds with an outcome and the one-sided
    95% upper bound on the failure rate, equal to scipy's exact binomial interval (two-sided
    90% Clopper-Pearson: its upper end is the one-sided 95% bound); a seed the machinery
    failed is no outcome of the arm."""
    trials = trials_table(10, {**EQUAL_ARMS, "flaky": (1.0, {2, 5, 8})})
    failed = (trials["ablation"] == "same0") & (trials["seed"] == 4)
    trials.loc[failed, ["status", "test_mae"]] = ["failed", np.nan]
    for table in (verdict_table(trials),
                  sequential_verdict_table(trials, SeedDesign.plan(3, 10), list(range(10)))):
        rows = table.set_index("ablation")
        for arm, diverged, runs in (("flaky", 3, 10), ("same0", 0, 9), ("baseline", 0, 10)):
            assert (rows.loc[arm, "n_diverged"], rows.loc[arm, "n_outcomes"]) == (diverged, runs)
            exact = stats.binomtest(diverged, runs).proportion_ci(0.90, method="exact").high
            assert rows.loc[arm, "failure_rate_upper"] == pytest.approx(exact, rel=1e-9)
    view = verdict_view(verdict_table(trials), metric="test_mae", alpha=ALPHA)
    cells = view.set_index("Variant")["Diverged (failure rate ≤, 95%)"]
    assert cells["flaky"] == "3/10 (≤61%)" and cells["same1"] == "0/10 (≤26%)"
    assert cells["same0"] == "0/9 (≤28%)"


@pytest.mark.parametrize("auto", [False, True], ids=["fixed 10", "auto 10"])
@pytest.mark.slow  # a simulation of many experiments
def test_the_failure_bound_covers_the_true_rate_and_an_equivalent_rarely_hides_one(auto):
    """The printed bound of an arm that diverges at a rate q (equal to the reference when it
    finishes) is at least q in 95% of experiments, under --seeds auto too (its seeds end where
    the arm was decided); `equivalent` with a bound below the true rate in at most 5%."""
    rng = np.random.default_rng(7)
    experiments = 2000
    slack = 3 * np.sqrt(0.05 * 0.95 / experiments)
    for q in (0.1, 0.3):
        rates = bound_coverage(q, experiments=experiments, seeds=10, auto=auto, rng=rng)
        assert rates["covered"] >= 0.95 - slack, (q, rates)
        assert rates["reassured"] <= 0.05 + slack, (q, rates)


# ------------------------------------------------------------- a tolerance for divergence


def test_a_tolerance_keeps_equivalent_until_the_seeds_bound_the_failure_rate_below_it():
    """No run diverges; the arms equal the reference. 0 of 3 bounds the rate at 63%, 0 of 10
    at 26%: with a 30% tolerance the fixed design's arms are `equivalent` at 10 seeds and not
    at 3 (where they are without it); under --seeds auto they stop at the look whose seeds
    bound it below 30% (10: 0 of 7 is 35%), not at the first one that shows equivalence."""
    from ablations.results.stats.failures import seeds_for_tolerance

    trials = trials_table(10, EQUAL_ARMS, sd=0.001)
    three = trials[trials["seed"] < 3]
    assert set(verdict_table(three)["verdict"]) == {"reference", "equivalent"}
    held = verdict_table(three, max_failure_rate=0.3).set_index("ablation")
    assert set(held["verdict"]) == {"reference", "inconclusive"}
    assert held.loc["same0", "reason"] == ("failure rate ≤63% not below the tolerance 30%: "
                                           "no equivalence claim")
    assert set(verdict_table(trials, max_failure_rate=0.3)["verdict"]) == {
        "reference", "equivalent"}
    design = SeedDesign.plan(3, 10)
    free = sequential_verdict_table(trials, design, list(range(10))).set_index("ablation")
    tolerant = sequential_verdict_table(trials, design, list(range(10)),
                                        max_failure_rate=0.3).set_index("ablation")
    arms = list(EQUAL_ARMS)
    assert (free.loc[arms, "verdict"] == "equivalent").all()
    assert free.loc[arms, "decided_at"].max() < 10
    assert (tolerant.loc[arms, "verdict"] == "equivalent").all()
    assert (tolerant.loc[arms, "decided_at"] == 10).all()
    assert seeds_for_tolerance(0.3, ALPHA) == 9 and seeds_for_tolerance(0.2, ALPHA) == 14


def test_the_tolerance_is_recorded_before_the_data_and_an_unreachable_one_refused():
    from ablations.experiment.prepare import prepare
    from ablations.experiment.core.request import Request, UsageError

    assert prepare(Request(max_failure_rate=0.3)).design.planned["max_failure_rate"] == 0.3
    rounds = prepare(Request(max_failure_rate=0.3, seeds="auto")).design
    assert rounds.planned["max_failure_rate"] == 0.3
    assert rounds.run.record()["max_failure_rate"] == 0.3
    with pytest.raises(UsageError, match=r"max_failure_rate 20%: 10 seeds per variant bound "
                                         r"the rate of divergence at 26% at best"):
        prepare(Request(max_failure_rate=0.2, seeds="auto"))
    rounds = Rounds(max_seeds=14)
    assert prepare(Request(max_failure_rate=0.2, seeds="auto", design=rounds)).design.run \
        .design.max_seeds == 14


def test_a_tolerance_costs_seeds_not_error_in_the_simulated_workflow():
    """tools/failure_simulation.py's tolerance cost, small: at the tight spread (equivalence
    within reach at the pilot) a 30% tolerance makes every arm run 10 seeds, and an arm that
    diverges on 30% of its runs is `equivalent` less often than without it."""
    from tools.failure_simulation import TIGHT, tolerance_cost

    free = tolerance_cost(0.3, None, experiments=300, rng=np.random.default_rng(1),
                          spread=TIGHT)
    held = tolerance_cost(0.3, 0.3, experiments=300, rng=np.random.default_rng(1),
                          spread=TIGHT)
    assert free["seeds per arm"] < 7 and held["seeds per arm"] > 9.9
    assert held["equivalent"] < free["equivalent"]
