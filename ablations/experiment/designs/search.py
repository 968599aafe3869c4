"""A search (``search.Search``): Optuna (TPE) through Ray Tune's OptunaSearch, with an ASHA
scheduler, in one Tune experiment.

``SearchRun`` says what to search; :class:`SearchTune` builds Tune's search and scheduler for
``run_experiment``, keeps the Optuna study (a URI root's copy uploaded as trials start and end);
:class:`Search`, the design, writes the best trial's configuration as YAML
(``write_best_config``) when the search ends.
"""

from __future__ import annotations

import functools
import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import pandas as pd

from ablations.config.statuses import TrialStatus
from ablations.config import TrialConfig, apply_overrides
from ablations.config.values import arg, command, named
from ablations.experiment.core.request import UsageError
from ablations.experiment.designs.base import (
    Design,
    planned_decision,
    refuse_crossed,
    refuse_max_seeds,
)
from ablations.experiment.core.design_options import Search as SearchOptions
from ablations.experiment.core.design_options import rounds_of
from ablations.experiment.designs.resume_text import counts_line
from ablations.experiment.execution.tune_setup import Part, TuneSetup
from ablations.experiment.core.options import experiment_dir
from ablations.experiment.execution.runner import run_experiment
from ablations.experiment.execution.tables import HPO_TRIAL, plain_value, result_name
from ablations.results.io.files import atomic_write, is_file, is_uri, join, read_bytes
from ablations.search_spaces.hpo import HPO_METRIC, HPO_MODE
from ablations.search_spaces.spaces import TrialSpec

if TYPE_CHECKING:
    from ablations.experiment.core.options import ExperimentResult, RunOptions
    from ablations.experiment.execution.progress import Planned
    from ablations.experiment.core.request import Request
    from ablations.experiment.planning.table_plan import PlanState
    from ablations.search_spaces import Space

BEST_CONFIG_FILE = "best_config.yaml"
OPTUNA_FILE = "optuna.db"


@dataclass
class SearchRun:
    """An Optuna (TPE) search through Ray Tune's OptunaSearch, with an ASHA scheduler."""

    base: TrialConfig  # the configuration every sampled trial starts from
    space: dict[str, tuple[str, Any]]  # field -> (kind, args): see search_spaces/hpo.py
    num_samples: int
    metric: str = HPO_METRIC  # search_spaces/hpo.py
    mode: str = HPO_MODE
    scheduler: str = "asha"  # asha / fifo (no early stopping)


def optuna_file(root: str, name: str) -> Path:
    """The study's SQLite file: in the experiment folder, or for a URI root a local copy
    (SQLite needs a local file), one per experiment URI, uploaded to the bucket as trials
    start and end (:func:`optuna_upload`) and at the end. The searcher Tune saves keeps this
    path: a resume on another machine needs the same temporary folder (``TMPDIR``)."""
    if not is_uri(root):
        return Path(root) / OPTUNA_FILE
    key = hashlib.sha1(root.encode()).hexdigest()[:12]
    local = Path(tempfile.gettempdir()) / "ablation-runner" / f"{name}-{key}" / OPTUNA_FILE
    local.parent.mkdir(parents=True, exist_ok=True)
    return local


def fetch_optuna(root: str, name: str, *, resume: bool = False) -> Path:
    """The study's file for a URI root, before a search starts or resumes. A new search starts
    from no file (not the local copy an earlier experiment of the same name left). A resume
    keeps the local copy where there is one (it is never older than the bucket's, which is
    uploaded from it), else starts from the bucket's (another machine)."""
    local = optuna_file(root, name)
    if is_uri(root):
        remote = join(root, OPTUNA_FILE)
        if resume and not local.exists() and is_file(remote):
            local.write_bytes(read_bytes(remote))
        elif not resume:
            local.unlink(missing_ok=True)
    return local


def publish_optuna(root: str, name: str) -> None:
    if is_uri(root):
        data = optuna_file(root, name).read_bytes()
        atomic_write(join(root, OPTUNA_FILE), lambda handle: handle.write(data))


