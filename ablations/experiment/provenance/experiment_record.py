"""experiment.json as a run starts: the folder made, the fields every design has
(:func:`experiment_metadata`: the plan, the options, the versions, the provenance, the
trackers, own code's metrics), the design's record, and what a resume, a later round or a
grown table keeps of the record before it (:func:`start_record`)."""

from __future__ import annotations

import datetime as dt
import platform
from pathlib import Path
from typing import Any, Optional, Sequence

from ablations.config import TrialConfig
from ablations.config.safety import installed_torch
from ablations.experiment.core.options import Recorded, RunOptions, experiment_dir
from ablations.experiment.core.plans import skipped_plan, trial_plan
from ablations.experiment.provenance.provenance import changes, collect, git_commit_label
from ablations.results.io.files import (
    DESIGN_PLUGIN_KEY,
    METADATA_FILE,
    SCHEMA_VERSION,
    is_uri,
    join,
    read_metadata,
    remove_stale_temp_files,
    write_json_atomic,
)
from ablations.search_spaces.spaces import TrialSpec



def start_record(trials: Sequence[TrialSpec], options: RunOptions,
                 skipped: Sequence[tuple[TrialSpec, str]], configs: Sequence[TrialConfig], *,
                 design: Optional[Recorded], part: Any, resume: bool) -> tuple[str, dict[str, Any]]:
    """Make the experiment's folder and write its experiment.json before the fit: the fields
    every design has, the design's record (a plug-in's spec, so that a resume and ``report``
    import it again), the settings fixed before the first trial (a resume or a later round
    keeps the first record; an experiment recorded without one gets none), the variants added
    to a finished table each time, and a later round's or resume's first start. ``configs``:
    the configurations the trainable gets. Returns (the folder, the metadata)."""
    root = experiment_dir(options)
    if not is_uri(root):
        Path(root).mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(root)
    started_at = dt.datetime.now(dt.timezone.utc)
    metadata = experiment_metadata(trials, options, started_at, skipped, configs)
    if design is not None:
        design.record(metadata)
        if design.spec:
            metadata[DESIGN_PLUGIN_KEY] = design.spec
    previous = read_metadata(root)
    metadata["auto_batch"] = options.auto_batch or (previous or {}).get("auto_batch")
    if previous is None:  # results/stats/planned.py
        planned = design.planned if design is not None else None
    else:
        planned = previous.get("planned")
    if planned:
        metadata["planned"] = planned
    # variants added to the finished table, each time (resuming.growth)
    grown = [*(previous or {}).get("grown", []), *([options.grown] if options.grown else [])]
    if grown:
        metadata["grown"] = grown
    if (resume or part.earlier_rows is not None or part.round_number > 1) \
            and previous is not None:  # a later round or stage of the same experiment
        metadata["started_at"] = previous.get("started_at", metadata["started_at"])
        metadata["resumed_at"] = [*previous.get("resumed_at", []),
                                  *([started_at.isoformat()] if resume else [])]
    write_json_atomic(metadata, join(root, METADATA_FILE))
    return root, metadata


def experiment_metadata(trials: Sequence[TrialSpec], options: RunOptions,
                        started_at: dt.datetime, skipped: Sequence[tuple[TrialSpec, str]],
                        planned: Sequence[TrialConfig] = ()) -> dict[str, Any]:
    """experiment.json's fields every design has; ``planned``: the configurations the
    trainable gets (a search's base), whose data the provenance covers too."""
    import ray

    configs = [spec.config for spec in trials] + [spec.config for spec, _ in skipped]
    provenance = collect(configs + list(planned))
    # A resume (the folder already holds an experiment) that found the code, data, packages or
    # device changed (the CLI refuses code/data changes without --allow-changed) keeps what
    # changed and the provenance it replaces.
    previous = read_metadata(experiment_dir(options)) or {}
    history = list(previous.get("resume_history", []))
    recorded_trackers = previous.get("log_to", [])
    blocking, notes = changes(previous.get("provenance"), provenance)
    if blocking or notes:
        replaced = {k: v for k, v in previous["provenance"].items() if k != "environment"}
        history.append({"at": started_at.isoformat(), "changed": blocking, "notes": notes,
                        "previous": replaced})
    return {
        "schema_version": SCHEMA_VERSION,  # results/io/files.py; read_metadata refuses others
        "experiment": options.name,
        "space": options.space,
        "reference": options.reference,
        "started_at": started_at.isoformat(),
        "command": options.command,
        "trials": trial_plan(trials),
        # the plan's order (JSON keeps "trials" sorted by name): the tables' order on a resume
        "trial_order": [spec.name for spec in trials],
        "skipped": skipped_plan(skipped),
        "search": None,  # a search's: designs/search.py
        "max_concurrent": options.max_concurrent,
        "max_failures": options.max_failures,
        "seeds": sorted({spec.seed for spec in trials}),
        "cpus_per_trial": options.cpus_per_trial,
        "gpus_per_trial": options.gpus_per_trial,
        "time_limit_s": options.time_limit_s,
        "address": options.address or "local",
        "torch_version": installed_torch(),
        "ray_version": ray.__version__,
        "python_version": platform.python_version(),
        "git_commit": git_commit_label(provenance["git"]),
        "hostname": platform.node(),
        "provenance": provenance,  # code, git, packages, device, data: provenance.py
        "resume_history": history,
        # every tracker that holds the experiment's logs: those recorded before (a resume's
        # trials go on logging to them) and this run's (trackers/specs.py)
        "log_to": [*recorded_trackers,
                   *[spec for spec in (spec.to_dict() for spec in options.tracker_specs)
                     if spec not in recorded_trackers]],
        # own code's metrics, name -> {direction, unit}: the verdicts' directions and the
        # report's units (results/io/directions.py); null for the built-in model and plugins
        "metrics": declared_metrics_of(configs),
    }


def declared_metrics_of(configs: Sequence[TrialConfig]) -> Optional[dict[str, Any]]:
    """What own code declares about its metrics, as experiment.json's ``metrics`` (None for
    the built-in model and plugins): what the analysis is given to read own code's metrics
    (ablations.results.io.directions.metric_of)."""
    codes = [config.own_code for config in configs if config.own_code is not None]
    if not codes:
        return None
    return {name: metric.record() for name, metric in codes[0].metrics.items()}
