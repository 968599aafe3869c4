"""``--resume``: which experiment, its plan rebuilt from experiment.json, the check that the
code and data have not changed since it started, and the line saying what the resume will do.

The command line (ablations/cli/main.py) checks the ``--name`` and runs the plan; a start whose
folder already holds an experiment goes through :func:`same_name_again`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional, Sequence

from ablations.config import TrialConfig
from ablations.experiment.request import Request, UsageError
from results.io.files import MetadataError, first_line, join, list_dir, read_metadata


@dataclass
class ResumePlan:
    """What :func:`resume_plan` read: the arguments of the command line's run."""

    name: str  # the experiment's folder under --storage
    space_name: str  # as experiment.json has it
    trials: list  # the TrialSpecs to run now (with --seeds auto: the current round's)
    skipped: list  # (TrialSpec, reason) of the cells the plan skipped
    strategy: Any  # how it runs (a fixed run continued with --seeds auto: its rows are round 1)
    seeds: list  # the seeds experiment.json recorded
    reference: str  # the variant the others are compared with
    reuse_workers: bool  # False when the space isolates its trials


def resume_plan(args: argparse.Namespace, storage: str) -> ResumePlan:
    """The experiment ``args.name`` (None: the one started or resumed last) in ``storage``,
    rebuilt from its experiment.json and checked unchanged; ``args`` takes its recorded
    resources and seeds. Prints what the resume will do. With ``--seeds auto``, a fixed-seed
    experiment continued into rounds (ablations/experiment/continuing.py)."""
    from ablations.experiment.planning import strategy_for
    from ablations.experiment.runner import plan_from_metadata
    from ablations.experiment.strategies.hpo import HpoSearch
    from search_spaces import SPACES

    continuing = args.seeds == "auto"
    if not continuing and (args.pilot is not None or args.max_seeds is not None):
        raise UsageError("--resume keeps the experiment's seeds: --pilot and --max-seeds apply "
                         "only when continuing a fixed-seed experiment with --seeds auto")
    name = args.name
    if name is None:
        started = {}
        for entry in list_dir(storage):
            try:
                meta = read_metadata(join(storage, entry))
            except MetadataError:  # a damaged record: not the experiment to continue
                continue
            if meta is not None:
                started[entry] = max([meta.get("started_at", ""), *meta.get("resumed_at", [])])
        if not started:
            raise UsageError(f"--resume: no experiment in {storage}; pass --name or --storage")
        name = max(started, key=started.get)
    target = join(storage, name)
    meta = read_metadata(target)
    if meta is None:
        raise UsageError(f"--resume: {target} is not an experiment folder (no experiment.json)")
    trials, skipped = plan_from_metadata(meta)
    sequential, tune_subdir, factorial = None, None, None
    if meta.get("factorial"):
        from results.stats.factorial_design import FactorialDesign

        if continuing:
            raise UsageError(f"--seeds auto: {target} holds a factorial design, whose cells "
                             "run at the same fixed seeds; resume it without --seeds auto")
        factorial = FactorialDesign.from_dict(meta["factorial"])
    tuned = None
    if meta.get("tuned"):
        from ablations.experiment.strategies.tuned import TunedRun

        if continuing:
            raise UsageError(f"--seeds auto: {target} holds tuned ablations (--tune-each), "
                             "which run at fixed seeds; resume it without --seeds auto")
        tuned = TunedRun.from_record(meta["tuned"])
    if continuing:
        from ablations.experiment.continuing import continue_plan

        sequential = continue_plan(Request.of(args), storage, name, meta,
                                   retry_failed=args.retry_failed)
    elif meta.get("sequential"):
        from ablations.experiment.strategies.seeds_auto import SequentialRun

        sequential = SequentialRun.from_record(meta["sequential"])
        tune_subdir = sequential.rounds[-1]["tune"] if sequential.rounds else None
    hpo = None
    if meta.get("hpo"):
        h = meta["hpo"]
        hpo = HpoSearch(base=TrialConfig.from_dict(h["base"]),
                        space={k: (kind, tuple(v) if isinstance(v, list) else v)
                               for k, (kind, v) in h["space"].items()},
                        num_samples=h["num_samples"], metric=h["metric"], mode=h["mode"],
                        scheduler=h["scheduler"])
    check_unchanged(meta, [s.config for s in [*trials, *(t for t, _ in skipped)]]
                    + ([hpo.base] if hpo else []), args.allow_changed)
    args.cpus_per_trial = meta.get("cpus_per_trial", args.cpus_per_trial)
    args.gpus_per_trial = meta.get("gpus_per_trial", args.gpus_per_trial)
    seeds = meta.get("seeds", [])
    current = sequential.current_trials() if sequential is not None else trials
    if continuing:
        looks = ", ".join(str(n) for n in sequential.design.looks)
        print(f"Continuing experiment {name} ({meta['space']}) with --seeds auto: its "
              f"{len(current)} trials at seeds {', '.join(map(str, seeds))} are the pilot "
              f"(round 1, kept, not run again); looks at {looks} seeds per variant")
    elif tuned is not None:
        print(f"Resuming experiment {name} ({meta['space']}, tuned ablations): "
              f"{tuned_outlook(target, tuned, args.retry_failed)}")
    else:
        print(f"Resuming experiment {name} ({meta['space']}): "
              f"{resume_outlook(target, current, hpo, args.retry_failed, tune_subdir)}")
    finished = None
    if continuing:  # the fixed run's trials: round 1 as they are (continuing.py)
        from ablations.experiment.options import ExperimentResult
        from results.io.files import read_experiment

        frames = read_experiment(target)
        finished = ExperimentResult(target, frames["trials"], frames["epochs"],
                                    frames["predictions"])
    space = SPACES.get(meta["space"])
    strategy = strategy_for(hpo, sequential, root=target, finished=finished,
                            factorial=factorial, tuned=tuned)
    strategy.planned = meta.get("planned")  # the settings recorded before its first trial
    return ResumePlan(
        name=name, space_name=meta["space"], trials=current, skipped=skipped,
        strategy=strategy, seeds=seeds,
        reference=meta.get("reference") or (space.reference if space else "baseline"),
        reuse_workers=not (space and space.isolate_trials),
    )


