"""What a fixed-seed run's summary says of its ``inconclusive`` variants: which they are, the one
command that continues the experiment into ``--seeds auto`` (:func:`continue_command`;
ablations/experiment/continuing.py plans what it runs) and what that adds in the worst case
(:func:`estimate_continuation`), with the continuation's defaults the command and its plan
share (:func:`default_max_seeds`, :func:`sequential_seeds`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import pandas as pd

from ablations.config.comparison import DEFAULT_ALPHA, DEFAULT_MARGIN, DEFAULT_METRIC, Decision
from ablations.config.statuses import TrialStatus
from ablations.config.values import command
from ablations.results.io.directions import MetricLike, metric_of


@dataclass
class ContinuationEstimate:
    """What continuing a fixed run into ``--seeds auto`` adds in the worst case: every
    variant that the design's first look leaves without a verdict, and the reference, run to
    ``max_seeds``."""

    arms: list[str]  # the variants that get more seeds after the pilot (not the reference)
    max_seeds: int
    added_seeds: int  # per arm: max_seeds - the fixed run's seeds
    trials: int  # (arms + the reference) x added_seeds
    trial_s: float  # their summed wall time: each variant's median wall_s x its added trials
    cpu_hours: float  # the same with each variant's median cpu_hours
    gpu_hours: float
    wall_s: Optional[float]  # on ``slots`` trials at a time, round by round; None: unknown


def trial_slots(resources: dict[str, float], cpus_per_trial: float, gpus_per_trial: float,
                max_concurrent: int = 0) -> Optional[int]:
    """How many trials run at once on Ray's ``resources``; None when a trial asks for
    nothing (no bound)."""
    bounds = [int(resources.get(key, 0) // need) for key, need in
              (("CPU", cpus_per_trial), ("GPU", gpus_per_trial)) if need > 0]
    if max_concurrent:
        bounds.append(max_concurrent)
    return max(1, min(bounds)) if bounds else None


def default_max_seeds(fixed_seeds: int) -> int:
    """The ``--max-seeds`` a continuation uses: the ``--seeds auto`` default (10), or twice
    the fixed run's seeds when it already ran that many."""
    from ablations.results.stats.sequential import DEFAULT_MAX_SEEDS

    return DEFAULT_MAX_SEEDS if fixed_seeds < DEFAULT_MAX_SEEDS else 2 * fixed_seeds


def continue_command(storage: str, name: str, *, max_seeds: int, fixed_seeds: int,
                     address: Optional[str] = None, metric: str = DEFAULT_METRIC,
                     margin: Optional[str] = None, alpha: float = DEFAULT_ALPHA,
                     max_concurrent: int = 0) -> str:
    """The one command that continues experiment ``name`` into ``--seeds auto``; decision
    flags only where they differ from the defaults (the continuation decides on them)."""
    parts = ["--resume", "--name", name, "--storage", storage, "--seeds", "auto"]
    if max_seeds != default_max_seeds(fixed_seeds):
        parts += ["--max-seeds", str(max_seeds)]
    if metric != DEFAULT_METRIC:
        parts += ["--metric", metric]
    if margin is not None and margin != DEFAULT_MARGIN:
        parts += ["--margin", margin]
    if alpha != DEFAULT_ALPHA:
        parts += ["--alpha", f"{alpha:g}"]
    if max_concurrent:
        parts += ["--max-concurrent", str(max_concurrent)]
    if address:
        parts += ["--address", address]
    return command(*parts)


def sequential_seeds(fixed: Sequence[int], max_seeds: int) -> list[int]:
    """The seed order of the continuation: the fixed run's seeds (the pilot), then the
    smallest seeds it did not run, up to ``max_seeds`` in all."""
    from ablations.results.stats.planned import seed_order

    return seed_order(fixed, max_seeds)