def optuna_upload(root: str, name: str) -> list[Any]:
    """For a URI root, a Tune callback that uploads the study as each trial starts and ends: a
    driver killed mid-search leaves the study in the bucket as of its last trial event, and
    ``--resume`` elsewhere starts from it (:func:`fetch_optuna`). None for a local root, where
    the study is the file."""
    if not is_uri(root):
        return []
    from ablations.experiment.designs.optuna_search import OptunaUpload  # loads Ray Tune

    return [OptunaUpload(functools.partial(publish_optuna, root, name))]


def sampled_spec(result: Any, run: SearchRun) -> TrialSpec:
    name = result_name(result)
    params = (result.config or {}).get("params", {})  # None: a trial that never started
    config = apply_overrides(run.base, {**params, "ablation": HPO_TRIAL}, source="hpo sample")
    return TrialSpec(name, HPO_TRIAL, config.seed, config)


def write_best_config(trials_df: pd.DataFrame, run: SearchRun, root: str) -> Optional[str]:
    """The best trial's configuration as a YAML file that ``--config`` accepts."""
    import yaml

    done = trials_df[trials_df["status"] == TrialStatus.OK]
    if done.empty:
        return None
    best = done.sort_values(run.metric, ascending=run.mode == "min").iloc[0]
    default = TrialConfig.of(model=run.base.plugin).flat()  # that model's defaults
    keys = [k for k in default
            if k not in ("ablation", "dataset", "seed", "seed_offset", "model", "data_dir",
                         "num_threads",
                         "device", "compile_requested", "precision_requested") and k in best]
    values = {k: plain_value(best[k]) for k in keys
              if k in run.space or plain_value(best[k]) != default[k]}
    if run.base.plugin:
        values["model"] = run.base.plugin
    header = (f"# Best of {len(trials_df)} trials of {run.num_samples} ({run.metric} "
              f"{plain_value(best[run.metric]):.4f}, trial {best['trial_name']}).\n"
              f"# {named(command('--space', 'components', '--config', BEST_CONFIG_FILE))}\n")
    text = header + yaml.safe_dump(values, sort_keys=True)
    return atomic_write(join(root, BEST_CONFIG_FILE), lambda handle: handle.write(text.encode()))


