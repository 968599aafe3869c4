"""Experiment trackers, MLflow and Weights & Biases, through Ray Tune's own logger callbacks.

``--log-to mlflow[:TRACKING_URI]`` and ``--log-to wandb[:PROJECT]`` (repeatable) add one
callback each to the Tuner's RunConfig: :class:`MLflowTracker`, a
``ray.air.integrations.mlflow.MLflowLoggerCallback``, and :class:`WandbTracker`, a
``ray.air.integrations.wandb.WandbLoggerCallback`` (both in
:mod:`ablations.experiment.trackers.runs`).
Each trial is one run of the tracker:

- parameters: the trial's ``TrialConfig.flat()`` (its row of trials.parquet: ``ablation``,
  ``seed``, ``lr``, ``cnn_widths``, ...), not Tune's ``{"trial": name}``; the callbacks read
  the trials from experiment.json, the record of what was run, as the trainable reads its plan;
- metrics: what the trainable reports each epoch (:func:`tracked_metrics`) at step = epoch; the
  last epoch's report adds the test and final metrics;
- tags: ``variant`` (the ablation), ``seed``, ``trial_name``, ``experiment``, ``space``; MLflow
  groups the runs in an MLflow experiment named like the runner's, W&B in a group of that name.

After the run :func:`publish_summary` adds a run ``<experiment>-verdicts`` to each tracker with
the verdict table (verdicts.csv, verdicts.md) and the table the command printed (summary.txt).
The user's guide is docs/trackers.md.

Nothing here is imported unless ``--log-to`` is given (ray's W&B module imports wandb).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence
from urllib.parse import urlparse

import pandas as pd

from ablations.experiment.core import events
from ablations.config.values import expanded_path
from ablations.experiment.core.request import UsageError, arg
from ablations.experiment.trackers.registry import TrackerKind, register_tracker, tracker_kind
from ablations.experiment.trackers.runs import (
    MLflowTracker,
    TrackerSpec,
    WandbTracker,
)
from ablations.results.io.files import first_line, is_uri, read_metadata

DISTRIBUTION = "ablation-runner"  # pip install 'ablation-runner[mlflow]' installs a tracker
DEFAULT_WANDB_PROJECT = "ablation-runner"
MLFLOW_SUBDIR = "mlruns"  # the default MLflow store: <experiment>/mlruns/mlflow.db


def parse_log_to(text: str) -> TrackerSpec:
    """``NAME[:TARGET]`` of a registered tracker (ablations/experiment/trackers/registry.py):
    ``mlflow``, ``mlflow:URI`` (``sqlite:///FILE``, ``file:DIR``, a directory, or any
    ``scheme://`` URI MLflow takes, e.g. ``http://host:5000``), ``wandb``, ``wandb:PROJECT``.

    Raises:
        ValueError: one line, for a bad value or a tracker whose package is not installed.
    """
    name, _, target = text.strip().partition(":")
    try:
        kind = tracker_kind(name)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    missing = kind.not_installed()
    if missing:
        raise ValueError(f"{text!r}: {missing}")
    return TrackerSpec(name, kind.target(target.strip(), text) if target.strip() else "")


def _wandb_project(target: str, text: str) -> str:
    if re.search(r"[/\\#?%:]", target) or len(target) > 128:
        raise ValueError(f"{text!r}: a W&B project name has at most 128 characters and none "
                         "of / \\ # ? % :")
    return target


def _tracking_uri(target: str, text: str) -> str:
    """The tracking URI with its local path made absolute (Tune's trials change directory; the
    driver does not, but a relative store would depend on where the command ran)."""
    if not target:
        return ""
    if target.startswith("sqlite:"):
        if not target.startswith("sqlite:///") or target == "sqlite:///":
            raise ValueError(f"{text!r}: an SQLite store is sqlite:///relative/file.db or "
                             "sqlite:////absolute/file.db")
        where = expanded_path(target.removeprefix("sqlite:///"), "")
        return "sqlite:///" + str(where.resolve())
    if target.startswith("file:"):
        return expanded_path(urlparse(target).path, "").resolve().as_uri()
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", target):
        return target  # a server (http://, https://) or another store MLflow knows
    # a directory: MLflow's file store
    return expanded_path(target, "").resolve().as_uri()


def tracker_callbacks(specs: Sequence[TrackerSpec], root: str, *, experiment: str,
                      space: str, resume: bool = False,
                      grown: Optional[Mapping[str, Any]] = None) -> list[tuple[TrackerSpec, Any]]:
    """The Tune callbacks of ``--log-to`` for the experiment at ``root`` (a path or a URI),
    each with its spec (the target resolved: what experiment.json's ``log_to`` records).

    With ``resume``: Tune restores the callbacks the experiment started with (its RunConfig is
    in tuner.pkl), so its trials go on logging where they did; the trackers recorded in
    experiment.json's ``log_to`` are the ones returned when ``specs`` is empty (for the
    verdicts), and other ``specs`` get a warning. A table that ``grown`` adds variants to
    trains them in a Tune run of their own: they log to ``specs`` (the recorded trackers when
    empty), and the console says where the kept trials logged.

    Raises:
        UsageError: a tracker that cannot log from here (MLflow's default store with a URI
            experiment root, W&B online without credentials, a recorded tracker's package
            not installed), before any trial starts.
    """
    specs = list(dict.fromkeys(_resolved(spec, root) for spec in specs))  # one of each
    if resume:
        recorded = [TrackerSpec(**item) for item in (read_metadata(root) or {}).get("log_to", [])]
        if specs and set(specs) != set(recorded):
            started = ", ".join(f"{spec.kind}:{spec.target}" for spec in recorded) or "none"
            if grown:
                named = ", ".join(f"{spec.kind}:{spec.target}" for spec in specs)
                events.info(f"{arg('log_to')}: the new trials ({', '.join(grown['added'])}) "
                            f"and the verdicts log to {named}; the kept trials logged to "
                            f"{started}")
            else:
                events.warning(f"{arg('log_to')}: the trials go on logging to the trackers "
                               f"the experiment started with ({started}); only the verdicts "
                               f"go to {arg('log_to')}'s")
        specs = specs or recorded
    callbacks: list[tuple[TrackerSpec, Any]] = []
    for spec in specs:
        try:
            kind = tracker_kind(spec.kind)
        except ValueError as exc:  # a recorded tracker of one's own, not registered here
            raise UsageError(f"{experiment} logs to {spec.kind}: {exc}") from None
        missing = kind.not_installed()
        if missing:
            raise UsageError(f"{experiment} logs to {spec.kind}: {missing}")
        kind.check()
        callbacks.append((spec, kind.make(target=spec.target, root=root,
                                          experiment=experiment, space=space)))
    return callbacks


def _resolved(spec: TrackerSpec, root: str) -> TrackerSpec:
    """The default store or project filled in."""
    if spec.target:
        return spec
    return TrackerSpec(spec.kind, tracker_kind(spec.kind).default(root))


def _default_store(root: str) -> str:
    if is_uri(root):
        raise UsageError(f"{arg('log_to')} mlflow: the experiment is at a URI and MLflow's "
                         f"default store is a local file; give one: {arg('log_to')} "
                         "mlflow:sqlite:////path/mlflow.db or mlflow:http://HOST:PORT")
    return f"sqlite:///{Path(root) / MLFLOW_SUBDIR / 'mlflow.db'}"


def _check_wandb_credentials() -> None:
    """W&B online needs an API key; Ray's callback would raise for its absence mid-run."""
    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun") \
            or os.environ.get("WANDB_API_KEY"):
        return
    import wandb

    if not wandb.login(prompt=False, verify=False):
        raise UsageError(f"{arg('log_to')} wandb: no W&B API key (run `wandb login` or set "
                         "WANDB_API_KEY); WANDB_MODE=offline logs to local files instead")


def publish_summary(trackers: Sequence[Any], summary: str,
                    verdicts: Optional[pd.DataFrame],
                    across: Optional[pd.DataFrame] = None) -> None:
    """Give each tracker ``summary``, the table the command printed, and ``verdicts``, the
    experiment's verdict table (:func:`ablations.results.stats.decisions.verdicts_of`'s; None: no
    verdicts); over several datasets ``across``, the verdicts across them
    (across_datasets.csv). A tracker that fails here gets a warning line: the results are
    written already."""
    from ablations.results.stats.analysis import dropped_note, verdict_note
    from ablations.results.report.page import markdown_cells
    from ablations.results.report.tables import verdict_view

    files = {"summary.txt": summary + "\n"}
    if verdicts is not None and len(verdicts):
        reference, metric = (verdicts.attrs["settings"][key] for key in ("reference", "metric"))
        alpha = verdicts.attrs["settings"]["alpha"]
        files["verdicts.csv"] = verdicts.to_csv(index=False)
        shown = markdown_cells(verdict_view(verdicts, metric=metric, alpha=alpha))
        note = verdict_note(verdicts)
        dropped = dropped_note(verdicts.attrs.get("dropped_nan", []), metric)
        if dropped:
            note += f"\n{dropped}"
        files["verdicts.md"] = (f"# Verdicts against {reference} on {metric}\n\n"
                                f"{note}\n\n{shown}\n")
    else:
        verdicts = None
    if across is not None:
        files["across_datasets.csv"] = across.to_csv(index=False)
    for tracker in trackers:
        try:
            tracker.publish(files, verdicts, across)
        except tracker.errors as exc:
            first = first_line(exc)
            events.warning(f"{type(tracker).__name__}: the verdicts were not logged: {first}")


def _mlflow(*, target: str, root: str, experiment: str, space: str) -> MLflowTracker:
    return MLflowTracker(tracking_uri=target, root=root, experiment=experiment, space=space)


def _wandb(*, target: str, root: str, experiment: str, space: str) -> WandbTracker:
    return WandbTracker(project=target, root=root, experiment=experiment, space=space)


register_tracker(TrackerKind("mlflow", _mlflow, usage="mlflow[:TRACKING_URI]", package="mlflow",
                             install=f"'{DISTRIBUTION}[mlflow]'",
                             target=_tracking_uri, default=_default_store))
register_tracker(TrackerKind("wandb", _wandb, usage="wandb[:PROJECT]", package="wandb",
                             install=f"'{DISTRIBUTION}[wandb]'",
                             target=_wandb_project, default=lambda root: DEFAULT_WANDB_PROJECT,
                             check=_check_wandb_credentials))
