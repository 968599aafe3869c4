"""Tests of Δ = 0 for a variant whose noise shape differs from the reference's (its mean equal):
the runner's paired t test against a sign-flip permutation test of the paired differences
(exact, every sign pattern), Wilcoxon's signed-rank test and a t test of the log ratio, at
Holm's last step (the full α, two-sided; the hardest case of docs/verdicts.md), at 6 and 10
seeds. Size: the variant alone carries ``lognormal`` or ``diverging`` noise
(tools.simulation's shapes), the reference Gaussian. Power: Gaussian noise, Δ = one paired
s.d. (0.017 km, ratio 1.031).

    python benchmarks/skew_tests.py [--experiments 20000]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
from scipy import special, stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.simulation import REFERENCE_MEAN, SPREAD, draw_noise  # noqa: E402

ALPHA = 0.05


def t_test(d: np.ndarray) -> np.ndarray:
    n = d.shape[-1]
    t = d.mean(-1) / (d.std(-1, ddof=1) / np.sqrt(n))
    return 2 * special.stdtr(n - 1, -np.abs(t))


def sign_flip(d: np.ndarray) -> np.ndarray:
    """Exact two-sided sign-flip p-value of the mean (every one of the 2^n sign patterns)."""
    n = d.shape[-1]
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))  # (2^n, n)
    observed = np.abs(d.sum(-1))
    flipped = np.abs(d @ signs.T)  # (experiments, 2^n)
    return (flipped >= observed[:, None] - 1e-12).mean(-1)


def signed_rank(d: np.ndarray) -> np.ndarray:
    return np.array([stats.wilcoxon(row, method="exact").pvalue for row in d])


def log_ratio(v: np.ndarray, r: np.ndarray) -> np.ndarray:
    return t_test(np.log(v) - np.log(r))


def runs(rng: np.random.Generator, experiments: int, seeds: int, noise: str,
         ratio: float) -> tuple[np.ndarray, np.ndarray]:
    r = REFERENCE_MEAN + SPREAD * draw_noise(rng, (experiments, seeds), "gaussian")
    v = REFERENCE_MEAN * ratio + SPREAD * draw_noise(rng, (experiments, seeds), noise)
    return v, r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=20000)
    args = parser.parse_args()
    rng = np.random.default_rng(33)
    print(f"Rejections of Δ = 0 at α = {ALPHA} two-sided, {args.experiments} experiments a "
          f"cell (MC s.e. about {np.sqrt(ALPHA * (1 - ALPHA) / args.experiments):.4f} at α)\n")
    print("| case | seeds | paired t | sign-flip | signed-rank | log-ratio t |\n"
          "|---|---|---|---|---|---|")
    for case, noise, ratio in (("size, variant lognormal", "lognormal", 1.0),
                               ("size, variant diverging", "diverging", 1.0),
                               ("size, Gaussian", "gaussian", 1.0),
                               ("power, Gaussian, Δ = 1 paired s.d.", "gaussian",
                                1 + 0.017 / REFERENCE_MEAN)):
        for seeds in (6, 10):
            v, r = runs(rng, args.experiments, seeds, noise, ratio)
            d = v - r
            rates = [(p < ALPHA).mean() for p in (t_test(d), sign_flip(d), signed_rank(d),
                                                  log_ratio(v, r))]
            print(f"| {case} | {seeds} | " + " | ".join(f"{x:.3f}" for x in rates) + " |")


if __name__ == "__main__":
    main()
