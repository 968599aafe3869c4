"""Planning an experiment before anything runs: the base configuration from the flags, the
space's trials expanded and validated against the device and the data, the null control, the
design of ``--seeds auto``. The command line (ablations/cli/main.py) and the library
(ablations/experiment/api.py) share it; it prints nothing."""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from ablations.config.comparison import DEFAULT_MARGIN
from ablations.config.code import Command
from ablations.trial.batches import scalar_columns
from ablations.trial.command import unused_key_problem, value_problem
from ablations.config import (
    ConfigError,
    TrialConfig,
    apply_overrides,
    config_from_sources,
)
from ablations.config.safety import local_cuda_capability, resolve_systems, skip_reason
from ablations.experiment.cells import crossed_seeds, spec_for, with_null_control
from ablations.experiment.datasets_plan import (
    check_named,
    named_trials,
    on_dataset,
    refuse_across,
    requested_datasets,
    single_dataset_name,
)
from ablations.experiment.designs.registry import design_named, is_plugin
from ablations.experiment.own_code_plan import command_model, refuse_runner_flags, with_metric
from ablations.experiment.request import Request, UsageError, arg
from ablations.model.data import MAX_SYNTHETIC_FRAMES, load_directory
from ablations.search_spaces.presets import PRESETS


def base_config(args: Request, model: Optional[str] = None) -> TrialConfig:
    """Defaults ← --config YAML ← flags ← --set, validated. ``model``: the plugin (default:
    the request's)."""
    model = args.model if model is None else model
    flags: dict[str, Any] = {}
    if args.epochs is not None:
        flags["epochs"] = args.epochs
    if args.max_train_examples is not None:
        flags["max_train_examples"] = args.max_train_examples
    if args.max_eval_examples is not None:
        flags["max_eval_examples"] = args.max_eval_examples
    if args.data is not None:
        flags["data_dir"] = str(Path(args.data).expanduser().resolve())
    if args.seed_sources is not None:
        flags["seed_sources"] = args.seed_sources
    yaml_path = args.config
    preset = None
    if args.config is not None and not Path(args.config).exists() and args.config in PRESETS:
        yaml_path, preset = None, PRESETS[args.config]
    config = TrialConfig()
    if model:
        config = apply_overrides(config, {"model": model}, source=arg("model"))
    if preset is not None:
        config = apply_overrides(config, preset, source=f"preset {args.config}")
    config = config_from_sources(yaml_path=yaml_path, overrides=flags, base=config)
    if args.overrides:
        config = apply_overrides(config, dict(args.overrides), source=arg("overrides"))
    threads = max(1, int(args.cpus_per_trial))
    device = config.systems.device
    if device == "auto":
        device = "cuda" if args.gpus_per_trial > 0 else "cpu"
    if device == "cuda" and args.gpus_per_trial <= 0:
        raise ConfigError(f"device=cuda needs {arg('gpus_per_trial')} > 0 (e.g. 1 or 0.5)")
    return config.replace(num_threads=threads, device=device,
                          resolve_conflicts=args.resolve_conflicts)


