"""A fixed-seed experiment continued into ``--seeds auto``: its seeds are the pilot.

A fixed run (``--seeds 3``) that leaves variants ``inconclusive`` ends with one command,
``--resume --name NAME --storage DIR --seeds auto``, and what it adds in the worst case
(ablations/experiment/continuation_hint.py). That command (:func:`continue_plan`)
turns the experiment's record into a sequential one: the design is the one experiment.json's
``planned`` recorded before the first trial (``SeedDesign.plan(pilot=<the fixed run's seed
count>, max_seeds)``, results/stats/planned.py), whose pilot look the fixed run's verdicts already
were, so nothing they decided changes; its seed order starts with the fixed run's seeds, and
the fixed run's trials are round 1 as they are (read from trials.parquet, not run again).
Rounds 2.. are ablations/experiment/designs/rounds.py's. A run whose design has one
look (``--seeds`` at least ``--max-seeds``) has final verdicts and is not continued. An
experiment whose experiment.json records no design is planned here, on its seeds; its fixed
table decided at full α, so the design's first look may leave a variant it decided undecided.

Every bad use (a search, an experiment already sequential, an unfinished run, flags that
would change the plan) is refused in :func:`continue_plan` before anything is written.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional, Sequence

import pandas as pd

from ablations.config import TrialConfig
from ablations.config.comparison import DEFAULT_MARGIN, DEFAULT_REFERENCE
from ablations.config.statuses import UNFINISHED, TrialStatus
from ablations.config.values import command
from ablations.experiment.continuation_hint import default_max_seeds, sequential_seeds
from ablations.experiment.core.design_options import rounds_of
from ablations.experiment.continuation_hint import (  # noqa: F401 (re-exported)
    continuation_hint,
    estimate_continuation,
    first_look,
    trial_slots,
)
from ablations.experiment.core.request import Request, UsageError, arg
from ablations.search_spaces import TrialSpec
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


def continue_plan(args: Request, storage: str, name: str, meta: dict[str, Any], *,
                  retry_failed: bool = False) -> Any:
    """The :class:`ablations.experiment.designs.rounds.RoundsRun` that continues the fixed
    experiment ``name`` (``meta``: its experiment.json) with ``--seeds auto``, its round 1 the fixed
    run's trials. ``args.given``: the fields the caller set, refused where they would change
    the recorded plan.
    Writes nothing.

    Raises:
        UsageError: one line, for every use that cannot continue it.
    """
    from ablations.experiment.designs.rounds import RoundsRun

    target = join(storage, name)
    resume = command("--resume", "--name", name, "--storage", storage)
    trials, fixed = _continuable(args, name, meta, target, resume, retry_failed)
    planned = meta.get("planned")
    design, seeds, metric, margin, alpha = _sequential_design(args, name, planned, fixed)
    reference = _reference(name, meta)
    plan = extended_plan(meta["trials"], seeds)
    # the tolerance recorded before the first trial (check_planned refuses another); one
    # given with the continuation only for a run that recorded no plan
    tolerance = planned.get("max_failure_rate") if planned else args.max_failure_rate
    from ablations.results.stats.planned import verdict_test

    # the test the fixed run's verdicts were decided with (one procedure for the experiment)
    run = RoundsRun(design, seeds, reference, metric, margin, alpha, plan,
                        max_failure_rate=tolerance, test=verdict_test(planned))
    run.rounds = [{"round": 1, "tune": "tune", "trials": list(meta["trials"])}]
    run.continued = _continued_record(meta, trials, fixed, planned)
    return run


def _continuable(args: Request, name: str, meta: dict[str, Any], target: str, resume: str,
                 retry_failed: bool) -> tuple[pd.DataFrame, list[int]]:
    """The fixed run's trials.parquet and seeds, once nothing refuses its continuation: its
    design, ``--retry-failed``, flags that would change its plan, tables not yet written,
    unfinished trials, fewer than 2 seeds.

    Raises:
        UsageError: one line naming what refuses it and what to do instead.
    """
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
    return trials, fixed


def _sequential_design(args: Request, name: str, planned: Optional[dict[str, Any]],
                       fixed: list[int]) -> tuple[Any, list[int], Any, Any, float]:
    """The design the continuation runs, its seed order, and the metric, margin and α it
    decides on: those experiment.json's ``planned`` recorded before the first trial (the
    flags checked against them), else a design planned here on the fixed run's seeds."""
    from ablations.results.stats.sequential import SeedDesign

    if planned and planned.get("design"):  # the design fixed before its first trial
        design = SeedDesign.from_dict(planned["design"])
        check_planned(args, name, planned, design)
        metric, margin, alpha = planned["metric"], planned["margin"], float(planned["alpha"])
        return design, [int(s) for s in planned["seeds"]], metric, margin, alpha
    # no design recorded in experiment.json: planned here, on its seeds
    max_seeds = rounds_of(args.design).max_seeds or default_max_seeds(len(fixed))
    if max_seeds <= len(fixed):
        raise UsageError(f"{arg('max_seeds')} {max_seeds}: {name} already ran {len(fixed)} "
                         f"seeds; raise {arg('max_seeds')}")
    design = SeedDesign.plan(len(fixed), max_seeds)
    return (design, sequential_seeds(fixed, max_seeds), args.metric,
            args.margin or DEFAULT_MARGIN, args.alpha)


def _reference(name: str, meta: dict[str, Any]) -> str:
    """The reference every round compares with, once the fixed run is known to have run it
    and a variant beside it."""
    reference = meta.get("reference") or DEFAULT_REFERENCE
    variants = list(dict.fromkeys(values["ablation"] for values in meta["trials"].values()))
    if reference not in variants:
        raise UsageError(f"{name} did not run its reference {reference!r}; every round "
                         "compares with it")
    if len(variants) < 2:
        raise UsageError(f"{name} ran only the reference; there is nothing to decide")
    return reference


def _continued_record(meta: dict[str, Any], trials: pd.DataFrame, fixed: list[int],
                      planned: Optional[dict[str, Any]]) -> dict[str, Any]:
    """What the continuation records of the fixed run it continues: its seeds, the trials it
    ran and their compute, its command, when, and whether its design was planned first."""
    ran = trials[trials["status"] != TrialStatus.SKIPPED]
    return {"seeds": fixed, "trials": len(ran),
            "cpu_hours": float(ran["cpu_hours"].sum()),
            "gpu_hours": float(ran["gpu_hours"].sum()),
            "command": meta.get("command"),
            "at": dt.datetime.now(dt.timezone.utc).isoformat(),
            "planned": bool(planned and planned.get("design"))}


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
    values = {**{key: getattr(args, key) for key in recorded_values if key != "max_seeds"},
              "max_seeds": rounds_of(args.design).max_seeds}
    for key, recorded in recorded_values.items():
        value = values[key]
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
