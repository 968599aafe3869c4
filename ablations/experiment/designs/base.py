"""The interface of a design: how an experiment's trials are planned, run and recorded.

A design (``table.Table``, ``factorial.Factorial``, ``search.Search``, ``rounds.Rounds``,
``tuned.Tuned``) runs its trials (:meth:`Design.execute`), writes what defines it into
experiment.json (:meth:`Design.record`) and is rebuilt from it (:meth:`Design.from_record`),
says whether a folder's design is its own plan (:meth:`Design.same_plan_as`) and which
configurations its trials start from (:meth:`Design.configs`). The designs that run one Tune
experiment hand :func:`ablations.experiment.execution.runner.run_experiment` a
:class:`~ablations.experiment.execution.tune_setup.TuneSetup`; rounds and stages run several.
A design describes itself in the words a reader sees: the run's count, the dry run, the lines
after the summary, what a resume will do (the methods under "how it describes itself"; the
text may name arguments with :func:`~ablations.config.values.arg`, which the command line
shows as its flags).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from ablations.config.comparison import DEFAULT_MARGIN, DEFAULT_MAX_SEEDS, Decision
from ablations.experiment.core.design_options import rounds_of
from ablations.experiment.core.options import TUNE_SUBDIR
from ablations.experiment.core.plans import trial_plan

if TYPE_CHECKING:
    from ablations.config import TrialConfig
    from ablations.experiment.core.options import ExperimentResult, RunOptions
    from ablations.experiment.core.request import Request
    from ablations.experiment.planning.table_plan import PlanState
    from ablations.search_spaces import Space, TrialSpec


def refuse_unreachable_tolerance(request: Request, most: int, *, rounds: bool) -> None:
    """Refuse a ``max_failure_rate`` that ``most`` seeds per variant cannot meet even where
    none diverges (every variant would stay short of `equivalent`), in one line naming the
    seeds it needs (``rounds``: the design reaches its seeds in rounds, up to ``max_seeds``)."""
    if request.max_failure_rate is None:
        return
    from ablations.experiment.core.request import UsageError, arg
    from ablations.results.stats.failures import failure_rate_upper, seeds_for_tolerance

    needed = seeds_for_tolerance(request.max_failure_rate, request.alpha)
    if needed > most:
        best = float(failure_rate_upper(0, most, request.alpha))
        how = (f"{arg('max_seeds')} {needed}" if rounds else f"{arg('seeds')} {needed}")
        raise UsageError(f"{arg('max_failure_rate')} {request.max_failure_rate:.0%}: {most} "
                         f"seeds per variant bound the rate of divergence at {best:.0%} at "
                         f"best (none diverged), so no variant could be equivalent; give "
                         f"{needed} seeds or more ({how}), or a tolerance above {best:.0%}")


def planned_decision(request: Request, space: Space) -> Decision:
    """The decision every design fixes before the data: the reference, metric, margin, α and
    the tolerance for divergence."""
    return Decision(reference=space.reference, metric=request.metric,
                    margin=request.margin or DEFAULT_MARGIN, alpha=request.alpha,
                    max_failure_rate=request.max_failure_rate)


def spec_of(design: object, chosen: type) -> str:
    """What experiment.json records of a plug-in design, so that a resume imports it again:
    the name or spec it was asked for by, or (asked for with its options) its
    ``package.module:Class``."""
    return design if isinstance(design, str) else f"{chosen.__module__}:{chosen.__qualname__}"


def refuse_max_seeds(request: Request, asked_by: str) -> None:
    """Refuse ``max_seeds`` (given) where no rounds follow the fixed design: ``cross_seeds``,
    or the design ``asked_by`` names.

    Raises:
        UsageError: always.
    """
    from ablations.experiment.core.request import UsageError, arg

    by = arg("cross_seeds") if request.cross_seeds else asked_by
    raise UsageError(f"{arg('max_seeds')} plans the rounds a fixed ablation table can be "
                     f"continued into; {by} keeps the fixed design: drop {arg('max_seeds')}")


def refuse_crossed(request: Request) -> None:
    """Refuse ``cross_seeds`` for a design whose seeds are no fixed grid per variant (rounds,
    a search).

    Raises:
        UsageError: ``cross_seeds`` given.
    """
    from ablations.experiment.core.request import UsageError, arg

    if request.cross_seeds:
        raise UsageError(f"{arg('cross_seeds')} runs a fixed grid of seeds per variant of an "
                         f"ablation table; it does not combine with {arg('seeds')} auto or a "
                         "search space")


class Design:
    """A run kind. The attributes are data the callers read; the methods are the interface."""

    name: Optional[str] = None  # a plug-in design's --design name (designs/registry.py)
    record_key: Optional[str] = None  # experiment.json's key of this design's record
    spec: Optional[str] = None  # the --design a plug-in design was chosen by (recorded)
    # a plug-in design's options (a core/design_options.py DesignOptions subclass whose kind is
    # the design's name): its arguments and command-line flags
    options: Optional[type] = None
    asked_by = "fixed seeds"  # what asks for this design, as an error message names it
    continues_into_rounds = False  # inconclusive arms can be continued with --seeds auto
    # a finished experiment of this design takes more variants under its name (its verdicts
    # read the whole table): :meth:`added_variants`
    grows = False
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

    # ------------------------------------------------------------- how a plug-in is planned

    @classmethod
    def check_request(cls, request: Request, space: Space) -> None:
        """Refuse what this design cannot run (one UsageError each, naming the argument and
        the fix), before anything is planned. A plug-in design runs a table's variants at
        fixed seeds; override to accept more or refuse more."""
        from ablations.experiment.core.request import UsageError, arg

        what = (f"space {space.name} is a search" if space.is_search else
                f"{arg('seeds')} auto runs rounds" if request.seeds == "auto" else None)
        if what:
            raise UsageError(f"{arg('design')} {spec_of(request.design, cls)}: {what}; this design "
                             "runs an ablation table's variants at fixed seeds")

    @classmethod
    def check_base(cls, request: Request, space: Space, base: TrialConfig) -> None:
        """Refuse what the base configuration shows this design cannot run (e.g. a search of
        the runner's keys over one's own code), after the model and the datasets are known."""

    @classmethod
    def seed_list(cls, request: Request) -> list[int]:
        """Every seed the design may run (fixed seeds: the request's).

        Raises:
            UsageError: ``pilot`` given with fixed seeds.
        """
        from ablations.experiment.core.request import UsageError, arg

        if rounds_of(request.design).pilot is not None:
            raise UsageError(f"{arg('pilot')} applies with {arg('seeds')} auto only (fixed "
                             f"seeds: the pilot is {arg('seeds')})")
        return list(request.seeds)

    @classmethod
    def prepare(cls, state: PlanState) -> Design:
        """This design planned from ``state`` (the request, the space, the base, the datasets,
        the seeds): the table's trials on each dataset (:meth:`PlanState.plan_table`), then
        :meth:`plan`. Fills ``state``'s trials, skipped and notes; a design that plans
        otherwise (a search, a factorial design, rounds, stages) overrides it."""
        state.plan_table()
        design, state.trials = cls.plan(state.request, state.space, state.trials)
        if state.across:  # fixed seeds at full α on each dataset: no rounds follow
            design.continues_into_rounds = False
        if cls.name:  # a plug-in: its --design is recorded, so a resume imports it again
            design.spec = spec_of(state.request.design, cls)
        return design

    @classmethod
    def options_of(cls, request: Request) -> Any:
        """A plug-in design's options (its :attr:`options` class): those the request was
        given, else the class's defaults (the design asked for by its name); None for a
        design without options."""
        if cls.options is None:
            return None
        return request.design if isinstance(request.design, cls.options) else cls.options()

    def planned_settings(self, request: Request, space: Space,
                         seeds: Sequence[int]) -> dict[str, Any]:
        """The arguments of :func:`ablations.results.stats.planned.planned_record`
        (experiment.json's ``planned``): the ``decision`` fixed before the data (reference,
        metric, margin, α, tolerance); for a fixed table that can be continued into rounds,
        its ``seeds`` and
        ``max_seeds`` (default 10), the sequential design whose pilot look they are. A
        design that keeps the fixed design at full α (and ``cross_seeds``) refuses
        ``max_seeds``.

        Raises:
            UsageError: ``max_seeds`` where no rounds can follow, or below the seeds run.
        """
        from ablations.experiment.core.request import UsageError, arg

        spec: dict[str, Any] = {"decision": planned_decision(request, space)}
        pilot = self.continues_into_rounds and not request.cross_seeds
        max_seeds = rounds_of(request.design).max_seeds
        most = max(len(seeds), max_seeds or DEFAULT_MAX_SEEDS) if pilot else len(seeds)
        refuse_unreachable_tolerance(request, most, rounds=pilot)
        if max_seeds is not None:
            if not pilot:
                refuse_max_seeds(request, self.asked_by)
            if max_seeds < len(seeds):
                raise UsageError(f"{arg('max_seeds')} {max_seeds} is below the "
                                 f"{len(seeds)} seeds run; give {arg('max_seeds')} {len(seeds)} "
                                 "for the fixed design at full alpha, or more to plan rounds")
        if not pilot:
            return spec
        return {**spec, "seeds": list(seeds), "max_seeds": max_seeds}

    @classmethod
    def plan(cls, request: Request, space: Space,
             trials: list[TrialSpec]) -> tuple[Design, list[TrialSpec]]:
        """The design and its trials for ``request``, from the table's ``trials`` (each
        variant at each seed, on each dataset); a resume rebuilds the design with
        :meth:`from_record` and runs the recorded trials instead."""
        return cls(), trials

    def execute(self, trials: Sequence[TrialSpec], options: RunOptions,
                skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False
                ) -> ExperimentResult:
        """Run the experiment (or continue it with ``resume``) and return its tables; what a
        design with several Tune runs reports between them goes out as events
        (ablations/experiment/core/events.py)."""
        raise NotImplementedError

    def record(self, metadata: dict[str, Any]) -> None:
        """Add this design's fields to experiment.json's ``metadata`` (written before Tune
        starts, after it ends, and between the parts of a design with several); the runner
        adds a plug-in's :attr:`spec`."""

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

    def added_variants(self, trials: Sequence[TrialSpec],
                       recorded_trials: Sequence[TrialSpec],
                       skipped: Sequence[TrialSpec] = ()) -> list[str]:
        """The variants ``trials`` adds to ``recorded_trials`` (what an experiment of this
        design recorded), in plan order: where every recorded trial is planned again unchanged
        and every other trial belongs to a new variant run at the recorded seeds, on each
        recorded dataset where the plan does not skip its cell (``skipped``: the plan's cells
        that cannot run). [] where ``trials`` is not the recorded table plus whole variants, or
        the design does not grow."""
        if not self.grows:
            return []
        now, was = trial_plan(trials), trial_plan(recorded_trials)
        if any(now.get(name) != config for name, config in was.items()):
            return []
        new = [spec for spec in trials if spec.name not in was]
        added = list(dict.fromkeys(spec.variant for spec in new))
        if not added or set(added) & {spec.variant for spec in recorded_trials}:
            return []
        cells = {(spec.config.dataset, spec.seed) for spec in recorded_trials}
        for variant in added:
            if {(spec.config.dataset, spec.seed) for spec in [*new, *skipped]
                    if spec.variant == variant} != cells:
                return []
        return added

    def may_continue(self, meta: dict[str, Any]) -> bool:
        """Whether this finished run's inconclusive variants may be continued with ``--seeds
        auto`` (``meta``: its experiment.json): a table that planned the rounds it is the pilot
        look of, or was recorded before runs planned them; not rounds, a search, tuned
        ablations, a factorial design's cells or a design of its own seeds."""
        from ablations.results.stats.planned import pilot_design

        planned = meta.get("planned")
        return self.continues_into_rounds and (planned is None
                                               or pilot_design(planned) is not None)

    def recorded_plan(self, meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Tune's trial name -> ``TrialConfig.to_dict()`` of each trial this design runs, from
        its experiment.json ``meta`` (what a tracker logs as a trial's params)."""
        return dict(meta.get("trials", {}))

    @classmethod
    def rounds_refusal(cls, name: str, meta: dict[str, Any], resume: str) -> Optional[str]:
        """Why experiment ``name`` (``meta``: its experiment.json; ``resume``: its plain
        resume command) cannot be continued with ``seeds="auto"``, in one line; None if it
        can."""
        if cls.continues_into_rounds:
            return None
        from ablations.experiment.core.request import arg

        return (f"{arg('seeds')} auto: {name} holds an experiment run with {cls.asked_by}, "
                f"which runs at fixed seeds; resume it without {arg('seeds')} auto")

    def configs(self, trials: Sequence[TrialSpec]) -> list[TrialConfig]:
        """The configurations ``trials`` and the trials this design adds start from: the data
        every worker must reach, the provenance a resume checks."""
        return [spec.config for spec in trials]

    # ---------------------------------------------------------------- how it describes itself

    def count_text(self, trials: Sequence[TrialSpec], seeds: Sequence[int],
                   crossed: bool = False) -> str:
        """How many trials, for the run's first line."""
        cells = f", crossed: {len(seeds)}x{len(seeds)} cells" if crossed else ""
        datasets = {s.config.dataset for s in trials}
        on = f" x {len(datasets)} datasets" if len(datasets) > 1 else ""
        return (f"{len(trials)} trials ({len({s.variant for s in trials})} variants x "
                f"{len(seeds)} seeds{on}{cells})")

    def dry_run_lines(self, alpha: float) -> list[str]:
        """What the dry run says about the design before the data and the trials."""
        return []

    def describe(self, trials: Sequence[TrialSpec], base: TrialConfig,
                 skipped: Sequence[tuple[TrialSpec, str]]) -> list[str]:
        """What the dry run lists after its first line: the trials."""
        from ablations.experiment.designs.text import describe_trials

        return [describe_trials(trials, base, skipped)]

    def summary_lines(self, trials: Any, meta: dict[str, Any],
                      decision: Decision) -> list[str]:
        """Lines after the summary's table (``trials``: trials.parquet's rows, ``meta``:
        experiment.json; ``decision``: the summary's reference, metric, margin and alpha)."""
        return []

    def tables(self, trials: Any, meta: dict[str, Any],
               decision: Decision) -> dict[str, Any]:
        """The design's own tables of a finished run, by name (``Results.tables``: e.g. a
        factorial design's ``effects``), at the summary's ``decision``: each table its
        recorded analysis names (``Analysis.table_names``), less those these trials cannot
        make (a cell without an ok trial: the summary's lines say why)."""
        from ablations.results.stats.analyses import analysis_of

        analysis, tables = analysis_of(meta), {}
        for name in analysis.table_names:
            try:
                table = analysis.table(name, trials, decision)
            except (ValueError, KeyError):
                continue
            if table is not None:
                tables[name] = table
        return tables

    def closing_lines(self, directory: Any) -> list[str]:
        """Lines at the end of the run (e.g. where the best configuration is)."""
        return []

    def resume_line(self, name: str, space: str, target: str, trials: Sequence[TrialSpec],
                    retry_failed: bool) -> str:
        """What the resume of experiment ``name`` (space ``space``, folder ``target``, its
        recorded ``trials``) will do, in one line
        (:func:`~ablations.experiment.designs.resume_text.counts_line` counts them)."""
        raise NotImplementedError