def plan_trials(space: Any, trials: Sequence[Any], *, resolve: bool,
                capability: Optional[tuple[int, int]] = None
                ) -> tuple[list[Any], list[tuple[Any, str]], list[str], Optional[str]]:
    """Validate every trial against its device and data before any trial starts; with the
    compute ``capability`` of the GPUs the trials will get (a local run), against that too.

    Returns (trials to run, skipped (trial, reason), notes on mapped settings, data summary).
    A cell that cannot run is skipped in spaces with ``skip_invalid``, else an error.
    """
    runnable, skipped, notes = [], [], []
    summary = []
    data_info: dict[str, tuple[int, Optional[dict], Any]] = {}
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
    for spec in trials:
        config = spec.config
        if config.own_code is not None:  # its data is its own; its switches are checked
            if isinstance(config.own_code, Command):  # values a program cannot receive
                problem = (value_problem(config.model)
                           or unused_key_problem(config.own_code, config.model))
                if problem:
                    raise ConfigError(f"trial {spec.name}: {problem}")
            config, mapped = resolve_systems(config, device=config.systems.device,
                                             resolve=resolve, capability=capability)
            notes.extend(f"{spec.name}: {note}" for note in mapped)
            runnable.append(dataclasses.replace(spec, config=config))
            continue
        frames, counts, data = data_info[config.data.data_dir]
        where = config.data.data_dir or "the synthetic data"
        columns = scalar_names[config.data.data_dir]
        unknown = [name for name in config.data.dropped_scalars if name not in columns]
        if unknown:
            raise ConfigError(f"trial {spec.name}: drop_scalars: {where} has no scalar column "
                              f"{unknown[0]!r}; its scalar columns: {', '.join(columns) or 'none'}")
        if config.data.use_scalars and config.data.dropped_scalars and \
                not set(columns) - set(config.data.dropped_scalars):
            raise ConfigError(f"trial {spec.name}: drop_scalars={config.data.drop_scalars} leaves "
                              "out "
                              f"every scalar column of {where}; to train without scalars set "
                              "use_scalars=false (components' no_scalars variant) instead")
        problem = None
        if config.data.temporal_frames > frames:
            problem = (f"temporal_frames={config.data.temporal_frames} but {where} has {frames} "
                       "frames; lower temporal_frames")
        elif space.skip_invalid:
            problem = skip_reason(config, config.systems.device, capability)
        if problem is not None:
            if space.skip_invalid:
                skipped.append((spec, problem))
                continue
            raise ConfigError(f"trial {spec.name}: {problem}")
        config, mapped = resolve_systems(config, device=config.systems.device, resolve=resolve,
                                         capability=capability)
        notes.extend(f"{spec.name}: {note}" for note in mapped)
        if counts is not None:
            n_train = counts["train"]
            if config.data.max_train_examples:
                n_train = min(n_train, config.data.max_train_examples)
            if config.optim.batch_size > n_train:
                raise ConfigError(
                    f"trial {spec.name}: batch_size={config.optim.batch_size} exceeds the "
                    f"{n_train} training samples; lower batch_size"
                )
            if config.data.use_scalars and not data.scalar_names:
                raise ConfigError(f"{config.data.data_dir}: table.parquet has no scalar_* columns; "
                                  "set use_scalars=false")
        runnable.append(dataclasses.replace(spec, config=config))
    if not runnable:
        raise ConfigError(f"no trial of space {space.name} can run here: "
                          f"{skipped[0][1] if skipped else 'none selected'}")
    return runnable, skipped, notes, "; ".join(summary) or None


def auto_seeds(args: Request, space: Any) -> Optional[tuple[int, int]]:
    """(pilot, max seeds) for --seeds auto (its seeds: ``range(max seeds)``); None for fixed
    seeds (refusing --pilot / --max-seeds there)."""
    if args.seeds != "auto":
        if args.pilot is not None:
            raise UsageError(f"{arg('pilot')} applies with {arg('seeds')} auto only (fixed seeds: "
                             f"the pilot is {arg('seeds')})")
        return None
    from ablations.results.stats.sequential import DEFAULT_MAX_SEEDS

    if space.is_search:
        raise UsageError(f"{arg('seeds')} auto: space {space.name} is a search, not an ablation "
                         "table; give a number of seeds")
    if args.auto_batch:
        raise UsageError(f"{arg('auto_batch')} with {arg('seeds')} auto is not supported yet: "
                         f"pass the batch size ({arg('overrides')} batch_size=N) or fixed seeds")
    pilot = args.pilot or 3
    max_seeds = args.max_seeds or max(DEFAULT_MAX_SEEDS, pilot)
    if max_seeds < pilot:
        raise UsageError(f"{arg('max_seeds')} {max_seeds} is below the pilot's {pilot} seeds; "
                         f"raise {arg('max_seeds')} or lower {arg('pilot')}")
    return pilot, max_seeds


@dataclass
class Prepared:
    """A planned experiment: what :func:`prepare` found, nothing started."""

    space: Any  # search_spaces.Space
    base: TrialConfig
    trials: list  # the trials to run first (with --seeds auto: the pilot's)
    skipped: list  # (TrialSpec, reason): cells that cannot run here
    notes: list[str] = field(default_factory=list)  # warnings for the user
    data_summary: Optional[str] = None
    hpo: Any = None  # ablations.experiment.designs.hpo.HpoSearch for a search space
    # ablations.experiment.designs.seeds_auto.SequentialRun for --seeds auto
    sequential: Any = None
    seeds: list[int] = field(default_factory=list)  # every seed (--seeds auto: all it may run)
    datasets: list[str] = field(default_factory=list)  # the datasets, by name, in order
    design: Any = None  # how it runs: a designs.base.Design (design_for)
    # --design factorial: its ablations.results.stats.factorial.FactorialDesign
    factorial: Any = None


