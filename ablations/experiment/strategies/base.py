"""The interface of a run kind. :func:`ablations.experiment.runner.run_experiment` runs one
Tune experiment through these hooks and never asks which kind it has; the command line and the
library call :meth:`Strategy.execute` and print what the strategy says.

A new kind (a factorial design is ``factorial.Factorial``, tuned ablations
``tuned.Tuned``) is a new subclass: what trials the trainable
gets (:meth:`trainable_plan`), how Tune searches and schedules them (:meth:`tune_setup`), its
callbacks, what experiment.json records (:meth:`record`), and what happens when the search, or
a round, ends (:meth:`specs`, :meth:`finish`, :meth:`execute`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from ablations.experiment.options import TUNE_SUBDIR

if TYPE_CHECKING:
    from ablations.config import TrialConfig
    from ablations.experiment.progress import Planned
    from ablations.experiment.options import ExperimentResult, RunOptions
    from search_spaces import TrialSpec



class Strategy:
    """A run kind: how one experiment turns its planned trials into Tune trials and results.

    The attributes are what the runner and the result tables need from any kind; a subclass
    sets what differs."""

    kind = "strategy"
    tune_subdir = TUNE_SUBDIR  # Tune's folder of this run under the experiment's folder
    tensorboard_dir = TUNE_SUBDIR  # what TensorBoard reads, under the experiment's folder
    round_number = 1  # trials.parquet's ``round``
    phase = "evaluation"  # trials.parquet's ``phase``: evaluation / search / tuning / tuned
    earlier_rows: Optional[tuple] = None  # (trials, epochs, predictions) kept from earlier runs
    search_samples: Optional[int] = None  # a search's number of trials; None: a fixed plan
    has_verdicts = True  # its trials form an ablation table with verdicts
    continues_into_rounds = False  # inconclusive arms can be continued with --seeds auto
    # the arguments of results.stats.planned.planned_record, set by planning; the record is made
    # on first use of :attr:`planned` (it loads the analysis modules, which planning does not)
    plan_spec: Optional[dict[str, Any]] = None
    _planned: Optional[dict[str, Any]] = None

    @property
    def planned(self) -> Optional[dict[str, Any]]:
        """experiment.json's ``planned`` (results/stats/planned.py): the settings fixed before the
        data and, for a fixed table, the design whose pilot look it is; None for an
        experiment whose experiment.json has none."""
        if self._planned is None and self.plan_spec is not None:
            from results.stats.planned import planned_record

            self._planned = planned_record(**self.plan_spec)
        return self._planned

    @planned.setter
    def planned(self, record: Optional[dict[str, Any]]) -> None:
        self._planned, self.plan_spec = record, None

    # ------------------------------------------------------------------ run by the runner

    def record(self, metadata: dict[str, Any], trials: Sequence[TrialSpec]) -> None:
        """Add this kind's fields to experiment.json's ``metadata`` (written before Tune
        starts and again when it ends)."""

    def provenance_configs(self) -> list[TrialConfig]:
        """Configurations besides the trials' whose code and data the provenance covers."""
        return []

    def trainable_plan(self, trials: Sequence[TrialSpec]) -> dict[str, dict[str, Any]]:
        """What the trainable receives: trial name -> configuration (``to_dict``)."""
        return {spec.name: spec.config.to_dict() for spec in trials}

    def progress_plan(self, trials: Sequence[TrialSpec]
                      ) -> tuple[int, dict[str, Planned], Optional[Planned]]:
        """(trials expected, name -> Planned, the Planned of a trial not named in advance)."""
        from ablations.experiment.progress import Planned
        from ablations.trial.cost import estimated_cost

        planned = {spec.name: Planned(spec.config.optim.epochs, estimated_cost(spec.config))
                   for spec in trials}
        return len(trials), planned, None

    def tune_setup(self, trials: Sequence[TrialSpec], options: RunOptions, root: str,
                   planned: dict[str, Planned]) -> tuple[dict[str, Any], Any]:
        """Tune's ``param_space`` and ``TuneConfig`` for a new run."""
        raise NotImplementedError

    def before_restore(self, root: str, options: RunOptions) -> None:
        """Called before ``Tuner.restore`` continues an interrupted run."""

    def callbacks(self, root: str, options: RunOptions) -> list[Any]:
        """Tune callbacks of this kind (beside progress and trackers)."""
        return []

    def specs(self, grid: Any, trials: Sequence[TrialSpec]) -> list[TrialSpec]:
        """The trials that ran, as TrialSpecs, from Tune's ResultGrid (a fixed plan: as
        planned)."""
        return list(trials)

    def finish(self, result: ExperimentResult, root: str, options: RunOptions) -> None:
        """After the tables are written (e.g. the best configuration of a search)."""

    # ------------------------------------------------------------------ run by the callers

    def execute(self, trials: Sequence[TrialSpec], options: RunOptions,
                skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False,
                say: Callable[[str], None] = print) -> ExperimentResult:
        """Run the experiment (or continue it with ``resume``) and return its tables."""
        from ablations.experiment.runner import run_experiment

        return run_experiment(trials, options, skipped, strategy=self, resume=resume)

    def count(self, trials: Sequence[TrialSpec], seeds: Sequence[int],
              crossed: bool = False) -> str:
        """How many trials, for the console's first line."""
        raise NotImplementedError

    def design_lines(self, alpha: float) -> list[str]:
        """What ``--dry-run`` prints about the design before the data and the trials."""
        return []

    def describe(self, trials: Sequence[TrialSpec], base: TrialConfig,
                 skipped: Sequence[tuple[TrialSpec, str]]) -> list[str]:
        """What ``--dry-run`` prints after its first line."""
        raise NotImplementedError

    def checked_configs(self, trials: Sequence[TrialSpec]) -> list[TrialConfig]:
        """The configurations whose data every worker must reach (``--address``)."""
        return [spec.config for spec in trials]

    def verdict_settings(self, metric: str, margin: Optional[str], alpha: float,
                         reference: str) -> tuple[str, str, str | float, float, Optional[dict]]:
        """(reference, metric, margin, alpha, sequential record) the summary decides with:
        the settings recorded before the data, and for a fixed table planned as the pilot
        look of a design, that record (its ``design`` and ``seeds``)."""
        from results.stats.planned import pilot_design

        planned = self.planned
        if not planned:
            return reference, metric, margin or "5%", alpha, None
        return (planned["reference"], planned["metric"], planned["margin"],
                float(planned["alpha"]), planned if pilot_design(planned) else None)

    def summary_lines(self, trials_df: Any, *, metric: str, margin: Any,
                      alpha: float) -> list[str]:
        """Lines printed after the summary's table (e.g. a factorial design's effects)."""
        return []

    def closing_lines(self, directory: Any) -> list[str]:
        """Lines printed after the summary (e.g. where the best configuration is)."""
        return []
