"""The verdicts' error rates when training diverges on some seeds, simulated on the runner's own
decision functions: the failure rows of docs/verdicts.md and tests/test_failures.py.

A simulated run is :func:`tools.simulation.simulate_runs`'s, and diverges (its value is
lost, its status ``diverged``) with a probability per arm: the reference's ``q_reference``,
every arm's ``q_arms`` (the same probability: failures that do not depend on the component,
the null of the worst-rank test), and optionally one arm's own. Per experiment and arm, the
comparison is what :func:`ablations.results.stats.verdicts.verdict_table` computes from
trials.parquet: the paired contrasts over the seeds both finished, the worst-rank test
(:func:`ablations.results.stats.failures.signed_rank_p`) where a seed is discordant, and equivalence
barred for an arm with more diverged seeds than the reference; the decisions are
:func:`ablations.results.stats.verdicts.equivalence_tests` (fixed seeds) and
:func:`ablations.results.stats.sequential.sequential_tests` with stopping (``--seeds auto``).

``python -m tools.failure_simulation 4000`` prints the table; ``... bounds 4000`` the failure
bound's coverage; ``... tolerance 2000`` what a tolerance for divergence
(``--max-failure-rate``) costs under ``--seeds auto``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from ablations.results.stats.contrasts import Contrasts
from ablations.results.stats.failures import FailureTests, failure_rate_upper, signed_rank_p
from ablations.results.stats.sequential import SeedDesign, sequential_tests
from ablations.results.stats.shared_variance import (
    DEFAULT_TEST,
    SHARED_TEST,
    SharedContrasts,
    shared_contrasts,
)
from tools.simulation import REFERENCE_MEAN, SPREAD, simulate_runs
from ablations.results.stats.verdicts import equivalence_tests


def masked_contrasts(variant: np.ndarray, reference: np.ndarray, keep: np.ndarray
                     ) -> Contrasts:
    """:meth:`Contrasts.paired` over the seeds (last axis) where ``keep``; NaN with fewer
    than two."""
    n = keep.sum(axis=-1).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.where(keep, variant - reference, 0.0)
        r = np.where(keep, reference, 0.0)
        d_mean, r_mean = d.sum(-1) / n, r.sum(-1) / n
        dc = np.where(keep, d - d_mean[..., None], 0.0)
        rc = np.where(keep, r - r_mean[..., None], 0.0)
        scale = 1.0 / ((n - 1) * n)
        out = Contrasts(d_mean, r_mean, (dc * dc).sum(-1) * scale, (dc * rc).sum(-1) * scale,
                        (rc * rc).sum(-1) * scale, n - 1.0)
    few = n < 2
    return out.map(lambda values: np.where(few, np.nan, values))


def failure_arrays(arms: np.ndarray, reference: np.ndarray, arm_failed: np.ndarray,
                   ref_failed: np.ndarray, direction: int = -1) -> FailureTests:
    """:class:`FailureTests` of simulated comparisons ((experiments, arms, seeds) values and
    failure masks; the reference's (experiments, seeds)), as
    :func:`ablations.results.stats.failures.failure_tests` computes them from trials."""
    ref_failed = np.broadcast_to(ref_failed[:, None, :], arm_failed.shape)
    reference = np.broadcast_to(reference[:, None, :], arms.shape)
    discordant = (arm_failed != ref_failed).any(axis=-1)
    p = np.full(arms.shape[:-1], np.nan)
    sign = np.full(arms.shape[:-1], np.nan)
    orient = -1.0 if direction > 0 else 1.0
    for index in zip(*np.nonzero(discordant)):
        score_v = np.where(arm_failed[index], np.inf, orient * arms[index])
        score_r = np.where(ref_failed[index], np.inf, orient * reference[index])
        with np.errstate(invalid="ignore"):
            p[index], w = signed_rank_p(score_v - score_r)
        sign[index] = np.sign(w)
    count, ref_count = arm_failed.sum(-1), ref_failed.sum(-1)
    seeds = np.full(count.shape, float(arms.shape[-1]))
    return FailureTests(count.astype(float), ref_count.astype(float), seeds, seeds, seeds, p,
                        sign, count > ref_count, ("",) * int(np.prod(count.shape)))


def draw_failures(rng: np.random.Generator, experiments: int, arms: int, seeds: int,
                  q_reference: float, q_arms: float | Sequence[float]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Failure masks: the reference's (experiments, seeds), the arms' (experiments, arms,
    seeds), each run diverging with its arm's probability."""
    q = np.broadcast_to(np.asarray(q_arms, float), (arms,))
    ref = rng.random((experiments, seeds)) < q_reference
    arm = rng.random((experiments, arms, seeds)) < q[None, :, None]
    return ref, arm


def failure_contrasts(arms: np.ndarray, reference: np.ndarray, arm_failed: np.ndarray,
                      ref_failed: np.ndarray, *, test: str, floor_diff: float,
                      floor_eq: float, eligible: np.ndarray | bool = True
                      ) -> Contrasts | SharedContrasts:
    """The comparisons as the runner makes them from trials with failed seeds: each arm paired
    over the seeds both finished; with the shared-variance ``test``, the arms with no failed
    seed pool their variance, where the reference has none either (the runner's
    :func:`ablations.results.stats.shared_variance.pool_members`)."""
    keep = ~arm_failed & ~ref_failed[:, None, :]
    own = masked_contrasts(arms, np.broadcast_to(reference[:, None, :], arms.shape), keep)
    if test != SHARED_TEST:
        return own
    members = (~arm_failed.any(axis=-1) & ~ref_failed.any(axis=-1)[:, None]
               & np.asarray(eligible, bool))
    return shared_contrasts(np.where(arm_failed, np.nan, arms), reference, members,
                            floor_diff=floor_diff, floor_eq=floor_eq, own=own)


def fixed_failure_verdicts(reference: np.ndarray, arms: np.ndarray, ref_failed: np.ndarray,
                           arm_failed: np.ndarray, *, margin: float = 0.05,
                           alpha: float = 0.05, test: str = DEFAULT_TEST
                           ) -> dict[str, np.ndarray]:
    """The fixed design's verdicts with failures as outcomes."""
    contrasts = failure_contrasts(arms, reference, arm_failed, ref_failed, test=test,
                                  floor_diff=alpha, floor_eq=alpha)
    failures = failure_arrays(arms, reference, arm_failed, ref_failed)
    return equivalence_tests(contrasts, margin=margin, relative=True, alpha=alpha,
                             failures=failures)


def sequential_failure_verdicts(reference: np.ndarray, arms: np.ndarray,
                                ref_failed: np.ndarray, arm_failed: np.ndarray,
                                design: SeedDesign, *, margin: float = 0.05,
                                alpha: float = 0.05, tolerance: float | None = None,
                                test: str = DEFAULT_TEST) -> dict[str, np.ndarray]:
    """``--seeds auto`` with stopping and failures as outcomes: at look k the arms still
    running are compared over their first n_k seeds. ``tolerance``: ``max_failure_rate``
    (an arm whose failure-rate bound over the look's seeds is not below it is not
    `equivalent` there)."""
    experiments, count, _ = arms.shape
    shape = (experiments, count, len(design.looks))
    per_look: list = []
    floors_diff = design.levels(alpha, equivalence=False)
    floors_eq = design.levels(alpha, equivalence=True)
    p_rank, sign = np.full(shape, np.nan), np.full(shape, np.nan)
    unstable = np.zeros(shape, bool)
    over = np.zeros(shape, bool)
    running = np.ones((experiments, count), bool)
    tests: dict[str, np.ndarray] = {}
    for k, n in enumerate(design.looks):
        contrasts = failure_contrasts(arms[..., :n], reference[:, :n], arm_failed[..., :n],
                                      ref_failed[:, :n], test=test,
                                      floor_diff=floors_diff[k], floor_eq=floors_eq[k],
                                      eligible=running)
        failures = failure_arrays(arms[..., :n], reference[:, :n], arm_failed[..., :n],
                                  ref_failed[:, :n])
        per_look.append(contrasts.map(lambda values: np.where(running, values, np.nan)))
        pending = [per_look[0].map(lambda values: np.full(values.shape, np.nan))] * (
            len(design.looks) - k - 1)
        p_rank[..., k] = np.where(running, failures.p_value, np.nan)
        sign[..., k] = np.where(running, failures.worse_sign, np.nan)
        unstable[..., k] = running & failures.no_equivalence
        if tolerance is not None:  # every seed ends ok or diverged: n outcomes per arm
            over[..., k] = running & (failure_rate_upper(
                arm_failed[..., :n].sum(-1), n, alpha) >= tolerance)
        tests = sequential_tests(type(contrasts).join([*per_look, *pending]), design=design,
                                 margin=margin, relative=True, alpha=alpha,
                                 worst_rank=(p_rank, sign),
                                 unstable=unstable, over_tolerance=over)
        running = tests["decided"] < 0
    return tests


TIGHT = 0.003 / np.sqrt(2)  # km per run: docs/verdicts.md's Holm's-hardest-case spread

CASES = {
    # name: (q_reference, q of every arm, the last arm's own q, its ratio, what is counted,
    # the spread per run)
    "null, every run diverges 10%": (0.1, 0.1, 0.1, 1.0, "false worse/better", SPREAD),
    "null, every run diverges 30%": (0.3, 0.3, 0.3, 1.0, "false worse/better", SPREAD),
    "at the margin, diverges 10%": (0.0, 0.0, 0.1, 1.05, "false equivalent", SPREAD),
    "at the margin, diverges 30%": (0.0, 0.0, 0.3, 1.05, "false equivalent", SPREAD),
    "at the margin, diverges 10%, tight": (0.0, 0.0, 0.1, 1.05, "false equivalent", TIGHT),
    "equal when it finishes, diverges 30%": (0.0, 0.0, 0.3, 1.0, "equivalent/negligible",
                                             SPREAD),
    "equal when it finishes, diverges 30%, tight": (0.0, 0.0, 0.3, 1.0, "worse", TIGHT),
    "diverges on every seed": (0.0, 0.0, 1.0, 1.0, "worse", SPREAD),
    "10% better when it finishes, diverges 20%": (0.0, 0.0, 0.2, 0.9,
                                                  "better while unstable", SPREAD),
    "10% better when it finishes, diverges 20%, tight": (0.0, 0.0, 0.2, 0.9,
                                                         "better while unstable", TIGHT),
}


def case_rate(case: str, *, experiments: int, seeds: int, auto: bool,
              rng: np.random.Generator, arms: int = 8) -> float:
    """The rate of the case's counted verdict for the last of ``arms`` arms (the family: the
    other arms equal to the reference, diverging with every arm's q); for a null case, of any
    arm (family-wise)."""
    q_ref, q_all, q_last, ratio, counted, spread = CASES[case]
    ratios = [1.0] * (arms - 1) + [ratio]
    reference, values = simulate_runs(rng, experiments=experiments, seeds=seeds, ratios=ratios,
                                      spread=spread, reference_mean=REFERENCE_MEAN)
    q = [q_all] * (arms - 1) + [q_last]
    ref_failed, arm_failed = draw_failures(rng, experiments, arms, seeds, q_ref, q)
    if auto:
        tests = sequential_failure_verdicts(reference, values, ref_failed, arm_failed,
                                            SeedDesign.plan(3, seeds))
    else:
        tests = fixed_failure_verdicts(reference, values, ref_failed, arm_failed)
    verdict = tests["verdict"]
    if counted == "false worse/better":
        return float(np.isin(verdict, ("worse", "better", "negligible", "significant"))
                     .any(axis=-1).mean())
    last = verdict[:, -1]
    if counted == "false equivalent":  # `equivalent` or `negligible`: within the margin
        return float(tests["equivalent"][:, -1].mean())
    if counted == "better while unstable":  # more diverged seeds than the reference
        return float(((last == "better") & tests["unstable"][:, -1]).mean())
    if counted == "equivalent/negligible":
        return float(np.isin(last, ("equivalent", "negligible")).mean())
    return float((last == "worse").mean())


def failure_table(experiments: int, seed: int = 20261125) -> str:
    """docs/verdicts.md's failure rows as a Markdown table."""
    rng = np.random.default_rng(seed)
    designs = (("fixed 5", 5, False), ("fixed 10", 10, False), ("auto 10", 10, True))
    lines = ["| case | counted | " + " | ".join(d[0] for d in designs) + " |",
             "|---|---|" + "---|" * len(designs)]
    for case, (*_, counted, _) in CASES.items():
        rates = [case_rate(case, experiments=experiments, seeds=n, auto=auto, rng=rng)
                 for _, n, auto in designs]
        lines.append(f"| {case} | {counted} | " + " | ".join(f"{r:.3f}" for r in rates) + " |")
    return "\n".join(lines)


BOUND_RATES = (0.02, 0.05, 0.1, 0.2, 0.3)  # the last arm's probability of diverging


def bound_coverage(q: float, *, experiments: int, seeds: int, auto: bool,
                   rng: np.random.Generator, arms: int = 8, alpha: float = 0.05
                   ) -> dict[str, float]:
    """How the printed failure bound (:func:`failure_rate_upper` of the arm's diverged runs of
    the seeds it ran: under ``--seeds auto`` those up to the look that decided it, else the
    last it reached) stands to the arm's true rate ``q``: ``covered`` (the bound is at least
    ``q``), ``equivalent`` (the arm was called `equivalent` or `negligible`), ``reassured``
    (both that and a bound below ``q``: the reader is told the arm is as good and rarely
    fails, and it fails more often than that) and ``covered_given_equivalent``. The arm
    equals the reference when it finishes; the reference and the other arms never diverge."""
    reference, values = simulate_runs(rng, experiments=experiments, seeds=seeds,
                                      ratios=[1.0] * arms, spread=SPREAD,
                                      reference_mean=REFERENCE_MEAN)
    ref_failed, arm_failed = draw_failures(rng, experiments, arms, seeds, 0.0,
                                           [0.0] * (arms - 1) + [q])
    if auto:
        design = SeedDesign.plan(3, seeds)
        tests = sequential_failure_verdicts(reference, values, ref_failed, arm_failed, design)
        ran = np.asarray(design.looks)[tests["last"][:, -1]]
    else:
        tests = fixed_failure_verdicts(reference, values, ref_failed, arm_failed)
        ran = np.full(experiments, seeds)
    diverged = (arm_failed[:, -1, :] & (np.arange(seeds)[None, :] < ran[:, None])).sum(-1)
    covered = failure_rate_upper(diverged, ran, alpha) >= q
    within = np.isin(tests["verdict"][:, -1], ("equivalent", "negligible"))
    return {"covered": float(covered.mean()), "equivalent": float(within.mean()),
            "reassured": float((within & ~covered).mean()),
            "covered_given_equivalent": float(covered[within].mean()) if within.any()
            else np.nan}


def bound_table(experiments: int, seed: int = 20261128) -> str:
    """docs/verdicts.md's coverage of the failure bound as a Markdown table."""
    rng = np.random.default_rng(seed)
    designs = (("fixed 3", 3, False), ("fixed 10", 10, False), ("auto 10", 10, True))
    columns = ("covered", "equivalent", "reassured", "covered_given_equivalent")
    lines = ["| rate of divergence | design | bound ≥ rate | equivalent | equivalent and "
             "bound < rate | bound ≥ rate given equivalent |", "|---|---|---|---|---|---|"]
    for q in BOUND_RATES:
        for name, n, auto in designs:
            rates = bound_coverage(q, experiments=experiments, seeds=n, auto=auto, rng=rng)
            lines.append(f"| {q:g} | {name} | " + " | ".join(
                "–" if np.isnan(rates[c]) else f"{rates[c]:.3f}" for c in columns) + " |")
    return "\n".join(lines)


TOLERANCE_RATES = (0.0, 0.05, 0.1, 0.3)  # the last arm's probability of diverging
TOLERANCES = (None, 0.5, 0.3)  # max_failure_rate; 0.3 needs 9 seeds without a failure


def tolerance_cost(q: float, tolerance: float | None, *, experiments: int,
                   rng: np.random.Generator, arms: int = 8, max_seeds: int = 10,
                   alpha: float = 0.05, spread: float = SPREAD) -> dict[str, float]:
    """``--seeds auto`` to ``max_seeds`` with ``max_failure_rate`` = ``tolerance``: every arm
    equal to the reference when it finishes, the last diverging with probability ``q`` (the
    others and the reference never). ``equivalent``: the last arm's share called
    `equivalent`/`negligible`; ``equivalent, other arms``: the others' (the tolerance's power
    cost); ``seeds per arm``: the mean seeds an arm ran (the cost: where it stopped).
    ``spread``: the runs' s.d. (:data:`TIGHT`: equivalence within reach at the pilot)."""
    reference, values = simulate_runs(rng, experiments=experiments, seeds=max_seeds,
                                      ratios=[1.0] * arms, spread=spread,
                                      reference_mean=REFERENCE_MEAN)
    ref_failed, arm_failed = draw_failures(rng, experiments, arms, max_seeds, 0.0,
                                           [0.0] * (arms - 1) + [q])
    design = SeedDesign.plan(3, max_seeds)
    tests = sequential_failure_verdicts(reference, values, ref_failed, arm_failed, design,
                                        alpha=alpha, tolerance=tolerance)
    within = np.isin(tests["verdict"], ("equivalent", "negligible"))
    ran = np.asarray(design.looks)[tests["last"]]
    return {"equivalent": float(within[:, -1].mean()),
            "equivalent, other arms": float(within[:, :-1].mean()),
            "seeds per arm": float(ran.mean())}


def tolerance_table(experiments: int, seed: int = 20261129) -> str:
    """docs/verdicts.md's cost of a tolerance for divergence as a Markdown table."""
    rng = np.random.default_rng(seed)
    columns = ("equivalent", "equivalent, other arms", "seeds per arm")
    lines = ["| spread | rate of divergence | tolerance | equivalent | other arms equivalent "
             "| seeds per arm |", "|---|---|---|---|---|---|"]
    for label, spread in (("default", SPREAD), ("tight", TIGHT)):
        for q in TOLERANCE_RATES:
            for tolerance in TOLERANCES:
                rates = tolerance_cost(q, tolerance, experiments=experiments, rng=rng,
                                       spread=spread)
                shown = "none" if tolerance is None else f"{tolerance:.0%}"
                lines.append(f"| {label} | {q:g} | {shown} | " + " | ".join(
                    f"{rates[c]:.2f}" if c == "seeds per arm" else f"{rates[c]:.3f}"
                    for c in columns) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "tolerance":
        print(tolerance_table(int(sys.argv[2]) if len(sys.argv) > 2 else 2000))
    elif len(sys.argv) > 1 and sys.argv[1] == "bounds":
        print(bound_table(int(sys.argv[2]) if len(sys.argv) > 2 else 2000))
    else:
        print(failure_table(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
