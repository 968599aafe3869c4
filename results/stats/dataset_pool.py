"""One variant's per-dataset log ratios pooled with the dataset as the unit
(:func:`pool`): their mean and a t test on k − 1 degrees of freedom from their spread, the
between-dataset heterogeneity as a description, the Q-profile upper bound on τ
(:func:`tau_upper_bound`) and the share of datasets like these beyond the margin that it
allows (:func:`share_beyond`). :mod:`ablations.results.stats.datasets` (its docstring says
why the datasets are not weighted) turns each variant's pool into its verdict across them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Pooled:
    """One variant's per-dataset log ratios pooled: their mean, with datasets as the unit."""

    k: int  # datasets pooled
    mean: float  # pooled log ratio: the mean of the datasets' log ratios
    sd: float  # the datasets' log ratios' standard deviation
    se: float  # sd / sqrt(k)
    df: int  # k - 1
    tau2: float  # between-dataset variance of the log ratio (Paule-Mandel; descriptive)
    i2: float  # share of the spread that is between datasets (descriptive)
    tau_upper: float  # one-sided 1 − α upper bound on τ (Q-profile), at the level pooled with

    def interval(self, level: float) -> tuple[float, float]:
        half = stats.t.ppf(0.5 + level / 2, self.df) * self.se
        return self.mean - half, self.mean + half

    def prediction(self, level: float) -> tuple[float, float]:
        """Where a new dataset's log ratio, measured as these were, lies with probability
        ``level``: the normal sample's prediction interval, t on k − 1 df, s·√(1 + 1/k)."""
        half = stats.t.ppf(0.5 + level / 2, self.df) * self.sd * np.sqrt(1 + 1 / self.k)
        return self.mean - half, self.mean + half

    def p_value(self) -> float:
        return float(2 * stats.t.sf(abs(self.mean) / self.se, self.df))

    def p_tost(self, log_low: float, log_high: float) -> float:
        """The larger one-sided p of the log ratio above ``log_low`` and below ``log_high``."""
        above = stats.t.sf((self.mean - log_low) / self.se, self.df)
        below = stats.t.cdf((self.mean - log_high) / self.se, self.df)
        return float(max(above, below))


# an equivalence across datasets carries the 'on average' caveat unless, with τ at its upper
# bound and the pooled mean at the worse end of its interval, at most this share of datasets
# like these have a true ratio beyond the margin
NEW_SHARE = 0.10


def tau_upper_bound(effects: np.ndarray, variances: np.ndarray, level: float) -> float:
    """A one-sided ``level`` upper confidence bound on the between-dataset s.d. τ of the log
    ratio: the Q-profile bound (Viechtbauer 2007), the τ² at which the generalised Q statistic,
    Σ wᵢ(yᵢ − ȳ_w)² with wᵢ = 1/(vᵢ + τ²), falls to the 1 − ``level`` quantile of χ² on k − 1
    degrees of freedom. Q decreases in τ², so the bound is the one root; 0 where even τ = 0
    gives a Q below that quantile (the datasets agree more closely than their seeds' noise
    alone predicts). It holds the within-dataset noise apart from the spread between datasets,
    unlike the prediction interval's s, which holds both."""
    from scipy.optimize import brentq

    effects = np.asarray(effects, float)
    variances = np.maximum(np.asarray(variances, float), 1e-12)

    def q(tau2: float) -> float:
        weights = 1 / (variances + tau2)
        centre = np.sum(weights * effects) / np.sum(weights)
        return float(np.sum(weights * (effects - centre) ** 2))

    target = stats.chi2.ppf(1 - level, len(effects) - 1)
    if q(0.0) <= target:
        return 0.0
    high = max(float(np.var(effects, ddof=1)), float(variances.max()), 1e-12)
    while q(high) > target:  # Q ~ Σ(y − ȳ)²/τ² for large τ²: the bracket is reached
        high *= 4
    return float(np.sqrt(brentq(lambda tau2: q(tau2) - target, 0.0, high, xtol=1e-14)))


def share_beyond(log_mean: float, tau: float, log_low: float, log_high: float) -> float:
    """The share of datasets whose true log ratio, normal around ``log_mean`` with s.d.
    ``tau``, lies outside (``log_low``, ``log_high``)."""
    if tau <= 0:
        return float(not log_low < log_mean < log_high)
    return float(stats.norm.cdf((log_low - log_mean) / tau)
                 + stats.norm.sf((log_high - log_mean) / tau))


def pool(log_ratios: np.ndarray, variances: np.ndarray, level: float = 0.95) -> Pooled:
    """Two or more per-dataset log ratios pooled with the dataset as the unit: their mean and
    a t test on k − 1 degrees of freedom from their spread, which holds the within-dataset
    noise and the between-dataset spread alike. The datasets are not weighted by their
    estimated variances: with a few seeds per dataset those estimates are too noisy to weight
    by (inverse-variance weights, even with the Knapp-Hartung interval, called about 2α of
    null variants `worse`/`better` at 5 datasets of 3 seeds; docs/datasets.md). ``variances``
    (each dataset's delta-method variance) give the descriptive heterogeneity: statsmodels'
    ``combine_effects`` Paule-Mandel τ² and I², and the ``level`` Q-profile bound on τ
    (:func:`tau_upper_bound`) that the 'on average' caveat reads."""
    from statsmodels.stats.meta_analysis import combine_effects

    effects = np.asarray(log_ratios, float)
    variances = np.maximum(np.asarray(variances, float), 1e-12)  # a seed-identical dataset
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # combine_effects warns about per-sample intervals
        result = combine_effects(effects, variances, method_re="iterated")
    k = len(effects)
    sd = max(float(effects.std(ddof=1)), 1e-12)  # identical ratios: a degenerate spread
    return Pooled(k=k, mean=float(effects.mean()), sd=sd, se=sd / np.sqrt(k), df=k - 1,
                  tau2=float(max(result.tau2, 0.0)), i2=float(max(result.i2, 0.0)),
                  tau_upper=tau_upper_bound(effects, variances, level))
