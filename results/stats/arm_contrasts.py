"""Each arm's contrast against the reference, from a trials table or from values aligned by
seed: paired over the shared seeds where there are two or more, else Welch's
(:func:`seed_contrast`, :func:`aligned_contrast`), and a family of arms at once, with the
robustness rule's flags and the shared-variance or crossed test where the table has it
(:func:`family_contrasts`).

Re-exported by :mod:`ablations.results.stats.verdicts`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ablations.config.comparison import DEFAULT_ALPHA
from ablations.results.stats.comparisons import usable_trials
from ablations.results.stats.contrasts import Contrasts, robust_outliers
from ablations.results.stats.crossed import crossed_family
from ablations.results.stats.seed_tables import seed_table
from ablations.results.stats.shared_variance import (
    PAIRED_TEST,
    SHARED_TEST,
    SharedContrasts,
    pool_members,
    shared_contrasts,
)


def seed_contrast(variant: pd.Series, reference: pd.Series
                  ) -> tuple[Contrasts | None, pd.Series]:
    """One variant's :class:`Contrasts` against a reference, each a Series of values by seed
    (NaN: none): paired over the shared seeds where there are two or more, else Welch's (as
    :func:`~ablations.results.stats.comparisons.ablation_table` pairs them), else None; and the
    paired differences by seed (empty when not paired), which the robustness rule reads."""
    variant, reference = variant.dropna(), reference.dropna()
    common = variant.index.intersection(reference.index)
    if len(common) >= 2:
        return (Contrasts.paired(variant[common].to_numpy(), reference[common].to_numpy()),
                variant[common] - reference[common])
    if len(variant) >= 2 and len(reference) >= 2:
        return Contrasts.unpaired(variant.to_numpy(), reference.to_numpy()), pd.Series(
            dtype=float)
    return None, pd.Series(dtype=float)


def aligned_contrast(variant: np.ndarray, reference: np.ndarray
                     ) -> tuple[Contrasts | None, np.ndarray]:
    """:func:`seed_contrast` of two arrays of values aligned by seed (NaN: none), as one
    table's columns are: the same choice and the same numbers, without a Series per arm (the
    simulations that validate the verdicts call it per arm and look); the paired differences
    aligned too (NaN where not paired)."""
    variant_ok, reference_ok = ~np.isnan(variant), ~np.isnan(reference)
    both = variant_ok & reference_ok
    if np.count_nonzero(both) >= 2:
        return (Contrasts.paired(variant[both], reference[both]),
                np.where(both, variant - reference, np.nan))
    unpaired = np.full(len(variant), np.nan)
    if np.count_nonzero(variant_ok) >= 2 and np.count_nonzero(reference_ok) >= 2:
        return Contrasts.unpaired(variant[variant_ok], reference[reference_ok]), unpaired
    return None, unpaired


def family_contrasts(trials: pd.DataFrame, arms: list[str], *, reference: str, metric: str,
                     seeds: set | None = None, test: str = PAIRED_TEST,
                     floor_diff: float = DEFAULT_ALPHA, floor_eq: float = DEFAULT_ALPHA
                     ) -> tuple[Contrasts | SharedContrasts, np.ndarray, np.ndarray]:
    """Per arm, its contrast against ``reference`` (:func:`aligned_contrast`) over the ok
    trials with a finite ``metric`` (among ``seeds`` if given); the robustness rule's flag
    (:func:`ablations.results.stats.contrasts.robust_outliers` on its paired differences); and the
    seeds paired (0 for Welch's comparison or none).

    ``test``: :data:`~ablations.results.stats.shared_variance.SHARED_TEST` gives
    :class:`~ablations.results.stats.shared_variance.SharedContrasts`: the arms that qualify
    (:func:`pool_members`) share the variance, each with its own test as the floor at
    ``floor_diff`` (worse/better) and ``floor_eq`` (equivalence)."""
    ok, _ = usable_trials(trials, metric)
    if seeds is not None:
        ok = ok[ok["seed"].isin(seeds)]
    by_seed = seed_table(ok, metric)
    empty = np.full(len(by_seed.index), np.nan)

    def column(arm: str) -> np.ndarray:  # in the metric's own float type (float32 stays)
        if arm not in by_seed:
            return empty
        dtype = getattr(by_seed[arm].dtype, "numpy_dtype", by_seed[arm].dtype)
        return by_seed[arm].to_numpy(dtype=dtype if dtype.kind == "f" else float,
                                     na_value=np.nan)

    ref = column(reference)
    items, differences = [], []
    for arm in arms:
        contrast, paired = aligned_contrast(column(arm), ref)
        items.append(contrast)
        differences.append(paired)
    contrasts = Contrasts.stack(items)
    crossed = crossed_family(trials, by_seed, arms, reference=reference)
    matrix = np.array(differences, dtype=float).reshape(len(arms), len(by_seed.index))
    outlier = robust_outliers(matrix) if matrix.size else np.zeros(len(arms), dtype=bool)
    pairs = np.array([np.count_nonzero(~np.isnan(row)) for row in matrix], dtype=float)
    if crossed is not None:  # --cross-seeds: cells that share a seed are not independent
        contrasts = crossed
    elif test == SHARED_TEST:
        values = np.array([column(arm) for arm in arms], dtype=float).reshape(
            len(arms), len(by_seed.index))
        # an arm with an outlying seed keeps its own test: one seed would widen every arm's
        members = pool_members(values, ref) & ~outlier
        keep = ~np.isnan(ref)
        contrasts = shared_contrasts(np.where(members[:, None], values, 0.0)[:, keep],
                                     ref[keep], members, floor_diff=floor_diff,
                                     floor_eq=floor_eq, own=contrasts)
    return contrasts, outlier & ~np.isnan(contrasts.diff), pairs
