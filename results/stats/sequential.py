"""Seeds where they decide something: the sequential design of ``--seeds auto`` and its
procedure on arrays of contrasts (:class:`SeedDesign`, :func:`sequential_tests`, whose steps
are :mod:`ablations.results.stats.sequential_looks`');
:mod:`ablations.results.stats.sequential_table` turns an experiment's trials into its verdict table.

The procedure (docs/verdicts.md words it for citing):

1. A pilot of ``n_1`` seeds for every arm, then looks at ``n_2 < n_3 < ... <= max_seeds``
   seeds (:meth:`SeedDesign.plan`). The looks and the α each may spend are fixed before any
   trial runs.
2. At look k, each arm still running is compared with the reference over its first ``n_k``
   seeds (:mod:`ablations.results.stats.contrasts`: the paired t test of Δ = 0, and TOST against the
   margin, as a ratio for a percentage). Each kind of verdict is a group-sequential test: the
   nominal level of look k (:func:`ablations.results.stats.boundaries.nominal_levels`) spends the
   share ``f_k`` (differences) or ``g_k`` (equivalence) of the test's level, with the correlation
   between looks accounted for.
3. Holm over the arms, separately for `worse`/`better` and for `equivalent`, step by step
   within the look: the level of the next test is α / (the arms not yet rejected in that
   family, counting every look so far). An arm is decided from its current look's numbers
   only; an arm with an outlying seed (the robustness rule) is not called `equivalent`.
4. An arm with a verdict stops and its verdict is frozen: later looks never re-decide it,
   and its row shows the look that decided it. The others get the next look's seeds. The
   experiment ends when every arm has a verdict or has run ``max_seeds`` seeds.

Why the error rates hold with the stopping included: take the true hypotheses of one family
(m_0 of them). Until the first of them is rejected, only false ones were, so at most
m − m_0 rejections count and its level is at most α/m_0. Each true hypothesis is then rejected
only if its statistic crossed the boundary of level α/m_0 at some look, which has probability
at most α/m_0 (a group-sequential test; stopping only removes looks); over the m_0 of them, at
most α, whatever the dependence between arms (they share the reference's seeds). This is the
graphical Holm procedure for group-sequential tests (Maurer and Bretz 2013) without its
retrospective rejections. ``tests/test_sequential.py`` checks it by simulating this exact
procedure under Gaussian, heavy-tailed, skewed and diverging-seed noise (docs/verdicts.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ablations.config.comparison import DEFAULT_ALPHA, DEFAULT_MAX_SEEDS  # noqa: F401 (re-exported)
from ablations.results.stats.boundaries import nominal_levels
from ablations.results.stats.contrasts import Contrasts
from ablations.results.stats.sequential_looks import (
    decide_looks,
    look_inputs,
    reported_verdicts,
)

# Share of α for `worse`/`better` spent at the pilot; the rest goes to the later looks in
# proportion to the seeds each adds. The pilot decides the large effects (3 seeds and df = 2
# need a small p); later looks mostly decide equivalence.
PILOT_DIFF_SHARE = 0.5
# `equivalent` spends α as (n_k / max_seeds)^2 (Kim and DeMets 1987's power family, ρ = 2).
EQ_SPENDING_POWER = 2.0


@dataclass(frozen=True)
class SeedDesign:
    """Planned looks (seeds per arm at each) and the share of α spent at each; the levels
    account for the looks' correlation (group-sequential boundaries,
    :mod:`ablations.results.stats.boundaries`)."""

    looks: tuple[int, ...]  # e.g. (3, 6, 10)
    diff_spend: tuple[float, ...]  # `worse`/`better`: shares of α per look, summing to 1
    eq_spend: tuple[float, ...]  # `equivalent`: the same for TOST

    @classmethod
    def plan(cls, pilot: int, max_seeds: int = DEFAULT_MAX_SEEDS) -> SeedDesign:
        """Looks at ``pilot`` seeds, then every n + max(2, n // 2) seeds up to
        ``max_seeds`` (3 and 10: 3, 5, 7, 10; 2 and 20: 2, 4, 6, 9, 13, 19, 20). Looks closer
        than doubling let arms stop sooner (``benchmarks/seeds_auto.py`` measures the
        compute and power of other looks).

        α for `worse`/`better`: :data:`PILOT_DIFF_SHARE` at the pilot, the rest in proportion
        to the seeds each later look adds. α for `equivalent`: the power spending function
        α·(n_k / max_seeds)² (Kim and DeMets 1987, ρ = 2): little at the pilot, where 2
        degrees of freedom can rarely show equivalence, most at the last look.

        Raises:
            ValueError: a pilot below 2 seeds (no t test) or ``max_seeds`` below the pilot.
        """
        if pilot < 2:
            raise ValueError(f"a pilot of {pilot} seed(s): at least 2 are needed for a t test")
        if max_seeds < pilot:
            raise ValueError(f"max_seeds {max_seeds} is below the pilot's {pilot} seeds")
        looks = [pilot]
        while looks[-1] < max_seeds:
            looks.append(min(max_seeds, looks[-1] + max(2, looks[-1] // 2)))
        return cls.with_looks(looks)

    @classmethod
    def with_looks(cls, looks: Sequence[int]) -> SeedDesign:
        """The shares of :meth:`plan` for any increasing looks."""
        looks = [int(n) for n in looks]
        added = np.diff([0, *looks]).astype(float)
        eq = np.diff([0.0, *((np.array(looks) / looks[-1]) ** EQ_SPENDING_POWER)])
        if len(looks) == 1:
            diff = np.array([1.0])
        else:
            later = added[1:] / added[1:].sum()
            diff = np.array([PILOT_DIFF_SHARE, *((1 - PILOT_DIFF_SHARE) * later)])
        return cls(tuple(looks), tuple(float(x) for x in diff), tuple(float(x) for x in eq))

    @classmethod
    def fixed(cls, seeds: int) -> SeedDesign:
        """One look: the fixed design (what ``verdict_table`` tests)."""
        return cls((seeds,), (1.0,), (1.0,))

    def to_dict(self) -> dict[str, Any]:
        return {"looks": list(self.looks), "diff_spend": list(self.diff_spend),
                "eq_spend": list(self.eq_spend)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SeedDesign:
        return cls(tuple(int(n) for n in values["looks"]),
                   tuple(float(x) for x in values["diff_spend"]),
                   tuple(float(x) for x in values["eq_spend"]))

    @property
    def max_seeds(self) -> int:
        return self.looks[-1]

    def levels(self, level: float, *, equivalence: bool) -> tuple[float, ...]:
        """Nominal p-value thresholds per look for a test of overall size ``level``."""
        shares = self.eq_spend if equivalence else self.diff_spend
        return nominal_levels(self.looks, tuple(shares), float(level), not equivalence)


def sequential_tests(contrasts: Contrasts, *, design: SeedDesign, margin: float,
                     relative: bool = False, alpha: float = DEFAULT_ALPHA, direction: int = -1,
                     outlier: np.ndarray | None = None, alpha_diff: float | None = None,
                     worst_rank: tuple[np.ndarray, np.ndarray] | None = None,
                     unstable: np.ndarray | None = None,
                     over_tolerance: np.ndarray | None = None,
                     untested: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Verdicts of the sequential design from each arm's contrasts at each look.

    Args:
        contrasts: fields of shape (..., arms, looks): each arm over its first
            ``design.looks[k]`` seeds against the reference; NaN ``diff`` where the arm did
            not reach the look (it had stopped). Leading axes: independent experiments.
        design: the planned looks and α shares.
        margin: the equivalence margin (units, or a share when ``relative``).
        alpha: family-wise error rate of each kind of verdict.
        direction: +1 if higher is better, -1 if lower is, 0 if neither.
        outlier: (..., arms, looks): the robustness rule's flags (never `equivalent`).
        alpha_diff: the `worse`/`better` family's α when it differs from ``alpha`` (0: no
            such test, which the tests use to exercise the equivalence path alone).
        worst_rank: (p, sign), each (..., arms, looks): the worst-rank test's p-value where a
            seed of the look is discordant (one arm diverged, the other finished), else NaN,
            and its sign (+1: the arm ranks worse; :mod:`ablations.results.stats.failures`). Such a
            look splits its share of Holm's level: half to the t test of the finished seeds, half
            banked for the worst-rank test, spent at the first look whose seeds can reach it
            at α/m (an exact test of n seeds has no p below 2^(1-n); at looks 3, 5, 7, 10 and
            eight arms, the last, with half of Holm's level). The plan depends on the design
            and the family only, and the parts an arm spends add up to at most its share, so
            its test keeps its level whichever look the first discordant seed comes at.
        unstable: (..., arms, looks): more training failures than the reference by that
            look: never `equivalent` there (as ``outlier``), and never `better`: each part
            of such a look's test counts only where it points worse.
        over_tolerance: (..., arms, looks): the arm's failure-rate bound over the look's
            seeds is not below the tolerance (``max_failure_rate``): never `equivalent` there,
            so an arm that would stop `equivalent` runs on to more seeds.
        untested: (..., arms, looks): no seed variance (the arm's seeds, or the reference's,
            all one value): in both families, never rejected.

    The family is every arm on the arms axis, fixed before any data: an arm without a
    comparison at some look (its trials failed, or the reference's) still counts in Holm's
    divisor, so a pilot where few arms could be compared does not open α/1 to the rest.

    Returns:
        Arrays of shape (..., arms): ``verdict``, ``significant``, ``equivalent``,
        ``decided`` (the index of the look that decided the arm, -1 if none), ``last`` (the
        index of the look its row reports: the deciding one, else the last it reached),
        ``looks`` (how many looks it reached), ``level_diff``/``level_eq`` (the nominal level
        each test had at that look; NaN for an arm never compared) and ``outlier`` (the rule's
        flag at that look).
    """
    if np.shape(contrasts.diff)[-1] != len(design.looks):
        raise ValueError(f"{np.shape(contrasts.diff)[-1]} looks given, the design plans "
                         f"{len(design.looks)}")
    inputs = look_inputs(contrasts, margin=margin, relative=relative, direction=direction,
                         outlier=outlier, worst_rank=worst_rank, unstable=unstable,
                         over_tolerance=over_tolerance, untested=untested)
    family_alpha = {False: alpha if alpha_diff is None else alpha_diff, True: alpha}
    thresholds = _holm_thresholds(design, family_alpha, arms=inputs.diff.shape[-2])
    decisions = decide_looks(inputs, thresholds, looks=design.looks,
                             diff_spend=design.diff_spend, alpha_diff=family_alpha[False])
    return reported_verdicts(inputs, decisions, worst_rank=worst_rank, direction=direction)


def _holm_thresholds(design: SeedDesign, family_alpha: dict[bool, float], *, arms: int
                     ) -> dict[bool, np.ndarray]:
    """Per family (False: `worse`/`better`, True: `equivalent`), ``[k, j]``: look k's nominal
    level at Holm's level α/j of the family's ``family_alpha`` (j = 1..arms; 0 at j = 0)."""
    looks = len(design.looks)
    return {family: np.array([(0.0,) * looks,
                              *(design.levels(family_alpha[family] / j, equivalence=family)
                                for j in range(1, arms + 1))]).T
            for family in (False, True)}


def design_note(design: SeedDesign, alpha: float = DEFAULT_ALPHA) -> str:
    """One line saying how ``--seeds auto`` decided: the looks and the α each spent."""
    def shares(values: Sequence[float]) -> str:
        return "/".join(f"{v:.0%}" for v in values)

    looks = ", ".join(str(n) for n in design.looks)
    return (f"Seeds added in rounds (--seeds auto): looks at {looks} seeds per variant; alpha "
            f"{alpha:g} split across the looks (worse/better {shares(design.diff_spend)}, "
            f"equivalent {shares(design.eq_spend)}); a variant stops at its first verdict.")


def seed_span(seeds: Sequence[int]) -> str:
    """Seeds as a reader writes them: ``0-4`` for a run of three or more, else ``0,2``."""
    seeds = list(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(s) for s in seeds)
