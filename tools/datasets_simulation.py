"""The error rates of the verdicts across datasets, simulated on the runner's own functions:
the table of docs/datasets.md ("Error rates across datasets") and tests/test_datasets_stats.py.

A simulated experiment is a trials table as trials.parquet holds it (``dataset``, ``ablation``,
``seed``, ``status``, ``test_mae``): a reference ``baseline`` and :data:`VARIANTS` variants on
each of five datasets of their own scale (:data:`MEANS`: a ratio has no unit, so km and kelvin
pool). A run's metric is ``mean_d · exp(θ_dv) · (1 + u_ds) · (1 + 0.05 e)``:

- ``θ_dv``: the variant's true log ratio on dataset d, ``μ_v + N(0, τ²)`` (τ: the
  between-dataset heterogeneity; 0 for the reference);
- ``u_ds`` ~ N(0, 0.05²): a seed effect shared by every arm at that seed of that dataset;
- ``e``: per run, mean 0 and variance 1: ``gaussian``, ``lognormal`` (right-skewed,
  :func:`tools.simulation.draw_noise`'s) or ``diverged`` (Gaussian, and each run diverges with
  probability 0.1 in every arm alike: status ``diverged``, metric NaN; the null of failures);
  ``tight``: Gaussian at 1% instead of 5%, where the null arms are `equivalent` across
  datasets and clear Holm's way, so the arm at the margin is tested at the full α (Holm's
  hardest case for a false `equivalent`).

The verdicts are what the runner computes:
:func:`ablations.results.stats.decisions.dataset_verdicts_of` on each dataset (at full α, meta
without ``planned``) and :func:`ablations.results.stats.decisions.across_datasets_of` on the first k
datasets. The 3-seed experiment is the 5-seed one's first three seeds and k datasets are the first k
of five, so the cells of one scenario share draws (each cell's Monte-Carlo error is its own).

``python -m tools.datasets_simulation [REPS]`` prints the table (REPS experiments per null
and margin scenario, a quarter of them at a ratio of 1.2; 6 s a rep on one core: the default,
80, takes about 8 minutes). ``python -m tools.datasets_simulation caveat [REPS]`` prints the
'on average' caveat's table (:func:`caveat_table`: REPS null experiments of 5 seeds per noise
and τ; about 10 s a rep on one core, the default 100 about 17 minutes).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd

from ablations.results.stats.datasets import NEW_SHARE, share_beyond
from ablations.results.stats.decisions import across_datasets_of, dataset_verdicts_of
from tools.simulation import draw_noise

MEANS = (0.5, 1.2, 3.0, 10.0, 40.0)  # each dataset's reference mean, in its own units
VARIANTS = 4  # arms besides the reference
RELATIVE_NOISE = 0.05  # s.d. of a run's own noise, as a share of its mean
SEED_EFFECT = 0.05  # s.d. of the seed effect every arm shares, as a share of the mean
DIVERGE = 0.1  # the chance a run diverges (``diverged`` noise), in every arm alike
MARGIN, ALPHA = 0.05, 0.05
NOISES = ("gaussian", "lognormal", "diverged", "tight")
TIGHT_NOISE = 0.01  # the ``tight`` noise's relative s.d.
TAUS = (0.0, 0.02)
DATASETS = (2, 3, 5)
SEEDS = (3, 5)
META = {"reference": "baseline"}  # no ``planned``: each dataset's verdicts at full α
SETTINGS = {"reference": "baseline", "metric": "test_mae", "margin": f"{MARGIN:.0%}",
            "alpha": ALPHA}
DIFFERENCE = ("worse", "better", "negligible")  # claims of a difference
WITHIN = ("equivalent", "negligible")  # claims that the ratio lies within the margin

# a scenario's true pooled log ratio μ per variant
KINDS = {"null": [0.0] * VARIANTS,
         "margin": [np.log1p(MARGIN)] + [0.0] * (VARIANTS - 1),
         "ratio 1.2": [np.log(1.2)] + [0.0] * (VARIANTS - 1)}


def simulate_trials(rng: np.random.Generator, *, mu: np.ndarray, tau: float, noise: str,
                    datasets: int = len(MEANS), seeds: int = max(SEEDS)
                    ) -> tuple[pd.DataFrame, np.ndarray]:
    """One experiment's trials table and the true log ratios θ (datasets, variants)."""
    arms = ["baseline"] + [f"variant_{j}" for j in range(len(mu))]
    theta = np.asarray(mu, float)[None, :] + tau * rng.standard_normal((datasets, len(mu)))
    log_ratio = np.concatenate([np.zeros((datasets, 1)), theta], axis=1)  # (d, arms)
    means = np.asarray(MEANS[:datasets], float)[:, None, None] * np.exp(log_ratio)[:, :, None]
    u = SEED_EFFECT * rng.standard_normal((datasets, 1, seeds))
    e = draw_noise(rng, (datasets, len(arms), seeds),
                   "lognormal" if noise == "lognormal" else "gaussian")
    spread = TIGHT_NOISE if noise == "tight" else RELATIVE_NOISE
    values = means * (1 + u) * (1 + spread * e)  # (datasets, arms, seeds)
    diverged = np.zeros(values.shape, bool)
    if noise == "diverged":
        diverged = rng.random(values.shape) < DIVERGE
    d, a, s = np.meshgrid(np.arange(datasets), np.arange(len(arms)), np.arange(seeds),
                          indexing="ij")
    trials = pd.DataFrame({
        "dataset": np.asarray([f"dataset_{i}" for i in range(datasets)])[d.ravel()],
        "ablation": np.asarray(arms)[a.ravel()],
        "seed": s.ravel(),
        "status": np.where(diverged.ravel(), "diverged", "ok"),
        "test_mae": np.where(diverged.ravel(), np.nan, values.ravel())})
    return trials, theta


