"""How an experiment runs (not what: that is the list of trials) and what a run returns;
shared by the runner, the result tables and the designs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional, Protocol

import pandas as pd

from ablations.config.comparison import DEFAULT_REFERENCE
from ablations.results.io.files import is_uri, join

TUNE_SUBDIR = "tune"


class Recorded(Protocol):
    """What the runner and experiment.json take of a design (designs/base.py's ``Design``):
    its record, a plug-in's spec, and the settings it fixed before the data."""

    spec: Optional[str]
    planned: Optional[dict[str, Any]]

    def record(self, metadata: dict[str, Any]) -> None: ...


@dataclass
class RunOptions:
    """How to run an experiment (not what: that is the list of trials)."""

    storage: Path | str  # results root (a path or a URI); the experiment goes in storage/name
    name: str
    space: str
    reference: str = DEFAULT_REFERENCE  # the variant the others are compared with
    address: Optional[str] = None  # None: start a local Ray; else an existing cluster
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_concurrent: int = 0  # 0: as many as resources allow
    max_failures: int = 0  # retries of a failed trial, each from its last checkpoint
    retry_failed: bool = False  # on resume: retry failed trials from their last checkpoint
    time_limit_s: Optional[float] = None  # each run of a trial ends past it, as timeout
    reuse_workers: bool = True  # False: a fresh process per trial (clean peak memory)
    # finished trials of other experiments under ``storage`` with a planned trial's identity
    # are taken instead of trained (trial_store.py)
    reuse: bool = True
    # a finished table that takes new variants (resuming.growth's record): its own finished
    # trials are kept and only the new ones train, in a new Tune run beside the first
    grown: Optional[dict[str, Any]] = None
    dashboard: bool = True
    verbose: int = 0  # Ray Tune's own console output: 0 none, 1 status table, 2 every result
    progress: bool = True  # events: each finished trial, a status with an ETA (progress.py)
    progress_epochs: bool = False  # also a line per trial per epoch (--progress epochs)
    command: list[str] = field(default_factory=list)
    trackers: list[Any] = field(default_factory=list)  # Tune callbacks of --log-to (trackers/)
    tracker_specs: list[Any] = field(default_factory=list)  # theirs, as experiment.json keeps them
    auto_batch: Optional[dict[str, Any]] = None  # what --auto-batch probed and chose
    # Entered around Tuner.fit: the command line's SIGTERM handling (cli/signals.py); the
    # library installs no signal handler.
    fit_guard: Optional[Callable[[], ContextManager[Any]]] = None
    # where Tune's lines other than its start-up ones go with verbose 0 (None: with those, in
    # the experiment's tune_console.log; the command line: its stdout)
    tune_console: Any = None


@dataclass
class ExperimentResult:
    directory: Path | str  # a Path for a local experiment, the URI otherwise
    trials: pd.DataFrame
    epochs: pd.DataFrame
    predictions: pd.DataFrame
    wall_s: float = math.nan  # the driver's time in Tuner.fit


def experiment_dir(options: RunOptions) -> Path:
    storage = str(options.storage)
    if is_uri(storage):
        return join(storage, options.name)
    return str((Path(storage) / options.name).resolve())
