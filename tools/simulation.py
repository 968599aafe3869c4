"""The runner's decision procedures on simulated experiments, under the noise real training
shows: the error-rate table of docs/verdicts.md and tests/test_error_rates.py come from here.

A simulated run's metric is ``μ_arm · (1 + u_seed) + spread · e_run``:

- ``u_seed`` ~ N(0, ``shared``²): a seed effect shared by every arm at that seed (a lucky or
  unlucky data order moves all arms together);
- ``e_run``: independent per run, of one of :data:`NOISES`, with mean 0 (so μ_arm is the
  arm's true mean):
  ``gaussian``; ``t3`` (Student t with 3 df, scaled to unit variance); ``lognormal``
  (right-skewed, σ = 0.8, centred and scaled to unit variance); ``diverging`` (a standard
  Gaussian, plus 6 in one run in ten: a seed that lands about 6 s.d. worse, centred).
- ``skewed_arm``: where only one arm (the one at the margin, or the one equal to the
  reference) carries the noise shape and every other run is Gaussian (a component whose
  removal makes training unstable).

Tables: false `equivalent` (:func:`error_rate_table`), false `worse`/`better`/`negligible`
(:func:`false_difference_table`), and the Δ and interval reported after a sequential stop
(:func:`stopped_estimates`).

The procedures are the runner's own functions:
:func:`ablations.results.stats.verdicts.equivalence_tests` (fixed seeds, and ``compare``),
:func:`ablations.results.stats.sequential.sequential_tests` with stopping (``--seeds auto``), on
:class:`ablations.results.stats.contrasts.Contrasts` and the robustness rule.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import special

from ablations.results.stats.contrasts import Contrasts, robust_outliers
from ablations.results.stats.sequential import SeedDesign, sequential_tests
from ablations.results.stats.sequential_table import repeated_interval
from ablations.results.stats.shared_variance import DEFAULT_TEST, array_contrasts
from ablations.results.stats.verdicts import equivalence_tests

NOISES = ("gaussian", "t3", "lognormal", "diverging")
REFERENCE_MEAN = 0.552  # km: the synthetic default's baseline test MAE
SPREAD = 0.017 / np.sqrt(2)  # km per run: paired differences' s.d. 0.017 km, as measured there


def draw_noise(rng: np.random.Generator, shape: tuple[int, ...], noise: str) -> np.ndarray:
    """Per-run noise of mean 0 (unit variance but for ``diverging``: unit s.d. between the
    runs that do not diverge)."""
    if noise == "gaussian":
        return rng.standard_normal(shape)
    if noise == "t3":
        return rng.standard_t(3, shape) / np.sqrt(3.0)
    if noise == "lognormal":
        sigma = 0.8
        mean, var = np.exp(sigma ** 2 / 2), (np.exp(sigma ** 2) - 1) * np.exp(sigma ** 2)
        return (rng.lognormal(0.0, sigma, shape) - mean) / np.sqrt(var)
    if noise == "diverging":
        return rng.standard_normal(shape) + 6.0 * (rng.random(shape) < 0.1) - 0.6
    raise ValueError(f"noise {noise!r}: one of {', '.join(NOISES)}")


def simulate_runs(rng: np.random.Generator, *, experiments: int, seeds: int,
                  ratios: Sequence[float], noise: str = "gaussian", shared: float = 0.0,
                  spread: float | Sequence[float] = SPREAD, skewed_arm: int | None = None,
                  reference_mean: float = REFERENCE_MEAN, seed_effect: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The reference's runs (experiments, seeds) and the arms' (experiments, arms, seeds);
    arm j's true mean is ``ratios[j] · reference_mean``. ``seed_effect``: the shared u
    (experiments, 1, seeds) to use (two experiments of ``compare`` share their seeds')."""
    ratios = np.asarray(ratios, float)
    arms = len(ratios)
    spreads = np.broadcast_to(np.asarray(spread, float), (arms,))
    u = shared * rng.standard_normal((experiments, 1, seeds)) if seed_effect is None \
        else seed_effect
    shape_ref = "gaussian" if skewed_arm is not None else noise
    reference = reference_mean * (1 + u[:, 0]) + spreads.mean() * draw_noise(
        rng, (experiments, seeds), shape_ref)
    e = draw_noise(rng, (experiments, arms, seeds), "gaussian" if skewed_arm is not None
                   else noise)
    if skewed_arm is not None:
        e[:, skewed_arm] = draw_noise(rng, (experiments, seeds), noise)
    values = reference_mean * ratios[:, None] * (1 + u) + spreads[:, None] * e
    return reference, values