def wrong_direction(per_dataset: dict[str, pd.DataFrame], names: list[str], variant: str,
                    theta: np.ndarray, column: int) -> bool:
    """Whether a difference claimed on every dataset points, on some dataset, away from its
    true log ratio (a true ratio of exactly 1 has no direction: any claim is false)."""
    for index, name in enumerate(names):
        if name not in per_dataset:  # no verdicts there (across_datasets_of leaves it out)
            continue
        row = per_dataset[name].set_index("ablation").loc[variant]
        if np.sign(row["diff_mean"]) != np.sign(theta[index, column]):
            return True
    return False


def outside_margin(theta: np.ndarray) -> bool:
    """Whether some dataset's true ratio is not within the margin (1 ± margin, open)."""
    return bool(np.any((theta >= np.log1p(MARGIN)) | (theta <= np.log1p(-MARGIN))))


def experiment_outcomes(trials: pd.DataFrame, theta: np.ndarray, kind: str, *,
                        datasets: tuple[int, ...], seeds: tuple[int, ...]
                        ) -> dict[tuple[int, int], dict[str, float]]:
    """The runner's verdicts on one simulated experiment, per (k datasets, seeds): what each
    column of the table counts (NaN where the kind does not measure it)."""
    out = {}
    names_all = [f"dataset_{i}" for i in range(max(datasets))]
    for n in seeds:
        at_n = trials[trials["seed"] < n]
        per_dataset = dataset_verdicts_of(at_n, META, **SETTINGS)
        for k in datasets:
            names = names_all[:k]
            table = across_datasets_of(at_n[at_n["dataset"].isin(names)], META,
                                       {name: per_dataset[name] for name in names}, **SETTINGS)
            usable = {name: per_dataset[name] for name in names if len(per_dataset[name])}
            verdict = table.set_index("ablation")
            first = "variant_0"
            row = dict.fromkeys(COLUMNS, np.nan)
            if kind == "null":
                row["false difference"] = float(verdict["verdict"].isin(DIFFERENCE).any())
                row["equivalent at 1"] = float(verdict["equivalent"].mean())
                row["same direction at 1"] = float((verdict["n_same_direction"] == k).mean())
                row["false on every dataset"] = float(any(
                    verdict.loc[v, "on_every_dataset"] in DIFFERENCE
                    and wrong_direction(usable, names, v, theta[:k], j)
                    for j, v in enumerate(verdict.index)))
            elif kind == "margin":
                row["false equivalent"] = float(bool(verdict.loc[first, "equivalent"]))
                row["false equivalent on every dataset"] = float(
                    verdict.loc[first, "on_every_dataset"] in WITHIN
                    and outside_margin(theta[:k, 0]))
            else:
                row["worse at 1.2"] = float(verdict.loc[first, "verdict"] == "worse")
            out[(k, n)] = row
    return out


