"""The verdicts' test under the noise real training shows: each arm's own seed-paired t test
against the shared-variance test (results/stats/shared_variance.py), through the runner's own
procedures, at 3, 5 and 10 seeds, fixed and through the pilot → rounds workflow. The table of
docs/verdicts.md ("The test") and tests/test_shared_variance.py come from here.

A simulated experiment has a reference and eight arms trained on the same seeds. A run's
metric is ``μ_a · (1 + u_s) + μ_a · sd_a · e_as``: ``u_s`` ~ N(0, seed_sd²) a seed effect every
arm shares, ``e_as`` independent noise of unit variance (Gaussian, or Student t with 3 df), and
``sd_a`` the arm's run s.d. as a share of its mean, so an arm with a larger mean is noisier in
km as real runs are. ``run_sd`` and ``seed_sd`` are fitted to the main job's recorded trials
(tests/fixtures/main_job: the reference and the five arms without a large effect, two-way
ANOVA of the log metric, :func:`fitted_noise`). A run that diverges (the ``diverged`` cell) is a
failed trial, an outcome ranked below every finished one (results/stats/failures.py).

Scenarios (:data:`SCENARIOS`): five arms equal to the reference and three large effects (x1.5,
x0.6, x1.4: decided early, they open Holm's way to the rest, the main job's shape), counting
any false `worse`/`better`/`negligible` among the five; the same with the first arm at exactly
+5% (the margin), counting its false `equivalent`; and one arm at +20% or +50% among seven
equal ones, counting its `worse` (power). The noise cells (:data:`CELLS`) put the unusual noise
on the arms whose error is counted (a noisy arm is the one that could borrow precision).

Designs: ``fixed n`` (verdict_table's procedure at full α), ``pilot 3`` (a default run's table:
the pilot look of the design up to 10 seeds) and ``rounds n`` (the pilot, then ``--seeds
auto``'s looks up to n seeds: the whole workflow, the pilot's verdicts frozen).

``python -m tools.shared_simulation [EXPERIMENTS]`` prints the tables.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ablations.results.stats.sequential import SeedDesign
from ablations.results.stats.shared_variance import PAIRED_TEST, SHARED_TEST
from tools.failure_simulation import fixed_failure_verdicts, sequential_failure_verdicts
from tools.simulation import draw_noise, fixed_verdicts, sequential_verdicts

MAIN_JOB = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "main_job" / \
    "trials.parquet"
MEAN = 0.54  # km: the main job's reference test MAE
MARGIN = 0.05  # "5%", tested as a ratio
ALPHA = 0.05
LARGE = (1.5, 0.6, 1.4)
TESTS = (PAIRED_TEST, SHARED_TEST)
DESIGNS = ("fixed 3", "fixed 5", "fixed 10", "pilot 3", "rounds 5", "rounds 10")
# name -> (the eight arms' true ratios, the arms whose error is counted, the error)
SCENARIOS = {
    "false worse/better": ((1.0,) * 5 + LARGE, (0, 1, 2, 3, 4), "significant"),
    "false equivalent": ((1 + MARGIN,) + (1.0,) * 4 + LARGE, (0,), "equivalent"),
    "power +20%": ((1.2,) + (1.0,) * 7, (0,), "worse"),
    "power +50%": ((1.5,) + (1.0,) * 7, (0,), "worse"),
}


@dataclass(frozen=True)
class Cell:
    """A noise condition: the counted arms' s.d. multiple (``arm``, on the first ``noisy`` of
    them), the reference's (``reference``), the seed effect's (``seed``, × the fitted one),
    the noise shape and each run's probability of diverging."""

    arm: float = 1.0
    noisy: int = 1
    reference: float = 1.0
    seed: float = 1.0
    noise: str = "gaussian"
    diverge: float = 0.0


CELLS = {
    "equal s.d.": Cell(),
    "reference 3x s.d.": Cell(reference=3.0),
    "reference 10x s.d.": Cell(reference=10.0),
    "one arm 5x s.d.": Cell(arm=5.0),
    "one arm 10x s.d.": Cell(arm=10.0),
    "three arms 5x s.d.": Cell(arm=5.0, noisy=3),
    "no seed effect": Cell(seed=0.0),
    "seed effect 5x": Cell(seed=5.0),
    "t3 tails": Cell(noise="t3"),
    "diverged 1 run in 10": Cell(diverge=0.1),
}


def fitted_noise(path: Path = MAIN_JOB) -> tuple[float, float]:
    """(run s.d., seed s.d.) of the log metric, from the main job's reference and the five arms
    whose ratio to it is below 1.2: the two-way ANOVA's residual and seed mean squares."""
    trials = pd.read_parquet(path)
    table = np.log(trials.pivot(index="ablation", columns="seed", values="test_mae"))
    ratio = np.exp(table.mean(axis=1) - table.loc["baseline"].mean())
    y = table[ratio < 1.2].to_numpy()
    arms, seeds = y.shape
    residual = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
    ms_res = (residual ** 2).sum() / ((arms - 1) * (seeds - 1))
    ms_seed = arms * ((y.mean(0) - y.mean()) ** 2).sum() / (seeds - 1)
    return float(np.sqrt(ms_res)), float(np.sqrt(max(ms_seed - ms_res, 0.0) / arms))


