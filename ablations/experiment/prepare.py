"""Planning an experiment before anything runs: the base configuration from the flags, the
model, the datasets and the variants asked for; the design the request asks for plans the rest
(ablations/experiment/designs/: its refusals, its seeds, its trials, validated against the
device and the data by ablations/experiment/planning/table_plan.py). The command line
(ablations/cli/main.py) and the library (ablations/experiment/api.py) share it; it prints
nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ablations.config import ConfigError, TrialConfig, apply_overrides, config_from_sources
from ablations.config.safety import local_cuda_capability
from ablations.experiment.planning.datasets_plan import (
    on_dataset,
    refuse_across,
    requested_datasets,
    single_dataset_name,
)
from ablations.experiment.designs.registry import design_class
from ablations.experiment.planning.own_code_plan import (
    command_model,
    refuse_runner_flags,
    with_metric,
)
from ablations.config.values import expanded_path
from ablations.experiment.core.request import Request, UsageError, arg
from ablations.experiment.planning.table_plan import PlanState, plan_trials  # noqa: F401 (re-exported)
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
        flags["data_dir"] = str(expanded_path(args.data, arg("data")).resolve())
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
        # the keys each trial gets from its plan: a value set here would be dropped unseen
        planned = {"seed": f"each trial's seed comes from {arg('seeds')} (e.g. 5, or "
                           "0,3,7)", "ablation": "each trial's variant name comes from the "
                           "space's variants"}
        for key in sorted(planned.keys() & dict(args.overrides).keys()):
            raise UsageError(f"{arg('overrides')} {key}=...: {planned[key]}; it is not a key "
                             "to set")
        config = apply_overrides(config, dict(args.overrides), source=arg("overrides"))
    threads = max(1, int(args.cpus_per_trial))
    device = config.systems.device
    if device == "auto":
        device = "cuda" if args.gpus_per_trial > 0 else "cpu"
    if device == "cuda" and args.gpus_per_trial <= 0:
        raise ConfigError(f"device=cuda needs {arg('gpus_per_trial')} > 0 (e.g. 1 or 0.5)")
    return config.replace(num_threads=threads, device=device,
                          resolve_conflicts=args.resolve_conflicts)


@dataclass
class Prepared:
    """A planned experiment: what :func:`prepare` found, nothing started."""

    space: Any  # search_spaces.Space
    base: TrialConfig
    trials: list  # the trials to run first (with --seeds auto: the pilot's)
    skipped: list  # (TrialSpec, reason): cells that cannot run here
    notes: list[str] = field(default_factory=list)  # warnings for the user
    data_summary: Optional[str] = None
    seeds: list[int] = field(default_factory=list)  # every seed (--seeds auto: all it may run)
    datasets: list[str] = field(default_factory=list)  # the datasets, by name, in order
    design: Any = None  # how it runs: a designs.base.Design (designs/registry.design_class)


def prepare(args: Request) -> Prepared:
    """The experiment ``args`` describes, validated: every bad input raises a one-line
    UsageError/ConfigError/DataError here, before any trial starts. ``args`` is not changed.

    The design the request asks for (:func:`~ablations.experiment.designs.registry.
    design_class`) refuses what it cannot run, gives the seeds and plans its trials from a
    :class:`~ablations.experiment.planning.table_plan.PlanState`; what every design shares
    (the model, the base configuration, the datasets, the variants asked for) is planned
    here."""
    from ablations.search_spaces import get_space

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
    kind = design_class(args, space)
    kind.check_request(args, space)  # its own words first: what it is asked that it is not
    if args.command is not None or args.metrics is not None:
        model = command_model(args, space, model)
    refuse_runner_flags(args, model)
    base = base_config(args, model)
    args = with_metric(args, base)
    if base.dataset:  # --set or --config naming it: the datasets are named otherwise
        raise UsageError(f"dataset={base.dataset!r} is the runner's name of a dataset, not a "
                         f"key to set; name datasets with {arg('datasets')} (docs/datasets.md)")
    datasets = requested_datasets(args, space) or {single_dataset_name(base): {}}
    if len(datasets) > 1:
        refuse_across(args, space)
    else:  # one dataset: its name on every trial, the trials' names as they are
        base = on_dataset(base, *next(iter(datasets.items())))
    kind.check_base(args, space, base)
    seeds = kind.seed_list(args)
    only = list(args.only) if args.only else None
    added_reference = bool(only) and space.reference not in only
    if added_reference:  # every variant is compared with it: without it, no verdicts
        only = [space.reference, *only]
    # A local run knows the GPUs its trials get; a cluster's are checked in each trial.
    state = PlanState(args, space, base, datasets, seeds, only=only,
                      added_reference=added_reference,
                      capability=local_cuda_capability() if args.address is None else None)
    design = kind.prepare(state)
    design.plan_spec = design.planned_settings(args, space, seeds)
    return Prepared(space, state.base, state.trials, state.skipped, state.notes,
                    state.data_summary, seeds=seeds, design=design, datasets=list(datasets))