class SearchTune(TuneSetup):
    """Tune's side of a search: Optuna's study ``study`` (default: the experiment's name) in
    the experiment's optuna.db, the trainable's plan entry ``plan_key`` (the base every sample
    starts from). ``fresh``: a URI root's study file starts empty (False: another study of the
    same experiment is already in it). ``startup_trials``: TPE's random trials before it models
    (None: Optuna's default, 10). ``sampled``: a finished trial's TrialSpec from its result
    (default: :func:`sampled_spec`)."""

    def __init__(self, search: SearchRun, *, part: Part = Part(phase="search"),
                 plan_key: str = HPO_TRIAL, study: Optional[str] = None, fresh: bool = True,
                 startup_trials: Optional[int] = None,
                 sampled: Optional[Callable[[Any], TrialSpec]] = None) -> None:
        self.search, self.part, self.plan_key, self.study = search, part, plan_key, study
        self.fresh, self.startup_trials = fresh, startup_trials
        self.sampled = sampled or functools.partial(sampled_spec, run=search)

    def trainable_plan(self, trials: Sequence[TrialSpec]) -> dict[str, TrialConfig]:
        return {self.plan_key: self.search.base}  # every sample starts from the base

    def progress_plan(self, trials: Sequence[TrialSpec]
                      ) -> tuple[int, dict[str, Planned], Optional[Planned]]:
        from ablations.experiment.execution.progress import Planned  # loads Ray Tune
        from ablations.trial.cost import estimated_cost  # torch only to count FLOPs not kept yet

        base = self.search.base
        return self.search.num_samples, {}, Planned(base.optim.epochs, estimated_cost(base))

    def tune_config(self, trials: Sequence[TrialSpec], options: RunOptions, root: str,
                    planned: dict[str, Planned]) -> tuple[dict[str, Any], Any]:
        import optuna
        from ray import tune
        from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

        # Ray Tune's subclasses: this module leaves Ray and Optuna unloaded until a search runs
        from ablations.experiment.designs.optuna_search import ResumableOptunaSearch
        from ablations.experiment.execution.trainable import trial_name

        run = self.search
        params = {}
        for name, (kind, args) in run.space.items():
            if kind == "loguniform":
                params[name] = tune.loguniform(*args)
            elif kind == "uniform":
                params[name] = tune.uniform(*args)
            elif kind == "choice":
                params[name] = tune.choice(list(args))
            else:
                raise ValueError(f"unknown search kind {kind!r} for {name}")
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # not "A new study created" lines
        storage = optuna.storages.RDBStorage(
            f"sqlite:///{fetch_optuna(root, options.name, resume=not self.fresh)}")
        study = self.study or options.name
        if self.startup_trials is None:
            searcher = ResumableOptunaSearch(study_name=study, storage=storage,
                                             seed=run.base.seed)
        else:
            sampler = optuna.samplers.TPESampler(n_startup_trials=self.startup_trials,
                                                 seed=run.base.seed)
            searcher = ResumableOptunaSearch(study_name=study, storage=storage,
                                             sampler=sampler)
        scheduler = (
            ASHAScheduler(time_attr="training_iteration", max_t=run.base.optim.epochs,
                          grace_period=1, reduction_factor=2)
            if run.scheduler == "asha" else FIFOScheduler()
        )
        tune_config = tune.TuneConfig(
            metric=run.metric, mode=run.mode, search_alg=searcher, scheduler=scheduler,
            num_samples=run.num_samples, max_concurrent_trials=options.max_concurrent or None,
            reuse_actors=True, trial_name_creator=trial_name, trial_dirname_creator=trial_name,
        )
        return {"trial": self.plan_key, "params": params}, tune_config

    def callbacks(self, root: str, options: RunOptions) -> list[Any]:
        return optuna_upload(root, options.name)

    def before_restore(self, root: str, options: RunOptions) -> None:
        fetch_optuna(root, options.name, resume=True)  # from the bucket if not here

    def specs(self, grid: Any, trials: Sequence[TrialSpec]) -> list[TrialSpec]:
        return [self.sampled(result) for result in grid]