def prepare(args: Request) -> Prepared:
    """The experiment ``args`` describes, validated: every bad input raises a one-line
    UsageError/ConfigError/DataError here, before any trial starts. ``args`` is not changed."""
    from ablations.search_spaces import expand, get_space

    args.check()
    space = get_space(args.space)
    if (args.command is not None or args.metrics is not None) and not space.source_file:
        given = arg("command") if args.command is not None else arg("metrics")
        raise UsageError(f"{given}: space {space.name} is a table of the built-in model's keys; "
                         f"a program is ablated over a table of its own keys: give "
                         f"{arg('space')} FILE with its variants (docs/own-code.md)")
    model = args.model
    if space.model:
        if model and model != space.model:
            raise UsageError(f"{arg('model')} {model} but {space.source_file} is about "
                             f"{space.model}; drop one of the two")
        model = space.model
    if args.auto_batch and space.name == "batch":
        raise UsageError(f"{arg('auto_batch')} picks one batch size; the batch space sweeps them: "
                         "drop one of the two")
    if args.scheduler is not None and not space.is_search:
        raise UsageError(f"{arg('scheduler')}: space {space.name} is an ablation table; every "
                         "trial runs to the same budget so comparisons stay unbiased (schedulers "
                         "are for search spaces such as hpo)")
    plugin = None
    if is_plugin(args.design):  # a design of one's own (designs/registry.py)
        plugin = design_named(args.design)
        plugin.check_request(args, space)
    elif args.design != "table" or args.factors:  # --design / --factors: what it refuses
        # only then: its module loads statsmodels and scipy, which a plain table does not need
        from ablations.experiment.designs.factorial import check_request

        check_request(args, space)
    if args.command is not None or args.metrics is not None:
        model = command_model(args, space, model)
    refuse_runner_flags(args, model)
    base = base_config(args, model)
    args = with_metric(args, base)
    if base.dataset:  # --set or --config naming it: the datasets are named otherwise
        raise UsageError(f"dataset={base.dataset!r} is the runner's name of a dataset, not a "
                         f"key to set; name datasets with {arg('datasets')} (docs/datasets.md)")
    datasets = requested_datasets(args, space) or {single_dataset_name(base): {}}
    across = len(datasets) > 1
    if across:
        refuse_across(args, space)
    else:  # one dataset: its name on every trial, the trials' names as they are
        base = on_dataset(base, *next(iter(datasets.items())))
    if base.own_code is not None and space.is_search:
        raise UsageError(f"{arg('space')} {space.name} searches the runner's own keys; own "
                         "code is ablated with a table of its keys (a space file, "
                         "docs/own-code.md)")
    # A local run knows the GPUs its trials get; a cluster's are checked in each trial.
    capability = local_cuda_capability() if args.address is None else None
    only = list(args.only) if args.only else None
    if args.cross_seeds and (space.is_search or args.seeds == "auto"):
        raise UsageError(f"{arg('cross_seeds')} runs a fixed grid of seeds per variant of an "
                         f"ablation table; it does not combine with {arg('seeds')} auto or a "
                         "search space")
    auto = auto_seeds(args, space)
    seeds = list(range(auto[1])) if auto else list(args.seeds)
    added_reference = bool(only) and not space.is_search and space.reference not in only
    if added_reference:  # every variant is compared with it: without it, no verdicts
        only = [space.reference, *only]
    hpo = factorial = None
    if space.is_search:
        if only:
            raise UsageError(f"{arg('only')}: space {space.name} is a search and has no variants")
        from ablations.experiment.designs.hpo import HpoSearch

        base = base.replace(ablation=space.name, seed=seeds[0])
        planned, _, notes, _ = plan_trials(space, [spec_for(base)],
                                           resolve=args.resolve_conflicts, capability=capability)
        base = planned[0].config  # what --resolve-conflicts mapped is what the samples start from
        hpo = HpoSearch(base=base, space=dict(space.search), num_samples=args.num_samples,
                        scheduler=args.scheduler or "asha")
        trials, skipped, data_summary = [], [], None
    else:
        trials = []
        for name, keys in datasets.items():  # the table on each dataset, seeds paired in it
            on_it = on_dataset(base, name, keys) if across else base
            scalar_names = scalar_columns(on_it) if space.variants_from_data else None
            if args.design == "factorial":
                from ablations.experiment.designs.factorial import factorial_trials

                table, factorial = factorial_trials(args, space, on_it, seeds, scalar_names)
            else:
                table = expand(space, on_it, seeds, only=only, scalar_names=scalar_names)
            if args.cross_seeds:
                table = crossed_seeds(table, seeds)
            if args.null_control:
                table = with_null_control(table, space.reference)
            check_named(name, table)
            trials += named_trials(name, table, across)
        trials, skipped, notes, data_summary = plan_trials(space, trials, capability=capability,
                                                           resolve=args.resolve_conflicts)
        if added_reference:
            notes.append(f"{arg('only')}: added the reference {space.reference!r}, which every "
                         "variant's verdict is compared with")
        if factorial is not None and skipped:
            spec, reason = skipped[0]
            raise UsageError(f"{arg('design')} factorial: cell {spec.variant} cannot run here "
                             f"({reason}); every cell of the design must run")
    if args.tune_each:
        from ablations.experiment.designs.tuned import check_request

        check_request(args, space, trials, auto=bool(auto))
    sequential = None
    if auto:
        from ablations.experiment.designs.seeds_auto import SequentialRun
        from ablations.results.stats.sequential import SeedDesign

        seed_design = SeedDesign.plan(*auto)
        sequential = SequentialRun(seed_design, list(seeds), space.reference, args.metric,
                                   args.margin or DEFAULT_MARGIN, args.alpha,
                                   {s.name: s for s in trials})
        pilot = set(seeds[:seed_design.looks[0]])
        trials = [s for s in trials if s.seed in pilot]  # the first round's; dry run shows them
        skipped = [(s, why) for s, why in skipped if s.seed in pilot]
        variants = {s.variant for s in trials}
        if space.reference not in variants:
            raise UsageError(f"{arg('seeds')} auto: the reference {space.reference!r} cannot run "
                             "here (skipped); every round compares with it")
        if len(variants) < 2:
            raise UsageError(f"{arg('seeds')} auto: only the reference would run; there is "
                             f"nothing to decide (see {arg('only')})")
    tuned = None
    if args.tune_each:
        from ablations.experiment.designs.tuned import TunedRun, tuning_seed

        tuned = TunedRun(list(args.tune_each),
                         args.tune_budget, tuning_seed(seeds), space.reference,
                         {s.name: s for s in trials})
    if plugin is not None:  # it plans its trials from the table's
        design, trials = plugin.plan(args, space, trials)
        design.spec = args.design
    else:
        design = design_for(hpo, sequential, factorial=factorial, tuned=tuned)
    if across:  # fixed seeds at full α on each dataset: no rounds follow
        design.continues_into_rounds = False
    design.plan_spec = planned_settings(args, space, seeds, design)
    return Prepared(space, base, trials, skipped, notes, data_summary, hpo=hpo,
                    sequential=sequential, seeds=seeds, design=design, factorial=factorial,
                    datasets=list(datasets))