COLUMNS = ("false difference", "equivalent at 1", "same direction at 1",
           "false on every dataset", "false equivalent", "false equivalent on every dataset",
           "worse at 1.2")


def scenario_rates(rng: np.random.Generator, *, noise: str, tau: float, reps: int,
                   kinds: tuple[str, ...] = tuple(KINDS), datasets: tuple[int, ...] = DATASETS,
                   seeds: tuple[int, ...] = SEEDS, power_share: float = 0.25
                   ) -> dict[tuple[int, int], dict[str, float]]:
    """Each column's rate per (k, seeds) over ``reps`` experiments of each kind (the kind
    ``ratio 1.2``: ``power_share`` of them, at least 1)."""
    sums: dict[tuple[int, int], dict[str, list[float]]] = {}
    for kind in kinds:
        count = max(1, round(reps * power_share)) if kind == "ratio 1.2" else reps
        for _ in range(count):
            trials, theta = simulate_trials(rng, mu=np.asarray(KINDS[kind]), tau=tau,
                                            noise=noise, datasets=max(datasets),
                                            seeds=max(seeds))
            outcomes = experiment_outcomes(trials, theta, kind, datasets=datasets, seeds=seeds)
            for cell, row in outcomes.items():
                for column, value in row.items():
                    if not np.isnan(value):
                        sums.setdefault(cell, {}).setdefault(column, []).append(value)
    return {cell: {column: float(np.mean(sums.get(cell, {}).get(column, [np.nan])))
                   for column in COLUMNS} for cell in sums}


def rate_table(reps: int, seed: int = 20261126) -> str:
    """docs/datasets.md's table as Markdown, and the cells above α + 2 Monte-Carlo s.e."""
    bound = ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / reps)
    errors = ("false difference", "false on every dataset", "false equivalent",
              "false equivalent on every dataset")
    lines = ["| noise | τ | k | seeds | " + " | ".join(COLUMNS) + " |",
             "|---|---|---|---|" + "---|" * len(COLUMNS)]
    above = []
    for index, (noise, tau) in enumerate((n, t) for n in NOISES for t in TAUS):
        rng = np.random.default_rng([seed, index])  # each scenario its own draws
        kinds = ("null", "margin") if noise == "tight" else tuple(KINDS)
        rates = scenario_rates(rng, noise=noise, tau=tau, reps=reps, kinds=kinds)
        for k in DATASETS:
            for n in SEEDS:
                cell = rates[(k, n)]
                lines.append(f"| {noise} | {tau:g} | {k} | {n} | " + " | ".join(
                    "–" if np.isnan(cell[c]) else f"{cell[c]:.3f}" for c in COLUMNS) + " |")
                above += [f"{noise}, τ {tau:g}, k {k}, {n} seeds: {c} {cell[c]:.3f}"
                          for c in errors if cell[c] > bound]
    lines.append("")
    lines.append(f"α + 2 MC s.e. at {reps} experiments: {bound:.3f}; above it: "
                 + ("; ".join(above) if above else "none"))
    return "\n".join(lines)


CAVEAT_TAUS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5)
CAVEAT_NOISES = ("gaussian", "tight")
CAVEAT_SEEDS = 5


def caveat_outcomes(trials: pd.DataFrame, tau: float, *,
                    datasets: tuple[int, ...]) -> dict[int, list[dict[str, float]]]:
    """Per k, one record per null variant (true mean ratio 1): whether it reads `equivalent`
    (or `negligible`) across the first k datasets, whether its row carries a caveat about new
    datasets (the 'on average' reason, or the note that two datasets make no claim about a
    third), the prediction interval's old rule (its interval reaching past the margin), whether
    datasets like these truly have more than NEW_SHARE of true ratios beyond the margin, and
    whether the Q-profile bound covers τ."""
    per_dataset = dataset_verdicts_of(trials, META, **SETTINGS)
    names_all = [f"dataset_{i}" for i in range(max(datasets))]
    truly_beyond = share_beyond(0.0, tau, np.log1p(-MARGIN), np.log1p(MARGIN)) > NEW_SHARE
    out: dict[int, list[dict[str, float]]] = {}
    for k in datasets:
        names = names_all[:k]
        table = across_datasets_of(trials[trials["dataset"].isin(names)], META,
                                   {name: per_dataset[name] for name in names}, **SETTINGS)
        for _, row in table.iterrows():
            reason = str(row["reason"])
            out.setdefault(k, []).append({
                "equivalent": float(row["verdict"] in WITHIN),
                "caveat": float(reason.startswith("on average") or "datasets only" in reason),
                "prediction rule": float(row["pi_low"] <= -MARGIN or row["pi_high"] >= MARGIN
                                         or k == 2),
                "truly beyond": float(truly_beyond),
                "covers": float(row["tau_upper"] >= tau)})
    return out


