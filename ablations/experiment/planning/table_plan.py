"""The table an experiment runs, planned before anything starts: the space's trials on each
dataset (:class:`PlanState`; a design's :meth:`~ablations.experiment.designs.base.Design.
prepare` calls :meth:`PlanState.plan_table` with its own table), every trial validated against
its device and data (:func:`plan_trials`). Planning (ablations/experiment/prepare.py) fills
the state a design plans from; it prints nothing."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ablations.config import ConfigError, TrialConfig
from ablations.config.safety import resolve_systems, skip_reason
from ablations.experiment.planning.cells import crossed_seeds, with_null_control
from ablations.experiment.planning.datasets_plan import check_named, named_trials, on_dataset
from ablations.experiment.core.request import Request, arg
from ablations.model.data import MAX_SYNTHETIC_FRAMES, load_directory
from ablations.trial.loading import scalar_columns
from ablations.trial.contracts import contract_of

# a design's table on one dataset: (request, space, base, seeds, scalar names, only) -> trials
Table = Callable[[Request, Any, TrialConfig, Sequence[int], Optional[Sequence[str]],
                  Optional[Sequence[str]]], list]


def expanded_table(request: Request, space: Any, base: TrialConfig, seeds: Sequence[int],
                   scalar_names: Optional[Sequence[str]], only: Optional[Sequence[str]]
                   ) -> list:
    """The space's variants (``only`` those) at every seed, from ``base``: an ablation
    table's trials on one dataset."""
    from ablations.search_spaces import expand

    return expand(space, base, seeds, only=only, scalar_names=scalar_names)


@dataclass
class PlanState:
    """What planning knows before a design plans: the request, the space, the base
    configuration, the datasets (name -> keys), the seeds, the variants asked for
    (``only``: the reference added where the request left it out, ``added_reference``), the
    compute capability of a local run's GPUs. A design's planning fills ``trials``,
    ``skipped``, ``notes`` and ``data_summary`` (and may refine ``base``)."""

    request: Request
    space: Any
    base: TrialConfig
    datasets: dict[str, dict[str, Any]]
    seeds: list[int]
    only: Optional[list[str]] = None
    added_reference: bool = False
    capability: Optional[tuple[int, int]] = None
    trials: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data_summary: Optional[str] = None

    @property
    def across(self) -> bool:
        """Whether the table runs on several datasets."""
        return len(self.datasets) > 1

    def plan_table(self, table: Table = expanded_table) -> None:
        """``table`` on each dataset (seeds paired within it; crossed seeds and the null
        control added where asked), every trial validated (:func:`plan_trials`): fills
        ``trials``, ``skipped``, ``notes`` and ``data_summary``."""
        request, space = self.request, self.space
        trials = []
        for name, keys in self.datasets.items():
            on_it = on_dataset(self.base, name, keys) if self.across else self.base
            scalar_names = scalar_columns(on_it) if space.variants_from_data else None
            specs = table(request, space, on_it, self.seeds, scalar_names, self.only)
            if request.cross_seeds:
                specs = crossed_seeds(specs, self.seeds)
            if request.null_control:
                specs = with_null_control(specs, space.reference)
            check_named(name, specs)
            trials += named_trials(name, specs, self.across)
        self.trials, self.skipped, notes, self.data_summary = plan_trials(
            space, trials, capability=self.capability, resolve=request.resolve_conflicts)
        self.notes += notes
        if self.added_reference:
            self.notes.append(f"{arg('only')}: added the reference {space.reference!r}, which "
                              "every variant's verdict is compared with")


def plan_trials(space: Any, trials: Sequence[Any], *, resolve: bool,
                capability: Optional[tuple[int, int]] = None
                ) -> tuple[list[Any], list[tuple[Any, str]], list[str], Optional[str]]:
    """Validate every trial against its device and data before any trial starts; with the
    compute ``capability`` of the GPUs the trials will get (a local run), against that too.

    Returns (trials to run, skipped (trial, reason), notes on mapped settings, data summary).
    A cell that cannot run is skipped in spaces with ``skip_invalid``, else an error.
    """
    runnable, skipped, notes = [], [], []
    data_info, scalar_names, summary = _data_facts(trials)
    for spec in trials:
        config = spec.config
        if config.own_code is not None:  # its data is its own; its switches are checked
            _check_command_values(spec)
            config, mapped = resolve_systems(config, device=config.systems.device,
                                             resolve=resolve, capability=capability)
            notes.extend(f"{spec.name}: {note}" for note in mapped)
            runnable.append(dataclasses.replace(spec, config=config))
            continue
        frames, counts, data = data_info[config.data.data_dir]
        where = config.data.data_dir or "the synthetic data"
        _check_scalars(spec.name, config, scalar_names[config.data.data_dir], where)
        problem = _run_problem(space, config, frames, where, capability)
        if problem is not None:
            if space.skip_invalid:
                skipped.append((spec, problem))
                continue
            raise ConfigError(f"trial {spec.name}: {problem}")
        config, mapped = resolve_systems(config, device=config.systems.device, resolve=resolve,
                                         capability=capability)
        notes.extend(f"{spec.name}: {note}" for note in mapped)
        if counts is not None:
            _check_fits_data(spec.name, config, counts, data)
        runnable.append(dataclasses.replace(spec, config=config))
    if not runnable:
        raise ConfigError(f"no trial of space {space.name} can run here: "
                          f"{skipped[0][1] if skipped else 'none selected'}")
    return runnable, skipped, notes, "; ".join(summary) or None


