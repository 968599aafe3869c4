"""How exactly the group-sequential boundaries of ``--seeds auto`` spend α, checked on paths
drawn apart from the ones they were set on (another generator seed): per look, the share of
Gaussian experiments whose t statistic first crosses there, against its target level·share_k,
and the overall size, at Holm's first (α) and last (α/8) levels of an eight-arm family, for
`worse`/`better` (two-sided) and `equivalent` (one-sided), with Monte-Carlo s.e. Also the time
``nominal_levels`` takes to compute the sixteen level sets of the default design (the cache
folder is not read).

    python benchmarks/boundaries.py [--paths 8388608] [--seed 7]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import special

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablations.results.stats import boundaries  # noqa: E402
from ablations.results.stats.sequential import SeedDesign  # noqa: E402


def first_crossings(looks: tuple[int, ...], nominal: dict[str, tuple[float, ...]],
                    two_sided: dict[str, bool], paths: int, seed: int) -> dict[str, np.ndarray]:
    """Per named boundary: the number of paths (of ``paths`` Gaussian experiments) whose t
    statistic first crosses the nominal level at each look; a one-sided boundary counts both
    signs (``2 * paths`` trials)."""
    rng = np.random.default_rng(seed)
    counts = {name: np.zeros(len(looks), np.int64) for name in nominal}
    chunk = max(1, (1 << 21) // looks[-1])
    for start in range(0, paths, chunk):
        z = rng.standard_normal((min(chunk, paths - start), looks[-1]))
        total, squares = np.cumsum(z, axis=1), np.cumsum(z * z, axis=1)
        t = np.empty((len(z), len(looks)))
        for k, n in enumerate(looks):
            mean = total[:, n - 1] / n
            t[:, k] = mean / np.sqrt((squares[:, n - 1] - n * mean * mean) / (n - 1) / n)
        for name, levels in nominal.items():
            if two_sided[name]:
                p = 2 * special.stdtr(np.array(looks) - 1, -np.abs(t))
            else:
                p = special.stdtr(np.array(looks) - 1, -np.concatenate([t, -t]))
            alive = np.ones(len(p), bool)
            for k in range(len(looks)):
                crossed = alive & (p[:, k] < levels[k])
                counts[name][k] += crossed.sum()
                alive &= ~crossed
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", type=int, default=1 << 23)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    # the levels computed here, not read from the cache folder: what is checked is the code
    os.environ["ABLATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="boundaries-")
    design = SeedDesign.plan(3, 10)
    boundaries.null_paths.cache_clear()
    start = time.perf_counter()
    for j in range(1, 9):  # the computation, not a read of the levels kept in the cache folder
        for equivalence in (False, True):
            shares = design.eq_spend if equivalence else design.diff_spend
            boundaries.simulated_levels(design.looks, tuple(shares), 0.05 / j, not equivalence)
    print(f"nominal_levels, looks {design.looks}, alpha/j for j = 1..8, both families: "
          f"{time.perf_counter() - start:.2f} s ({boundaries.PATHS} paths)")
    nominal, two_sided, targets = {}, {}, {}
    for j in (1, 8):
        for equivalence in (False, True):
            name = f"alpha/{j} {'one' if equivalence else 'two'}-sided"
            nominal[name] = design.levels(0.05 / j, equivalence=equivalence)
            two_sided[name] = not equivalence
            shares = design.eq_spend if equivalence else design.diff_spend
            targets[name] = np.array(shares) * 0.05 / j
    counts = first_crossings(design.looks, nominal, two_sided, args.paths, args.seed)
    print(f"\n{args.paths} independent paths (seed {args.seed}); realised / target, "
          f"± 1 MC s.e.\n")
    print("| boundary | " + " | ".join(f"look {n}" for n in design.looks) + " | overall |")
    print("|---|" + "---|" * (len(design.looks) + 1))
    for name, count in counts.items():
        trials = args.paths * (1 if two_sided[name] else 2)
        cells = []
        for observed, target in ((*zip(count, targets[name]),) + ((count.sum(),
                                                                   targets[name].sum()),)):
            ratio = observed / trials / target
            cells.append(f"{ratio:.3f} ± {np.sqrt(target * trials) / (target * trials):.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