def draw(rng: np.random.Generator, *, experiments: int, seeds: int, ratios: np.ndarray,
         counted: tuple[int, ...], cell: Cell, run_sd: float, seed_sd: float
         ) -> tuple[np.ndarray, np.ndarray]:
    """The reference's runs (experiments, seeds) and the arms' (experiments, 8, seeds)."""
    sd = np.full(len(ratios), run_sd)
    sd[list(counted[:cell.noisy])] *= cell.arm
    u = cell.seed * seed_sd * rng.standard_normal((experiments, 1, seeds))
    reference = MEAN * (1 + u[:, 0]) + MEAN * cell.reference * run_sd * draw_noise(
        rng, (experiments, seeds), cell.noise)
    mu = MEAN * np.asarray(ratios)[:, None]
    arms = mu * (1 + u) + mu * sd[:, None] * draw_noise(rng, (experiments, len(ratios), seeds),
                                                       cell.noise)
    return reference, arms


def decide(reference: np.ndarray, arms: np.ndarray, design: str, test: str, cell: Cell,
           rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The verdicts of one design and test (``decided`` the look index for the sequential
    ones; the pilot's table is the design up to 10 seeds at its first look)."""
    kind, n = design.split()
    n = int(n)
    failed = None
    if cell.diverge:
        ref_failed = rng.random(reference.shape) < cell.diverge
        arm_failed = rng.random(arms.shape) < cell.diverge
        failed = (ref_failed, arm_failed)
    if kind == "fixed":
        if failed:
            return fixed_failure_verdicts(reference[:, :n], arms[..., :n], failed[0][:, :n],
                                          failed[1][..., :n], margin=MARGIN, test=test)
        return fixed_verdicts(reference[:, :n], arms[..., :n], margin=MARGIN, relative=True,
                              test=test)
    plan = SeedDesign.plan(3, 10 if kind == "pilot" else n)
    if failed:
        tests = sequential_failure_verdicts(reference, arms, *failed, plan, margin=MARGIN,
                                            test=test)
    else:
        tests = sequential_verdicts(reference, arms, plan, margin=MARGIN, relative=True,
                                    test=test)
    if kind == "pilot":  # the decisions of the first look alone: the default run's table
        first = tests["decided"] == 0
        tests = {**tests, "significant": tests["significant"] & first,
                 "equivalent": tests["equivalent"] & first,
                 "verdict": np.where(first, tests["verdict"], "inconclusive")}
    return tests


def rate(scenario: str, cell: str, design: str, test: str, *, experiments: int, seed: int,
         noise: tuple[float, float] | None = None) -> float:
    """The share of experiments with the scenario's error (or, for power, the arm `worse`)."""
    ratios, counted, error = SCENARIOS[scenario]
    run_sd, seed_sd = noise or fitted_noise()
    rng = np.random.default_rng(seed)
    reference, arms = draw(rng, experiments=experiments, seeds=10, ratios=np.array(ratios),
                           counted=counted, cell=CELLS[cell], run_sd=run_sd, seed_sd=seed_sd)
    tests = decide(reference, arms, design, test, CELLS[cell], rng)
    if error == "worse":
        hit = tests["verdict"][:, list(counted)] == "worse"
    else:
        hit = np.asarray(tests[error])[:, list(counted)]
    return float(hit.any(axis=-1).mean())


def table(scenario: str, experiments: int, cells: list[str] | None = None) -> pd.DataFrame:
    """Rows: noise cell x test; columns: :data:`DESIGNS`. The same experiments (seed) for
    both tests of a cell."""
    noise = fitted_noise()
    rows = []
    for c, cell in enumerate(cells or list(CELLS)):
        for test in TESTS:
            row: dict[str, object] = {"cell": cell, "test": test}
            for d, design in enumerate(DESIGNS):
                row[design] = rate(scenario, cell, design, test, experiments=experiments,
                                   seed=1000 * list(SCENARIOS).index(scenario) + 10 * c + d,
                                   noise=noise)
            rows.append(row)
    return pd.DataFrame(rows)


def bound(experiments: int, alpha: float = ALPHA) -> float:
    """α + 3 Monte-Carlo s.e."""
    return alpha + 3 * np.sqrt(alpha * (1 - alpha) / experiments)


def main() -> None:
    experiments = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    run_sd, seed_sd = fitted_noise()
    print(f"Fitted to tests/fixtures/main_job (log test MAE): run s.d. {run_sd:.3f}, seed s.d. "
          f"{seed_sd:.3f}; {experiments} experiments a cell; alpha + 3 MC s.e. = "
          f"{bound(experiments):.3f}")
    for scenario in SCENARIOS:
        cells = None if scenario in ("false worse/better", "false equivalent") else [
            "equal s.d.", "reference 3x s.d.", "t3 tails"]
        frame = table(scenario, experiments, cells)
        print(f"\n{scenario}\n")
        print("| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns))
        for row in frame.itertuples(index=False):
            print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v)
                                    for v in row) + " |")


if __name__ == "__main__":
    main()
