"""Resuming an experiment from its folder: which experiment, its design rebuilt from
experiment.json (:func:`ablations.experiment.designs.records.design_from_record`), the check
that the code and data have not changed since it started, and, with ``seeds="auto"``, a
fixed-seed experiment continued into rounds (ablations/experiment/continuing.py).

:meth:`ablations.experiment.api.Experiment.resume` (the command line's ``--resume``) and a
start under a folder that holds the same plan (:func:`same_name_again`) use it; it prints
nothing: what changed comes back as lines, or goes out as events.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ablations.config.comparison import DEFAULT_REFERENCE
from ablations.config import TrialConfig
from ablations.experiment.core import events
from ablations.experiment.continuing import PLAN_FIELDS, continue_plan
from ablations.experiment.designs.records import design_from_record
from ablations.experiment.core.design_options import rounds_of
from ablations.experiment.designs.rounds import Rounds
from ablations.experiment.core.options import TUNE_SUBDIR
from ablations.experiment.core.plans import plan_from_metadata, skipped_plan
from ablations.experiment.provenance.provenance import changes, collect
from ablations.experiment.core.request import Request, UsageError, arg
from ablations.results.io.files import (
    METADATA_FILE,
    TRIALS_FILE,
    MetadataError,
    first_line,
    join,
    list_dir,
    read_metadata,
)
from ablations.search_spaces import SPACES

if TYPE_CHECKING:
    from ablations.search_spaces import TrialSpec


@dataclass
class ResumePlan:
    """What :func:`resume_plan` read: what the resumed run needs."""

    name: str  # the experiment's folder under the storage
    space_name: str  # as experiment.json has it
    trials: list  # the TrialSpecs experiment.json recorded (a design with parts: so far)
    skipped: list  # (TrialSpec, reason) of the cells the plan skipped
    design: Any  # its design (a fixed run continued with seeds="auto": rounds, its rows round 1)
    seeds: list  # the seeds experiment.json recorded
    reference: str  # the variant the others are compared with
    reuse_workers: bool  # False when the space isolates its trials
    cpus_per_trial: float  # as recorded
    gpus_per_trial: float
    time_limit_s: Optional[float] = None  # as recorded (a resume's time_limit overrides it)
    continued: bool = False  # a fixed run continued into rounds
    warnings: list[str] = field(default_factory=list)  # what changed, resumed anyway
    notes: list[str] = field(default_factory=list)  # what else differs (packages, device)
    storage: str = ""  # the storage root it was read from


def latest_experiment(storage: str) -> str:
    """The name of the experiment in ``storage`` started or resumed last."""
    started = {}
    for entry in list_dir(storage):
        try:
            meta = read_metadata(join(storage, entry))
        except MetadataError:  # a damaged record: not the experiment to continue
            continue
        if meta is not None:
            started[entry] = max([meta.get("started_at", ""), *meta.get("resumed_at", [])])
    if not started:
        raise UsageError(f"{arg('resume')}: no experiment in {storage}; pass {arg('name')} or "
                         f"{arg('storage')}")
    return max(started, key=started.get)


def resume_plan(storage: str, name: Optional[str], request: Request, *,
                retry_failed: bool = False, allow_changed: bool = False) -> ResumePlan:
    """The experiment ``name`` (None: the one started or resumed last) in ``storage``,
    rebuilt from its experiment.json and checked unchanged. ``request``: its ``seeds``
    ``"auto"`` continues a fixed-seed experiment into rounds (with ``max_seeds``, ``metric``,
    ``margin``, ``alpha`` where given); any other field it gives that would change the
    recorded plan is refused.

    Raises:
        UsageError: one line, for every experiment that cannot be resumed so.
    """
    continuing = request.seeds == "auto"
    if not continuing and rounds_of(request.design).given():
        raise UsageError(f"{arg('resume')} keeps the experiment's seeds: {arg('pilot')} and "
                         f"{arg('max_seeds')} apply only when continuing a fixed-seed "
                         f"experiment with {arg('seeds')} auto")
    name = name or latest_experiment(storage)
    target = join(storage, name)
    meta = read_metadata(target)
    if meta is None:
        raise UsageError(f"{arg('resume')}: {target} is not an experiment folder (no "
                         "experiment.json)")
    missing = [key for key in ("space", "trials") if meta.get(key) is None]
    if missing:
        raise UsageError(f"{join(target, METADATA_FILE)} has no {missing[0]!r}; the experiment's "
                         "record is damaged: restore it or use another --name")
    trials, skipped = plan_from_metadata(meta)
    if not continuing:  # a continuation refuses them in its own words (continue_plan)
        refuse_plan_changes(request, name, meta, [spec.config for spec in trials])
    continued = None
    if continuing:  # refuses a search and rounds, each in its own words
        continued = Rounds.continuing(continue_plan(request, storage, name, meta,
                                                    retry_failed=retry_failed), target, meta)
    design = design_from_record(meta, target)
    warnings, notes = check_unchanged(meta, design.configs([*trials, *(t for t, _ in skipped)]),
                                      allow_changed)
    design = continued or design  # the fixed run's trials: round 1 as they are (continuing.py)
    space = SPACES.get(meta["space"])
    return ResumePlan(
        name=name, space_name=meta["space"], trials=trials, skipped=skipped, design=design,
        seeds=meta.get("seeds", []),
        reference=meta.get("reference") or (space.reference if space else DEFAULT_REFERENCE),
        reuse_workers=not (space and space.isolate_trials),
        cpus_per_trial=meta.get("cpus_per_trial", request.cpus_per_trial),
        gpus_per_trial=meta.get("gpus_per_trial", request.gpus_per_trial),
        time_limit_s=meta.get("time_limit_s"),
        continued=continued is not None, warnings=warnings, notes=notes, storage=storage)


# what a resume takes from the record, never from the request: the trials and how they run
RECORDED_FIELDS = (*PLAN_FIELDS, "datasets", "command", "metrics", "seed_sources", "design",
                   "factors", "tune_each", "tune_budget", "cross_seeds", "resolve_conflicts",
                   "cpus_per_trial", "gpus_per_trial")


def refuse_plan_changes(request: Request, name: str, meta: dict[str, Any],
                        configs: Sequence[TrialConfig]) -> None:
    """A resume continues the plan its experiment recorded (``configs``, its trials'): a
    field ``request`` gives that would plan other trials (other epochs, keys, seeds,
    resources) is refused in one line rather than dropped unseen. One that repeats the
    recorded plan passes (the command that started it, given again with --resume): seeds,
    epochs, ``--set`` keys, the variants and the resources are compared with the record."""
    given = [key for key in RECORDED_FIELDS if key in request.given]
    variants = {config.ablation for config in configs}

    def same(key: str) -> bool:
        try:
            if key == "epochs":
                return all(config.replace(epochs=request.epochs) == config for config in configs)
            if key == "overrides":
                return all(config.replace(**dict(request.overrides)) == config
                           for config in configs)
        except (ValueError, TypeError):  # a key the recorded trials do not have
            return False
        if key == "only":
            return set(request.only or ()) | {meta.get("reference")} == variants
        if key in ("cpus_per_trial", "gpus_per_trial"):
            return float(getattr(request, key)) == float(meta.get(key, -1))
        return False

    changed = [arg(key) for key in given if not same(key)]
    if "seeds" in request.given and isinstance(request.seeds, list) \
            and sorted(request.seeds) != sorted(meta.get("seeds") or []):
        changed.insert(0, arg("seeds"))
    if changed:
        raise UsageError(f"{arg('resume')} continues {name} as it was planned (space "
                         f"{meta.get('space')}, seeds {meta.get('seeds')}); "
                         f"{', '.join(changed)} would plan other trials: drop "
                         f"{'them' if len(changed) > 1 else 'it'}, give {arg('space')} as well "
                         f"to add variants, or start a new experiment under another "
                         f"{arg('name')} (it reuses the finished trials it shares)")


def check_unchanged(meta: dict[str, Any], configs: Sequence[TrialConfig],
                    allow_changed: bool) -> tuple[list[str], list[str]]:
    """Before resuming: refuse (one line) when the code or the data changed since the
    experiment started, unless ``allow_changed``. Returns (what changed, resumed anyway;
    what else differs: packages, device, commit); experiment.json keeps both
    (``resume_history``)."""
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
                         f"{arg('name')}, or pass {arg('allow_changed')} to continue anyway")
    return list(blocking), list(notes)


def same_name_again(request: Request, target: str, name: str, prepared: Any, *,
                    allow_changed: bool = False) -> tuple[list, Any, Optional[dict[str, Any]]]:
    """A start whose ``--name`` already holds an experiment at ``target``: the trials and the
    design that resume it when the plan (``prepared``: planning's ``Prepared``) is the one
    it recorded, with the code and data unchanged (:func:`check_unchanged`), and None; or,
    where the plan is the recorded table plus whole new variants of a design that grows
    (:meth:`~ablations.experiment.designs.base.Design.added_variants`) and every recorded
    trial finished, the whole table, the design and the growth's record (:func:`growth`).
    Anything else that would change the plan (another space's trials, another design, a
    setting the design decides with, the settings planned before its data) is refused with
    one line, before anything is written."""
    space, base, trials, skipped = (prepared.space, prepared.base, prepared.trials,
                                    prepared.skipped)
    design = prepared.design
    previous = read_metadata(target)
    if previous is None:
        raise UsageError(f"{target} already exists and is not an experiment of this tool; "
                         f"choose another {arg('name')} or {arg('storage')}")
    recorded_batch = previous.get("auto_batch")
    if request.auto_batch and recorded_batch:  # the same command again: the size it chose then
        trials = [dataclasses.replace(spec, config=spec.config.replace(
            batch_size=recorded_batch["micro_batch"] * spec.config.optim.grad_accum_steps))
            for spec in trials]
    recorded = design_from_record(previous, target)
    if type(recorded) is not type(design):
        raise UsageError(f"{target} holds an experiment run with {recorded.asked_by}; "
                         f"continue it with {arg('resume')} or choose another {arg('name')}")
    recorded_trials, recorded_skipped = plan_from_metadata(previous)
    same_cells = previous.get("skipped") == skipped_plan(skipped)
    same = (design.same_plan_as(recorded, trials, recorded_trials, target)
            and previous.get("space") == space.name and same_cells)
    # a growth keeps the recorded variants' skipped cells; a new variant may skip its own (a
    # cell its settings cannot run on one of several datasets)
    before = {spec.variant for spec in recorded_trials} | \
        {spec.variant for spec, _ in recorded_skipped}
    kept_cells = (previous.get("skipped") or {}) == \
        skipped_plan([cell for cell in skipped if cell[0].variant in before])
    added = [] if same or not kept_cells else \
        design.added_variants(trials, recorded_trials, [spec for spec, _ in skipped])
    if not same and not added:
        raise UsageError(f"{target} holds a different experiment (space "
                         f"{previous.get('space')}, {len(previous.get('trials', {}))} "
                         f"trials at seeds {previous.get('seeds')}; a table that keeps its "
                         f"trials, with the settings it ran with ({arg('seeds')}, "
                         f"{arg('epochs')}, {arg('set')}, ...), and adds variants grows it); "
                         f"continue it with {arg('resume')} or choose another "
                         f"{arg('name')} (its finished trials with the same configuration "
                         "are reused, not trained again)")
    check_planned_unchanged(design.planned, recorded.planned, target)
    grown = growth(previous, target, recorded_trials, trials, added, space.name) \
        if added else None
    warnings, notes = check_unchanged(
        previous, design.configs([*trials, *(t for t, _ in skipped)]) or [base],
        allow_changed)
    for line in warnings:
        events.warning(f"resuming although it changed ({arg('allow_changed')}): {line}")
    if notes:
        events.warning(f"since the experiment started: {'; '.join(notes)}")
    if grown is None:
        events.info(f"Experiment {name} exists with the same plan: resuming it.")
    else:
        new = len(trials) - len(recorded_trials)
        events.info(f"Experiment {name} grows: the space adds {', '.join(added)} "
                    f"({new} new trial{'s' if new != 1 else ''}); its "
                    f"{len(recorded_trials)} finished trials are kept and the verdicts are "
                    "taken over the whole table")
    return trials, recorded, grown


def growth(previous: dict[str, Any], target: str, recorded_trials: Sequence[TrialSpec],
           trials: Sequence[TrialSpec], added: Sequence[str], space: str) -> dict[str, Any]:
    """experiment.json's record of a finished experiment (``previous``, at ``target``) that
    takes the variants ``added`` (``trials``: the whole new table): when, what it held before
    and what was added. Its trials must all have ended ``ok`` or ``diverged`` (a grown table
    is a new Tune run beside the first; an unfinished trial is resumed, not grown around).

    Raises:
        UsageError: a recorded trial has not finished so.
    """
    import datetime as dt

    from ablations.experiment.provenance.trial_store import REUSABLE, read_table

    table = read_table(join(target, TRIALS_FILE))
    ended = {} if table is None else dict(zip(table["trial_name"].astype(str),
                                              table["status"].astype(str)))
    open_ = [spec.name for spec in recorded_trials if ended.get(spec.name) not in REUSABLE]
    if open_:
        listed = ", ".join(open_[:3]) + (f" and {len(open_) - 3} more" if len(open_) > 3 else "")
        raise UsageError(f"{target} cannot take new variants: {listed} did not finish ok or "
                         f"diverged; finish it first with {arg('resume')} (and "
                         f"{arg('retry_failed')}), or choose another {arg('name')}")
    kept = [spec.name for spec in recorded_trials]
    recorded = set(kept)
    # each growth's new trials are a Tune run in a folder of their own, which a resume of
    # the grown table continues (Table.from_record)
    tune = f"{TUNE_SUBDIR}-grown-{len(previous.get('grown') or []) + 1}"
    return {"at": dt.datetime.now(dt.timezone.utc).isoformat(), "tune": tune,
            "added": list(added),
            "variants_before": list(dict.fromkeys(spec.variant for spec in recorded_trials)),
            "space_before": previous.get("space"), "space": space, "kept": kept,
            "trials_added": [spec.name for spec in trials if spec.name not in recorded]}


def check_planned_unchanged(now: Any, was: Any, target: str) -> None:
    """Refuse (one line) a start under the folder ``target`` whose settings fixed before the
    data (``now``: experiment.json's ``planned`` it would record) differ from those recorded
    there (``was``)."""
    if not was or not now:
        return
    from ablations.results.stats.planned import departures  # loads scipy
    from ablations.results.stats.sequential import SeedDesign

    differ = departures(was, reference=now["reference"], metric=now["metric"],
                        margin=now["margin"], alpha=now["alpha"])
    if was.get("design") != now.get("design"):  # the same trials: another --max-seeds
        differ.append(f"{arg('max_seeds')} {SeedDesign.from_dict(now['design']).max_seeds} "
                      f"(planned {SeedDesign.from_dict(was['design']).max_seeds})"
                      if was.get("design") and now.get("design") else
                      f"{arg('max_seeds')} (the design)")
    if was.get("max_failure_rate") != now.get("max_failure_rate"):
        differ.append(f"{arg('max_failure_rate')} {now.get('max_failure_rate')} (planned "
                      f"{was.get('max_failure_rate')})")
    if differ:
        raise UsageError(f"{target} holds an experiment planned before its data with "
                         f"other settings: {'; '.join(differ)}; give those (or "
                         f"{arg('resume')}, which keeps them) or choose another {arg('name')}")