def planned_settings(args: Request, space: Any, seeds: Sequence[int],
                     design: Any) -> dict[str, Any]:
    """The arguments of :func:`ablations.results.stats.planned.planned_record` (experiment.json's
    ``planned``): the reference, metric, margin and α fixed before the data; for a fixed table
    that can be continued into rounds, its seeds and ``--max-seeds`` (default 10), the
    sequential design whose pilot look they are. Factorial, tuned, search and
    ``--cross-seeds`` runs keep the fixed design at full α, so ``--max-seeds`` is refused
    there.

    Raises:
        UsageError: ``--max-seeds`` where no rounds can follow, or below the seeds run.
    """
    settings = {"reference": space.reference, "metric": args.metric,
                "margin": args.margin or DEFAULT_MARGIN, "alpha": args.alpha}
    if args.seeds == "auto":  # the design is the sequential record's
        return settings
    pilot = design.continues_into_rounds and not args.cross_seeds
    if args.max_seeds is not None:
        if not pilot:
            kind = arg("cross_seeds") if args.cross_seeds else design.asked_by
            raise UsageError(f"{arg('max_seeds')} plans the rounds a fixed ablation table can be "
                             f"continued into; {kind} keeps the fixed design: drop "
                             f"{arg('max_seeds')}")
        if args.max_seeds < len(seeds):
            raise UsageError(f"{arg('max_seeds')} {args.max_seeds} is below the {len(seeds)} seeds "
                             f"run; give {arg('max_seeds')} {len(seeds)} for the fixed design at "
                             "full alpha, or more to plan rounds")
    if not pilot:
        return settings
    return {**settings, "seeds": list(seeds), "max_seeds": args.max_seeds}


def design_for(hpo: Any = None, sequential: Any = None, *, root: str = "",
               finished: Any = None, factorial: Any = None, tuned: Any = None) -> Any:
    """The design of a plan: a search (``hpo``), rounds (``sequential``), the cells of a
    factorial design (``factorial``), tuned ablations (``tuned``: a designs.tuned.TunedRun),
    else a grid. ``root`` and ``finished``: a fixed run continued into rounds
    (continuing.py). Only that design's module is imported: the rounds and the stages load
    the sequential statistics (scipy), which planning a grid (a dry run,
    ``Experiment.plan``) does not need."""
    if tuned is not None:
        from ablations.experiment.designs.tuned import Stages

        return Stages(tuned, root)
    if sequential is not None:
        from ablations.experiment.designs.seeds_auto import Rounds

        return Rounds(sequential, root, finished)
    if factorial is not None:
        from ablations.experiment.designs.factorial import Factorial

        return Factorial(factorial)
    if hpo is not None:
        from ablations.experiment.designs.hpo import Search

        return Search(hpo)
    from ablations.experiment.designs.grid import Grid

    return Grid()
