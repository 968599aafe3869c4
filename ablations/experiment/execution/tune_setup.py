"""What one Tune experiment needs from a design: the narrow object that
:func:`ablations.experiment.execution.runner.run_experiment` calls, and never asks which design it
serves.

:class:`Part` says which part of the experiment a Tune run is (its folder, its rows' round and
phase, the rows kept from the parts before it). :class:`TuneSetup` says what the trainable gets
and how Tune searches and schedules it; :class:`TableTune` is the one for a list of fixed trials
(a grid, a factorial design, a round, an evaluation stage). A search's is
``designs.search.SearchTune``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ablations.experiment.core.options import TUNE_SUBDIR

if TYPE_CHECKING:
    from ablations.config import TrialConfig
    from ablations.experiment.core.options import RunOptions
    from ablations.experiment.execution.progress import Planned
    from ablations.search_spaces import TrialSpec


@dataclass(frozen=True)
class Part:
    """Which part of an experiment one Tune run is."""

    tune_subdir: str = TUNE_SUBDIR  # Tune's folder of this run under the experiment's folder
    round_number: int = 1  # trials.parquet's ``round``
    phase: str = "evaluation"  # trials.parquet's ``phase``: evaluation / search / tuning / tuned
    earlier_rows: Optional[tuple] = None  # (trials, epochs, predictions) kept from earlier parts


class TuneSetup:
    """The trainable's plan, Tune's param space and TuneConfig, callbacks, and what a restore
    needs; ``part`` places the run in its experiment."""

    part = Part()
    # whether finished trials of other experiments with a trial's identity stand in for it
    # (trial_store.py): fixed trials, yes; a search's samples are not known in advance
    reusable = False

    def trainable_plan(self, trials: Sequence[TrialSpec]) -> dict[str, TrialConfig]:
        """What the trainable receives: plan key -> configuration."""
        return {spec.name: spec.config for spec in trials}

    def progress_plan(self, trials: Sequence[TrialSpec]
                      ) -> tuple[int, dict[str, Planned], Optional[Planned]]:
        """(trials expected, name -> Planned, the Planned of a trial not named in advance)."""
        from ablations.experiment.execution.progress import Planned  # loads Ray Tune
        # torch only to count FLOPs not kept yet
        from ablations.trial.cost import estimated_cost, planned_epochs

        planned = {spec.name: Planned(planned_epochs(spec.config), estimated_cost(spec.config))
                   for spec in trials}
        return len(trials), planned, None

    def tune_config(self, trials: Sequence[TrialSpec], options: RunOptions, root: str,
                    planned: dict[str, Planned]) -> tuple[dict[str, Any], Any]:
        """Tune's ``param_space`` and ``TuneConfig`` (search, scheduler, stopping) for a new
        run."""
        raise NotImplementedError

    def callbacks(self, root: str, options: RunOptions) -> list[Any]:
        """Tune callbacks of this run (beside progress and trackers)."""
        return []

    def before_restore(self, root: str, options: RunOptions) -> None:
        """Called before ``Tuner.restore`` continues an interrupted run."""

    def specs(self, grid: Any, trials: Sequence[TrialSpec]) -> list[TrialSpec]:
        """The trials that ran, as TrialSpecs, from Tune's ResultGrid (fixed trials: as
        planned)."""
        return list(trials)


class TableTune(TuneSetup):
    """Every trial once, the longest first: Tune's BasicVariantGenerator over the trial names
    (their configurations go to the trainable)."""

    reusable = True

    def __init__(self, part: Part = Part()) -> None:
        self.part = part

    def tune_config(self, trials: Sequence[TrialSpec], options: RunOptions, root: str,
                    planned: dict[str, Planned]) -> tuple[dict[str, Any], Any]:
        from ray import tune

        from ablations.experiment.execution.trainable import trial_name  # loads Ray Tune
        from ablations.trial.cost import longest_first  # torch only to count FLOPs not kept yet

        # The grid holds names (readable in the progress table); configs go in the plan.
        # Longest trials first: the short ones fill the slots at the end (ablations/trial/cost.py).
        order = longest_first([spec.config for spec in trials],
                              [planned[spec.name].cost for spec in trials])
        param_space = {"trial": tune.grid_search([trials[i].name for i in order])}
        tune_config = tune.TuneConfig(
            max_concurrent_trials=options.max_concurrent or None,
            # one worker process runs many trials (torch imported once), unless isolated
            reuse_actors=options.reuse_workers,
            trial_name_creator=trial_name,
            trial_dirname_creator=trial_name,
        )
        return param_space, tune_config