def fixed_verdicts(reference: np.ndarray, arms: np.ndarray, *, margin: float, relative: bool,
                   alpha: float = 0.05, robust: bool = True,
                   test: str = DEFAULT_TEST) -> dict[str, np.ndarray]:
    """:func:`ablations.results.stats.verdicts.verdict_table`'s procedure on every simulated
    experiment (``test``: the verdicts' test). ``reference``: (experiments, seeds), or
    (experiments, arms, seeds) for ``compare`` (each variant against its own runs in experiment
    A), which keeps each arm's own paired test."""
    if reference.ndim == arms.ndim:  # compare: its own test
        contrasts = Contrasts.paired(arms, reference)
        outlier = robust_outliers(arms - reference) if robust else None
    else:
        outlier = robust_outliers(arms - reference[..., None, :]) if robust else None
        contrasts = array_contrasts(arms, reference, test=test, floor_diff=alpha,
                                    floor_eq=alpha, eligible=True if outlier is None
                                    else ~outlier)
    return equivalence_tests(contrasts, margin=margin, relative=relative, alpha=alpha,
                             outlier=outlier)


def sequential_verdicts(reference: np.ndarray, arms: np.ndarray, design: SeedDesign, *,
                        margin: float, relative: bool, alpha: float = 0.05,
                        robust: bool = True, test: str = DEFAULT_TEST
                        ) -> dict[str, np.ndarray]:
    """``--seeds auto`` on every simulated experiment, stopping included: at look k the arms
    still running are compared over their first n_k seeds (with the shared-variance ``test``,
    they form the look's pool); an arm that stopped has no values beyond its last look (as in
    the runner). ``reported``: each arm's contrasts at the look its row reports (``last``)."""
    experiments, count, _ = arms.shape
    looks = design.looks
    shape = (experiments, count, len(looks))
    flags = np.zeros(shape, bool)
    seeds_run = np.zeros((experiments, count), dtype=int)
    running = np.ones((experiments, count), bool)
    floors_diff = design.levels(alpha, equivalence=False)
    floors_eq = design.levels(alpha, equivalence=True)
    per_look: list = []
    tests: dict[str, np.ndarray] = {}
    for k, n in enumerate(looks):
        seeds_run = np.where(running, n, seeds_run)
        if robust:
            paired = arms[..., :n] - reference[:, None, :n]
            beyond = np.arange(n)[None, None, :] >= seeds_run[..., None]
            flags[..., k] = robust_outliers(np.where(beyond, np.nan, paired)) & running
        contrasts = array_contrasts(arms[..., :n], reference[:, :n], test=test,
                                    floor_diff=floors_diff[k], floor_eq=floors_eq[k],
                                    eligible=running & ~flags[..., k])
        per_look.append(contrasts.map(lambda values: np.where(running, values, np.nan)))
        # the looks not reached yet: no comparison (NaN), as the runner has them
        pending = [per_look[0].map(lambda values: np.full(values.shape, np.nan))] * (
            len(looks) - k - 1)
        joined = type(contrasts).join([*per_look, *pending])
        tests = sequential_tests(joined, design=design, margin=margin,
                                 relative=relative, alpha=alpha, outlier=flags)
        running = tests["decided"] < 0
    reported = joined.take((*np.indices(tests["last"].shape), tests["last"]))
    return {**tests, "seeds": seeds_run, "reference_seeds": seeds_run.max(axis=-1),
            "reported": reported}


# --------------------------------------------------------------------- the error-rate table