# a data directory ("": the synthetic data) -> (its frames, its split's counts, the data;
# None for the synthetic data)
DataFacts = dict[str, tuple[int, Optional[dict], Any]]


def _data_facts(trials: Sequence[Any]) -> tuple[DataFacts, dict[str, list[str]], list[str]]:
    """Each data directory the trials train on, loaded once: its facts, its scalar columns
    (data directory -> names), and a summary line of each directory."""
    summary = []
    data_info: DataFacts = {}
    scalar_names: dict[str, list[str]] = {}
    for data_dir in sorted({spec.config.data.data_dir for spec in trials}):
        if data_dir:
            data = load_directory(data_dir)  # DataError names the file and problem
            counts = {s: int((data.split == s).sum()) for s in ("train", "val", "test")}
            data_info[data_dir] = (data.num_frames, counts, data)
            scalar_names[data_dir] = list(data.scalar_names)
            summary.append(f"{data_dir}: {len(data.target)} samples {counts}, "
                           f"frames x C x H x W = {data.num_frames} x "
                           f"{' x '.join(map(str, data.image_shape))}, "
                           f"{len(data.scalar_names)} scalars, strata {list(data.strata.columns)}")
        else:
            data_info[data_dir] = (MAX_SYNTHETIC_FRAMES, None, None)
            scalar_names[data_dir] = scalar_columns(TrialConfig())
    return data_info, scalar_names, summary


def _check_command_values(spec: Any) -> None:
    """Refuse own code's trial with values its contract says cannot run (a command's: a value
    its program cannot receive, a key changed that its command line never names)."""
    config = spec.config
    if config.own_code is not None:
        problem = contract_of(config.own_code).problem(config.own_code, config.model)
        if problem:
            raise ConfigError(f"trial {spec.name}: {problem}")


def _check_scalars(trial: str, config: TrialConfig, columns: Sequence[str], where: str) -> None:
    """Refuse ``drop_scalars`` naming a column the data lacks, or leaving out every scalar
    column of a trial that uses scalars."""
    unknown = [name for name in config.data.dropped_scalars if name not in columns]
    if unknown:
        raise ConfigError(f"trial {trial}: drop_scalars: {where} has no scalar column "
                          f"{unknown[0]!r}; its scalar columns: {', '.join(columns) or 'none'}")
    if config.data.use_scalars and config.data.dropped_scalars and \
            not set(columns) - set(config.data.dropped_scalars):
        raise ConfigError(f"trial {trial}: drop_scalars={config.data.drop_scalars} leaves "
                          "out "
                          f"every scalar column of {where}; to train without scalars set "
                          "use_scalars=false (components' no_scalars variant) instead")


def _run_problem(space: Any, config: TrialConfig, frames: int, where: str,
                 capability: Optional[tuple[int, int]]) -> Optional[str]:
    """Why the trial cannot run here (more frames than the data has; in a space that skips
    invalid cells, also what its device and switches rule out), else None."""
    if config.data.temporal_frames > frames:
        return (f"temporal_frames={config.data.temporal_frames} but {where} has {frames} "
                "frames; lower temporal_frames")
    if space.skip_invalid:
        return skip_reason(config, config.systems.device, capability)
    return None


def _check_fits_data(trial: str, config: TrialConfig, counts: dict[str, int], data: Any) -> None:
    """Refuse a batch larger than the training samples the trial uses, and scalars from a
    table that has none."""
    n_train = counts["train"]
    if config.data.max_train_examples:
        n_train = min(n_train, config.data.max_train_examples)
    if config.optim.batch_size > n_train:
        raise ConfigError(
            f"trial {trial}: batch_size={config.optim.batch_size} exceeds the "
            f"{n_train} training samples; lower batch_size"
        )
    if config.data.use_scalars and not data.scalar_names:
        raise ConfigError(f"{config.data.data_dir}: table.parquet has no scalar_* columns; "
                          "set use_scalars=false")
