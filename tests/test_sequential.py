"""The sequential design of ``--seeds auto`` (results.sequential): the planned looks and α
shares, the sequential p-values and Holm against the fixed design and against an independent
implementation with scipy's t tests, the equivalence bound, the runner's DataFrame path against
the array path, and a simulation of the whole procedure (stopping included) that checks its
error rates, and that it would catch a procedure that does not split α across looks. No Ray."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from results.analysis import equivalence_tests
from results.sequential import (
    SeedDesign,
    active_arms,
    sequential_tests,
    sequential_verdict_table,
    simulate,
)

ALPHA = 0.05
MARGIN = 0.0276  # 5% of the synthetic default's reference test MAE (0.552 km)
DIFFERENCE = ("worse", "better", "negligible")  # a significant difference
EQUIVALENT = ("equivalent", "negligible")  # TOST declared equivalence

# Simulated error rates, printed at the end of the module (pytest -s) and quoted in the
# assertion messages.
RATES: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def _report_rates():
    yield
    if RATES:
        print("\nsimulated rates (results.sequential.simulate):")
        for name, rate in RATES.items():
            print(f"  {name}: {rate:.4f}")


def _mc_bound(experiments: int, alpha: float = ALPHA) -> float:
    """alpha plus three Monte-Carlo standard errors."""
    return alpha + 3 * np.sqrt(alpha * (1 - alpha) / experiments)


def _look_stats(paired: np.ndarray, looks: tuple[int, ...], reached: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """diff, se and df (arms, looks) of paired differences (arms, seeds) over each look's first
    n_k seeds; NaN where ``reached`` (arms, looks) is False."""
    shape = (paired.shape[0], len(looks))
    diff, se, df = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    for k, n in enumerate(looks):
        d = paired[:, :n]
        diff[:, k] = np.where(reached[:, k], d.mean(axis=-1), np.nan)
        se[:, k] = np.where(reached[:, k], d.std(axis=-1, ddof=1) / np.sqrt(n), np.nan)
        df[:, k] = np.where(reached[:, k], n - 1.0, np.nan)
    return diff, se, df


# -------------------------------------------------------------------------------- the design


def test_plan_doubles_up_to_max_seeds_and_shares_alpha_across_the_looks():
    """Looks at the pilot, then doubling capped at max_seeds; one α share per look for each
    kind of verdict, summing to 1 (the README's shares for 3 and 10); bad pilots refused; the
    design survives experiment.json (to_dict, JSON, from_dict)."""
    assert SeedDesign.plan(3, 10).looks == (3, 6, 10)
    assert SeedDesign.plan(3).looks == (3, 6, 10)  # --max-seeds 10 by default
    assert SeedDesign.plan(2, 20).looks == (2, 4, 8, 16, 20)
    assert SeedDesign.plan(3, 3).looks == (3,)
    assert SeedDesign.plan(4, 8).looks == (4, 8)
    for pilot, max_seeds in ((3, 10), (2, 20), (3, 3), (4, 8), (2, 3), (5, 40)):
        design = SeedDesign.plan(pilot, max_seeds)
        assert design.looks[0] == pilot and design.max_seeds == max_seeds
        assert all(a < b for a, b in zip(design.looks, design.looks[1:]))
        for shares in (design.diff_spend, design.eq_spend):
            assert len(shares) == len(design.looks), design
            assert sum(shares) == pytest.approx(1.0, abs=1e-12), design
            assert all(s > 0 for s in shares), design
    one = SeedDesign.plan(3, 3)
    assert one.diff_spend == (1.0,) and one.eq_spend == pytest.approx((1.0,))
    # 3, 6, 10: half of α for differences at the pilot, the rest 3:4 by the seeds added;
    # equivalence (n_k / 10)²: 0.09, 0.36 - 0.09, 1 - 0.36
    design = SeedDesign.plan(3, 10)
    assert design.diff_spend == pytest.approx((0.5, 0.5 * 3 / 7, 0.5 * 4 / 7))
    assert design.eq_spend == pytest.approx((0.09, 0.27, 0.64))
    with pytest.raises(ValueError, match="at least 2"):
        SeedDesign.plan(1, 10)
    with pytest.raises(ValueError, match="at least 2"):
        SeedDesign.plan(0)
    with pytest.raises(ValueError, match="below the pilot"):
        SeedDesign.plan(5, 4)
    for design in (SeedDesign.plan(3, 10), SeedDesign.plan(2, 20), SeedDesign.fixed(5)):
        again = SeedDesign.from_dict(json.loads(json.dumps(design.to_dict())))
        assert again == design
        assert isinstance(again.looks[0], int) and isinstance(again.diff_spend[0], float)
    assert SeedDesign.fixed(5) == SeedDesign((5,), (1.0,), (1.0,))


# ---------------------------------------------------------------- p-values, Holm, the bound


def _random_families(rng: np.random.Generator, families: int, arms: int, looks: int,
                     missing: float = 0.1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random t statistics (families, arms, looks): differences around ±0.05, standard errors
    0.004-0.03, df 2-9; an arm stops after a random look (NaN later) and a share ``missing`` of
    arms has no look at all."""
    shape = (families, arms, looks)
    diff = rng.choice([0.0, 0.0, 0.03, -0.08], size=shape[:-1])[..., None] + \
        0.02 * rng.standard_normal(shape)
    se = rng.uniform(0.004, 0.03, shape)
    df = rng.integers(2, 10, shape).astype(float)
    stop = rng.integers(1, looks + 1, shape[:-1])  # looks reached
    diff[np.arange(looks) >= stop[..., None]] = np.nan
    diff[rng.random(shape[:-1]) < missing] = np.nan
    return diff, se, df


def test_one_look_is_the_fixed_design():
    """With SeedDesign.fixed (one look, all of α there) the sequential tests are
    equivalence_tests: the same Holm p-values, verdicts and Holm equivalence bounds, family by
    family (stacked along a leading axis), arms without a test left out of the family."""
    rng = np.random.default_rng(3)
    diff, se, df = _random_families(rng, families=40, arms=7, looks=1, missing=0.1)
    assert np.isnan(diff).any() and (~np.isnan(diff)).sum(axis=1).min() >= 1
    for direction in (-1, 1, 0):
        seq = sequential_tests(diff, se, df, design=SeedDesign.fixed(6), margin=0.05,
                               alpha=ALPHA, direction=direction)
        fixed = equivalence_tests(diff[..., 0], se[..., 0], df[..., 0], margin=0.05, alpha=ALPHA,
                                  direction=direction)
        for column in ("p_holm", "p_tost_holm", "equivalence_bound_holm"):
            np.testing.assert_allclose(seq[column], fixed[column], rtol=1e-10, equal_nan=True,
                                       err_msg=column)
        np.testing.assert_allclose(seq["p_seq"], fixed["p_value"], rtol=1e-10, equal_nan=True)
        np.testing.assert_allclose(seq["p_tost_seq"], fixed["p_tost"], rtol=1e-10,
                                   equal_nan=True)
        assert (seq["verdict"] == fixed["verdict"]).all()
        assert (seq["significant"] == fixed["significant"]).all()
        assert (seq["equivalent"] == fixed["equivalent"]).all()
        np.testing.assert_array_equal(seq["looks"], (~np.isnan(diff[..., 0])).astype(int))
    # not vacuous: every kind of verdict occurs
    assert set(fixed["verdict"].ravel()) >= {"higher", "lower", "equivalent", "inconclusive"}


def _holm_step_down(p: np.ndarray) -> np.ndarray:
    """Holm's adjusted p-values, written out: NaN arms are not in the family."""
    adjusted = np.full(len(p), np.nan)
    present = [i for i in range(len(p)) if not np.isnan(p[i])]
    m = len(present)
    running = 0.0
    for rank, i in enumerate(sorted(present, key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def _hand_made_experiment() -> tuple[list[np.ndarray], np.ndarray]:
    """Paired differences (variant - reference) of seven arms under the design 3, 6, 10, each
    with the seeds it ran: two large effects that stopped at the pilot, arms that stopped after
    the second look, arms that ran 10 seeds, one whose pilot decides though its later seeds
    turn the mean's sign, and one with no ok pair at all."""
    rng = np.random.default_rng(21)
    pilot_strong = np.r_[0.06, 0.061, 0.059, -0.04 + 0.03 * rng.standard_normal(7)]
    return [
        np.array([0.41, 0.40, 0.42]),                   # worse, stopped at the pilot
        np.array([-0.30, -0.28, -0.31]),                # better, stopped at the pilot
        0.001 + 0.004 * rng.standard_normal(6),         # stopped after the second look
        0.0 + 0.008 * rng.standard_normal(10),          # ran 10 seeds
        np.array([0.03, -0.02, -0.01, 0.025, -0.03, 0.004, 0.02, -0.025, 0.01, -0.006]),
        # ^ noisy, mean about 0: p / share above 1 at every look
        pilot_strong,                                   # its pilot decides
        np.array([]),                                   # no look
    ], np.array([3, 6, 10])


def test_sequential_p_values_and_verdicts_against_scipys_t_tests():
    """An independent implementation: per look scipy's one-sample t test (two-sided, and TOST
    as the larger of the one-sided tests against ±margin) on the arm's first n_k differences,
    divided by the look's share of α, the smallest over the looks the arm reached, capped at 1;
    Holm as an explicit step-down loop; the verdict from the deciding look's sign."""
    arms, looks = _hand_made_experiment()
    design = SeedDesign.plan(3, 10)
    assert design.looks == tuple(looks)
    f, g = np.array(design.diff_spend), np.array(design.eq_spend)
    margin = 0.02
    shape = (len(arms), len(looks))
    diff, se, df = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    p_seq, p_tost_seq = np.full(len(arms), np.nan), np.full(len(arms), np.nan)
    deciding_sign = np.zeros(len(arms))
    for j, d in enumerate(arms):
        scaled, scaled_tost, signs = [], [], []
        for k, n in enumerate(looks):
            if len(d) < n:
                continue
            x = d[:n]
            diff[j, k], se[j, k], df[j, k] = x.mean(), stats.sem(x), n - 1
            scaled.append(stats.ttest_1samp(x, 0).pvalue / f[k])
            tost = max(stats.ttest_1samp(x, -margin, alternative="greater").pvalue,
                       stats.ttest_1samp(x, margin, alternative="less").pvalue)
            scaled_tost.append(tost / g[k])
            signs.append(np.sign(x.mean()))
        if scaled:
            p_seq[j], p_tost_seq[j] = min(1.0, min(scaled)), min(1.0, min(scaled_tost))
            deciding_sign[j] = signs[int(np.argmin(scaled))]
    p_holm, p_tost_holm = _holm_step_down(p_seq), _holm_step_down(p_tost_seq)
    significant, equivalent = p_holm < ALPHA, p_tost_holm < ALPHA
    expected = np.where(equivalent, "equivalent", "inconclusive").astype(object)
    expected[significant] = np.where(deciding_sign > 0, "worse", "better")[significant]
    expected[significant & equivalent] = "negligible"

    out = sequential_tests(diff, se, df, design=design, margin=margin, alpha=ALPHA,
                           direction=-1)
    np.testing.assert_allclose(out["p_seq"], p_seq, rtol=1e-8, equal_nan=True)
    np.testing.assert_allclose(out["p_tost_seq"], p_tost_seq, rtol=1e-8, equal_nan=True)
    np.testing.assert_allclose(out["p_holm"], p_holm, rtol=1e-8, equal_nan=True)
    np.testing.assert_allclose(out["p_tost_holm"], p_tost_holm, rtol=1e-8, equal_nan=True)
    assert out["verdict"].tolist() == expected.tolist()
    np.testing.assert_array_equal(out["looks"], [1, 1, 2, 3, 3, 3, 0])
    # what the hand-made arms were made to show
    assert expected.tolist()[:4] == ["worse", "better", "equivalent", "equivalent"]
    assert p_seq[4] == 1.0  # capped
    assert out["verdict"][5] == "worse" and out["significant"][5]
    # the pilot decided (worse), not the last look, where the mean is below 0
    assert p_seq[5] < stats.ttest_1samp(arms[5], 0).pvalue / f[2] and diff[5, 2] < 0
    assert np.isnan(out["p_holm"][6]) and out["verdict"][6] == "inconclusive"
    # labels for a metric where higher is better, and for one with no better direction
    up = sequential_tests(diff, se, df, design=design, margin=margin, direction=+1)
    assert up["verdict"][:2].tolist() == ["better", "worse"]
    neither = sequential_tests(diff, se, df, design=design, margin=margin, direction=0)
    assert neither["verdict"][:2].tolist() == ["higher", "lower"]


def test_equivalence_bound_is_the_smallest_margin_the_procedure_declares():
    """equivalence_bound_holm per arm: at a common margin just above it (a margin per
    experiment, shape (experiments, 1)) sequential_tests declares the arm equivalent, just
    below it does not; multi-look design, stopped arms and arms without a look included."""
    rng = np.random.default_rng(5)
    design = SeedDesign.plan(3, 10)
    diff, se, df = _random_families(rng, families=30, arms=6, looks=3, missing=0.1)
    bound = sequential_tests(diff, se, df, design=design, margin=0.05)["equivalence_bound_holm"]
    valid = ~np.isnan(diff).all(axis=-1)
    assert np.isfinite(bound[valid]).all() and np.isnan(bound[~valid]).all()
    checked = 0
    for j in range(diff.shape[1]):
        rows = valid[:, j]
        above = sequential_tests(diff, se, df, design=design,
                                 margin=np.where(rows, bound[:, j], 1.0)[:, None] * (1 + 1e-6))
        below = sequential_tests(diff, se, df, design=design,
                                 margin=np.where(rows, bound[:, j], 1.0)[:, None] * (1 - 1e-3))
        assert above["equivalent"][rows, j].all(), j
        assert (above["p_tost_holm"][rows, j] < ALPHA).all()
        assert not below["equivalent"][rows, j].any(), j
        assert (below["p_tost_holm"][rows, j] >= ALPHA).all()
        checked += rows.sum()
    assert checked >= 150
    # the bound depends on the look: a share of 0 at the pilot leaves the pilot out of it
    late = SeedDesign((3, 6, 10), (0.5, 0.25, 0.25), (0.0, 0.5, 0.5))
    bound_late = sequential_tests(diff, se, df, design=late, margin=0.05)[
        "equivalence_bound_holm"]
    only_pilot = valid & np.isnan(diff[..., 1])
    assert only_pilot.any() and np.isnan(bound_late[only_pilot]).all()


# ------------------------------------------------------------- the runner's DataFrame path


ARMS = {  # name: (true difference, seed spread): decided at the pilot, later, or never
    "tiny": (0.0, 0.002), "zero": (0.0, 0.006), "small": (0.004, 0.008),
    "images": (0.41, 0.02), "better": (-0.3, 0.02), "noisy": (0.01, 0.03),
    "margin": (MARGIN, 0.01), "spread": (0.0, 0.014),
}


def _round_rows(columns: dict[str, np.ndarray], arms: list[str], seeds: list[int]
                ) -> pd.DataFrame:
    """A round's trials: ``arms`` at ``seeds``, each an ok trial with the arm's test MAE at
    that seed."""
    return pd.DataFrame([{"ablation": arm, "seed": s, "status": "ok", "test_mae": columns[arm][s]}
                         for arm in arms for s in seeds])


class _Replay:
    """A stand-in for simulate's numpy Generator that hands back given standard normals
    (the reference's draw has one row, the arms' one per arm)."""

    def __init__(self, reference: np.ndarray, arms: np.ndarray):
        self.reference, self.arms = reference, arms

    def standard_normal(self, shape):
        values = self.reference if shape[1] == 1 else self.arms
        assert values.shape == tuple(shape)
        return values


def test_the_runners_rounds_decide_as_the_array_path_and_simulate():
    """The runner's path (a trials table grown round by round: sequential_verdict_table, then
    active_arms picks who gets the next look's seeds, the reference running whenever any arm
    does) gives the verdicts, p-values and seeds per arm of sequential_tests on the same
    values' paired t statistics with the stopping done on arrays, and of simulate on the same
    draws."""
    rng = np.random.default_rng(11)
    design = SeedDesign.plan(3, 10)
    looks, seeds = design.looks, list(range(10))
    names = list(ARMS)
    delta = np.array([ARMS[n][0] for n in names])
    sd = np.array([ARMS[n][1] for n in names])
    experiments = 10
    e_reference = rng.standard_normal((experiments, 1, 10))
    e_arms = rng.standard_normal((experiments, len(names), 10))
    simulated = simulate(design, delta, sd, reference_sd=0.01, experiments=experiments,
                         margin=MARGIN, rng=_Replay(e_reference, e_arms))
    spent = []
    for e in range(experiments):
        reference = 0.55 + 0.01 * e_reference[e, 0]
        values = 0.55 + delta[:, None] + sd[:, None] * e_arms[e]
        columns = {"baseline": reference, **dict(zip(names, values))}
        trials = _round_rows(columns, ["baseline", *names], seeds[:looks[0]])
        reached = np.zeros((len(names), len(looks)), dtype=bool)
        reached[:, 0] = True
        paired = values - reference
        for k in range(len(looks)):
            table = sequential_verdict_table(trials, design, seeds, reference="baseline",
                                             metric="test_mae", margin=MARGIN)
            active = active_arms(table)
            diff, se, df = _look_stats(paired, looks, reached)
            arrays = sequential_tests(diff, se, df, design=design, margin=MARGIN, alpha=ALPHA)
            table = table.set_index("ablation")
            assert table.loc[names, "verdict"].tolist() == arrays["verdict"].tolist(), (e, k)
            for column in ("p_seq", "p_tost_seq", "p_holm", "p_tost_holm",
                           "equivalence_bound_holm"):
                np.testing.assert_allclose(table.loc[names, column].astype(float),
                                           arrays[column], rtol=1e-9, err_msg=column)
            np.testing.assert_array_equal(table.loc[names, "looks"].astype(int),
                                          reached.sum(axis=1))
            assert table.loc["baseline", "verdict"] == "reference"
            assert active == [n for n, v in zip(names, arrays["verdict"]) if v == "inconclusive"]
            if not active or k == len(looks) - 1:
                break
            trials = pd.concat([trials, _round_rows(columns, ["baseline", *active],
                                                    seeds[looks[k]:looks[k + 1]])],
                               ignore_index=True)
            reached[:, k + 1] = [n in active for n in names]
        counts = trials.groupby("ablation").size()
        runner_seeds = counts[names].to_numpy()
        np.testing.assert_array_equal(runner_seeds, [looks[r.sum() - 1] for r in reached])
        assert counts["baseline"] == runner_seeds.max()
        assert table.loc[names, "verdict"].tolist() == simulated["verdict"][e].tolist(), e
        np.testing.assert_array_equal(runner_seeds, simulated["seeds"][e])
        assert simulated["reference_seeds"][e] == counts["baseline"]
        spent.append(runner_seeds)
    spent = np.array(spent)
    # not vacuous: arms stopped at each look, and the verdicts vary
    assert {3, 6, 10} <= set(spent.ravel()), spent
    assert (spent[:, names.index("images")] == 3).all()


# ---------------------------------------------------------------------------- simulation

DESIGN = SeedDesign.plan(3, 10)
UNEQUAL = np.linspace(0.010, 0.030, 8)  # arms' seed spreads (km), threefold apart
NOISES = ("gaussian", "t3")
EXPERIMENTS = 4000


def _difference_rate(design: SeedDesign, noise: str, seed: int, experiments: int = EXPERIMENTS,
                     arms: int = 8) -> float:
    """Share of experiments with any worse/better/negligible verdict, every arm equal to the
    reference."""
    result = simulate(design, np.zeros(arms), UNEQUAL[:arms], reference_sd=0.01,
                      experiments=experiments, margin=MARGIN, alpha=ALPHA, noise=noise,
                      rng=np.random.default_rng(seed))
    return float(np.isin(result["verdict"], DIFFERENCE).any(axis=1).mean())


def _margin_rates(design: SeedDesign, noise: str, seed: int, experiments: int = EXPERIMENTS
                  ) -> dict[str, float]:
    """Share of experiments declaring an arm whose true difference is ± the margin equivalent
    (`equivalent` or `negligible`): alone among seven surely equivalent arms (Holm's hardest
    case: they clear the way, so it is tested at the full α), and both of them among arms with
    no or large effects."""
    rng = np.random.default_rng(seed)
    rates = {}
    for sign in (1, -1):
        result = simulate(design, np.r_[np.zeros(7), sign * MARGIN],
                          np.r_[np.full(7, 5e-4), 0.02], reference_sd=5e-4,
                          experiments=experiments, margin=MARGIN, alpha=ALPHA, noise=noise,
                          rng=rng)
        equivalent = np.isin(result["verdict"], EQUIVALENT)
        assert equivalent[:, :7].mean() > 0.99  # the seven do clear the way
        rates[f"{sign:+d} margin alone"] = float(equivalent[:, 7].mean())
    delta = np.r_[MARGIN, -MARGIN, 0.0, 0.0, 0.41, 0.40, -0.3, 0.27]
    result = simulate(design, delta, UNEQUAL, reference_sd=0.01, experiments=experiments,
                      margin=MARGIN, alpha=ALPHA, noise=noise, rng=rng)
    equivalent = np.isin(result["verdict"], EQUIVALENT)
    rates["+1 margin, mixed"] = float(equivalent[:, 0].mean())
    rates["-1 margin, mixed"] = float(equivalent[:, 1].mean())
    rates["either margin arm, mixed"] = float(equivalent[:, :2].any(axis=1).mean())
    return rates


@pytest.mark.parametrize("noise", NOISES)
def test_simulate_stops_arms_with_a_verdict_and_runs_the_rest_to_max_seeds(noise):
    """simulate's bookkeeping: an arm stops at a planned look, with a verdict unless it ran
    max_seeds; the reference runs every seed any arm ran."""
    delta = np.r_[0.0, 0.0, 0.004, MARGIN, 0.41, -0.3, 0.01, 0.0]
    result = simulate(DESIGN, delta, UNEQUAL, reference_sd=0.01, experiments=500,
                      margin=MARGIN, noise=noise, rng=np.random.default_rng(2))
    seeds, verdict = result["seeds"], result["verdict"]
    assert np.isin(seeds, DESIGN.looks).all()
    assert (verdict[seeds < DESIGN.max_seeds] != "inconclusive").all()
    assert (verdict == "inconclusive").any() and (seeds < 10).any()
    np.testing.assert_array_equal(result["reference_seeds"], seeds.max(axis=1))


@pytest.mark.parametrize("noise", NOISES)
def test_no_effect_anywhere_is_called_different_in_at_most_5_percent(noise):
    """Eight arms equal to the reference, seed spreads 0.010-0.030 km: with the stopping and
    the looks, the chance that any arm is called worse, better or negligible stays at or under
    α (within three Monte-Carlo standard errors)."""
    rate = _difference_rate(DESIGN, noise, seed=len(noise))
    RATES[f"(a) {noise}: any difference, all arms null"] = rate
    assert rate <= _mc_bound(EXPERIMENTS), rate


@pytest.mark.parametrize("noise", NOISES)
def test_an_arm_a_margin_away_is_called_equivalent_in_at_most_5_percent(noise):
    """An arm whose true difference is exactly +margin or −margin is called equivalent in at
    most α of experiments (equivalent or negligible; within three Monte-Carlo standard errors),
    alone after seven surely equivalent arms and among arms with no or large effects."""
    rates = _margin_rates(DESIGN, noise, seed=10 + len(noise))
    for name, rate in rates.items():
        RATES[f"(b) {noise}: equivalent, {name}"] = rate
        if not name.startswith("either"):
            assert rate <= _mc_bound(EXPERIMENTS), (name, rates)


@pytest.mark.parametrize("noise", NOISES)
def test_no_effect_is_equivalent_and_large_effects_stop_at_the_pilot(noise):
    """The synthetic default's family, in small: an arm with no effect and its seed spread
    (paired sd about 0.017 km) is called equivalent within 10 seeds in most experiments, and the
    three large effects (no_images, no_scalars, single_frame) are called worse at the pilot."""
    experiments = 2000
    result = simulate(DESIGN, [0.0, 0.41, 0.40, 0.27], [0.014, 0.02, 0.02, 0.02],
                      reference_sd=0.01, experiments=experiments, margin=MARGIN, alpha=ALPHA,
                      noise=noise, rng=np.random.default_rng(20 + len(noise)))
    verdict, seeds = result["verdict"], result["seeds"]
    equivalent = float((verdict[:, 0] == "equivalent").mean())
    at_pilot = float(((verdict[:, 1:] == "worse") & (seeds[:, 1:] == 3)).all(axis=1).mean())
    RATES[f"(c) {noise}: no effect called equivalent"] = equivalent
    RATES[f"(c) {noise}: all three large arms worse at the pilot"] = at_pilot
    RATES[f"(c) {noise}: mean seeds of the no-effect arm"] = float(seeds[:, 0].mean())
    assert equivalent > 0.6, equivalent
    assert at_pilot > 0.85, at_pilot
    assert (result["reference_seeds"] == seeds.max(axis=1)).all()


NAIVE = {  # no α split across looks: every look tested at the full α
    "3,6,10": SeedDesign((3, 6, 10), (1.0,) * 3, (1.0,) * 3),
    "2..10": SeedDesign(tuple(range(2, 11)), (1.0,) * 9, (1.0,) * 9),
}


@pytest.mark.parametrize(("noise", "looks"), [("gaussian", "3,6,10"), ("gaussian", "2..10"),
                                              ("t3", "2..10")])
def test_the_simulation_catches_repeated_testing_at_the_full_alpha(noise, looks):
    """The simulations above have the power to fail: the same experiments with a design that
    does not split α across the looks (naive repeated testing) exceed the bounds they check,
    both for differences under no effect and for equivalence at the margin."""
    design, experiments = NAIVE[looks], 2000
    rate = _difference_rate(design, noise, seed=30 + len(noise), experiments=experiments)
    RATES[f"(d) {noise}, naive looks {looks}: any difference, all arms null"] = rate
    assert rate > _mc_bound(experiments) + 0.02, rate
    rates = _margin_rates(design, noise, seed=40 + len(noise), experiments=experiments)
    for sign in ("+1", "-1"):
        rate = rates[f"{sign} margin alone"]
        RATES[f"(d) {noise}, naive looks {looks}: equivalent, {sign} margin alone"] = rate
        assert rate > _mc_bound(experiments) + 0.01, rates


# ------------------------------------------------------------------------------ edge cases


def _rows(arm, values, start=0):
    return [{"ablation": arm, "seed": start + i, "status": "ok", "test_mae": v}
            for i, v in enumerate(values)]


def test_an_arm_with_zero_spread_is_decided_as_the_fixed_design_decides_it():
    """Paired differences all equal (se = 0: a no-op under deterministic training, or a
    constant shift) are a look: the no-op is `equivalent`, the shift `worse`, as
    verdict_table has them, instead of running to max_seeds undecided."""
    from results.analysis import verdict_table

    base = [0.55, 0.56, 0.54]
    trials = pd.DataFrame(_rows("baseline", base) + _rows("noop", base)
                          + _rows("shift", [v + 0.1 for v in base]))
    fixed = verdict_table(trials, margin=0.0276).set_index("ablation")["verdict"]
    table = sequential_verdict_table(trials, SeedDesign.plan(3, 10), list(range(10)),
                                     margin=0.0276).set_index("ablation")
    assert fixed["noop"] == table.loc["noop", "verdict"] == "equivalent"
    assert fixed["shift"] == table.loc["shift", "verdict"] == "worse"
    assert (table.loc[["noop", "shift"], "looks"] == 1).all()
    assert active_arms(table.reset_index()) == []


def test_a_relative_margin_is_the_pilots_and_stays_fixed_across_looks():
    """`--margin 5%` is 5% of the reference's mean over the pilot's seeds: when the reference's
    later seeds move its mean, the margin (and so a verdict reached at the pilot) stays."""
    design, seeds = SeedDesign.plan(3, 10), list(range(10))
    base = np.array([1.0, 1.01, 0.99])
    arm = base + np.array([0.0, 0.004, -0.004])  # tight: equivalent at the pilot at 5%
    noisy = base + np.array([0.05, -0.04, 0.06])
    first = pd.DataFrame(_rows("baseline", base) + _rows("a", arm) + _rows("b", noisy))
    one = sequential_verdict_table(first, design, seeds, margin="5%").set_index("ablation")
    assert one.loc["a", "verdict"] == "equivalent"
    assert one.loc["a", "margin"] == pytest.approx(0.05)
    later = pd.concat([first, pd.DataFrame(_rows("baseline", [0.90, 0.91, 0.89], 3)
                                           + _rows("b", [0.95, 0.86, 0.96], 3))])
    two = sequential_verdict_table(later, design, seeds, margin="5%").set_index("ablation")
    assert two.loc["a", "margin"] == pytest.approx(0.05)  # not 5% of the 6-seed mean 0.95
    assert two.loc["a", "verdict"] == "equivalent"
    assert "over the pilot's seeds" in __import__("results.analysis").analysis.verdict_note(two)
