"""Seeds where they decide something: the sequential design of ``--seeds auto``.

The procedure (the README's "Verdicts" section words it for citing):

1. A pilot of ``n_1`` seeds for every arm, then looks at ``n_2 < n_3 < ... <= max_seeds``
   seeds (:meth:`SeedDesign.plan`: doubling, capped at ``--max-seeds``: 3, 6, 10 by default).
   The looks are fixed before any trial runs.
2. At look k, each arm still running has the seed-paired t statistics of its first ``n_k``
   seeds against the reference (which runs every seed any arm runs). An arm's two-sided
   p-value at look k counts as ``p_k / f_k`` and its TOST p-value as ``p_k / g_k``: the
   family-wise α is split across the planned looks in fixed shares ``f`` (differences) and
   ``g`` (equivalence), each summing to 1 (Bonferroni over looks, the most conservative
   alpha-spending rule, valid for any dependence between looks). An arm's sequential p-value
   is the smallest over the looks it reached.
3. Holm over the arms, separately for `worse`/`better` and for `equivalent`, on the sequential
   p-values; the verdict is :func:`results.analysis.verdict_table`'s rule on them.
4. An arm with a verdict stops; the others get the next look's seeds. The experiment ends when
   every arm has a verdict or has run ``max_seeds`` seeds.

Why the error rates hold with the stopping included: for an arm whose true difference is 0,
``P(p_k <= a f_k) = a f_k`` at each planned look (a t test at a fixed number of seeds), so the
event "its sequential p-value is below a" has probability at most ``sum_k a f_k = a`` whether or
not the arm was stopped, and whether or not the other arms were (an arm that stopped contributes
fewer looks: a subset of that event). The sequential p-values are therefore valid p-values, and
Holm over valid p-values controls the family-wise error under any dependence (the arms share
the reference's seeds). The same holds for TOST at a true difference of ± the margin.
``tests/test_sequential.py`` checks both by simulating this exact procedure, stopping
included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from results.analysis import (
    DEFAULT_ALPHA,
    DEFAULT_MARGIN,
    _t_cdf,
    _tost_p,
    ablation_table,
    holm,
    holm_bound,
    metric_direction,
    parse_margin,
    usable_trials,
)

DEFAULT_MAX_SEEDS = 10
# Share of α for `worse`/`better` spent at the pilot; the rest goes to the later looks in
# proportion to the seeds each adds. The pilot decides the large effects (3 seeds and df = 2
# need a small p); later looks mostly decide equivalence.
PILOT_DIFF_SHARE = 0.5


@dataclass(frozen=True)
class SeedDesign:
    """Planned looks (seeds per arm at each) and the share of α spent at each."""

    looks: tuple[int, ...]  # e.g. (3, 6, 10)
    diff_spend: tuple[float, ...]  # `worse`/`better`: shares of α per look, summing to 1
    eq_spend: tuple[float, ...]  # `equivalent`: the same for TOST

    @classmethod
    def plan(cls, pilot: int, max_seeds: int = DEFAULT_MAX_SEEDS) -> SeedDesign:
        """Looks at ``pilot`` seeds, then doubling up to ``max_seeds`` (3 and 10: 3, 6, 10).

        α for `worse`/`better`: :data:`PILOT_DIFF_SHARE` at the pilot, the rest in proportion
        to the seeds each later look adds. α for `equivalent`: the power spending function
        α·(n_k / max_seeds)² (Kim and DeMets 1987, ρ = 2): little at the pilot, where 2
        degrees of freedom can rarely show equivalence, most at the last look.

        Raises:
            ValueError: a pilot below 2 seeds (no t test) or ``max_seeds`` below the pilot.
        """
        if pilot < 2:
            raise ValueError(f"a pilot of {pilot} seed(s): at least 2 are needed for a t test")
        if max_seeds < pilot:
            raise ValueError(f"max_seeds {max_seeds} is below the pilot's {pilot} seeds")
        looks = [pilot]
        while looks[-1] < max_seeds:
            looks.append(min(max_seeds, 2 * looks[-1]))
        added = np.diff([0, *looks]).astype(float)
        eq = np.diff([0.0, *((np.array(looks) / max_seeds) ** 2)])
        if len(looks) == 1:
            diff = np.array([1.0])
        else:
            later = added[1:] / added[1:].sum()
            diff = np.array([PILOT_DIFF_SHARE, *((1 - PILOT_DIFF_SHARE) * later)])
        return cls(tuple(looks), tuple(float(x) for x in diff), tuple(float(x) for x in eq))

    @classmethod
    def fixed(cls, seeds: int) -> SeedDesign:
        """One look: the fixed design (what ``verdict_table`` tests)."""
        return cls((seeds,), (1.0,), (1.0,))

    def to_dict(self) -> dict[str, Any]:
        return {"looks": list(self.looks), "diff_spend": list(self.diff_spend),
                "eq_spend": list(self.eq_spend)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> SeedDesign:
        return cls(tuple(int(n) for n in values["looks"]),
                   tuple(float(x) for x in values["diff_spend"]),
                   tuple(float(x) for x in values["eq_spend"]))

    @property
    def max_seeds(self) -> int:
        return self.looks[-1]


def sequential_tests(diff: np.ndarray, se: np.ndarray, df: np.ndarray, *, design: SeedDesign,
                     margin: float | np.ndarray, alpha: float = DEFAULT_ALPHA,
                     direction: int = -1) -> dict[str, np.ndarray]:
    """Verdicts of the sequential design from each arm's t statistics at each look.

    Args:
        diff, se, df: arrays of shape (..., arms, looks): the mean seed-paired difference to
            the reference over the arm's first ``design.looks[k]`` seeds, its standard error
            and degrees of freedom; NaN ``diff`` where the arm did not reach the look (it had
            stopped). Leading axes are independent experiments (the simulation's).
        design: the planned looks and α shares.
        margin: the equivalence margin in the metric's units (a scalar, or one per experiment
            of shape (..., 1)).
        alpha: family-wise error rate of each kind of verdict.
        direction: +1 if higher is better, -1 if lower is, 0 if neither.

    Returns:
        Arrays of shape (..., arms): ``p_seq`` and ``p_tost_seq`` (the sequential p-values:
        min over reached looks of p / share), ``p_holm`` and ``p_tost_holm`` (Holm over the
        arms), ``significant``, ``equivalent``, ``verdict``, ``equivalence_bound_holm`` (the
        smallest margin at which this procedure would have declared the arm equivalent) and
        ``looks`` (how many looks the arm reached).
    """
    diff, se, df = (np.asarray(a, dtype=float) for a in (diff, se, df))
    if diff.shape[-1] != len(design.looks):
        raise ValueError(f"{diff.shape[-1]} looks given, the design plans {len(design.looks)}")
    f = np.asarray(design.diff_spend)
    g = np.asarray(design.eq_spend)
    margin = np.asarray(margin, dtype=float)[..., None]  # broadcast over looks
    # se = 0 (every paired difference equal, e.g. a no-op under deterministic training) is a
    # look, as in verdict_table: Δ = 0 gives no difference test and TOST p = 0, Δ ≠ 0 p = 0.
    looked = ~np.isnan(diff) & ~np.isnan(se)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * _t_cdf(-np.abs(diff) / se, df)
        p_tost = _tost_p(diff, se, df, margin)
        tested, tested_tost = looked & ~np.isnan(p), looked & ~np.isnan(p_tost)
        scaled = np.where(tested, p / f, np.inf)
        scaled_tost = np.where(tested_tost & (g > 0), p_tost / g, np.inf)
    valid = looked.any(axis=-1)
    p_seq = np.where(tested.any(axis=-1), np.minimum(scaled.min(axis=-1), 1.0), np.nan)
    p_tost_seq = np.where(tested_tost.any(axis=-1),
                          np.minimum(scaled_tost.min(axis=-1), 1.0), np.nan)
    p_holm, p_tost_holm = holm(p_seq), holm(p_tost_seq)
    significant = p_holm < alpha
    equivalent = p_tost_holm < alpha
    # the sign of the look that decided (the smallest scaled p)
    deciding = np.take_along_axis(np.where(looked, diff, 0.0),
                                  scaled.argmin(axis=-1)[..., None], axis=-1)[..., 0]
    worse, better = ("worse", "better") if direction else ("higher", "lower")
    up = deciding > 0 if direction <= 0 else deciding < 0
    verdict = np.where(equivalent, "equivalent", "inconclusive").astype(object)
    verdict[significant] = np.where(up, worse, better)[significant]
    verdict[significant & equivalent] = "negligible"

    # Holm's equivalence bound: comparison j passes Holm's step s at margin m when some look k
    # has |Δ_jk| + t(1 - level_s g_k)·se_jk < m.
    arms = diff.shape[-2]
    k = valid.sum(axis=-1, keepdims=True)  # (..., 1)
    level = alpha / np.maximum(k - np.arange(arms) , 1)  # (..., S): step s+1's level
    with np.errstate(divide="ignore", invalid="ignore"):
        per_look = np.abs(diff)[..., :, None, :] + special.stdtrit(
            df[..., :, None, :], 1 - level[..., None, :, None] * g) * se[..., :, None, :]
    per_look = np.where(looked[..., :, None, :] & (g > 0), per_look, np.inf)
    bound = holm_bound(per_look.min(axis=-1), valid)  # (..., arms, S) -> (..., arms)
    return {"p_seq": p_seq, "p_tost_seq": p_tost_seq, "p_holm": p_holm,
            "p_tost_holm": p_tost_holm, "significant": significant, "equivalent": equivalent,
            "verdict": verdict, "equivalence_bound_holm": bound,
            "looks": looked.sum(axis=-1)}


def look_statistics(trials: pd.DataFrame, design: SeedDesign, seeds: Sequence[int], *,
                    reference: str, metric: str) -> tuple[list[str], np.ndarray, np.ndarray,
                                                          np.ndarray]:
    """Per arm (every variant but ``reference``) and look: the seed-paired difference, its
    standard error and df over the arm's trials among the look's seeds (``seeds[:n_k]``, the
    experiment's seed order). An arm reached look k when it has a trial (of any status) among
    the seeds that look added; NaN where it did not."""
    arms = [a for a in dict.fromkeys(trials["ablation"]) if a != reference]
    shape = (len(arms), len(design.looks))
    diff, se, df = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    previous = 0
    for k, n in enumerate(design.looks):
        added = set(seeds[previous:n])
        previous = n
        subset = trials[trials["seed"].isin(seeds[:n])]
        if subset.empty or reference not in set(subset["ablation"]):
            continue
        table = ablation_table(subset, metric=metric, reference=reference).set_index("ablation")
        for j, arm in enumerate(arms):
            mine = trials[(trials["ablation"] == arm) & trials["seed"].isin(added)]
            if mine.empty or arm not in table.index:
                continue
            diff[j, k], se[j, k], df[j, k] = table.loc[arm, ["diff_mean", "se", "df"]]
    return arms, diff, se, df


def sequential_verdict_table(trials: pd.DataFrame, design: SeedDesign, seeds: Sequence[int], *,
                             reference: str = "baseline", metric: str = "test_mae",
                             margin: str | float = DEFAULT_MARGIN,
                             alpha: float = DEFAULT_ALPHA) -> pd.DataFrame:
    """:func:`results.analysis.verdict_table` for an experiment run with ``--seeds auto``:
    the same columns (descriptive ones over all the arm's seeds), with ``p_holm``,
    ``p_tost_holm``, ``significant``, ``equivalent``, ``verdict`` and
    ``equivalence_bound_holm`` from the sequential design (module docstring), plus ``p_seq``,
    ``p_tost_seq`` and ``looks``. ``seeds``: the experiment's seed order (experiment.json's
    ``sequential.seeds``). A relative margin (``"5%"``) is of the reference's mean over the
    pilot's seeds, so it stays the same from look to look."""
    from results.analysis import verdict_table

    seeds = list(seeds)
    value, relative = parse_margin(margin)
    if relative:  # fixed after the pilot: every look tests the same hypotheses
        usable, _ = usable_trials(trials, metric)
        pilot = usable[(usable["ablation"] == reference)
                       & usable["seed"].isin(seeds[:design.looks[0]])][metric]
        if pilot.empty:
            raise ValueError(f"reference {reference!r} has no ok trial in the pilot: no "
                             "relative margin")
        absolute = value * abs(float(pilot.mean()))
    else:
        absolute = value
    table = verdict_table(trials, reference=reference, metric=metric, margin=absolute,
                          alpha=alpha)
    if relative:
        table.attrs.update(margin_given=str(margin), reference_mean=float(pilot.mean()),
                           margin_of="the pilot's")
    arms, diff, se, df = look_statistics(trials, design, seeds, reference=reference,
                                         metric=metric)
    tests = sequential_tests(diff, se, df, design=design, margin=table.attrs["margin"],
                             alpha=alpha, direction=metric_direction(metric))
    position = {arm: i for i, arm in enumerate(arms)}
    rows = table["ablation"].map(position)
    compared = rows.notna().to_numpy()
    index = rows[compared].astype(int).to_numpy()
    for column in ("p_holm", "p_tost_holm", "equivalence_bound_holm", "p_seq", "p_tost_seq",
                   "looks", "verdict", "significant", "equivalent"):
        values = tests[column][index]
        if column not in table:
            table[column] = np.nan if column != "verdict" else None
        if column in ("significant", "equivalent"):
            table[column] = table[column].astype(object)
        table.loc[compared, column] = values
    for column in ("significant", "equivalent"):
        table[column] = table[column].astype("boolean")
    table.attrs.update(design=design.to_dict(), seeds=list(seeds))
    return table


def active_arms(table: pd.DataFrame) -> list[str]:
    """The arms of :func:`sequential_verdict_table` still without a verdict."""
    return table.loc[table["verdict"] == "inconclusive", "ablation"].tolist()



def simulate(design: SeedDesign, delta: Sequence[float], sd: Sequence[float], *,
             reference_sd: float, experiments: int, margin: float,
             alpha: float = DEFAULT_ALPHA, noise: str = "gaussian", direction: int = -1,
             rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """Run the sequential procedure on simulated experiments, stopping included.

    Each experiment draws, for every seed up to ``design.max_seeds``, the reference's value
    ``reference_sd * e_0`` and arm j's ``delta[j] + sd[j] * e_j`` (e: standard Gaussian, or t
    with 3 df scaled to unit variance for ``noise="t3"``); arm j's paired differences share the
    reference's noise, as the runner's do. At each look the arms still running get
    :func:`sequential_tests` on their first ``n_k`` differences; an arm with a verdict stops.

    Returns:
        ``verdict`` (experiments, arms) at the end, ``seeds`` (experiments, arms): seeds each
        arm ran, ``reference_seeds`` (experiments,): seeds the reference ran.
    """
    rng = rng or np.random.default_rng(0)
    delta, sd = np.asarray(delta, dtype=float), np.asarray(sd, dtype=float)
    arms, looks = len(delta), design.looks

    def draw(shape: tuple[int, ...]) -> np.ndarray:
        if noise == "gaussian":
            return rng.standard_normal(shape)
        if noise == "t3":
            return rng.standard_t(3, shape) / np.sqrt(3.0)  # unit variance
        raise ValueError(f"noise {noise!r}: gaussian or t3")

    reference = reference_sd * draw((experiments, 1, design.max_seeds))
    values = delta[:, None] + sd[:, None] * draw((experiments, arms, design.max_seeds))
    paired = values - reference  # (experiments, arms, seeds)
    shape = (experiments, arms, len(looks))
    diff, se, df = np.full(shape, np.nan), np.full(shape, np.nan), np.full(shape, np.nan)
    running = np.ones((experiments, arms), dtype=bool)
    seeds = np.zeros((experiments, arms), dtype=int)
    tests: dict[str, np.ndarray] = {}
    for k, n in enumerate(looks):
        d = paired[..., :n]
        diff[..., k] = np.where(running, d.mean(axis=-1), np.nan)
        se[..., k] = np.where(running, d.std(axis=-1, ddof=1) / np.sqrt(n), np.nan)
        df[..., k] = np.where(running, n - 1, np.nan)
        seeds = np.where(running, n, seeds)
        tests = sequential_tests(diff, se, df, design=design, margin=margin, alpha=alpha,
                                 direction=direction)
        running &= tests["verdict"] == "inconclusive"
    return {"verdict": tests["verdict"], "seeds": seeds, "reference_seeds": seeds.max(axis=-1)}


def compute_spent(trials: pd.DataFrame, max_seeds: int) -> pd.DataFrame:
    """Per variant: the trials it ran (skipped cells not counted), the rounds they took, the
    CPU- and GPU-hours they held, and what a fixed design of ``max_seeds`` seeds for every
    variant would have held (the variant's mean per trial times ``max_seeds``: an estimate
    for the seeds it did not run)."""
    rows = []
    for arm, group in trials.groupby("ablation", sort=False):
        ran = group[group["status"] != "skipped"]
        n = len(ran)
        mean = ran[["cpu_hours", "gpu_hours"]].mean() if n else pd.Series(
            {"cpu_hours": 0.0, "gpu_hours": 0.0})
        rows.append({
            "ablation": arm, "trials": n,
            "rounds": int(ran["round"].max()) if n and "round" in ran else 0,
            "cpu_hours": float(ran["cpu_hours"].sum()),
            "gpu_hours": float(ran["gpu_hours"].sum()),
            "fixed_trials": max_seeds if n else 0,
            "fixed_cpu_hours": float(mean["cpu_hours"]) * max_seeds if n else 0.0,
            "fixed_gpu_hours": float(mean["gpu_hours"]) * max_seeds if n else 0.0,
        })
    return pd.DataFrame(rows)


def compute_note(spent: pd.DataFrame) -> str:
    """One line: what :func:`compute_spent`'s table adds up to, against the fixed design."""
    trials, fixed = int(spent["trials"].sum()), int(spent["fixed_trials"].sum())
    cpu, fixed_cpu = spent["cpu_hours"].sum(), spent["fixed_cpu_hours"].sum()
    gpu, fixed_gpu = spent["gpu_hours"].sum(), spent["fixed_gpu_hours"].sum()
    hours = (f"{gpu:.3g} GPU-hours (fixed: ~{fixed_gpu:.3g})" if fixed_gpu > 0 else
             f"{cpu:.3g} CPU-hours (fixed: ~{fixed_cpu:.3g})")
    share = f"{trials / fixed:.0%} of the trials" if fixed else "no trials"
    return (f"Compute spent: {trials} trials, {hours}; a fixed design at "
            f"{int(spent['fixed_trials'].max())} seeds for every variant: {fixed} trials "
            f"({share}).")


def design_note(design: SeedDesign, alpha: float = DEFAULT_ALPHA) -> str:
    """One line saying how ``--seeds auto`` decided: the looks and the α each spent."""
    def shares(values: Sequence[float]) -> str:
        return "/".join(f"{v:.0%}" for v in values)

    looks = ", ".join(str(n) for n in design.looks)
    return (f"Seeds added in rounds (--seeds auto): looks at {looks} seeds per variant; alpha "
            f"{alpha:g} split across the looks (worse/better {shares(design.diff_spend)}, "
            f"equivalent {shares(design.eq_spend)}); a variant stops at its first verdict.")


def experiment_verdicts(directory: str, trials: pd.DataFrame | None = None, *,
                        reference: str | None = None, metric: str | None = None,
                        margin: str | float | None = None,
                        alpha: float | None = None) -> pd.DataFrame:
    """The verdict table of the experiment in ``directory`` as its design decided them:
    :func:`sequential_verdict_table` for a ``--seeds auto`` run (experiment.json's
    ``sequential``), else :func:`results.analysis.verdict_table`. Arguments left None are
    the experiment's (its reference; the metric, margin and α a ``--seeds auto`` run decided
    on), else baseline, test_mae, 5%, 0.05. ``trials``: its trials.parquet if loaded."""
    from results.analysis import verdict_table
    from results.io import read_experiment, read_metadata

    if trials is None:
        trials = read_experiment(directory)["trials"]
    meta = read_metadata(directory) or {}
    record = meta.get("sequential")
    reference = reference or meta.get("reference") or "baseline"
    metric = metric or (record or {}).get("metric") or "test_mae"
    margin = margin if margin is not None else (record or {}).get("margin", DEFAULT_MARGIN)
    alpha = alpha if alpha is not None else float((record or {}).get("alpha", DEFAULT_ALPHA))
    if record:
        return sequential_verdict_table(trials, SeedDesign.from_dict(record["design"]),
                                        record["seeds"], reference=reference, metric=metric,
                                        margin=margin, alpha=alpha)
    return verdict_table(trials, reference=reference, metric=metric, margin=margin, alpha=alpha)
