"""The error rates of the runner's verdicts, simulated (tools.simulation) with the runner's own
functions, stopping included, under the noise real training shows: Gaussian, t(3), right-skewed
(lognormal σ = 0.8) and a seed that diverges in one run of ten, each with and without a seed
effect shared by the arms, at 3, 5 and 10 seeds, for fixed seeds, ``--seeds auto`` and
``compare`` (docs/verdicts.md shows the same table at 4000 experiments a cell); the rows where
only the variant carries the noise; the coverage of the interval reported after a sequential
stop. No Ray."""

from __future__ import annotations

import numpy as np
import pytest

from ablations.results.stats.sequential import SeedDesign
from tools import simulation
from tools.simulation import (
    DESIGNS,
    NOISES,
    SHARED,
    SPREAD,
    TIGHT,
    false_difference,
    false_equivalence,
    fixed_verdicts,
    sequential_verdicts,
    simulate_runs,
    stopped_estimates,
)

ALPHA = 0.05
EXPERIMENTS = 2000
BOUND = ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / EXPERIMENTS)  # α + 3 Monte-Carlo s.e.


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.slow  # a simulation of many experiments
def test_an_arm_a_margin_away_is_called_equivalent_in_at_most_alpha(noise):
    """Every cell of the table: seven arms equal to the reference and one at exactly ±5%, with
    and without a shared seed effect, at the synthetic default's spread and at a tight one
    (where the seven are declared from 3 seeds on: Holm's hardest case for the eighth), each
    design: false `equivalent` at most α + 3 Monte-Carlo s.e."""
    rates = {}
    for w, spread in enumerate((SPREAD, TIGHT)):
        for s, shared in enumerate(SHARED):
            for d, (kind, seeds) in enumerate(DESIGNS):
                for sign in (1, -1):
                    rates[(w, shared, kind, seeds, sign)] = false_equivalence(
                        kind, seeds, noise=noise, shared=shared, sign=sign, spread=spread,
                        experiments=EXPERIMENTS, seed=1000 * w + 100 * s + 10 * d + (sign > 0))
    worst = max(rates, key=rates.get)
    assert rates[worst] <= BOUND, (worst, rates[worst])
    if noise == "gaussian":  # near α there, not far under: the floor (each arm's own TOST
        # must pass too) costs little of the size at the hardest case
        assert min(rates[(1, 0.0, "fixed", n, 1)] for n in (3, 5, 10)) >= 0.015, rates


class NoSpending(SeedDesign):
    """``--seeds auto`` weakened on purpose: TOST at the full α at every look (the looks'
    repeated tests not paid for)."""

    def levels(self, level: float, *, equivalence: bool) -> tuple[float, ...]:
        if equivalence:
            return (level,) * len(self.looks)
        return super().levels(level, equivalence=False)


@pytest.mark.slow  # a simulation of many experiments
def test_the_table_catches_a_procedure_that_does_not_spend_alpha_across_looks(monkeypatch):
    """The same check on a deliberately weakened ``--seeds auto`` (:class:`NoSpending`)."""
    monkeypatch.setattr(simulation, "SeedDesign", NoSpending)
    rates = [false_equivalence("auto", 10, noise="gaussian", shared=0.0, sign=sign,
                               experiments=EXPERIMENTS, seed=7)
             for sign in (1, -1)]
    assert max(rates) > BOUND, rates


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.slow  # a simulation of many experiments
def test_no_effect_anywhere_is_called_different_in_at_most_alpha(noise):
    """Eight arms equal to the reference: any `worse`, `better` or `negligible` in at most α +
    3 s.e. of experiments, at fixed 3 and 10 seeds and with ``--seeds auto``."""
    rng = np.random.default_rng(len(noise))
    for shared in SHARED:
        reference, arms = simulate_runs(rng, experiments=EXPERIMENTS, seeds=10,
                                        ratios=np.ones(8), noise=noise, shared=shared)
        cells = {
            "fixed 3": fixed_verdicts(reference[:, :3], arms[..., :3], margin=0.05,
                                      relative=True),
            "fixed 10": fixed_verdicts(reference, arms, margin=0.05, relative=True),
            "auto 10": sequential_verdicts(reference, arms, SeedDesign.plan(3, 10),
                                           margin=0.05, relative=True),
        }
        for name, verdicts in cells.items():
            rate = verdicts["significant"].any(axis=-1).mean()
            assert rate <= BOUND, (shared, name, rate)