def first_look(trials: pd.DataFrame, seeds: Sequence[int], max_seeds: int, *, reference: str,
               metric: MetricLike, margin: str, alpha: float,
               max_failure_rate: Optional[float] = None, test: Optional[str] = None
               ) -> pd.DataFrame:
    """The sequential design's verdicts on the fixed run's trials as its pilot: what round 1
    of the continuation decides (the arms it leaves are the ones that get seeds). ``metric``:
    a :class:`~ablations.config.metrics.Metric` (own code's, with its declared direction), or
    a built-in column's name; ``max_failure_rate``: the run's tolerance for divergence;
    ``test``: the run's verdicts' test (None: the default)."""
    from ablations.results.stats.sequential import SeedDesign
    from ablations.results.stats.sequential_table import sequential_verdict_table

    design = SeedDesign.plan(len(seeds), max_seeds)
    from ablations.results.stats.shared_variance import DEFAULT_TEST

    return sequential_verdict_table(trials, design, sequential_seeds(seeds, max_seeds),
                                    reference=reference, metric=metric, margin=margin,
                                    alpha=alpha, max_failure_rate=max_failure_rate,
                                    test=test or DEFAULT_TEST)


def estimate_continuation(trials: pd.DataFrame, arms: Sequence[str], *, reference: str,
                          fixed_seeds: int, max_seeds: int, slots: Optional[int] = None,
                          fixed_wall_s: Optional[float] = None) -> ContinuationEstimate:
    """The worst case of :class:`ContinuationEstimate` from the fixed run's ``trials``: per
    variant, the median wall_s / cpu_hours / gpu_hours of its ok trials (the median: a
    worker's first trial also pays the imports) times the seeds it would add.

    ``slots``: trials at a time. The wall time adds the later looks' rounds, each a batch of
    ``ceil(trials / slots)`` waves: at the fixed run's own driver time per wave
    (``fixed_wall_s``, which includes Tune's start and workers' imports; measured: 23 s
    estimated, 22 s in Tune; docs/benchmarks.md), else at the slowest variant's median. The trial
    count
    is a bound; the times are estimates of that worst case (later rounds start new workers:
    measured 0.0044 CPU-hours estimated, 0.0049 spent)."""
    from ablations.results.stats.sequential import SeedDesign

    ok = trials[trials["status"] == TrialStatus.OK]
    medians = ok.groupby("ablation")[["wall_s", "cpu_hours", "gpu_hours"]].median()
    running = [reference, *arms] if arms else []
    added = max_seeds - fixed_seeds
    per_arm = medians.reindex(running).fillna(0.0)
    wall_s = None
    if slots and running:
        looks = SeedDesign.plan(fixed_seeds, max_seeds).looks
        per_wave = float(per_arm["wall_s"].max())
        ran = int((trials["status"] != TrialStatus.SKIPPED).sum())
        if fixed_wall_s is not None and math.isfinite(fixed_wall_s) and ran:
            per_wave = fixed_wall_s / math.ceil(ran / slots)
        wall_s = sum(math.ceil(len(running) * (after - before) / slots) * per_wave
                     for before, after in zip(looks, looks[1:]))
    return ContinuationEstimate(
        arms=list(arms), max_seeds=max_seeds, added_seeds=added,
        trials=len(running) * added, trial_s=float(per_arm["wall_s"].sum()) * added,
        cpu_hours=float(per_arm["cpu_hours"].sum()) * added,
        gpu_hours=float(per_arm["gpu_hours"].sum()) * added, wall_s=wall_s)