class Search(Design):
    """A search: ``search.num_samples`` trials sampled by Optuna, scheduled by ASHA (or FIFO);
    no verdicts (no variants), the best configuration written at the end."""

    record_key = "search"
    asked_by = "a search"

    def __init__(self, search: SearchRun) -> None:
        self.search = search

    @classmethod
    def seed_list(cls, request: Request) -> list[int]:
        refuse_crossed(request)
        return super().seed_list(request)

    def planned_settings(self, request: Request, space: Space,
                         seeds: Sequence[int]) -> dict[str, Any]:
        """The decision alone: a search has no `equivalent` to withhold, nor rounds to plan."""
        if rounds_of(request.design).max_seeds is not None:
            refuse_max_seeds(request, self.asked_by)
        return {"decision": planned_decision(request, space)}

    @classmethod
    def check_request(cls, request: Request, space: Space) -> None:
        if not space.is_search:  # a search's options given for a table
            given = "scheduler" if request.design.scheduler is not None else "num_samples"
            raise UsageError(f"{arg(given)}: space {space.name} is an ablation table; every "
                             "trial runs to the same budget so comparisons stay unbiased "
                             "(a scheduler and a number of samples are for search spaces such "
                             "as hpo)")
        if request.seeds == "auto":
            raise UsageError(f"{arg('seeds')} auto: space {space.name} is a search, not an "
                             "ablation table; give a number of seeds")
        if request.only:
            raise UsageError(f"{arg('only')}: space {space.name} is a search and has no "
                             "variants")

    @classmethod
    def check_base(cls, request: Request, space: Space, base: TrialConfig) -> None:
        if base.own_code is not None:
            raise UsageError(f"{arg('space')} {space.name} searches the runner's own keys; own "
                             "code is ablated with a table of its keys (a space file, "
                             "docs/own-code.md)")

    @classmethod
    def prepare(cls, state: PlanState) -> Search:
        """The search's base (the first seed; what ``resolve_conflicts`` maps is what every
        sample starts from), validated like a table's trial; no trials planned ahead."""
        from ablations.experiment.planning.cells import spec_for
        from ablations.experiment.planning.table_plan import plan_trials

        space, request = state.space, state.request
        base = state.base.replace(ablation=space.name, seed=state.seeds[0])
        planned, _, notes, _ = plan_trials(space, [spec_for(base)],
                                           resolve=request.resolve_conflicts,
                                           capability=state.capability)
        state.base = planned[0].config
        state.notes += notes
        options = request.design if isinstance(request.design, SearchOptions) \
            else SearchOptions()  # a search space's defaults
        return cls(SearchRun(base=state.base, space=dict(space.search),
                             num_samples=options.num_samples,
                             scheduler=options.scheduler or "asha"))

    def execute(self, trials: Sequence[TrialSpec], options: RunOptions,
                skipped: Sequence[tuple[TrialSpec, str]] = (), *, resume: bool = False
                ) -> ExperimentResult:
        result = run_experiment(trials, options, skipped, design=self,
                                setup=SearchTune(self.search), resume=resume)
        root = experiment_dir(options)
        write_best_config(result.trials, self.search, root)
        publish_optuna(root, options.name)
        return result

    def record(self, metadata: dict[str, Any]) -> None:
        run = self.search
        metadata[self.record_key] = {
            "base": run.base.to_dict(), "space": {k: [kind, list(args) if isinstance(
                args, tuple) else args] for k, (kind, args) in run.space.items()},
            "num_samples": run.num_samples, "metric": run.metric, "mode": run.mode,
            "scheduler": run.scheduler,
        }

    @classmethod
    def from_record(cls, meta: dict[str, Any], root: str) -> Search:
        h = meta[cls.record_key]
        design = cls(SearchRun(base=TrialConfig.from_dict(h["base"]),
                               space={k: (kind, tuple(v) if isinstance(v, list) else v)
                                      for k, (kind, v) in h["space"].items()},
                               num_samples=h["num_samples"], metric=h["metric"],
                               mode=h["mode"], scheduler=h["scheduler"]))
        design.planned = meta.get("planned")
        return design

    def configs(self, trials: Sequence[TrialSpec]) -> list[TrialConfig]:
        return [self.search.base, *(spec.config for spec in trials)]

    def count_text(self, trials: Sequence[TrialSpec], seeds: Sequence[int],
                   crossed: bool = False) -> str:
        return f"{self.search.num_samples} sampled trials"

    def describe(self, trials: Sequence[TrialSpec], base: TrialConfig,
                 skipped: Sequence[tuple[TrialSpec, str]]) -> list[str]:
        from ablations.experiment.designs.text import describe_trials

        run = self.search
        lines = [f"{run.num_samples} sampled trials ({run.scheduler} scheduler) over:"]
        lines += [f"  {field}: {kind} {values}" for field, (kind, values) in run.space.items()]
        return [*lines, describe_trials([], base)]

    def closing_lines(self, directory: Any) -> list[str]:
        if not is_file(join(directory, BEST_CONFIG_FILE)):
            return []
        return [f"Best configuration: {join(directory, BEST_CONFIG_FILE)} (use it with "
                f"{arg('config')}); Optuna study: {join(directory, OPTUNA_FILE)} (SQLite)"]

    def recorded_plan(self, meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
        # every sampled trial starts from the base config (its params are Tune's)
        return {**super().recorded_plan(meta), HPO_TRIAL: meta[self.record_key]["base"]}

    @classmethod
    def rounds_refusal(cls, name: str, meta: dict[str, Any], resume: str) -> Optional[str]:
        return (f"{arg('seeds')} auto: {name} is a search (space {meta.get('space')}), not an "
                "ablation table; there are no variants to add seeds to")

    def resume_line(self, name: str, space: str, target: str, trials: Sequence[TrialSpec],
                    retry_failed: bool) -> str:
        counts = counts_line(target, trials, self.search.num_samples, retry_failed)
        return f"Resuming experiment {name} ({space}): {counts}"