@pytest.mark.slow  # a simulation of many experiments
def test_an_arm_equal_to_the_reference_is_called_equivalent_at_10_seeds():
    """Power at the synthetic default's spread (paired differences' s.d. 0.017 km, measured on
    its 10-seed run), Gaussian noise, 10 seeds, in the family of the default run (five arms
    without an effect, three with its large ones): `equivalent` in at least 80% of experiments,
    fixed (95% measured) and ``--seeds auto`` (91%, after 8.9 seeds on average), whose large
    effects stop at the 3-seed pilot."""
    rng = np.random.default_rng(3)
    ratios = np.r_[np.ones(5), 1.74, 1.72, 1.49]
    reference, arms = simulate_runs(rng, experiments=EXPERIMENTS, seeds=10, ratios=ratios,
                                    spread=SPREAD)
    fixed = fixed_verdicts(reference, arms, margin=0.05, relative=True)
    auto = sequential_verdicts(reference, arms, SeedDesign.plan(3, 10), margin=0.05,
                               relative=True)
    assert fixed["equivalent"][:, :5].mean() >= 0.8
    assert auto["equivalent"][:, :5].mean() >= 0.8
    assert (auto["verdict"][:, 5:] == "worse").mean() > 0.99
    assert (auto["seeds"][:, 5:] == 3).mean() > 0.95  # the large effects stop at the pilot
    assert auto["seeds"][:, :5].mean() < 9.5  # the rest stop before max_seeds on average


@pytest.mark.slow  # a simulation of many experiments
def test_the_interval_of_an_arm_that_stopped_keeps_its_coverage():
    """``--seeds auto`` reports Δ's repeated confidence interval at the look where the arm
    stopped: at a true +2% (where stopping as `worse` picks the seeds that ran high) it covers
    Δ in at least 1 − α − 3 s.e. of arms; the unadjusted 1 − α interval at the same look does
    not, and the Δ of arms stopped as `worse` is biased away from 0."""
    experiments = 500
    rates = stopped_estimates(1.02, experiments=experiments, seed=12)
    bound = 1 - ALPHA - 3 * np.sqrt(ALPHA * (1 - ALPHA) / (8 * experiments))
    assert rates["repeated coverage"] >= bound, rates
    assert rates["unadjusted coverage"] < bound, rates
    assert rates["Δ of worse (%)"] > 3.0, rates  # true Δ: 2%


@pytest.mark.slow  # a simulation of many experiments
@pytest.mark.parametrize("noise", ["lognormal", "diverging"])
def test_a_variant_alone_with_skewed_noise_is_called_different_as_the_docs_state(noise):
    """The variant-only rows of docs/verdicts.md's false-difference table at Holm's hardest case
    (seven arms far worse, decided at the pilot; the eighth, equal to the reference in mean,
    alone carries the noise, tested at the full α): right-skewed (lognormal) noise within
    α + 3 s.e. at fixed 5 and 10 seeds and ``--seeds auto`` up to 10;
    one run in ten diverging stays outside the guarantee (the seeds that did not diverge look
    better), as the docs' "Not covered" says."""
    rates = {f"{kind} {seeds}": false_difference(kind, seeds, noise=noise, unstable=True,
                                                 others=1.5, experiments=EXPERIMENTS,
                                                 seed=40 + d)["any"]
             for d, (kind, seeds) in enumerate((("fixed", 5), ("fixed", 10), ("auto", 10)))}
    if noise == "diverging":  # above α, named with its figures there
        assert max(rates.values()) > ALPHA, rates
    else:
        assert max(rates.values()) <= BOUND, rates


@pytest.mark.slow  # a simulation of many experiments
def test_a_variant_alone_with_heavy_tailed_noise_at_the_margin_is_rarely_equivalent():
    """The variant-only rows of the false-`equivalent` table inside the guarantee: the arm at
    ±5% alone carries t(3) noise, at the tight spread (Holm's hardest case), fixed 10 seeds and
    ``--seeds auto`` up to 10 (the skewed and diverging rows are outside it: "Not covered")."""
    rates = {(kind, sign): false_equivalence(kind, 10, noise="t3", shared=0.0, sign=sign,
                                             unstable=True, spread=TIGHT,
                                             experiments=EXPERIMENTS, seed=60 + d + 5 * sign)
             for d, kind in enumerate(("fixed", "auto")) for sign in (1, -1)}
    assert max(rates.values()) <= BOUND, rates
    assert rates[("fixed", 1)] >= 0.03, rates  # near α there, not far under