def resume_outlook(target: str, trials: Sequence[Any], hpo: Any, retry_failed: bool,
                   tune_subdir: Optional[str] = None) -> str:
    """One line: how many trials are finished, continue, start (Tune's saved state);
    ``tune_subdir``: the Tune folder of the round to continue (--seeds auto)."""
    from ablations.experiment.options import TUNE_SUBDIR
    from ablations.experiment.runner import resume_counts

    counts = resume_counts(target, trials, retry_failed=retry_failed,
                           num_samples=hpo.num_samples if hpo else None,
                           tune_subdir=tune_subdir or TUNE_SUBDIR)
    one = {"continue": counts["continue"] == 1, "start": counts["start"] == 1}
    parts = [f"{counts['finished']} finished (kept)"]
    if counts["failed"]:
        parts.append(f"{counts['failed']} failed (kept; --retry-failed retries them)")
    parts.append(f"{counts['continue']} "
                 + ("continues from its" if one["continue"] else "continue from their")
                 + " last saved epoch")
    parts.append(f"{counts['start']} " + ("starts" if one["start"] else "start"))
    return ", ".join(parts)


def tuned_outlook(target: str, tuned: Any, retry_failed: bool) -> str:
    """Which stage of a tuned ablation the resume continues, and what it does with its
    trials."""
    pending = tuned.pending()
    if pending is None:
        return "every stage has ended; nothing to run"
    number, stage, arm = pending
    trials = (list(tuned.plan.values()) if stage == "evaluation" else
              tuned.tuned_trials() if arm is None else [])
    search = SimpleNamespace(num_samples=tuned.budget) if arm is not None else None
    counts = resume_outlook(target, trials, search, retry_failed, tuned.tune_subdir(stage))
    return f"stage {number} of {len(tuned.steps())} ({stage}): {counts}"


def check_unchanged(meta: dict[str, Any], configs: Sequence[TrialConfig],
                    allow_changed: bool) -> None:
    """Before resuming: refuse (one line) when the code or the data changed since the
    experiment started, unless ``allow_changed``; then print what changed and what else differs
    (packages, device, commit). ``experiment.json`` keeps it (``resume_history``)."""
    from ablations.experiment.provenance import changes, collect

    try:
        current = collect(configs)
    except (OSError, ValueError) as exc:
        first = first_line(exc)
        raise UsageError(f"cannot fingerprint the data to compare it with the experiment's: "
                         f"{first}") from None
    blocking, notes = changes(meta.get("provenance"), current)
    if blocking and not allow_changed:
        raise UsageError(f"experiment {meta.get('experiment')} cannot be resumed: changed since "
                         f"it started: {'; '.join(blocking)}; restore them, run under a new "
                         "--name, or pass --allow-changed to continue anyway")
    for line in blocking:
        print(f"warning: resuming although it changed (--allow-changed): {line}",
              file=sys.stderr)
    if notes:
        print(f"note: since the experiment started: {'; '.join(notes)}", file=sys.stderr)


