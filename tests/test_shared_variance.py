"""The verdicts' default test (results/stats/shared_variance.py): its pooled variance against
statsmodels' OLS of the arm x seed model, which arms share it and which keep their own test,
the floor, the test an experiment recorded; its error rates and power simulated through the
runner's own procedures (tools/shared_simulation.py); and arms whose seeds measured no
variance (results/stats/seed_ties.py), down to a program that ignores its seed, run through
the command line."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ablations.config.comparison import Decision
from ablations.results.stats.planned import planned_record, verdict_test
from ablations.results.stats.sequential import SeedDesign
from ablations.results.stats.sequential_table import sequential_verdict_table
from ablations.results.stats.shared_variance import (
    PAIRED_TEST,
    SHARED_ROW,
    SHARED_TEST,
    shared_contrasts,
    shared_moments,
)
from ablations.results.stats.seed_ties import seed_tie_lines, seed_tied_column
from ablations.results.stats.verdicts import verdict_table
from tests.conftest import REPO, run_here

MAIN_JOB = REPO / "tests" / "fixtures" / "main_job" / "trials.parquet"


def _trials(values: dict[str, list[float]], status: dict[tuple[str, int], str] | None = None
            ) -> pd.DataFrame:
    rows = []
    for arm, column in values.items():
        for seed, value in enumerate(column):
            state = (status or {}).get((arm, seed), "ok")
            rows.append({"ablation": arm, "seed": seed, "status": state,
                         "test_mae": value if state == "ok" else np.nan})
    return pd.DataFrame(rows)


def _table(rng: np.random.Generator, arms: int, seeds: int, *, reference_sd: float = 0.02
           ) -> tuple[np.ndarray, np.ndarray]:
    seed_effect = 0.05 * rng.standard_normal(seeds)
    reference = 0.5 + seed_effect + reference_sd * rng.standard_normal(seeds)
    values = (0.5 + 0.01 * np.arange(arms)[:, None] + seed_effect
              + 0.02 * rng.standard_normal((arms, seeds)))
    return values, reference


# ------------------------------------------------------------ the statistic, independently


def test_the_pooled_variance_is_statsmodels_ols_residual_and_the_reference_s_own_part():
    """The variants' arm x seed residual mean square is the OLS residual variance of
    ``y ~ C(arm) + C(seed)`` (statsmodels), and the contrast's variance adds the sample
    variance of (the variants' seed means − the reference); the t and its Satterthwaite df
    give the p-value scipy's t distribution gives."""
    import statsmodels.formula.api as smf

    rng = np.random.default_rng(3)
    values, reference = _table(rng, 6, 4)
    moments, shared = shared_moments(values, reference, np.ones(6, bool))
    assert shared.all()
    long = pd.DataFrame([{"y": values[a, s], "arm": a, "seed": s}
                         for a in range(6) for s in range(4)])
    fit = smf.ols("y ~ C(arm) + C(seed)", data=long).fit()
    ms_int = fit.mse_resid
    assert fit.df_resid == (6 - 1) * (4 - 1)
    s2_c = np.var(values.mean(axis=0) - reference, ddof=1)
    v = (1 - 1 / 6) * ms_int + s2_c
    assert moments.var_diff == pytest.approx(np.full(6, v / 4), rel=1e-10)
    part = (1 - 1 / 6) * ms_int
    df = v ** 2 / (part ** 2 / fit.df_resid + s2_c ** 2 / 3)
    assert moments.df == pytest.approx(np.full(6, df), rel=1e-10)
    diff = (values - reference).mean(axis=1)
    p = 2 * stats.t.sf(np.abs(diff) / np.sqrt(v / 4), df)
    assert moments.p_value() == pytest.approx(p, rel=1e-9)


def test_the_pooled_variance_estimates_the_paired_differences_variance_whatever_the_reference():
    """E[V] = σ²_v + σ²_r, the variance of one paired difference, with the reference 5x as
    noisy as the variants and a seed effect shared by every arm (20,000 simulated tables):
    the reference's noise is counted once, never lent the variants' precision."""
    rng = np.random.default_rng(7)
    experiments, arms, seeds = 20000, 8, 3
    u = 0.1 * rng.standard_normal((experiments, 1, seeds))
    values = 1.0 + u + 0.02 * rng.standard_normal((experiments, arms, seeds))
    reference = 1.0 + u[:, 0] + 0.1 * rng.standard_normal((experiments, seeds))
    moments, _ = shared_moments(values, reference, np.ones((experiments, arms), bool))
    v = moments.var_diff[:, 0] * seeds
    truth = 0.02 ** 2 + 0.1 ** 2
    assert v.mean() == pytest.approx(truth, rel=0.03)


# ---------------------------------------------------------------- which arms share the pool


def test_the_main_jobs_pilot_calls_its_three_large_effects_worse():
    """The README's first command, as recorded: at the pilot look (the default run's table),
    the shared-variance test calls no_images, no_scalars and single_frame `worse` (+77%,
    +80%, +58%), each arm's own paired test only no_images; every row names its test."""
    trials = pd.read_parquet(MAIN_JOB)
    design = SeedDesign.plan(3, 10)
    shared = sequential_verdict_table(trials, design, list(range(10))).set_index("ablation")
    own = sequential_verdict_table(trials, design, list(range(10)),
                                   test=PAIRED_TEST).set_index("ablation")
    worse = {"no_images", "no_scalars", "single_frame"}
    assert set(shared.index[shared["verdict"] == "worse"]) == worse
    assert set(own.index[own["verdict"] == "worse"]) == {"no_images"}
    assert (shared.drop(index="baseline")["test"] == SHARED_ROW).all()
    assert (shared.drop(index=list(worse) + ["baseline"])["verdict"] == "inconclusive").all()
    # the shared degrees of freedom narrow the null arms' equivalence bounds
    nulls = shared.index.difference([*worse, "baseline"])
    assert (shared.loc[nulls, "equivalence_bound_holm"]
            < own.loc[nulls, "equivalence_bound_holm"]).all()


def test_an_arm_with_a_failed_seed_keeps_its_own_test_and_a_failed_reference_seed_every_arm():
    rng = np.random.default_rng(5)
    values, reference = _table(rng, 4, 4)
    arms = {"baseline": list(reference), **{f"a{i}": list(values[i]) for i in range(4)}}
    table = verdict_table(_trials(arms, {("a1", 2): "failed"})).set_index("ablation")
    assert table.loc["a1", "test"] == "paired t"
    assert (table.loc[["a0", "a2", "a3"], "test"] == SHARED_ROW).all()
    ref_failed = verdict_table(_trials(arms, {("baseline", 0): "failed"})).set_index(
        "ablation")
    assert (ref_failed.drop(index="baseline")["test"] == "paired t").all()
    single = verdict_table(_trials({"baseline": arms["baseline"], "a0": arms["a0"]}))
    assert single.set_index("ablation").loc["a0", "test"] == "paired t"  # a family of one


def test_the_floor_keeps_a_noisy_arm_from_borrowing_the_pools_precision():
    """Seven quiet arms and one whose seeds scatter widely around a difference of 0.1: the
    pool's variance alone would call it worse (p below α/8); its own paired test does not pass
    the floor, so it is `inconclusive`. Without the noise it is `worse`."""
    base = np.array([0.50, 0.52, 0.48, 0.51])
    quiet = {f"q{i}": list(base + 0.001 * np.array([1, -1, 1, -1]) * (i + 1))
             for i in range(7)}
    noisy = base + 0.1 + np.array([0.12, -0.10, 0.09, -0.11])
    values = np.array([*quiet.values(), noisy])
    pooled = shared_contrasts(values, base, np.ones(8, bool), floor_diff=0.05,
                              floor_eq=0.05).pooled.p_value()[-1]
    table = verdict_table(_trials({"baseline": list(base), **quiet, "noisy": list(noisy)}))
    row = table.set_index("ablation").loc["noisy"]
    own_p = stats.ttest_rel(noisy, base).pvalue
    assert pooled < 0.05 / 8 and own_p > 0.05, (pooled, own_p)
    assert row["verdict"] == "inconclusive", row
    calm = base + 0.1 + np.array([0.001, -0.001, 0.001, -0.001])
    calmer = verdict_table(_trials({"baseline": list(base), **quiet, "noisy": list(calm)}))
    assert calmer.set_index("ablation").loc["noisy", "verdict"] == "worse"


def test_several_noisy_arms_share_the_floor():
    """Each arm whose paired differences vary beyond the others' divides the floor: three
    noisy arms, a third of it each."""
    rng = np.random.default_rng(11)
    values, reference = _table(rng, 8, 5)
    values[:3] += 0.3 * rng.standard_normal((3, 5))
    contrasts = shared_contrasts(values, reference, np.ones(8, bool), floor_diff=0.05,
                                 floor_eq=0.05)
    assert contrasts.floor_diff == pytest.approx(np.full(8, 0.05 / 3))
    quiet = shared_contrasts(values[3:], reference, np.ones(5, bool), floor_diff=0.05,
                             floor_eq=0.05)
    assert quiet.floor_diff == pytest.approx(np.full(5, 0.05))


# ---------------------------------------------------------------------- the recorded test


def test_an_experiment_keeps_the_test_it_was_planned_with():
    record = planned_record(Decision(reference="baseline", metric="test_mae", margin="5%",
                                              alpha=0.05), seeds=[0, 1, 2])
    assert record["test"] == {"name": SHARED_TEST, "version": 1}
    assert verdict_test(record) == SHARED_TEST
    before = {k: v for k, v in record.items() if k != "test"}  # recorded before the test was
    assert verdict_test(before) == PAIRED_TEST and verdict_test(None) == PAIRED_TEST
    from ablations.experiment.designs.rounds import RoundsRun

    run = RoundsRun(SeedDesign.plan(3, 10), list(range(10)), "baseline", "test_mae", "5%",
                        0.05, {})
    assert run.record()["test"] == {"name": SHARED_TEST, "version": 1}
    old = {k: v for k, v in run.record().items() if k != "test"}
    assert RoundsRun.from_record(old).test == PAIRED_TEST


# ---------------------------------------------------------------------- error rates, power


@pytest.mark.slow  # a simulation of many experiments
@pytest.mark.parametrize("cell", ["equal s.d.", "reference 10x s.d.", "one arm 5x s.d.",
                                  "one arm 10x s.d.", "three arms 5x s.d.", "seed effect 5x",
                                  "t3 tails", "diverged 1 run in 10"])
def test_false_worse_or_better_stays_within_alpha_in_every_noise_cell(cell):
    """Five arms equal to the reference beside three large effects, every design (fixed 3, 5,
    10; the pilot; the pilot then rounds to 5 and 10): any false `worse`/`better`/`negligible`
    among the five in at most α + 3 Monte-Carlo s.e. of experiments."""
    from tools import shared_simulation as sim

    experiments = 600
    rates = {design: sim.rate("false worse/better", cell, design, SHARED_TEST,
                              experiments=experiments, seed=31 + d)
             for d, design in enumerate(sim.DESIGNS)}
    assert max(rates.values()) <= sim.bound(experiments), rates


@pytest.mark.slow  # a simulation of many experiments
def test_an_arm_at_the_margin_is_rarely_equivalent_and_power_rises_at_the_pilot():
    from tools import shared_simulation as sim

    experiments = 600
    for cell in ("equal s.d.", "one arm 10x s.d.", "t3 tails"):
        for d, design in enumerate(sim.DESIGNS):
            rate = sim.rate("false equivalent", cell, design, SHARED_TEST,
                            experiments=experiments, seed=71 + d)
            assert rate <= sim.bound(experiments), (cell, design, rate)
    power = {test: sim.rate("power +20%", "equal s.d.", "pilot 3", test,
                            experiments=experiments, seed=5) for test in sim.TESTS}
    assert power[SHARED_TEST] > 2 * power[PAIRED_TEST], power


# --------------------------------------------------------------------------- seed ties


def test_a_coarse_metric_that_ties_on_one_arm_and_an_arm_equal_to_the_reference_are_said():
    base = [0.50, 0.52, 0.48]
    trials = _trials({"baseline": base, "coarse": [0.6, 0.6, 0.6], "same": base,
                      "moved": [0.56, 0.57, 0.55]})
    trials["val_mae"] = trials["test_mae"] + 0.01 * trials["seed"]  # the other metric varies
    table = verdict_table(trials).set_index("ablation")
    assert bool(table.loc["coarse", "no_seed_variance"])
    assert table.loc["coarse", "verdict"] == "inconclusive"
    assert not table["no_seed_variance"].drop(index="coarse").any()
    lines = seed_tie_lines(trials, metric="test_mae", reference="baseline")
    assert lines[0].startswith("No seed variance was measured for coarse: test_mae is the same")
    assert lines[1].startswith("same gave exactly baseline's test_mae on every seed")
    assert seed_tied_column(trials, "test_mae").tolist() == [
        ablation == "coarse" for ablation in trials["ablation"]]


def test_a_program_that_ignores_its_seed_is_told_where_the_fix_is():
    """Every arm tied on every metric: the line says how to pass the seed, or, where the
    command line passes one already, that the program seeds a constant of its own."""
    trials = _trials({"baseline": [0.5] * 3, "other": [0.6] * 3})

    def line(run: str) -> str:
        model = "command:" + json.dumps({"run": run, "config": {}})
        return seed_tie_lines(trials.assign(model=model), metric="test_mae",
                              reference="baseline")[0]

    assert "Its command line passes the seed ({seed})" in line("{python} t.py --seed {seed}")
    assert "Its command line passes the seed" in line("{python} t.py --data-seed {data_seed}")
    unpassed = line("{python} t.py --lr 0.1")
    assert "Pass the seed to it ({seed} in the command" in unpassed
    assert "passes the seed" not in unpassed
    assert "Pass the seed to it" in seed_tie_lines(trials, metric="test_mae",
                                                   reference="baseline")[0]  # no command


def test_seeds_auto_adds_no_seeds_to_an_arm_without_seed_variance():
    from ablations.experiment.designs.rounds import next_arms

    base = [0.50, 0.52, 0.48]
    trials = _trials({"baseline": base, "coarse": [0.6, 0.6, 0.6],
                      "close": [0.505, 0.53, 0.47]})
    table = sequential_verdict_table(trials, SeedDesign.plan(3, 10), list(range(10)))
    assert set(table.loc[table["verdict"] == "inconclusive", "ablation"]) == {"coarse", "close"}
    assert next_arms(table, ["baseline", "coarse", "close"]) == ["close"]


IGNORES_SEED = '''
import argparse
import json
import random

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
random.seed(0)  # a constant, whatever --seed says
loss = 1.0
for epoch in range(1, 3):
    loss *= 1 - args.lr * random.random()
    print(json.dumps({"epoch": epoch, "train_loss": loss}), flush=True)
print(json.dumps({"test_loss": loss + 0.01 * random.random()}))
'''


@pytest.mark.slow  # trains through the command line, on the test worker's shared Ray
def test_a_command_that_ignores_its_seed_is_flagged_and_gets_no_verdict(tmp_path):
    """A published script that seeds a constant whatever ``--seed`` it is given: every seed
    of an arm gives the same metrics and curves. trials.parquet flags every trial, no arm is
    called worse/better/equivalent/negligible, and the summary says the program ignores its
    seed and how to pass it; the variant equal to the reference is not said apart (the seed
    line covers it)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(IGNORES_SEED.lstrip())
    (project / "space.yaml").write_text(textwrap.dedent("""
        name: ignores-seed
        command: "{python} train.py --lr {lr} --seed {seed}"
        config: {lr: 0.1}
        metrics: {test_loss: lower}
        variants:
          baseline: {}
          faster: {lr: 0.3}
          slower: {lr: 0.05}
        """).lstrip())
    run = run_here("--space", "space.yaml", "--seeds", "3", "--storage", str(tmp_path),
                   "--name", "constant", "--no-dashboard", cwd=project)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    trials = pd.read_parquet(tmp_path / "constant" / "trials.parquet")
    assert (trials["status"] == "ok").all() and trials["seed_tied"].all(), trials
    assert "the program ignores the seed it is given" in run.stdout, run.stdout
    # its line passes --seed {seed}: the fix is in the program, not the command
    assert "Its command line passes the seed ({seed}) and the program does not use it" \
        in run.stdout, run.stdout
    rows = [line for line in run.stdout.splitlines()
            if line.strip().startswith(("faster ", "slower "))]  # the summary's rows
    assert len(rows) == 2 and all("inconclusive" in line for line in rows), run.stdout
    for verdict in ("worse", "better", "equivalent", "negligible"):
        assert not any(f" {verdict} " in f"{line} " for line in rows), run.stdout
    # --seeds auto would add the same values: the end says so, not a failure
    assert "no seed variance: more seeds would give the same values" in run.stdout