MARGIN = 0.05  # "5%": tested as a ratio
DESIGNS = (("fixed", 3), ("fixed", 5), ("fixed", 10), ("auto", 5), ("auto", 10),
           ("compare", 3), ("compare", 5), ("compare", 10))
SHARED = (0.0, 0.1)  # the seed effect shared by the arms: none, or 10% of the mean
TIGHT = 0.003 / np.sqrt(2)  # km per run: paired s.d. 0.003 km, a ninth of the 5% margin


def simulated_verdicts(rng: np.random.Generator, kind: str, seeds: int, *,
                       ratios: np.ndarray, noise: str, shared: float, experiments: int,
                       unstable: bool = False, alpha: float = 0.05,
                       spread: float = SPREAD) -> dict[str, np.ndarray]:
    """The verdicts of arms at ``ratios`` x the reference's mean under one of the
    :data:`DESIGNS` (:func:`false_equivalence` says what ``kind`` and ``spread`` do);
    ``unstable``: only the last arm's runs carry ``noise``, every other run is Gaussian."""
    skewed = len(ratios) - 1 if unstable else None
    if kind == "compare":
        u = shared * rng.standard_normal((experiments, 1, seeds))
        _, a = simulate_runs(rng, experiments=experiments, seeds=seeds,
                             ratios=np.ones(len(ratios)), noise=noise, seed_effect=u,
                             skewed_arm=skewed, spread=spread)
        _, b = simulate_runs(rng, experiments=experiments, seeds=seeds, ratios=ratios,
                             noise=noise, seed_effect=u, skewed_arm=skewed, spread=spread)
        return fixed_verdicts(a, b, margin=MARGIN, relative=True, alpha=alpha)
    reference, arms = simulate_runs(rng, experiments=experiments, seeds=seeds, ratios=ratios,
                                    noise=noise, shared=shared, skewed_arm=skewed,
                                    spread=spread)
    if kind == "fixed":
        return fixed_verdicts(reference, arms, margin=MARGIN, relative=True, alpha=alpha)
    design = SeedDesign.plan(3, seeds)
    return sequential_verdicts(reference, arms, design, margin=MARGIN, relative=True,
                               alpha=alpha)


def false_difference(kind: str, seeds: int, *, noise: str, experiments: int, seed: int,
                     unstable: bool = False, others: float = 1.0,
                     alpha: float = 0.05) -> dict[str, float]:
    """Eight arms, the last equal to the reference, the other seven at ``others`` x its mean
    (every run with ``noise``; ``unstable``: only the last arm's runs, the rest Gaussian): the
    share of experiments that call any arm equal to the reference `worse`, `better` or
    `negligible` (``any``: the family-wise error), and the last arm's false `worse`, `better`
    and `negligible` (lower is better). ``others`` = 1.5: the seven are `worse` from the pilot
    on, so the last arm is tested at Holm's last step, at the full α (the hardest case). A seed
    effect shared by the arms cancels in the seed-paired Δ of equal arms, so none is drawn;
    the spread does not matter."""
    rng = np.random.default_rng(seed)
    ratios = np.r_[np.full(7, others), 1.0]
    verdicts = simulated_verdicts(rng, kind, seeds, ratios=ratios, noise=noise,
                                  shared=0.0, unstable=unstable, experiments=experiments,
                                  alpha=alpha)
    last = verdicts["verdict"][:, 7]
    return {"any": float(verdicts["significant"][:, ratios == 1.0].any(axis=-1).mean()),
            **{verdict: float((last == verdict).mean())
               for verdict in ("worse", "better", "negligible")}}