def same_name_again(args: argparse.Namespace, target: str, name: str, prepared: Any
                    ) -> tuple[list, Any]:
    """A start whose ``--name`` already holds an experiment at ``target``: the trials and the
    strategy that resume it when the plan (``prepared``: planning's ``Prepared``) is the one
    it recorded, with the code and data unchanged (:func:`check_unchanged`). Anything that
    would change the plan (the space, the trials, fixed seeds against ``--seeds auto``, the
    search, the settings planned before its data) is refused with one line, before anything
    is written."""
    from ablations.experiment.planning import strategy_for
    from ablations.experiment.runner import skipped_plan, trial_plan

    space, base, trials, skipped = (prepared.space, prepared.base, prepared.trials,
                                    prepared.skipped)
    hpo, sequential, strategy = prepared.hpo, prepared.sequential, prepared.strategy
    previous = read_metadata(target)
    if previous is None:
        raise UsageError(f"{target} already exists and is not an experiment of this tool; "
                         "choose another --name or --storage")
    recorded = previous.get("auto_batch")
    if args.auto_batch and recorded:  # the same command again: the size it chose then
        trials = [dataclasses.replace(spec, config=spec.config.replace(
            batch_size=recorded["micro_batch"] * spec.config.optim.grad_accum_steps))
            for spec in trials]
    planned = previous.get("trials")
    if (sequential is None) != (not previous.get("sequential")):
        was = "--seeds auto" if previous.get("sequential") else "fixed seeds"
        raise UsageError(f"{target} holds an experiment run with {was}; continue it with "
                         "--resume or choose another --name")
    if sequential is not None:  # the whole table up to --max-seeds, and the design
        planned = previous["sequential"].get("plan")
        trials = list(sequential.plan.values())
        recorded = previous["sequential"]
        decided = (recorded["metric"], str(recorded["margin"]), float(recorded["alpha"]))
        if decided != (sequential.metric, str(sequential.margin), sequential.alpha):
            raise UsageError(f"{target} decides its rounds on metric {decided[0]}, margin "
                             f"{decided[1]}, alpha {decided[2]:g}; give those (or --resume, "
                             "which keeps them) or choose another --name")
    tuned = getattr(strategy, "run", None) if strategy.kind == "tuned" else None
    if (tuned is None) != (not previous.get("tuned")):
        was = "with" if previous.get("tuned") else "without"
        raise UsageError(f"{target} holds an experiment run {was} --tune-each; continue it "
                         "with --resume or choose another --name")
    if tuned is not None:  # the table at the given configuration, and the same search
        recorded = previous["tuned"]
        planned = recorded.get("plan")
        if (recorded["keys"], recorded["budget"]) != (tuned.keys, tuned.budget):
            raise UsageError(f"{target} tunes {','.join(recorded['keys'])} with "
                             f"--tune-budget {recorded['budget']}; give those (or "
                             "--resume, which keeps them) or choose another --name")
    same = (previous.get("space") == space.name
            and planned == trial_plan(trials)
            and (sequential is None or previous["sequential"]["design"]
                 == sequential.design.to_dict())
            and previous.get("skipped") == skipped_plan(skipped)
            and (hpo is None) == (previous.get("hpo") is None))
    if not same:
        raise UsageError(f"{target} holds a different experiment (space "
                         f"{previous.get('space')}, {len(previous.get('trials', {}))} "
                         "trials); continue it with --resume or choose another --name")
    if sequential is None and previous.get("planned") and strategy.planned:
        from results.stats.planned import departures
        from results.stats.sequential import SeedDesign

        was, now = previous["planned"], strategy.planned
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
    check_unchanged(previous, [s.config for s in [*trials, *(t for t, _ in skipped)]]
                    or [base], args.allow_changed)
    print(f"Experiment {name} exists with the same plan: resuming it.")
    if sequential is not None:
        from ablations.experiment.strategies.seeds_auto import SequentialRun

        sequential = SequentialRun.from_record(previous["sequential"])
        trials = sequential.current_trials()
        strategy = strategy_for(sequential=sequential, root=target)
    if tuned is not None:
        from ablations.experiment.strategies.tuned import TunedRun

        strategy = strategy_for(tuned=TunedRun.from_record(previous["tuned"]), root=target)
    strategy.planned = previous.get("planned")  # the record made before its first trial
    return trials, strategy
