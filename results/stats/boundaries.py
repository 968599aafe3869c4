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
before, on the conservative side (at most level · share_k · PATHS paths, floored, cross).
Checked on 2^24 independent paths (``benchmarks/boundaries.py``, docs/verdicts.md): each look
within its target's Monte-Carlo error, none above it by more than that error. A boundary is
applied as a nominal p-value (π_k at the look's planned degrees of freedom), so a look with a
failed seed (one df fewer) is tested at the same nominal level.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import scipy
from scipy import special

from ablations.model.cache import keep_record, read_record, source_digest

PATHS = 1 << 21  # simulated experiments per set of looks; the one-sided case uses both signs
PATHS_SEED = 20261123
PATHS_CHUNK = 1 << 18  # paths drawn at a time
CACHE_KIND = "boundaries"  # the kept levels' files in the cache folder (ablations.model.cache)


@lru_cache(maxsize=8)
def null_paths(looks: tuple[int, ...]) -> np.ndarray:
    """(PATHS, looks) t statistics of nested samples of standard Gaussian seeds.

    Drawn from the sufficient statistics: the seeds a look adds (m of them) contribute a sum
    ~ N(0, m) and a within-increment sum of squares ~ χ²(m − 1), independent, so a path costs
    two draws per look whatever the number of seeds (a last look at 200 seeds costs what one
    at 10 does); the running sum of squares adds the increment's and the between-groups term.
    """
    rng = np.random.default_rng(PATHS_SEED)
    # float32: 7 digits, ample for a quantile; column-major: the search reads a look at a time
    out = np.empty((PATHS, len(looks)), dtype=np.float32, order="F")
    for start in range(0, PATHS, PATHS_CHUNK):  # bounded memory; a fixed chunk, fixed paths
        rows = min(PATHS_CHUNK, PATHS - start)
        n, total, squares = 0, np.zeros(rows), np.zeros(rows)
        for k, n_k in enumerate(looks):
            m = n_k - n
            added = np.sqrt(m) * rng.standard_normal(rows)
            within = 2.0 * rng.standard_gamma((m - 1) / 2, rows) if m > 1 else 0.0
            if n:
                squares += within + n * m / n_k * (total / n - added / m) ** 2
            else:
                squares = within + np.zeros(rows)
            total += added
            n = n_k
            out[start:start + rows, k] = total / n / np.sqrt(squares / (n - 1) / n)
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

    The levels are a deterministic function of the arguments, the simulation's constants and
    NumPy's generator: computed once (about a second per set of looks, in every run's verdicts
    and dry run), they are kept in a file of the cache folder the synthetic sets use
    (``$ABLATION_CACHE_DIR``, else ~/.cache/ablation-runner) and read back, the same floats, by
    later processes.
    """
    if len(looks) == 1 or level <= 0:
        return (float(level),) * len(looks)
    key = cache_key(looks, shares, level, two_sided)
    kept = read_record(CACHE_KIND, key)
    if isinstance(kept, list) and len(kept) == len(looks) \
            and all(isinstance(x, float) for x in kept):
        return tuple(kept)
    levels = simulated_levels(looks, shares, level, two_sided)
    keep_record(CACHE_KIND, key, list(levels))
    return levels


def simulated_levels(looks: tuple[int, ...], shares: tuple[float, ...], level: float,
                     two_sided: bool) -> tuple[float, ...]:
    """:func:`nominal_levels` from the simulated paths, without the cache."""
    t = null_paths(looks)
    stat = np.abs(t) if two_sided else np.asfortranarray(np.concatenate([t, -t]))
    total = stat.shape[0]
    alive = np.ones(total, dtype=bool)
    out = []
    for k, n in enumerate(looks):
        spend = level * shares[k]
        df = n - 1.0
        if k == 0:  # exact: no earlier look
            nominal = spend
        else:
            # the conservative side of the search: the critical value is the count-th largest
            # surviving statistic (count floored): at most spend · total paths cross
            count = int(np.floor(spend * total))
            candidates = stat[alive, k]
            if count <= 0:
                nominal = 0.0
            elif count > candidates.size:
                nominal = 1.0
            else:
                c = float(np.partition(candidates, candidates.size - count)[-count])
                nominal = float(special.stdtr(df, -c)) * (2 if two_sided else 1)
        crit = special.stdtrit(df, 1 - nominal / (2 if two_sided else 1)) if nominal > 0 \
            else np.inf
        alive &= stat[:, k] <= crit
        out.append(float(nominal))
    return tuple(out)


def cache_key(looks: tuple[int, ...], shares: tuple[float, ...], level: float,
               two_sided: bool) -> dict:
    """What the levels depend on: the arguments, the simulation's constants and code (this
    module's source), NumPy's generator and SciPy's t distribution."""
    return {"looks": [int(n) for n in looks], "shares": [float(x) for x in shares],
            "level": float(level), "two_sided": bool(two_sided), "paths": PATHS,
            "seed": PATHS_SEED, "chunk": PATHS_CHUNK, "source": source_digest(__file__),
            "numpy": np.__version__, "scipy": scipy.__version__}
