"""``--resume``: the library's resume plan (ablations/experiment/resuming.py) and the lines
saying what the resume will do and what changed since the experiment started.

The command line (ablations/cli/main.py) checks the ``--name`` and runs the plan; a start whose
folder already holds an experiment goes through :func:`same_name_again`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from ablations.cli.console import spoken
from ablations.experiment.designs.records import design_from_record
from ablations.experiment.plans import plan_from_metadata, skipped_plan
from ablations.experiment.request import UsageError, arg
from ablations.experiment.resuming import ResumePlan, check_unchanged
from ablations.experiment.resuming import resume_plan as library_resume_plan
from ablations.results.io.files import join, read_metadata
from ablations.results.stats.planned import departures
from ablations.results.stats.sequential import SeedDesign


def resume_plan(args: argparse.Namespace, storage: str) -> ResumePlan:
    """The experiment ``args.name`` (None: the one started or resumed last) in ``storage``,
    as :func:`ablations.experiment.resuming.resume_plan` rebuilds and checks it; ``args``
    takes its recorded resources. Prints what the resume will do and what changed since it
    started."""
    plan = library_resume_plan(storage, args.name, args.request,
                               retry_failed=args.retry_failed, allow_changed=args.allow_changed)
    for line in plan.warnings:
        print(f"warning: resuming although it changed (--allow-changed): {line}",
              file=sys.stderr)
    if plan.notes:
        print(f"note: since the experiment started: {'; '.join(plan.notes)}", file=sys.stderr)
    args.cpus_per_trial, args.gpus_per_trial = plan.cpus_per_trial, plan.gpus_per_trial
    target = join(storage, plan.name)
    if plan.continued:
        print(spoken(plan.design.continued_line(plan.name, plan.space_name, plan.seeds)))
    else:
        print(spoken(plan.design.resume_line(plan.name, plan.space_name, target, plan.trials,
                                             args.retry_failed)))
    return plan


def same_name_again(args: argparse.Namespace, target: str, name: str, prepared: Any
                    ) -> tuple[list, Any]:
    """A start whose ``--name`` already holds an experiment at ``target``: the trials and the
    design that resume it when the plan (``prepared``: planning's ``Prepared``) is the one
    it recorded, with the code and data unchanged (:func:`check_unchanged`). Anything that
    would change the plan (the space, the trials, another design, a setting the design
    decides with, the settings planned before its data) is refused with one line, before
    anything is written."""
    space, base, trials, skipped = (prepared.space, prepared.base, prepared.trials,
                                    prepared.skipped)
    design = prepared.design
    previous = read_metadata(target)
    if previous is None:
        raise UsageError(f"{target} already exists and is not an experiment of this tool; "
                         "choose another --name or --storage")
    recorded_batch = previous.get("auto_batch")
    if args.auto_batch and recorded_batch:  # the same command again: the size it chose then
        trials = [dataclasses.replace(spec, config=spec.config.replace(
            batch_size=recorded_batch["micro_batch"] * spec.config.optim.grad_accum_steps))
            for spec in trials]
    recorded = design_from_record(previous, target)
    if type(recorded) is not type(design):
        raise UsageError(f"{target} holds an experiment run with {recorded.asked_by}; "
                         f"continue it with {arg('resume')} or choose another {arg('name')}")
    recorded_trials, _ = plan_from_metadata(previous)
    same = (design.same_plan_as(recorded, trials, recorded_trials, target)
            and previous.get("space") == space.name
            and previous.get("skipped") == skipped_plan(skipped))
    if not same:
        raise UsageError(f"{target} holds a different experiment (space "
                         f"{previous.get('space')}, {len(previous.get('trials', {}))} "
                         "trials); continue it with --resume or choose another --name")
    check_planned_unchanged(design.planned, recorded.planned, target)
    warnings, notes = check_unchanged(
        previous, design.configs([*trials, *(t for t, _ in skipped)]) or [base],
        args.allow_changed)
    for line in warnings:
        print(f"warning: resuming although it changed (--allow-changed): {line}",
              file=sys.stderr)
    if notes:
        print(f"note: since the experiment started: {'; '.join(notes)}", file=sys.stderr)
    print(f"Experiment {name} exists with the same plan: resuming it.")
    return trials, recorded


def check_planned_unchanged(now: Any, was: Any, target: str) -> None:
    """Refuse (one line) a start under the folder ``target`` whose settings fixed before the
    data (``now``: experiment.json's ``planned`` it would record) differ from those recorded
    there (``was``)."""
    if not was or not now:
        return
    differ = departures(was, reference=now["reference"], metric=now["metric"],
                        margin=now["margin"], alpha=now["alpha"])
    if was.get("design") != now.get("design"):  # the same trials: another --max-seeds
        differ.append(f"--max-seeds {SeedDesign.from_dict(now['design']).max_seeds} "
                      f"(planned {SeedDesign.from_dict(was['design']).max_seeds})"
                      if was.get("design") and now.get("design") else
                      "--max-seeds (the design)")
    if differ:
        raise UsageError(f"{target} holds an experiment planned before its data with "
                         f"other settings: {'; '.join(differ)}; give those (or "
                         "--resume, which keeps them) or choose another --name")
