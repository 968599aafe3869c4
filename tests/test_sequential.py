"""The sequential design of ``--seeds auto`` (ablations.results.stats.sequential): the planned looks
and α shares, the group-sequential levels (against an independent simulation), one look as the fixed
design, the runner's DataFrame path against the simulated array path, and the audit cases of
"one verdict, one story": a verdict frozen at the look that decided it, never a `worse` beside
a difference in the better direction, an arm undecided at the pilot decided only from a look
that includes its later seeds. The error-rate table is tests/test_error_rates.py. No Ray."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import special

from ablations.results.stats.boundaries import nominal_levels
from ablations.results.stats.contrasts import Contrasts
from ablations.results.stats.sequential import SeedDesign, sequential_tests
from ablations.results.stats.sequential_table import active_arms, sequential_verdict_table
from ablations.results.stats.shared_variance import PAIRED_TEST
from tools.simulation import simulate_runs, sequential_verdicts
from ablations.results.stats.verdicts import equivalence_tests, verdict_table

ALPHA = 0.05
MARGIN = 0.0276  # 5% of the synthetic default's reference test MAE (0.552 km)


# -------------------------------------------------------------------------------- the design


def test_plan_looks_every_few_seeds_and_shares_alpha_across_the_looks():
    """Looks at the pilot, then n + max(2, n // 2) capped at max_seeds; one α share per look
    for each kind of verdict, summing to 1; bad pilots refused; the design survives
    experiment.json."""
    assert SeedDesign.plan(3, 10).looks == (3, 5, 7, 10)
    assert SeedDesign.plan(3).looks == (3, 5, 7, 10)  # --max-seeds 10 by default
    assert SeedDesign.plan(2, 20).looks == (2, 4, 6, 9, 13, 19, 20)
    assert SeedDesign.plan(3, 3).looks == (3,)
    assert SeedDesign.plan(4, 8).looks == (4, 6, 8)
    for pilot, max_seeds in ((3, 10), (2, 20), (3, 3), (4, 8), (2, 3), (5, 40)):
        design = SeedDesign.plan(pilot, max_seeds)
        assert design.looks[0] == pilot and design.max_seeds == max_seeds
        assert all(a < b for a, b in zip(design.looks, design.looks[1:]))
        for shares in (design.diff_spend, design.eq_spend):
            assert len(shares) == len(design.looks), design
            assert sum(shares) == pytest.approx(1.0, abs=1e-12), design
            assert all(s > 0 for s in shares), design
    design = SeedDesign.plan(3, 10)  # half of α for differences at the pilot, the rest 2:2:3
    assert design.diff_spend == pytest.approx((0.5, 0.5 * 2 / 7, 0.5 * 2 / 7, 0.5 * 3 / 7))
    assert design.eq_spend == pytest.approx((0.09, 0.16, 0.24, 0.51))  # (n_k / 10)²
    for bad, match in (((1, 10), "at least 2"), ((0,), "at least 2"), ((5, 4), "below")):
        with pytest.raises(ValueError, match=match):
            SeedDesign.plan(*bad)
    for design in (SeedDesign.plan(3, 10), SeedDesign.plan(2, 20), SeedDesign.fixed(5)):
        again = SeedDesign.from_dict(json.loads(json.dumps(design.to_dict())))
        assert again == design


# ------------------------------------------------------------------ group-sequential levels


def _independent_crossings(looks: tuple[int, ...], nominal: tuple[float, ...], two_sided: bool,
                           paths: int = 400_000, seed: int = 99) -> np.ndarray:
    """Written apart from ablations.results.stats.boundaries: the share of Gaussian experiments
    whose t statistic (over each look's first n_k seeds) first crosses the nominal level at look
    k."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((paths, looks[-1]))
    first = np.zeros(len(looks))
    alive = np.ones(paths, bool)
    for k, n in enumerate(looks):
        x = z[:, :n]
        t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / np.sqrt(n))
        p = 2 * special.stdtr(n - 1, -np.abs(t)) if two_sided else special.stdtr(n - 1, -t)
        crossed = alive & (p < nominal[k])
        first[k] = crossed.mean()
        alive &= ~crossed
    return first


@pytest.mark.parametrize("two_sided", [True, False])
@pytest.mark.parametrize("level", [0.05, 0.05 / 8])
@pytest.mark.slow  # a simulation of many experiments
def test_group_sequential_levels_spend_alpha_as_planned(two_sided, level):
    """Each look's nominal level makes the chance of a first crossing there level·share_k
    (checked on other simulated experiments than the ones the levels came from), so the test's
    size is the level; the first look's is exact, and later looks get more than Bonferroni's
    level·share_k (the looks' correlation is no longer wasted)."""
    design = SeedDesign.plan(3, 10)
    shares = design.diff_spend if two_sided else design.eq_spend
    nominal = design.levels(level, equivalence=not two_sided)
    assert nominal[0] == pytest.approx(level * shares[0], rel=1e-12)
    assert all(n > level * s for n, s in zip(nominal[1:], shares[1:]))
    first = _independent_crossings(design.looks, nominal, two_sided)
    paths = 400_000
    for k, share in enumerate(shares):
        target = level * share
        assert abs(first[k] - target) < 4 * np.sqrt(target / paths) + 2e-4, (k, first, target)
    assert first.sum() == pytest.approx(level, rel=0.06)
    bonferroni = _independent_crossings(design.looks, tuple(level * s for s in shares),
                                        two_sided)
    assert bonferroni.sum() < first.sum() - 3e-4  # what the correlation used to cost


@pytest.mark.parametrize("two_sided", [True, False])
@pytest.mark.slow  # a simulation of many experiments
def test_each_later_look_spends_at_most_its_share_of_the_paths_it_was_set_on(two_sided):
    """The search takes the conservative side: on the simulated paths the levels come from, the
    paths that first cross at a later look number at most level·share_k of them (floored), and
    miss it by at most a couple of paths (Holm's first and last levels of eight arms)."""
    from ablations.results.stats import boundaries

    design = SeedDesign.plan(3, 10)
    t = boundaries.null_paths(design.looks)
    stat = np.abs(t) if two_sided else np.concatenate([t, -t])
    shares = design.diff_spend if two_sided else design.eq_spend
    for level in (0.05, 0.05 / 8):
        nominal = design.levels(level, equivalence=not two_sided)
        alive = np.ones(len(stat), bool)
        for k, n in enumerate(design.looks):
            critical = special.stdtrit(n - 1, 1 - nominal[k] / (2 if two_sided else 1))
            crossed = alive & (stat[:, k] > critical)
            alive &= ~crossed
            if k:
                allowed = np.floor(level * shares[k] * len(stat))
                assert allowed - 2 <= crossed.sum() <= allowed, (level, k, crossed.sum(), allowed)


def test_a_single_look_spends_the_whole_level():
    assert nominal_levels((5,), (1.0,), 0.05, True) == (0.05,)
    assert SeedDesign.fixed(5).levels(0.01, equivalence=True) == (0.01,)


# -------------------------------------------------------------- one look, the fixed design


def test_one_look_is_the_fixed_design():
    """With one look holding all of α the sequential tests are equivalence_tests: the same
    verdicts family by family, for absolute and relative margins. With arms that have no
    comparison the sequential family still counts them (fixed before any data), so it decides
    a subset of what the fixed design, whose family is the arms compared, decides."""
    rng = np.random.default_rng(5)
    reference, arms = simulate_runs(rng, experiments=300, seeds=5,
                                    ratios=[1, 1, 1.05, 0.9, 1.6, 1.0, 1.02, 0.98])
    full = Contrasts.paired(arms, np.broadcast_to(reference[:, None, :], arms.shape))
    drop = rng.random(full.diff.shape) < 0.1  # arms with no comparison
    fields = ("diff", "ref_mean", "var_diff", "cov", "var_ref", "df")
    dropped = Contrasts(*(np.where(drop, np.nan, getattr(full, f)) for f in fields))
    for margin, relative in ((0.05, True), (MARGIN, False)):
        for contrasts, same in ((full, True), (dropped, False)):
            fixed = equivalence_tests(contrasts, margin=margin, relative=relative)
            one = sequential_tests(Contrasts(*(getattr(contrasts, f)[..., None]
                                               for f in fields)),
                                   design=SeedDesign.fixed(5), margin=margin, relative=relative)
            if same:
                np.testing.assert_array_equal(one["verdict"], fixed["verdict"])
                assert set(fixed["verdict"].ravel()) >= {"worse", "better", "equivalent",
                                                         "inconclusive"}
            else:
                for kind in ("significant", "equivalent"):
                    assert not (one[kind] & ~fixed[kind]).any(), kind
                    assert (fixed[kind] & ~one[kind]).any(), kind  # not vacuous


def test_the_family_is_fixed_before_the_data():
    """The audit case: the reference fails two of its three pilot seeds, so no arm is compared
    at the pilot; at the next look every arm is tested at Holm's first level α/8, not at α/1."""
    design, seeds = SeedDesign.plan(3, 10), list(range(10))
    rng = np.random.default_rng(2)
    base = 0.55 + 0.01 * rng.standard_normal(10)
    columns = {"baseline": base, **{f"a{j}": base + 0.01 * rng.standard_normal(10)
                                    for j in range(8)}}
    trials = pd.DataFrame([r for arm in columns for r in _rows(arm, columns[arm], seeds[:5])])
    failed = (trials["ablation"] == "baseline") & trials["seed"].isin([0, 1])
    trials.loc[failed, "status"] = "failed"
    table = sequential_verdict_table(trials, design, seeds).set_index("ablation")
    arms = [f"a{j}" for j in range(8)]
    assert table.loc[arms, "looks"].eq(1).all()  # compared at look 2 only (seeds 2-4)
    first = design.levels(ALPHA / 8, equivalence=False)[1]
    undecided = table.loc[arms, "verdict"] == "inconclusive"
    np.testing.assert_allclose(table.loc[arms][undecided]["level_diff"].astype(float), first)


def test_the_equivalence_path_spends_alpha_as_planned():
    """One arm held exactly at the margin (the other side far inside it), the difference test
    switched off: over 20,000 simulated runs, the share declared `equivalent` first at look k
    is α·share_k, and about α in all, through sequential_tests' whole path (stopping
    included)."""
    design = SeedDesign.plan(3, 10)
    paths = 20_000
    rng = np.random.default_rng(12)
    values = 1.0 + rng.standard_normal((paths, 1, 10))  # Δ = margin exactly, sd 1
    shape = (paths, 1, len(design.looks))
    fields = {f: np.full(shape, np.nan) for f in ("diff", "ref_mean", "var_diff", "cov",
                                                  "var_ref", "df")}
    for k, n in enumerate(design.looks):
        c = Contrasts.paired(values[..., :n], np.zeros((paths, 1, n)))
        for f in fields:
            fields[f][..., k] = getattr(c, f)
    tests = sequential_tests(Contrasts(**fields), design=design, margin=1.0, alpha=ALPHA,
                             alpha_diff=0.0)
    assert not tests["significant"].any()
    first = np.array([(tests["equivalent"] & (tests["decided"] == k)).mean()
                      for k in range(len(design.looks))])
    target = ALPHA * np.array(design.eq_spend)
    np.testing.assert_allclose(first, target, atol=4 * np.sqrt(target / paths).max())
    assert first.sum() == pytest.approx(ALPHA, abs=4 * np.sqrt(ALPHA / paths))


# ----------------------------------------------- the runner's path against the array path


ARMS = {"tiny": 1.0, "zero": 1.0, "small": 1.008, "images": 1.74, "better": 0.5,
        "margin": 1.05, "spread": 1.0, "other": 0.97}


def _rows(arm: str, values, seeds) -> list[dict]:
    return [{"ablation": arm, "seed": s, "status": "ok", "test_mae": float(values[s])}
            for s in seeds]


def _run_rounds(columns: dict[str, np.ndarray], design: SeedDesign, margin="5%"
                ) -> tuple[list[pd.DataFrame], pd.DataFrame]:
    """What ablations/experiment/designs/rounds.py does with a trials table: the pilot for
    every arm, then the next look's seeds for the reference and the arms still without a
    verdict. Returns the verdict table after each round and the trials."""
    seeds = list(range(design.max_seeds))
    names = [n for n in columns if n != "baseline"]
    trials = pd.DataFrame([r for arm in ["baseline", *names]
                           for r in _rows(arm, columns[arm], seeds[:design.looks[0]])])
    tables = []
    for k in range(len(design.looks)):
        table = sequential_verdict_table(trials, design, seeds, margin=margin)
        tables.append(table.set_index("ablation"))
        active = active_arms(table)
        if not active or k == len(design.looks) - 1:
            break
        added = seeds[design.looks[k]:design.looks[k + 1]]
        trials = pd.concat([trials, pd.DataFrame(
            [r for arm in ["baseline", *active] for r in _rows(arm, columns[arm], added)])],
            ignore_index=True)
    return tables, trials


@pytest.mark.slow  # a simulation of many experiments
def test_the_runners_rounds_decide_as_the_simulated_procedure():
    """The runner's path (a trials table grown round by round) gives the verdicts and seeds per
    arm of tools.simulation.sequential_verdicts on the same values: the error-rate table
    simulates the procedure the runner runs."""
    rng = np.random.default_rng(11)
    design = SeedDesign.plan(3, 10)
    names = list(ARMS)
    reference, arms = simulate_runs(rng, experiments=12, seeds=10, ratios=list(ARMS.values()),
                                    spread=0.012, shared=0.05)
    simulated = sequential_verdicts(reference, arms, design, margin=0.05, relative=True)
    spent = []
    for e in range(len(reference)):
        columns = {"baseline": reference[e], **dict(zip(names, arms[e]))}
        tables, trials = _run_rounds(columns, design)
        final = tables[-1]
        assert final.loc[names, "verdict"].tolist() == simulated["verdict"][e].tolist(), e
        counts = trials.groupby("ablation").size()
        np.testing.assert_array_equal(counts[names].to_numpy(), simulated["seeds"][e])
        assert counts["baseline"] == simulated["reference_seeds"][e]
        spent.append(counts[names].to_numpy())
    spent = np.array(spent)
    assert {3, 5, 7, 10} <= set(spent.ravel()), spent  # not vacuous: arms stop at each look
    assert (spent[:, names.index("images")] == 3).all()


# ------------------------------------------------------------- one verdict, one story


@pytest.mark.slow  # a simulation of many experiments
def test_a_verdict_is_frozen_at_the_look_that_decided_it():
    """Whatever later rounds bring, an arm's verdict, its deciding look and the numbers its row
    shows stay those of the round that decided it (what the console printed then); the row's
    Δ and intervals are that look's, over the arm's seeds."""
    rng = np.random.default_rng(21)
    design = SeedDesign.plan(3, 10)
    reference, arms = simulate_runs(rng, experiments=25, seeds=10, ratios=list(ARMS.values()),
                                    spread=0.012, shared=0.05)
    names = list(ARMS)
    decided_later = 0
    for e in range(len(reference)):
        columns = {"baseline": reference[e], **dict(zip(names, arms[e]))}
        tables, trials = _run_rounds(columns, design)
        final = tables[-1]
        for k, table in enumerate(tables):
            for arm in names:
                if table.loc[arm, "verdict"] == "inconclusive":
                    continue
                decided_later += k > 0
                for column in ("verdict", "decided_at", "diff_mean", "tost_ci_low",
                               "ratio_ci_high", "p_value"):
                    assert final.loc[arm, column] == table.loc[arm, column], (e, k, arm, column)
                seeds = int(final.loc[arm, "decided_at"])
                mine = trials[trials["ablation"] == arm].set_index("seed")["test_mae"]
                ref = trials[trials["ablation"] == "baseline"].set_index("seed")["test_mae"]
                assert len(mine) == seeds  # it stopped there
                assert final.loc[arm, "diff_mean"] == pytest.approx(
                    (mine - ref[mine.index]).mean(), rel=1e-12)
    assert decided_later > 10  # not vacuous: verdicts reached after the pilot were checked


def test_the_interval_of_delta_is_the_repeated_one_at_the_reported_look():
    """A row's diff_ci_* is Δ ± c_k·se, c_k the t critical value of its look's nominal level in
    the two-sided boundary of overall level α (no Holm division; Jennison and Turnbull's
    repeated confidence interval), labelled so, and wider than the unadjusted 1 − α interval
    at every look after the pilot."""
    rng = np.random.default_rng(5)
    design = SeedDesign.plan(3, 10)
    reference, arms = simulate_runs(rng, experiments=1, seeds=10, ratios=list(ARMS.values()),
                                    spread=0.012)
    columns = {"baseline": reference[0], **dict(zip(ARMS, arms[0]))}
    final = _run_rounds(columns, design)[0][-1].drop(index="baseline")
    assert final.attrs["diff_ci"] == "repeated"
    nominal = dict(zip(design.looks, design.levels(ALPHA, equivalence=False)))
    later = 0
    for arm, row in final.iterrows():
        look = int(row["decided_at"]) if row["decided_at"] == row["decided_at"] else 10
        half = special.stdtrit(row["df"], 1 - nominal[look] / 2) * row["se"]
        assert row["diff_ci_low"] == pytest.approx(row["diff_mean"] - half, rel=1e-9), arm
        assert row["diff_ci_high"] == pytest.approx(row["diff_mean"] + half, rel=1e-9), arm
        if look > 3:
            later += 1
            assert half > special.stdtrit(row["df"], 1 - ALPHA / 2) * row["se"], arm
    assert later >= 2, final[["verdict", "decided_at"]]  # not vacuous


@pytest.mark.slow  # a simulation of many experiments
def test_no_worse_beside_a_difference_in_the_better_direction():
    """`worse` (lower is better: MAE) always sits beside a positive Δ, `better` beside a
    negative one, and the p-value printed beside it is below the level its look was tested at,
    in every row of 25 simulated runs."""
    rng = np.random.default_rng(8)
    design = SeedDesign.plan(3, 10)
    reference, arms = simulate_runs(rng, experiments=25, seeds=10,
                                    ratios=[1.0, 1.03, 0.97, 1.06, 0.94, 1.0, 1.1, 0.9],
                                    spread=0.015, noise="t3")
    seen = set()
    for e in range(len(reference)):
        columns = {"baseline": reference[e], **{f"a{j}": arms[e, j] for j in range(8)}}
        final = _run_rounds(columns, design)[0][-1].drop(index="baseline")
        seen |= set(final["verdict"])
        worse, better = final["verdict"] == "worse", final["verdict"] == "better"
        assert (final.loc[worse, "diff_mean"] > 0).all() and (final.loc[worse, "diff_ci_low"]
                                                              > 0).all()
        assert (final.loc[better, "diff_mean"] < 0).all()
        differs = worse | better | (final["verdict"] == "negligible")
        assert (final.loc[differs, "p_value"] < final.loc[differs, "level_diff"]).all()
    assert {"worse", "better"} <= seen


def test_an_arm_undecided_at_the_pilot_is_decided_only_from_its_later_seeds():
    """The audit case: arm x's pilot p-value would pass at Holm's last step (α/1) but not at
    the pilot's α/8; at the next look the seven others are rejected, which opens α/1 to x,
    while x's own 5 seeds no longer differ. x must stay undecided (the old procedure took the
    smallest p/share over every look and called it `worse` from its pilot alone). Each arm's own
    paired test, whose levels the case is built on."""
    design = SeedDesign.plan(3, 10)
    seeds = list(range(10))
    rng = np.random.default_rng(4)
    base = 0.55 + 0.01 * rng.standard_normal(10)
    columns = {"baseline": base}
    pattern = np.array([-1.0, 0.0, 1.0, 1.2, -1.2, 0.5, -0.5, 0.8, -0.8, 0.3])
    for j in range(7):  # clear at 5 seeds, not at 3: Δ 0.08, paired sd 0.02
        columns[f"mid{j}"] = base + 0.08 + 0.02 * np.roll(pattern, j)
    # x: the pilot's differences 0.045 ± 0.01 (p ≈ 0.02), then two seeds far the other way
    columns["x"] = base + np.array([0.035, 0.045, 0.055, -0.12, -0.09, 0, 0, 0, 0, 0])
    trials = pd.DataFrame([r for arm in columns for r in _rows(arm, columns[arm], seeds[:3])])
    pilot = sequential_verdict_table(trials, design, seeds, test=PAIRED_TEST).set_index(
        "ablation")
    p_pilot = pilot.loc["x", "p_value"]
    levels = design.levels(ALPHA, equivalence=False), design.levels(ALPHA / 8,
                                                                   equivalence=False)
    assert levels[1][0] < p_pilot < levels[0][0]  # passes at α/1, not at α/8
    assert (pilot.drop(index=["baseline"])["verdict"] == "inconclusive").all()
    more = pd.DataFrame([r for arm in columns for r in _rows(arm, columns[arm], seeds[3:5])])
    table = sequential_verdict_table(pd.concat([trials, more]), design, seeds,
                                     test=PAIRED_TEST).set_index("ablation")
    assert (table.loc[[f"mid{j}" for j in range(7)], "verdict"] == "worse").all()
    assert table.loc["x", "verdict"] == "inconclusive"
    assert table.loc["x", "diff_mean"] < 0 and table.loc["x", "p_value"] > 0.3
    # the old rule: the smallest p / share over the looks, Holm at α/1 once the others are out
    old = min(p_pilot / design.diff_spend[0], table.loc["x", "p_value"] / design.diff_spend[1])
    assert old < ALPHA


# ------------------------------------------------------------------------------ edge cases


def test_an_arm_with_zero_spread_is_decided_as_the_fixed_design_decides_it():
    """Paired differences all equal (se = 0: a no-op under deterministic training, or a
    constant shift) are a look: the no-op is `equivalent`, the shift `worse`, as
    verdict_table has them, instead of running to max_seeds undecided."""
    base = [0.55, 0.56, 0.54]
    trials = pd.DataFrame(_rows("baseline", base, range(3)) + _rows("noop", base, range(3))
                          + _rows("shift", [v + 0.1 for v in base], range(3)))
    fixed = verdict_table(trials, margin=0.0276).set_index("ablation")["verdict"]
    table = sequential_verdict_table(trials, SeedDesign.plan(3, 10), list(range(10)),
                                     margin=0.0276).set_index("ablation")
    assert fixed["noop"] == table.loc["noop", "verdict"] == "equivalent"
    assert fixed["shift"] == table.loc["shift", "verdict"] == "worse"
    assert (table.loc[["noop", "shift"], "looks"] == 1).all()
    assert active_arms(table.reset_index()) == []


def test_a_relative_margin_is_a_ratio_at_every_look_not_a_margin_fixed_from_the_pilot():
    """`--margin 5%` is tested as the ratio to the reference's mean over the deciding look's
    own seeds: an arm undecided at the pilot and decided at 5 seeds, while the reference's mean
    moved, has the p-value of the exact contrasts over those 5 seeds, not of a margin taken
    from the pilot's sample mean."""
    design, seeds = SeedDesign.plan(3, 10), list(range(10))
    base = np.array([1.0, 1.01, 0.99, 0.90, 0.91])
    arm = base * 1.01 + np.array([0.0, 0.015, -0.015, 0.003, -0.003])
    pilot = pd.DataFrame(_rows("baseline", base, range(3)) + _rows("a", arm, range(3)))
    first = sequential_verdict_table(pilot, design, seeds).set_index("ablation")
    assert first.loc["a", "verdict"] == "inconclusive"
    trials = pd.DataFrame(_rows("baseline", base, range(5)) + _rows("a", arm, range(5)))
    table = sequential_verdict_table(trials, design, seeds, margin="5%").set_index("ablation")
    assert table.attrs["relative"] and table.loc["a", "margin"] == pytest.approx(0.05)
    assert table.loc["a", "verdict"] == "equivalent" and table.loc["a", "decided_at"] == 5
    from scipy import stats
    exact = max(stats.ttest_1samp(arm - 0.95 * base, 0, alternative="greater").pvalue,
                stats.ttest_1samp(arm - 1.05 * base, 0, alternative="less").pvalue)
    assert table.loc["a", "p_tost"] == pytest.approx(exact, rel=1e-9)
    margin = 0.05 * base[:3].mean()  # what the earlier procedure carried from the pilot
    d = arm - base
    frozen = max(stats.ttest_1samp(d, -margin, alternative="greater").pvalue,
                 stats.ttest_1samp(d, margin, alternative="less").pvalue)
    assert table.loc["a", "p_tost"] != pytest.approx(frozen, rel=1e-3)


def test_a_welch_comparison_inside_the_rounds_reports_no_pairs():
    """Failed trials leave a variant one seed in common with the reference: its comparison is
    Welch's, and its row says 0 pairs, as the fixed design's does."""
    design, seeds = SeedDesign.plan(3, 10), list(range(10))
    trials = pd.DataFrame(_rows("baseline", [0.55, 0.56, 0.54], range(3))
                          + _rows("other", [0.6, 0.58, 0.61], range(3)))
    trials.loc[(trials["ablation"] == "baseline") & (trials["seed"] == 2), "status"] = "failed"
    trials.loc[(trials["ablation"] == "other") & (trials["seed"] == 0), "status"] = "failed"
    table = sequential_verdict_table(trials, design, seeds).set_index("ablation")
    fixed = verdict_table(trials).set_index("ablation")
    assert fixed.loc["other", "test"] == "Welch t"
    assert table.loc["other", "n_pairs"] == 0 == fixed.loc["other", "n_pairs"]
    assert table.loc["other", "df"] == pytest.approx(fixed.loc["other", "df"])


def test_the_null_paths_of_a_large_last_look_are_drawn_in_bounded_memory():
    """A run suggests --seeds auto up to many seeds (~200 at 1000 trials): the simulation draws
    each look's sufficient statistics a bounded chunk at a time (drawing every seed took
    ~4 x 105 MB at 200 seeds, the driver's peak RSS at the end of a large run), and the
    statistics have the t law at each look (their joint law: the spending test above)."""
    import tracemalloc

    from ablations.results.stats import boundaries

    boundaries.null_paths.cache_clear()
    tracemalloc.start()
    try:
        paths = boundaries.null_paths((3, 200))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        boundaries.null_paths.cache_clear()
    assert peak < 64 * 2**20, peak / 2**20  # the (PATHS, 2) float32 result is 16 MiB
    from scipy import stats

    for k, n in enumerate((3, 200)):
        assert stats.kstest(paths[:100_000, k].astype(float), stats.t(n - 1).cdf).pvalue > 1e-3


def test_seeds_auto_at_default_settings_stops_planted_effects_after_the_pilot():
    """``--seeds auto``'s default design (pilot 3, here ``--max-seeds 4``) on the main job's
    recorded trials (tests/fixtures/main_job: the default model, data and 4 epochs, seeds 0-2,
    as the runner trained them) as its pilot look: the ablations that remove a planted signal
    (no_images, single_frame) are `worse` at the pilot, frozen there, and no arm is left for
    another round. The rounds themselves run in tests/test_seeds_auto.py and
    tests/test_continue_auto.py on tiny trials."""
    from pathlib import Path

    recorded = pd.read_parquet(Path(__file__).with_name("fixtures") / "main_job"
                               / "trials.parquet")
    trials = recorded[recorded["ablation"].isin(["baseline", "no_images", "single_frame"])]
    assert sorted(set(trials["seed"])) == [0, 1, 2] and (trials["epochs"] == 4).all()
    table = sequential_verdict_table(trials, SeedDesign.plan(3, 4), [0, 1, 2, 3],
                                     reference="baseline", metric="test_mae", margin="5%",
                                     alpha=0.05)
    assert active_arms(table) == []  # no more seeds for anyone
    table = table.set_index("ablation")
    for planted in ("no_images", "single_frame"):
        assert table.loc[planted, "verdict"] == "worse", table.loc[planted].to_dict()
        assert table.loc[planted, "decided_at"] == 3 and table.loc[planted, "diff_mean"] > 0.2


LOOKS, SHARES = (2, 4, 6), (0.5, 0.25, 0.25)
CACHE_DIR_ENV = "ABLATION_CACHE_DIR"  # the cache folder (ablations.model.cache)


def test_levels_computed_once_are_read_back_by_a_later_process(tmp_path, monkeypatch):
    """The levels a run computes are kept in the cache folder; a later process (the in-process
    cache cleared, the simulation made to fail) reads the same floats back."""
    from ablations.results.stats import boundaries

    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    boundaries.nominal_levels.cache_clear()
    computed = boundaries.nominal_levels(LOOKS, SHARES, 0.05, True)
    assert computed == boundaries.simulated_levels(LOOKS, SHARES, 0.05, True)
    assert len(list(tmp_path.glob("boundaries-*.json"))) == 1
    boundaries.nominal_levels.cache_clear()

    def no_simulation(*args):
        raise AssertionError("simulated again instead of read from the cache folder")

    monkeypatch.setattr(boundaries, "simulated_levels", no_simulation)
    try:
        assert boundaries.nominal_levels(LOOKS, SHARES, 0.05, True) == computed
        with pytest.raises(AssertionError, match="simulated again"):  # another level: its own
            boundaries.nominal_levels(LOOKS, SHARES, 0.025, True)
    finally:
        boundaries.nominal_levels.cache_clear()


@pytest.mark.parametrize("content", ["{\"key\": ", "[1, 2]",
                                     "{\"key\": {}, \"value\": [1.0, 1.0, 1.0]}"],
                         ids=["cut short", "not a record", "another key"])
def test_a_damaged_or_foreign_cache_file_is_simulated_again_and_replaced(tmp_path, monkeypatch,
                                                                         content):
    from ablations.results.stats import boundaries

    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    from ablations.model.cache import record_path

    key = boundaries.cache_key(LOOKS, SHARES, 0.05, False)
    path = record_path(boundaries.CACHE_KIND, key)
    path.write_text(content)
    boundaries.nominal_levels.cache_clear()
    try:
        levels = boundaries.nominal_levels(LOOKS, SHARES, 0.05, False)
    finally:
        boundaries.nominal_levels.cache_clear()
    assert levels == boundaries.simulated_levels(LOOKS, SHARES, 0.05, False)
    assert json.loads(path.read_text()) == {"key": key, "value": list(levels)}
