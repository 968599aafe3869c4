"""Group-sequential boundaries for t statistics at planned looks (``--seeds auto``).

At look k an arm's t statistic is computed over its first n_k seeds: the looks share seeds,
so their statistics are strongly correlated, and Bonferroni over the looks (α·share_k at look
k) wastes α. Here the per-look nominal levels π_k spend α exactly along the looks: under the
null, the probability that the statistic first crosses at look k is ``level · share_k``
(Lan and DeMets 1983's spending, with the shares as the increments of the spending function).

The joint law of the t statistics of nested samples of i.i.d. Gaussian seeds does not depend on
the mean or the spread, so it is simulated once per set of looks with a seed fixed in the code
(:data:`PATHS` paths): the boundaries are the same on every machine and every run. The first
look's level is exact (a t quantile); later looks are set among the paths that did not cross
before. A boundary is applied as a nominal p-value (π_k at the look's planned degrees of
freedom), so a look with a failed seed (one df fewer) is tested at the same nominal level.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import special

PATHS = 1 << 19  # simulated experiments per set of looks; the one-sided case uses both signs
PATHS_SEED = 20261123


@lru_cache(maxsize=8)
def null_paths(looks: tuple[int, ...]) -> np.ndarray:
    """(PATHS, looks) t statistics of nested samples of standard Gaussian seeds."""
    rng = np.random.default_rng(PATHS_SEED)
    n_max = looks[-1]
    out = np.empty((PATHS, len(looks)))
    # rows per chunk: ~1M draws (8 MB) at a time, whatever the largest look; the generator
    # fills rows in order, so the paths do not depend on the chunking
    chunk = max(1, min(PATHS, (1 << 20) // n_max))
    for start in range(0, PATHS, chunk):
        z = rng.standard_normal((min(chunk, PATHS - start), n_max))
        total, squares = np.cumsum(z, axis=1), np.cumsum(z * z, axis=1)
        for k, n in enumerate(looks):
            mean = total[:, n - 1] / n
            var = (squares[:, n - 1] - n * mean * mean) / (n - 1)
            out[start:start + len(z), k] = mean / np.sqrt(var / n)
    return out


@lru_cache(maxsize=4096)  # Holm levels α/j of two families for up to ~2000 arms
def nominal_levels(looks: tuple[int, ...], shares: tuple[float, ...], level: float,
                   two_sided: bool) -> tuple[float, ...]:
    """Per look, the nominal p-value below which the look rejects, so that a test at the looks
    has overall size ``level``, spent as ``level · shares[k]`` at look k.

    Args:
        looks: seeds per arm at each look (increasing).
        shares: the share of ``level`` spent at each look (non-negative, summing to 1).
        level: the test's overall size.
        two_sided: the two-sided test of Δ = 0 (|t|), else a one-sided test (TOST's sides).
    """
    if len(looks) == 1 or level <= 0:
        return (float(level),) * len(looks)
    t = null_paths(looks)
    stat = np.abs(t) if two_sided else np.concatenate([t, -t])
    total = stat.shape[0]
    alive = np.ones(total, dtype=bool)
    out = []
    for k, n in enumerate(looks):
        spend = level * shares[k]
        df = n - 1.0
        if k == 0:  # exact: no earlier look
            nominal = spend
        else:
            count = int(round(spend * total))
            candidates = stat[alive, k]
            if count <= 0:
                nominal = 0.0
            elif count >= candidates.size:
                nominal = 1.0
            else:
                cut = candidates.size - count - 1
                top = np.partition(candidates, cut)  # top[cut:]: the count + 1 largest
                c = 0.5 * (top[cut] + top[cut + 1:].min())  # between the two around the cut
                nominal = float(special.stdtr(df, -c)) * (2 if two_sided else 1)
        crit = special.stdtrit(df, 1 - nominal / (2 if two_sided else 1)) if nominal > 0 \
            else np.inf
        alive &= stat[:, k] <= crit
        out.append(float(nominal))
    return tuple(out)