def continuation_hint(trials: pd.DataFrame, verdicts: pd.DataFrame, *, storage: str, name: str,
                      decision: Decision, address: Optional[str] = None,
                      max_concurrent: int = 0, slots: Optional[int] = None,
                      fixed_wall_s: Optional[float] = None,
                      max_seeds: Optional[int] = None) -> Optional[str]:
    """The end of a fixed run's summary when variants are ``inconclusive``: which, the
    command that decides them and what it adds at most (``slots``, ``fixed_wall_s``: trials
    at a time and the run's time in Tune, for the wall time); None when none is (or the run
    had fewer than 2 seeds: no pilot). ``decision``: the verdicts' reference, metric (as
    :func:`first_look` takes it), margin and α. ``max_seeds``: the last look of the design
    the run recorded (``verdicts`` are then its pilot look's), else
    :func:`default_max_seeds`."""
    reference, metric, margin, alpha = (decision.reference, decision.metric, decision.margin,
                                        decision.alpha)
    undecided = verdicts.loc[verdicts["verdict"] == "inconclusive", "ablation"].tolist()
    ran = trials["status"] != TrialStatus.SKIPPED
    seeds = sorted(int(s) for s in trials.loc[ran, "seed"].unique())
    if not undecided or len(seeds) < 2:
        return None
    from ablations.experiment.designs.rounds import next_arms

    max_seeds = max_seeds or default_max_seeds(len(seeds))
    look = first_look(trials, seeds, max_seeds, reference=reference, metric=metric,
                      margin=margin or DEFAULT_MARGIN, alpha=alpha,
                      max_failure_rate=verdicts.attrs.get("max_failure_rate"),
                      test=verdicts.attrs.get("verdict_test"))
    arms = [a for a in next_arms(look, set(look["ablation"])) if a != reference]
    estimate = estimate_continuation(trials, arms, reference=reference,
                                     fixed_seeds=len(seeds), max_seeds=max_seeds, slots=slots,
                                     fixed_wall_s=fixed_wall_s)
    command = continue_command(storage, name, max_seeds=max_seeds, fixed_seeds=len(seeds),
                               address=address, metric=metric_of(metric).name, margin=margin,
                               alpha=alpha, max_concurrent=max_concurrent)
    named = f"Inconclusive after {len(seeds)} seeds: {', '.join(undecided)}."
    rows = look.set_index("ablation")
    flat = [a for a in undecided if "no_seed_variance" in rows
            and pd.notna(rows.loc[a, "no_seed_variance"]) and bool(rows.loc[a, "no_seed_variance"])]

    def why(arms_left: list[str]) -> str:  # why these get no more seeds
        parts = []
        if [a for a in arms_left if a in flat]:
            parts.append("no seed variance: more seeds would give the same values")
        if [a for a in arms_left if a not in flat]:
            parts.append("fewer than 2 ok or diverged trials, see the failures above")
        return "; ".join(parts)

    if not arms:  # next_arms: no variant can get more seeds
        return (f"{named} Seeds added in rounds would not decide "
                f"{'it' if len(undecided) == 1 else 'them'} here: {why(undecided)}.")
    lines = [f"{named} To decide {'it' if len(undecided) == 1 else 'them'}, continue this "
             f"experiment with seeds added in rounds: its {len(seeds)} seeds are the pilot "
             "(kept, not re-run); only variants without a verdict and the reference get more, "
             f"up to {max_seeds} seeds (--max-seeds):",
             f"  {command}"]
    stuck = [a for a in undecided if a not in arms]
    if stuck:
        lines.append(f"{', '.join(stuck)}: no more seeds: {why(stuck)}.")
    extra = [a for a in arms if a not in undecided]
    if extra:  # the design's first look spends part of alpha only
        lines.append(f"The design's first look spends part of alpha, so it also leaves "
                     f"{', '.join(extra)} undecided: they get seeds too; every verdict of the "
                     "continued experiment is the sequential design's.")
    hours = (f"{estimate.gpu_hours:.3g} GPU-hours" if estimate.gpu_hours > 0 else
             f"{estimate.cpu_hours:.3g} CPU-hours")
    wall = (f", ~{_duration(estimate.wall_s)} wall at {slots} trial(s) at a time"
            if estimate.wall_s is not None else "")
    lines.append(f"At most {estimate.trials} more trials ({len(arms)} variant(s) + the "
                 f"reference x {estimate.added_seeds} seeds): the worst case, every undecided "
                 f"variant running to --max-seeds; at this run's median trial times about "
                 f"{_duration(estimate.trial_s)} of trial time, {hours}{wall}.")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
