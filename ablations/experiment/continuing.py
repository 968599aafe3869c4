"""A fixed-seed experiment continued into ``--seeds auto``: its seeds are the pilot.

A fixed run (``--seeds 3``) that leaves variants ``inconclusive`` ends with one command,
:func:`continue_command` (``--resume --name NAME --storage DIR --seeds auto``), and what it
adds in the worst case (:func:`estimate_continuation`). That command (:func:`continue_plan`)
turns the experiment's record into a sequential one: the design is the one experiment.json's
``planned`` recorded before the first trial (``SeedDesign.plan(pilot=<the fixed run's seed
count>, max_seeds)``, results/stats/planned.py), whose pilot look the fixed run's verdicts already
were, so nothing they decided changes; its seed order starts with the fixed run's seeds, and
the fixed run's trials are round 1 as they are (read from trials.parquet, not run again).
Rounds 2.. are ablations/experiment/designs/seeds_auto.py's. A run whose design has one
look (``--seeds`` at least ``--max-seeds``) has final verdicts and is not continued. An
experiment whose experiment.json records no design is planned here, on its seeds; its fixed
table decided at full α, so the design's first look may leave a variant it decided undecided.

Every bad use (a search, an experiment already sequential, an unfinished run, flags that
would change the plan) is refused in :func:`continue_plan` before anything is written.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pandas as pd

from ablations.config import TrialConfig
from ablations.config.comparison import (DEFAULT_ALPHA, DEFAULT_MARGIN, DEFAULT_METRIC,
                                         DEFAULT_REFERENCE, Decision)
from ablations.config.statuses import UNFINISHED, TrialStatus
from ablations.config.values import command
from ablations.experiment.request import Request, UsageError, arg
from ablations.search_spaces import TrialSpec
from ablations.results.io.directions import MetricLike, metric_of
from ablations.results.io.files import (
    EPOCHS_FILE,
    PREDICTIONS_FILE,
    TRIALS_FILE,
    is_file,
    join,
    read_experiment,
)

# The request's fields that say what to run: a continuation runs what experiment.json
# recorded, so any of these given with it would silently not apply; they are refused instead.
PLAN_FIELDS = ("model", "only", "null_control", "epochs", "config", "overrides", "num_samples",
               "scheduler", "data", "max_train_examples", "max_eval_examples", "pilot",
               "auto_batch")


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
    from ablations.experiment.designs.seeds_auto import next_arms

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


# ------------------------------------------------------------------------------ the command


def continue_plan(args: Request, storage: str, name: str, meta: dict[str, Any], *,
                  retry_failed: bool = False) -> Any:
    """The :class:`ablations.experiment.designs.seeds_auto.SequentialRun` that continues the
    fixed experiment
    ``name`` (``meta``: its experiment.json) with ``--seeds auto``, its round 1 the fixed
    run's trials. ``args.given``: the fields the caller set, refused where they would change
    the recorded plan.
    Writes nothing.

    Raises:
        UsageError: one line, for every use that cannot continue it.
    """
    from ablations.experiment.designs.seeds_auto import SequentialRun
    from ablations.results.stats.sequential import SeedDesign

    target = join(storage, name)
    resume = command("--resume", "--name", name, "--storage", storage)
    from ablations.experiment.designs.records import design_class

    refusal = design_class(meta).rounds_refusal(name, meta, resume)
    if refusal:  # a search, rounds already, a design at fixed seeds: each in its own words
        raise UsageError(refusal)
    if retry_failed:
        raise UsageError(f"{arg('retry_failed')}: retry {name}'s failed trials first ({resume} "
                         f"{arg('retry_failed')}), then continue it with {arg('seeds')} auto")
    given = [arg(key) for key in PLAN_FIELDS if key in args.given]
    if "space" in args.given and args.space != meta.get("space"):
        given.insert(0, arg("space"))
    if given:
        raise UsageError(f"{arg('resume')} {arg('seeds')} auto continues {name} (space "
                         f"{meta.get('space')}) with the trials it recorded; {', '.join(given)} "
                         "would change them: drop them, or start a new experiment under another "
                         f"{arg('name')}")
    missing = [f for f in (TRIALS_FILE, EPOCHS_FILE, PREDICTIONS_FILE)
               if not is_file(join(target, f))]
    if missing:  # round 1 is these three tables as they are
        raise UsageError(f"{name} has no results yet ({', '.join(missing)}); finish it first: "
                         f"{resume}")
    trials = read_experiment(target)["trials"]
    unfinished = int(trials["status"].isin(UNFINISHED).sum())
    if unfinished:
        raise UsageError(f"{name} has {unfinished} unfinished trial(s); finish them first "
                         f"({resume}), then continue it with {arg('seeds')} auto")
    fixed = [int(s) for s in meta.get("seeds", [])]
    if len(fixed) < 2:
        raise UsageError(f"{name} ran {len(fixed)} seed(s); a pilot needs at least 2 for a t "
                         f"test: start a new experiment with {arg('seeds')} auto")
    planned = meta.get("planned")
    if planned and planned.get("design"):  # the design fixed before its first trial
        design = SeedDesign.from_dict(planned["design"])
        check_planned(args, name, planned, design)
        max_seeds, metric = design.max_seeds, planned["metric"]
        margin, alpha = planned["margin"], float(planned["alpha"])
        seeds = [int(s) for s in planned["seeds"]]
    else:  # no design recorded in experiment.json: planned here, on its seeds
        max_seeds = args.max_seeds or default_max_seeds(len(fixed))
        if max_seeds <= len(fixed):
            raise UsageError(f"{arg('max_seeds')} {max_seeds}: {name} already ran {len(fixed)} "
                             f"seeds; raise {arg('max_seeds')}")
        design = SeedDesign.plan(len(fixed), max_seeds)
        metric, margin, alpha = args.metric, args.margin or DEFAULT_MARGIN, args.alpha
        seeds = sequential_seeds(fixed, max_seeds)
    reference = meta.get("reference") or DEFAULT_REFERENCE
    variants = list(dict.fromkeys(values["ablation"] for values in meta["trials"].values()))
    if reference not in variants:
        raise UsageError(f"{name} did not run its reference {reference!r}; every round "
                         "compares with it")
    if len(variants) < 2:
        raise UsageError(f"{name} ran only the reference; there is nothing to decide")
    plan = extended_plan(meta["trials"], seeds)
    # the tolerance recorded before the first trial (check_planned refuses another); one
    # given now only for a run that recorded no plan
    tolerance = planned.get("max_failure_rate") if planned else args.max_failure_rate
    from ablations.results.stats.planned import verdict_test

    # the test the fixed run's verdicts were decided with (one procedure for the experiment)
    run = SequentialRun(design, seeds, reference, metric, margin, alpha, plan,
                        max_failure_rate=tolerance, test=verdict_test(planned))
    run.rounds = [{"round": 1, "tune": "tune", "trials": list(meta["trials"])}]
    ran = trials[trials["status"] != TrialStatus.SKIPPED]
    run.continued = {"seeds": fixed, "trials": len(ran),
                     "cpu_hours": float(ran["cpu_hours"].sum()),
                     "gpu_hours": float(ran["gpu_hours"].sum()),
                     "command": meta.get("command"),
                     "at": dt.datetime.now(dt.timezone.utc).isoformat(),
                     "planned": bool(planned and planned.get("design"))}
    return run


def check_planned(args: Request, name: str, planned: dict[str, Any], design: Any) -> None:
    """Refuse a continuation whose flags differ from the design experiment ``name`` recorded
    before its first trial (``planned``): its verdicts are that design's pilot look, so the
    continuation runs the same design; a single-look design's verdicts are final.

    Raises:
        UsageError: one line naming the flag and the recorded value.
    """
    if len(design.looks) == 1:
        raise UsageError(f"{name}'s verdicts are final: its {design.looks[0]} seeds were "
                         f"planned as the fixed design at full alpha ({arg('max_seeds')} "
                         f"{design.max_seeds}); more seeds would test them again: start a new "
                         f"experiment on new seeds (another {arg('name')})")
    from ablations.results.stats.planned import same_margin

    recorded_values = {"max_seeds": design.max_seeds, "metric": planned["metric"],
                       "margin": planned["margin"], "alpha": float(planned["alpha"]),
                       "max_failure_rate": planned.get("max_failure_rate")}
    for key, recorded in recorded_values.items():
        value = getattr(args, key)
        if key not in args.given or value is None:
            continue
        same = same_margin(value, recorded) if key == "margin" else value == recorded
        if not same:
            shown = ("none" if recorded is None else f"{recorded:g}"
                     if isinstance(recorded, float) else recorded)
            raise UsageError(f"{arg(key)} {value}: {name} planned its rounds before its "
                             f"first trial with {arg(key)} {shown}; drop {arg(key)} (the "
                             "continuation runs the recorded design)")


def extended_plan(recorded: dict[str, dict[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """The recorded trials (experiment.json's ``trials``: name -> config) as TrialSpecs, then
    each variant's cells at the seeds it did not run: its first recorded config at the new
    seed (``seed_offset`` and every switch kept), named as ``ablations.search_spaces.expand`` names
    cells (``<variant>-seed<seed>``)."""
    plan: dict[str, Any] = {}
    first: dict[str, TrialConfig] = {}
    for name, values in recorded.items():
        config = TrialConfig.from_dict(values)
        plan[name] = TrialSpec(name, config.ablation, config.seed, config)
        first.setdefault(config.ablation, config)
    ran = {(spec.variant, spec.seed) for spec in plan.values()}
    for variant, config in first.items():
        for seed in seeds:
            if (variant, seed) not in ran:
                name = f"{variant}-seed{seed}"
                plan[name] = TrialSpec(name, variant, seed, config.replace(seed=seed))
    return plan
