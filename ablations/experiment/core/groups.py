"""The library's typed groups of an experiment's arguments and what a run gives back:
:class:`Seeds`, :class:`Resources` and :class:`Console` (with
:class:`~ablations.config.comparison.Decision`, the arguments ``Experiment`` takes in
groups), :class:`Results` (what ``run`` and ``resume`` return), :class:`Preview` (what
``preview`` shows) and :class:`Interrupted` (a stop before the results were written)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Literal, Optional, Sequence

import pandas as pd

from ablations.config.comparison import NOT_GIVEN, Decision
from ablations.config.statuses import UNFINISHED, TrialStatus
from ablations.config.values import named
from ablations.results.stats.baseline_check import BaselineCheck, DatasetChecks


@dataclass(frozen=True)
class Seeds:
    """Which seeds every variant runs. None: not given. The rounds' pilot and most seeds are
    their design's options (``design=Rounds(pilot=..., max_seeds=...)``)."""

    seeds: int | Sequence[int] | Literal["auto"] | None = None  # 3: seeds 0, 1, 2; "auto": rounds
    cross: Optional[bool] = None  # every init seed with every order seed (docs/seed-sources.md)
    null_control: Optional[bool] = None  # the reference again at other seeds, a null arm
    sources: Optional[str] = None  # which sources vary with the seed: "init,order,data"


@dataclass(frozen=True)
class Resources:
    """Where and how wide the trials run. None: not given."""

    cpus_per_trial: Optional[float] = None
    gpus_per_trial: Optional[float] = None
    max_concurrent: Optional[int] = None  # 0: as many as the resources allow
    max_failures: Optional[int] = None  # retries of a failed trial from its last checkpoint
    address: Optional[str] = None  # a Ray cluster; None: this process's Ray, or a local one
    num_cpus: Optional[int] = None  # the CPUs of the local Ray a run starts
    auto_batch: Optional[bool] = None  # probe the largest batch that fits the trial's GPU
    # each run of a trial ends past it as ``timeout``: seconds, or "90s", "15m", "2h"
    time_limit: Optional[float | str] = None
    # False: train every trial, even where another experiment under the same storage finished
    # one with its identity (None: reuse those, trial_store.py)
    reuse: Optional[bool] = None


@dataclass(frozen=True)
class Console:
    """What a front end puts around a run (the command line sets these; a notebook need not):
    the Ray dashboard, Tune's own output, a line per epoch, the command recorded in
    experiment.json, a context around ``Tuner.fit`` (given the run's options: the command
    line's SIGTERM handling) and what to do once Ray has started (the command line re-enters a
    Ray job's working folder and installs its signal handler)."""

    dashboard: bool = False
    verbose: bool = False
    progress_epochs: bool = False
    command: Sequence[str] = ("ablations.Experiment",)
    fit_guard: Optional[Callable[[Any], ContextManager[Any]]] = None
    after_ray_start: Optional[Callable[[], None]] = None
    # where the lines Tune prints beyond its start-up ones go (a trial's error block the
    # progress does not replace; None: with the start-up ones, in tune_console.log)
    tune_console: Any = None


@dataclass
class Results:
    """What :meth:`Experiment.run` and :meth:`Experiment.resume` return: the experiment's
    folder and tables, its verdicts as its design decides them, and the text the command line
    prints of them."""

    directory: str
    trials: pd.DataFrame
    epochs: pd.DataFrame
    predictions: pd.DataFrame
    # None when no verdict is possible (e.g. no ok reference); over several datasets each
    # dataset's verdicts, one below the other, with a ``dataset`` column
    verdicts: Optional[pd.DataFrame]
    wall_s: float
    # the reference against the training mean and its last epoch
    # (ablations.results.stats.baseline_check); None without verdicts
    baseline_check: Optional[BaselineCheck | DatasetChecks] = None
    # the design's own tables by name (a factorial design's ``effects``, a tuned ablation's
    # ``tuned``: Design.tables) and over several datasets ``across``, each variant's verdict
    # across them (ablations.results.stats.datasets; across_datasets.parquet)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    name: str = ""
    storage: str = ""
    # the reference, metric, margin, alpha and tolerance the verdicts were decided with
    decision: Decision = NOT_GIVEN
    # the summary's table and notes (ablations/results/report/summary.py), the design's lines
    # after it and at the end, and the command that decides the inconclusive variants (None:
    # nothing to decide); text with the library's markers, str(...)-ready via ``named``
    summary: str = ""
    design_lines: list[str] = field(default_factory=list)
    closing_lines: list[str] = field(default_factory=list)
    continuation: Optional[str] = None
    # why the run stopped launching trials (its first trials failed alike,
    # ablations/experiment/execution/fail_fast.py); None when it did not
    stopped_early: Optional[str] = None

    @property
    def across(self) -> Optional[pd.DataFrame]:
        """``tables["across"]``: over several datasets, the verdicts across them."""
        return self.tables.get("across")

    @property
    def unfinished(self) -> int:
        """Trials a stop left unfinished (interrupted or not started): resume to end them."""
        return int(self.trials["status"].isin(list(UNFINISHED)).sum())

    def counts(self) -> dict[str, int]:
        """How many trials ended in each status."""
        return {str(status): int((self.trials["status"] == status).sum())
                for status in TrialStatus}

    def __str__(self) -> str:
        return named(self.summary)


class Interrupted(KeyboardInterrupt):
    """A stop (Ctrl-C, or SIGTERM where the command line makes it one) before the results were
    written; the trials' saved state is kept: resume the experiment ``name`` in
    ``storage`` to continue."""

    def __init__(self, storage: str, name: str, address: Optional[str] = None) -> None:
        super().__init__(f"{name} interrupted before its results were written")
        self.storage, self.name, self.address = storage, name, address


@dataclass
class Preview:
    """:meth:`Experiment.preview`: what a run would do."""

    prepared: Any  # planning's Prepared: the space, the base configuration, seeds, design
    name: str
    target: str  # the experiment's folder under the storage
    trials: list  # the trials the run would hold (a growth: the whole table)
    design: Any
    existing: bool  # the name holds an experiment already (resumed or grown)
    grown: Optional[dict[str, Any]]  # the growth's record (resuming.growth); None: none
    # of ``trials``, those the experiment finished ok or diverged (a growth keeps them all;
    # a resume of the same plan also keeps what Tune's state holds: its resume line says)
    kept: list[str]