def false_equivalence(kind: str, seeds: int, *, noise: str, shared: float, sign: int,
                      experiments: int, seed: int, unstable: bool = False,
                      alpha: float = 0.05, spread: float = SPREAD) -> float:
    """The share of experiments that call the arm at ``sign`` x the margin `equivalent` (or
    `negligible`): eight arms, seven equal to the reference, one whose mean is (1 ± 5%) of it;
    every run with the noise ``noise`` (``unstable``: only that arm's runs, the rest Gaussian).

    ``kind``: ``fixed`` (``seeds`` seeds, verdict_table's procedure), ``auto`` (``--seeds auto``
    with a pilot of 3 and ``seeds`` at most), ``compare`` (each variant of experiment B against
    the same variant of experiment A at ``seeds`` shared seeds; the seed effect shared by A and
    B). ``spread``: each run's s.d. (km); :data:`TIGHT` makes
    the seven equal arms clear Holm's way from 3-5 seeds on, the hardest case for the eighth.
    """
    rng = np.random.default_rng(seed)
    verdicts = simulated_verdicts(rng, kind, seeds, ratios=np.r_[np.ones(7), 1 + sign * MARGIN],
                                  noise=noise, shared=shared, unstable=unstable,
                                  experiments=experiments, alpha=alpha, spread=spread)
    return float(verdicts["equivalent"][:, 7].mean())


def error_rate_table(experiments: int = 4000, *, unstable: bool = False,
                     alpha: float = 0.05, spread: float = SPREAD) -> pd.DataFrame:
    """Rows: noise shape x shared seed effect; columns: the :data:`DESIGNS`; each cell the
    larger false-`equivalent` rate of the arm at +5% and at −5% over ``experiments``
    simulated experiments (seeded: the same table every time)."""
    rows = []
    for n, noise in enumerate(NOISES):
        for s, shared in enumerate(SHARED):
            row = {"noise": noise, "shared": shared}
            for d, (kind, seeds) in enumerate(DESIGNS):
                row[f"{kind} {seeds}"] = max(
                    false_equivalence(kind, seeds, noise=noise, shared=shared, sign=sign,
                                      experiments=experiments, unstable=unstable, alpha=alpha,
                                      spread=spread,
                                      seed=1000 * n + 100 * s + 10 * d + (sign > 0)
                                      + 50000 * unstable)
                    for sign in (1, -1))
            rows.append(row)
    return pd.DataFrame(rows)


def false_difference_table(experiments: int = 4000, *, others: float = 1.0) -> pd.DataFrame:
    """Rows: noise shape, carried by every run or by the variant alone (``variant only``);
    columns: the :data:`DESIGNS`; each cell :func:`false_difference`'s family-wise rate of a
    false `worse`/`better`/`negligible` (seeded: the same table every time), and for the
    variant-only rows a ``better:`` column set with that arm's false `better` alone."""
    rows = []
    for unstable in (False, True):
        for n, noise in enumerate(NOISES):
            row: dict[str, object] = {"noise": noise,
                                      "carried by": "variant only" if unstable else "every run"}
            for d, (kind, seeds) in enumerate(DESIGNS):
                rates = false_difference(kind, seeds, noise=noise, experiments=experiments,
                                         unstable=unstable, others=others,
                                         seed=8000 + 100 * n + 10 * d + 5000 * unstable
                                         + 20000 * (others != 1.0))
                row[f"{kind} {seeds}"] = rates["any"]
                row[f"better: {kind} {seeds}"] = rates["better"]
            rows.append(row)
    return pd.DataFrame(rows)


def _print_markdown(table: pd.DataFrame) -> None:
    print("| " + " | ".join(table.columns) + " |\n|" + "---|" * len(table.columns))
    for row in table.itertuples(index=False):
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row)
              + " |")


