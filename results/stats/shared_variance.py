"""The default test of an arm against the reference: its seed-paired difference, with the run
noise estimated from every arm of the table (two variances), and each arm's own paired test
as a floor.

Every arm of an ablation table trains on the same seeds. With ``K`` variants pooled and ``n``
seeds, the metric follows

    y_as = μ_a + β_s + ε_as,   ε_as ~ (0, σ²_v) for the variants, (0, σ²_r) for the reference,

with β_s the seed's effect on every arm (it cancels in the paired differences d_as = y_as −
y_rs). Var(d_as) = σ²_v + σ²_r is estimated by two independent parts:

- the variants' arm × seed residual mean square (their two-way table without the reference),
  MS_int, with (K − 1)(n − 1) degrees of freedom: σ²_v;
- the sample variance over seeds of c_s = ū_s − y_rs (ū_s: the pooled variants' mean at seed
  s), with n − 1: σ²_v / K + σ²_r;

so V = (1 − 1/K)·MS_int + s²(c) and the difference's t has V/n as its variance and
Welch-Satterthwaite degrees of freedom (Satterthwaite 1946). The reference's noise is kept
apart: a noisier reference inflates every contrast's variance and costs degrees of freedom,
never lends the variants' precision to it. A relative contrast y_a − ρ·y_r (a margin given as a
percentage, tested as a ratio) has V(ρ) = (1 − 1/K)·MS_int + s²(ū − ρ·y_r), which
:class:`~ablations.results.stats.contrasts.Contrasts` holds as its three moments.

Pooling alone would let a noisy arm borrow the others' precision (one arm at 5-10× the others'
s.d.: familywise false `worse` 0.16-0.26 in docs/verdicts.md's simulations). The floor bars it:
an arm is rejected only where its own seed-paired test (:meth:`Contrasts.paired`) also passes
at the unadjusted level (α for a fixed design; the look's nominal level at α for ``--seeds
auto``), so each null arm's error stays below α whatever its variance, and the pooled test
with Holm bounds the family where the variances agree.

Where the table cannot support the pool, an arm gets its own test (``test`` column):

- an arm with a failed, diverged or missing seed among the reference's (its test combines the
  worst-rank test, :mod:`ablations.results.stats.failures`), with an outlying seed (the
  robustness rule, :func:`~ablations.results.stats.contrasts.robust_outliers`: one seed would
  widen every arm's variance), or whose seeds all give one value (no seed variance measured);
- every arm, where the reference has such a seed, where fewer than two variants qualify, or
  where seed sources are crossed (``--cross-seeds``: cells share seeds).

:func:`shared_moments` computes the pool on arrays (any leading axes: looks, simulated
experiments); :class:`SharedContrasts` is the test: the pooled and the own contrasts, which
arms share, and the floor.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from ablations.results.stats.contrasts import Contrasts

# The tests an experiment can decide with; experiment.json's planned ``test`` names one, and an
# experiment keeps it on report and resume (results/stats/planned.py).
SHARED_TEST = "shared-variance t"
PAIRED_TEST = "paired t"
TEST_VERSIONS = {SHARED_TEST: 1, PAIRED_TEST: 1}
DEFAULT_TEST = SHARED_TEST
# An arm whose paired differences vary beyond the F quantile at 1 − this level of the pool's
# counts as noisier than the pool (:func:`noisier_arms`).
HETEROGENEITY_LEVEL = 0.3
# The name a row's ``test`` column gives an arm that got the pooled test.
SHARED_ROW = "shared-variance t"


def shared_moments(values: np.ndarray, reference: np.ndarray, pooled: np.ndarray
                   ) -> tuple[Contrasts, np.ndarray]:
    """Every arm's :class:`Contrasts` against the reference with the pooled variance, and
    whether the pool could be formed for it.

    Args:
        values: (..., K, n) the arms' metric by seed (NaN-free where ``pooled``).
        reference: (..., n) the reference's, NaN-free.
        pooled: (..., K) the arms whose residuals enter the pool.

    Returns:
        The moments (..., K) (``diff`` and ``ref_mean`` as the paired contrast's; ``var_diff``,
        ``cov``, ``var_ref`` from the two variances; ``df`` Satterthwaite's), and (..., K) True
        where the arm is pooled and the pool has two arms or more and two seeds or more.
    """
    values = np.asarray(values, float)
    reference = np.asarray(reference, float)
    pooled = np.asarray(pooled, bool)
    n = values.shape[-1]
    weight = pooled.astype(float)
    count = weight.sum(axis=-1)  # (...)
    clean = np.where(pooled[..., None], values, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        arm_mean = clean.mean(axis=-1)  # (..., K)
        column = clean.sum(axis=-2) / count[..., None]  # (..., n): ū_s
        grand = column.mean(axis=-1)
        residual = (clean - arm_mean[..., None] - column[..., None, :]
                    + grand[..., None, None]) * weight[..., None]
        df_int = (count - 1) * (n - 1)
        ms_int = (residual ** 2).sum(axis=(-2, -1)) / df_int
        r_centred = reference - reference.mean(axis=-1, keepdims=True)
        c = column - reference
        c_centred = c - c.mean(axis=-1, keepdims=True)
        s2_c = (c_centred ** 2).sum(axis=-1) / (n - 1)
        cov_cr = (c_centred * r_centred).sum(axis=-1) / (n - 1)
        s2_r = (r_centred ** 2).sum(axis=-1) / (n - 1)
        part_v = (1 - 1 / count) * ms_int
        total = part_v + s2_c
        df = total ** 2 / (part_v ** 2 / df_int + s2_c ** 2 / (n - 1))
    ok = (count >= 2) & (n >= 2)
    # no spread in either part: the df of the parts (the p is then 0/0, handled as a tie)
    df = np.where(total > 0, df, df_int + n - 1.0)
    shape = values.shape[:-1]
    own_diff = (values - reference[..., None, :]).mean(axis=-1)
    ref_mean = np.broadcast_to(reference.mean(axis=-1)[..., None], shape)

    def per_arm(x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.where(ok, x, np.nan)[..., None], shape) / n

    moments = Contrasts(own_diff, ref_mean.copy(), per_arm(total), per_arm(cov_cr),
                        per_arm(s2_r), np.broadcast_to(np.where(ok, df, np.nan)[..., None],
                                                       shape).copy())
    return moments, pooled & ok[..., None]


def own_floor_p(p_pooled: np.ndarray, p_own: np.ndarray, shared: np.ndarray,
                floor: np.ndarray) -> np.ndarray:
    """The arm's p-value: the pooled test's where it shares the pool and its own test passes
    the floor, else the larger of the two (never below the floor, so never rejected where the
    floor fails); its own test's where it does not share."""
    combined = np.where(p_own < floor, p_pooled, np.maximum(p_pooled, p_own))
    return np.where(shared, combined, p_own)


@dataclass(frozen=True)
class SharedContrasts:
    """The comparisons with the shared-variance test: what :class:`Contrasts` offers the
    verdicts (``p_value``, ``p_tost``, ``interval``, ``bound``, ``diff``, ``se``, ``df``,
    ``map``, ``take``), each arm from the pooled moments where ``shared``, with its own
    test's floor, else from its own. Every field has the comparisons' shape."""

    own: Contrasts
    pooled: Contrasts
    shared: np.ndarray
    floor_diff: np.ndarray  # the own test's level for worse/better (α, or the look's)
    floor_eq: np.ndarray  # for equivalence's TOST

    @classmethod
    def of(cls, own: Contrasts, pooled: Contrasts, shared: np.ndarray,
           floor_diff: np.ndarray | float, floor_eq: np.ndarray | float) -> SharedContrasts:
        shape = np.shape(own.diff)
        return cls(own, pooled, np.broadcast_to(np.asarray(shared, bool), shape).copy(),
                   np.broadcast_to(np.asarray(floor_diff, float), shape).copy(),
                   np.broadcast_to(np.asarray(floor_eq, float), shape).copy())

    @classmethod
    def join(cls, items: Sequence[SharedContrasts], axis: int = -1) -> SharedContrasts:
        return cls(Contrasts.join([c.own for c in items], axis),
                   Contrasts.join([c.pooled for c in items], axis),
                   *(np.stack([getattr(c, f) for c in items], axis=axis)
                     for f in ("shared", "floor_diff", "floor_eq")))

    def map(self, function: Callable[[np.ndarray], np.ndarray]) -> SharedContrasts:
        # a mask that puts NaN where there is no comparison shares nothing there
        shared = np.nan_to_num(np.asarray(function(self.shared.astype(float)), float)) > 0.5
        return SharedContrasts(self.own.map(function), self.pooled.map(function), shared,
                               function(self.floor_diff), function(self.floor_eq))

    def take(self, index) -> SharedContrasts:
        return self.map(lambda values: values[index])

    def _pick(self, pooled: np.ndarray, own: np.ndarray) -> np.ndarray:
        return np.where(self.shared, pooled, own)

    @property
    def diff(self) -> np.ndarray:
        return self.own.diff

    @property
    def ref_mean(self) -> np.ndarray:
        return self.own.ref_mean

    @property
    def se(self) -> np.ndarray:
        return self._pick(self.pooled.se, self.own.se)

    @property
    def df(self) -> np.ndarray:
        return self._pick(self.pooled.df, self.own.df)

    def ratio(self) -> np.ndarray:
        return self.own.ratio()

    def p_value(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return own_floor_p(self.pooled.p_value(), self.own.p_value(), self.shared,
                               self.floor_diff)

    def p_tost(self, margin: float, relative: bool) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return own_floor_p(self.pooled.p_tost(margin, relative),
                               self.own.p_tost(margin, relative), self.shared, self.floor_eq)

    def interval(self, level: np.ndarray | float, relative: bool
                 ) -> tuple[np.ndarray, np.ndarray]:
        """The pooled test's interval where the arm shares the pool (what its pooled test
        reads), else its own."""
        pooled, own = self.pooled.interval(level, relative), self.own.interval(level, relative)
        return self._pick(pooled[0], own[0]), self._pick(pooled[1], own[1])

    def bound(self, level: np.ndarray | float, relative: bool) -> np.ndarray:
        """The smallest margin at which the test declares equivalence at ``level``: the pooled
        bound, or the own test's at the floor where that is wider."""
        own_at_floor = self.own.bound(np.broadcast_to(self.floor_eq, np.broadcast(
            self.floor_eq, np.asarray(level)).shape), relative)
        with np.errstate(invalid="ignore"):
            shared = np.maximum(self.pooled.bound(level, relative), own_at_floor)
        return np.where(self.shared, shared, self.own.bound(level, relative))


def noisier_arms(values: np.ndarray, reference: np.ndarray, pooled: np.ndarray,
                 moments: Contrasts, level: float | None = None) -> np.ndarray:
    """(...) How many ``pooled`` arms' paired differences vary beyond the others': s²(d_a)
    over the pooled arms' median s²(d) (scaled to the mean of a χ² with n − 1 df: Wilson and
    Hilferty's median, so that equal variances give a ratio near F's) above the F(n − 1, df)
    quantile at 1 − ``level`` (:data:`HETEROGENEITY_LEVEL`). The median, not the pool's V:
    several noisy arms widen V and would hide one another."""
    level = HETEROGENEITY_LEVEL if level is None else level
    n = np.shape(values)[-1]
    pooled = np.asarray(pooled, bool)
    if n < 2:  # no variance to compare
        return np.zeros(pooled.shape[:-1], dtype=int)
    d = np.asarray(values, float) - np.asarray(reference, float)[..., None, :]
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no pooled arm: no count
        own = np.var(np.where(np.isnan(d), 0.0, d), axis=-1, ddof=1)
        median = np.nanmedian(np.where(pooled, own, np.nan), axis=-1)
        nu = n - 1.0
        scale = median / (1 - 2 / (9 * nu)) ** 3
        ratio = own / scale[..., None]
        critical = special.fdtri(nu, moments.df, 1 - level)
        return (pooled & (ratio > critical)).sum(axis=-1)


def shared_contrasts(values: np.ndarray, reference: np.ndarray, pooled: np.ndarray, *,
                     floor_diff: np.ndarray | float, floor_eq: np.ndarray | float,
                     own: Contrasts | None = None) -> SharedContrasts:
    """:class:`SharedContrasts` of arms (..., K, n) against the reference (..., n): the pooled
    moments of :func:`shared_moments` over the ``pooled`` arms, each arm's own paired contrast
    (``own``, else computed from the same values, NaN-free).

    The floors are divided by the number of pooled arms noisier than the pool
    (:func:`noisier_arms`, at least 1): each such arm could borrow the others' precision, and
    its own test alone then holds it, so several of them share the floor's level as a
    Bonferroni family (one noisy arm keeps the whole floor)."""
    moments, shared = shared_moments(values, reference, pooled)
    if own is None:
        own = Contrasts.paired(values, np.broadcast_to(reference[..., None, :],
                                                       np.shape(values)))
    share = np.maximum(noisier_arms(values, reference, shared, moments), 1)[..., None]
    return SharedContrasts.of(own, moments, shared, np.asarray(floor_diff) / share,
                              np.asarray(floor_eq) / share)


def pool_members(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """(..., K) the arms whose residuals may enter the pool: a finite value on every seed the
    table has (a failed, diverged or missing seed keeps the arm on its own test) and some
    spread over them (an arm whose seeds all give one value measured no seed variance).
    None qualifies where the reference lacks a seed of the table (its failed seed is every
    contrast's) or has fewer than two."""
    values, reference = np.asarray(values, float), np.asarray(reference, float)
    complete = ~np.isnan(values).any(axis=-1)
    with np.errstate(invalid="ignore"):
        spread = np.ptp(np.where(np.isnan(values), 0.0, values), axis=-1) > 0
    reference_ok = ~np.isnan(reference).any(axis=-1) & (reference.shape[-1] >= 2)
    return complete & spread & np.asarray(reference_ok)[..., None]


def array_contrasts(arms: np.ndarray, reference: np.ndarray, *, test: str,
                    floor_diff: np.ndarray | float, floor_eq: np.ndarray | float,
                    eligible: np.ndarray | bool = True) -> Contrasts | SharedContrasts:
    """The comparisons of arms (..., K, n) with the reference (..., n) as ``test`` makes them,
    on arrays (the simulations that validate the verdicts call it per look): each arm's
    seed-paired contrast, and for the shared-variance test the pool of :func:`pool_members`
    among the ``eligible`` arms (..., K) (those still running, without an outlying seed)."""
    arms, reference = np.asarray(arms, float), np.asarray(reference, float)
    own = Contrasts.paired(arms, np.broadcast_to(reference[..., None, :], arms.shape))
    if test != SHARED_TEST:
        return own
    members = pool_members(arms, reference) & np.asarray(eligible, bool)
    return shared_contrasts(arms, reference, members, floor_diff=floor_diff,
                            floor_eq=floor_eq, own=own)
