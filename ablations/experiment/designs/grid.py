"""A grid of fixed seeds: every planned trial runs once, the longest first, in one Tune
experiment (:class:`~ablations.experiment.designs.tune_setup.GridTune`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from ablations.experiment.designs.base import Design
from ablations.experiment.designs.tune_setup import GridTune
from ablations.experiment.runner import run_experiment

if TYPE_CHECKING:
    from ablations.experiment.options import ExperimentResult, RunOptions
    from ablations.search_spaces import TrialSpec


class Grid(Design):
    """The planned trials, each run once (an ablation table at fixed seeds)."""

    continues_into_rounds = True

    def execute(self, trials: Sequence[TrialSpec], options: RunOptions,
                skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False,
                say: Callable[[str], None] = print) -> ExperimentResult:
        return run_experiment(trials, options, skipped, design=self, setup=GridTune(),
                              resume=resume)