def stopped_estimates(ratio: float, *, experiments: int, seed: int, spread: float = SPREAD,
                      alpha: float = 0.05) -> dict[str, float]:
    """Δ and its interval as ``--seeds auto`` reports them for an arm that stopped: eight arms
    at ``ratio`` x the reference's mean, Gaussian noise, looks at 3, 5, 7, 10 seeds. Per arm:
    whether the repeated interval
    (:func:`ablations.results.stats.sequential_table.repeated_interval`, what the table reports) and
    the unadjusted 1 − α t interval at the reported look cover the true Δ; the mean reported Δ (as a
    share of the reference's mean) of the arms stopped as `worse`; the share of arms `inconclusive`
    beside an interval that excludes 0."""
    rng = np.random.default_rng(seed)
    design = SeedDesign.plan(3, 10)
    reference, arms = simulate_runs(rng, experiments=experiments, seeds=design.max_seeds,
                                    ratios=np.full(8, ratio), spread=spread)
    verdicts = sequential_verdicts(reference, arms, design, margin=MARGIN, relative=True,
                                   alpha=alpha)
    reported = verdicts["reported"]
    truth = (ratio - 1) * REFERENCE_MEAN
    low, high = repeated_interval(reported, verdicts["last"], design=design, alpha=alpha)
    half = special.stdtrit(reported.df, 1 - alpha / 2) * reported.se
    naive_low, naive_high = reported.diff - half, reported.diff + half
    worse = verdicts["verdict"] == "worse"
    inconclusive = verdicts["verdict"] == "inconclusive"
    return {
        "repeated coverage": float(((low <= truth) & (truth <= high)).mean()),
        "unadjusted coverage": float(((naive_low <= truth) & (truth <= naive_high)).mean()),
        "worse": float(worse.mean()),
        "Δ of worse (%)": float(100 * reported.diff[worse].mean() / REFERENCE_MEAN)
        if worse.any() else float("nan"),
        "inconclusive, repeated excludes 0": float((inconclusive & ((low > 0) | (high < 0)))
                                                   .mean()),
        "inconclusive, unadjusted excludes 0": float(
            (inconclusive & ((naive_low > 0) | (naive_high < 0))).mean()),
    }


def main() -> None:
    """``python -m tools.simulation [EXPERIMENTS]``: the tables of docs/verdicts.md (false
    differences first, then false `equivalent`); ``python -m tools.simulation differences
    [EXPERIMENTS]``: the false differences only; ``python -m tools.simulation estimates
    [EXPERIMENTS]``: Δ after a sequential stop."""
    if sys.argv[1:2] == ["estimates"]:
        experiments = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
        print(f"Δ after a sequential stop, {experiments} experiments x 8 arms a row, looks "
              "3, 5, 7, 10, Gaussian noise\n")
        rows = [{"paired s.d. (km)": round(spread * np.sqrt(2), 3), "true Δ": f"{r - 1:+.0%}",
                 **stopped_estimates(r, experiments=experiments, seed=10 * w + i,
                                     spread=spread)}
                for w, spread in enumerate((SPREAD, TIGHT))
                for i, r in enumerate((1.0, 1.02, 1.05))]
        _print_markdown(pd.DataFrame(rows))
        return
    differences_only = sys.argv[1:2] == ["differences"]
    if differences_only:
        sys.argv.pop(1)
    experiments = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    bound = 0.05 + 3 * np.sqrt(0.05 * 0.95 / experiments)
    for others, title in ((1.0, "eight arms equal to the reference"),
                          (1.5, "one arm equal to the reference, seven at 1.5x its mean "
                                "(Holm's last step, at the full alpha)")):
        table = false_difference_table(experiments, others=others)
        print(f"\nFalse `worse`/`better`/`negligible`, {title}, {experiments} experiments per "
              f"cell; alpha + 3 MC s.e. = {bound:.3f}; `better:` the variant-only arm's false "
              f"`better` alone (alpha/2 = 0.025 when it is the last step)\n")
        _print_markdown(table[[c for c in table.columns if not c.startswith("better:")]])
        print()
        _print_markdown(table.loc[table["carried by"] == "variant only",
                                  ["noise", *[c for c in table.columns
                                              if c.startswith("better:")]]])
    if differences_only:
        return
    for unstable, spread in ((False, SPREAD), (False, TIGHT), (True, SPREAD), (True, TIGHT)):
        table = error_rate_table(experiments, unstable=unstable, spread=spread)
        title = ("only the arm at the margin carries the noise (an unstable variant)"
                 if unstable else "every run carries the noise")
        print(f"\nFalse `equivalent` at ±5%, {experiments} experiments per cell, {title}, "
              f"paired s.d. {spread * np.sqrt(2):.3f} km; alpha + 3 MC s.e. = {bound:.3f}\n")
        header = list(table.columns)
        print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for row in table.itertuples(index=False):
            print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) and k > 1 else str(v)
                                    for k, v in enumerate(row)) + " |")


if __name__ == "__main__":
    main()
