"""The interface of a design: how an experiment's trials are planned, run and recorded.

A design (``grid.Grid``, ``factorial.Factorial``, ``hpo.Search``, ``seeds_auto.Rounds``,
``tuned.Stages``) runs its trials (:meth:`Design.execute`), writes what defines it into
experiment.json (:meth:`Design.record`) and is rebuilt from it (:meth:`Design.from_record`),
says whether a folder's design is its own plan (:meth:`Design.same_plan_as`) and which
configurations its trials start from (:meth:`Design.configs`). The designs that run one Tune
experiment hand :func:`ablations.experiment.runner.run_experiment` a
:class:`~ablations.experiment.designs.tune_setup.TuneSetup`; rounds and stages run several.
What the command line prints about a design is in ablations/cli/design_text.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from ablations.experiment.options import TUNE_SUBDIR
from ablations.experiment.plans import trial_plan

if TYPE_CHECKING:
    from ablations.config import TrialConfig
    from ablations.experiment.options import ExperimentResult, RunOptions
    from ablations.search_spaces import TrialSpec


class Design:
    """A run kind. The attributes are data the callers read; the methods are the interface."""

    record_key: Optional[str] = None  # experiment.json's key of this design's record
    asked_by = "fixed seeds"  # what asks for this design, as an error message names it
    has_verdicts = True  # its trials form an ablation table with verdicts
    continues_into_rounds = False  # inconclusive arms can be continued with --seeds auto
    tensorboard_dir = TUNE_SUBDIR  # what TensorBoard reads, under the experiment's folder
    # the arguments of ablations.results.stats.planned.planned_record, set by planning; the record
    # is made on first use of :attr:`planned` (it loads the analysis modules, which planning does
    # not)
    plan_spec: Optional[dict[str, Any]] = None
    _planned: Optional[dict[str, Any]] = None

    @property
    def planned(self) -> Optional[dict[str, Any]]:
        """experiment.json's ``planned`` (results/stats/planned.py): the settings fixed before the
        data and, for a fixed table, the design whose pilot look it is; None for an
        experiment whose experiment.json has none."""
        if self._planned is None and self.plan_spec is not None:
            from ablations.results.stats.planned import planned_record  # loads scipy

            self._planned = planned_record(**self.plan_spec)
        return self._planned

    @planned.setter
    def planned(self, record: Optional[dict[str, Any]]) -> None:
        self._planned, self.plan_spec = record, None

    def execute(self, trials: Sequence[TrialSpec], options: RunOptions,
                skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False,
                say: Callable[[str], None] = print) -> ExperimentResult:
        """Run the experiment (or continue it with ``resume``) and return its tables;
        ``say`` gets the lines a design with several Tune runs reports between them."""
        raise NotImplementedError

    def record(self, metadata: dict[str, Any]) -> None:
        """Add this design's fields to experiment.json's ``metadata`` (written before Tune
        starts, after it ends, and between the parts of a design with several)."""

    @classmethod
    def from_record(cls, meta: dict[str, Any], root: str) -> Design:
        """The design of the experiment whose experiment.json is ``meta``, in folder ``root``
        (:meth:`record` wrote its fields)."""
        design = cls()
        design.planned = meta.get("planned")
        return design

    def same_plan_as(self, recorded: Design, trials: Sequence[TrialSpec],
                     recorded_trials: Sequence[TrialSpec], where: str) -> bool:
        """Whether ``recorded`` (the same type, rebuilt from the folder ``where``) is this
        plan, its trials ``recorded_trials`` those of ``trials``: then a start under that
        folder's name resumes it.

        Raises:
            UsageError: a setting this design decides with differs, naming it.
        """
        return trial_plan(trials) == trial_plan(recorded_trials)

    def configs(self, trials: Sequence[TrialSpec]) -> list[TrialConfig]:
        """The configurations ``trials`` and the trials this design adds start from: the data
        every worker must reach, the provenance a resume checks."""
        return [spec.config for spec in trials]

