"""What ``--seeds auto`` spends and finds, by design, simulated with the runner's own procedure
(tools.simulation.sequential_verdicts, stopping included): per set of looks and α spending
for `equivalent`, the CPU-hours against a fixed design at the last look's seeds (each variant's
trials weighted by its cost on the default run), the trials, and how often the arms without an
effect end `equivalent`.

The family is the default `components` run's: five arms with its measured small ratios to the
baseline (0.985-1.001), three with its large ones (1.48-1.74); Gaussian seed noise at a paired
s.d. (``--paired-sd``, default 0.017 km: the default run's, measured over 10 seeds).

    python benchmarks/seeds_auto.py [--experiments 600] [--paired-sd 0.017]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ablations.results.stats.sequential as sequential  # noqa: E402
from benchmarks.common import markdown  # noqa: E402
from ablations.results.stats.sequential import SeedDesign  # noqa: E402
from tools.simulation import sequential_verdicts  # noqa: E402

# The default run (commit 71a2bbe, 2 cores): ratio to the baseline's mean, CPU-hours per trial.
ARMS = {  # variant: (ratio, cpu_hours per trial)
    "no_temporal_attention": (0.994, 0.003295), "no_spatial_attention": (0.999, 0.002514),
    "no_attention": (0.985, 0.002348), "no_scalars": (1.739, 0.003538),
    "no_images": (1.716, 0.000068), "single_frame": (1.483, 0.001119),
    "reduced_width": (1.001, 0.002008), "point_estimate": (0.990, 0.003536),
}
REFERENCE_CPU_HOURS = 0.003736
NULL = [0, 1, 2, 6, 7]  # the arms without an effect
LOOKS = ((3, 5, 7, 10), (3, 4, 5, 6, 7, 8, 9, 10), (3, 6, 10))
POWERS = (1.0, 2.0)  # α for `equivalent` spent as (n_k / n_max) ** power


def measure(looks: tuple[int, ...], power: float, *, experiments: int, paired_sd: float
            ) -> list[object]:
    """One row: the design's CPU share, trials and power on simulated default runs."""
    previous = sequential.EQ_SPENDING_POWER
    sequential.EQ_SPENDING_POWER = power
    try:
        design = SeedDesign.with_looks(looks)
    finally:
        sequential.EQ_SPENDING_POWER = previous
    rng = np.random.default_rng(1)
    ratios = np.array([r for r, _ in ARMS.values()])
    cost = np.array([c for _, c in ARMS.values()])
    # the reference carries most of the paired spread, as on the default run (0.0137 of 0.017)
    ref_sd, arm_sd = 0.8 * paired_sd, 0.6 * paired_sd
    reference = 0.553 + ref_sd * rng.standard_normal((experiments, 10))
    arms = 0.553 * ratios[:, None] + arm_sd * rng.standard_normal((experiments, len(ARMS), 10))
    verdicts = sequential_verdicts(reference, arms, design, margin=0.05, relative=True)
    spent = (verdicts["seeds"] * cost).sum(-1) + verdicts["reference_seeds"] * REFERENCE_CPU_HOURS
    fixed = design.max_seeds * (cost.sum() + REFERENCE_CPU_HOURS)
    trials = verdicts["seeds"].sum(-1) + verdicts["reference_seeds"]
    found = np.isin(verdicts["verdict"][:, NULL], ["equivalent", "negligible"]).mean()
    large = (verdicts["verdict"][:, [3, 4, 5]] == "worse").mean()
    return [", ".join(map(str, looks)), f"{power:g}", f"{np.mean(spent) / fixed:.0%}",
            f"{trials.mean():.1f}", f"{found:.0%}", f"{large:.0%}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=600)
    parser.add_argument("--paired-sd", type=float, default=0.017)
    args = parser.parse_args()
    rows = [measure(looks, power, experiments=args.experiments, paired_sd=args.paired_sd)
            for looks in LOOKS for power in POWERS]
    print(f"--seeds auto on simulated default runs: {args.experiments} experiments, paired "
          f"s.d. {args.paired_sd} km, margin 5%, alpha 0.05, fixed design = 90 trials\n")
    print(markdown(["looks", "eq spending power", "CPU-hours vs fixed", "trials",
                    "no-effect arms equivalent", "large effects worse"], rows))


if __name__ == "__main__":
    main()