def caveat_rates(rng: np.random.Generator, *, noise: str, tau: float, reps: int,
                 datasets: tuple[int, ...] = DATASETS) -> dict[int, dict[str, float]]:
    """Per k over ``reps`` null experiments (every variant's mean ratio 1, datasets spread by
    ``tau``): the variants called equivalent, and given `equivalent`, the caveat's rate and
    its misses (no caveat while more than NEW_SHARE of datasets like these lie beyond the
    margin), the same two for the prediction interval's rule (a caveat wherever the interval
    reaches the margin), and the τ bound's coverage (over every variant and given
    `equivalent`)."""
    records: dict[int, list[dict[str, float]]] = {}
    for _ in range(reps):
        trials, _ = simulate_trials(rng, mu=np.zeros(VARIANTS), tau=tau, noise=noise,
                                         datasets=max(datasets), seeds=CAVEAT_SEEDS)
        for k, rows in caveat_outcomes(trials, tau, datasets=datasets).items():
            records.setdefault(k, []).extend(rows)
    rates = {}
    for k, rows in records.items():
        frame = pd.DataFrame(rows)
        equivalent = frame[frame["equivalent"] == 1]
        silent = equivalent["caveat"] == 0
        beyond = equivalent["truly beyond"] == 1
        rates[k] = {"variants": len(frame), "equivalent": len(equivalent),
                    "caveat given eq": equivalent["caveat"].mean(),
                    "missed given eq": (silent & beyond).mean(),
                    "PI rule: caveat given eq": equivalent["prediction rule"].mean(),
                    "PI rule: missed given eq": ((equivalent["prediction rule"] == 0)
                                                 & beyond).mean(),
                    "τ bound covers": frame["covers"].mean(),
                    "τ bound covers given eq": equivalent["covers"].mean()}
    return rates


CAVEAT_COLUMNS = ("variants", "equivalent", "caveat given eq", "missed given eq",
                  "PI rule: caveat given eq", "PI rule: missed given eq", "τ bound covers",
                  "τ bound covers given eq")


def caveat_table(reps: int, seed: int = 20261129) -> str:
    """docs/datasets.md's table of the 'on average' caveat, given `equivalent`, as Markdown."""
    lines = ["| noise | τ | k | " + " | ".join(CAVEAT_COLUMNS) + " |",
             "|---|---|---|" + "---|" * len(CAVEAT_COLUMNS)]
    for index, (noise, tau) in enumerate((n, t) for n in CAVEAT_NOISES for t in CAVEAT_TAUS):
        rates = caveat_rates(np.random.default_rng([seed, index]), noise=noise, tau=tau,
                             reps=reps)
        print(f"{noise} τ {tau:g}: done", file=sys.stderr, flush=True)
        for k in DATASETS:
            cell = rates[k]
            lines.append(f"| {noise} | {tau:g} | {k} | " + " | ".join(
                f"{cell[c]:d}" if isinstance(cell[c], int)
                else "–" if np.isnan(cell[c]) else f"{cell[c]:.3f}"
                for c in CAVEAT_COLUMNS) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    start = time.perf_counter()
    if len(sys.argv) > 1 and sys.argv[1] == "caveat":
        print(caveat_table(int(sys.argv[2]) if len(sys.argv) > 2 else 100))
    else:
        print(rate_table(int(sys.argv[1]) if len(sys.argv) > 1 else 80))
    print(f"\n{time.perf_counter() - start:.0f} s")
