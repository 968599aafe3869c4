"""Checks and probes before the trials start: the data visible on a cluster's workers and
--auto-batch's memory probe."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

from ablations.experiment.core import events
from ablations.experiment.core.request import Request, UsageError, arg


def check_data_on_workers(configs: Sequence[Any], args: Request) -> None:
    """On a cluster, the data directory must be visible from every node that can run a trial
    (an alive node with a trial's CPUs and GPUs): each is asked, pinned to it."""
    import ray
    from ray.exceptions import GetTimeoutError, RayError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    dirs = sorted({config.data.data_dir for config in configs if config.data.data_dir})
    if not dirs:
        return

    def visible(paths: list[str]) -> tuple[str, list[str]]:
        import os as _os
        import platform as _platform

        return _platform.node(), [p for p in paths if not _os.path.isdir(p)]

    nodes = [node for node in ray.nodes() if node.get("Alive")
             and node["Resources"].get("CPU", 0) >= args.cpus_per_trial
             and node["Resources"].get("GPU", 0) >= args.gpus_per_trial]
    probe, probes = ray.remote(num_cpus=0)(visible), {}
    for node in nodes:
        name = f"{node['NodeManagerAddress']}, node {node['NodeID'][:8]}"
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        probes[name] = probe.options(scheduling_strategy=strategy).remote(dirs)
    blind, failed = [], []
    ray.wait(list(probes.values()), num_returns=len(probes), timeout=120)  # all at once
    for name, pending in probes.items():
        try:
            host, missing = ray.get(pending, timeout=0.1)
        except (GetTimeoutError, RayError) as exc:
            lines = str(exc).strip().splitlines()
            failed.append(f"{name}: {lines[0] if lines else type(exc).__name__}")
            continue
        if missing:
            blind.append((f"{host} ({name})", missing[0]))
    if blind:
        raise UsageError(f"{arg('data')} {blind[0][1]} is not visible on {len(blind)} of "
                         f"{len(nodes)} nodes that can run a trial: "
                         f"{'; '.join(n for n, _ in blind)}; put the data on a path every node "
                         "can read (a shared file system)")
    if failed:
        raise UsageError(f"cannot check {arg('data')} on {len(failed)} node(s): {failed[0]}; "
                         "check that the project's dependencies are installed on every node")


def auto_batch(args: Request, trials: list[Any], *,
               probe: Optional[Callable[..., dict[str, Any]]] = None
               ) -> tuple[list[Any], Optional[dict]]:
    """Probe on a worker holding one trial's resources; set every trial's batch size.
    Returns the trials and what was probed and chosen (for experiment.json).

    ``probe``: what the worker runs, called as
    :func:`ablations.trial.memory.probe_max_batch` is (a module-level function or a closure:
    Ray ships it). None, as the command line and ``Experiment`` pass: ``probe_max_batch``, for
    trials on CUDA only (another device has no GPU memory to fit). A probe given runs on any
    device: a test's, which fakes the GPU's out-of-memory errors on a CPU."""
    import ray

    from ablations.trial.memory import auto_batch_limit, choose_micro_batch, probe_max_batch
    from ablations.trial.loading import load_data

    config = trials[0].config
    if probe is None:
        if config.systems.device != "cuda":
            events.info(f"auto-batch: trials run on {config.systems.device}, which has no GPU "
                        f"memory to fit; keeping batch_size={config.optim.batch_size}")
            return trials, None
        probe = probe_max_batch
    datasets = {(d.data_dir, c.seeds.data, d.synthetic_train, d.synthetic_val, d.synthetic_test,
                 d.max_train_examples, d.max_eval_examples): c
                for c in (s.config for s in trials) for d in (c.data,)}
    train_samples = min(len(load_data(c).indices("train")) for c in datasets.values())
    limit = auto_batch_limit(train_samples, max(s.config.optim.grad_accum_steps for s in trials))
    remote = ray.remote(num_cpus=args.cpus_per_trial, num_gpus=args.gpus_per_trial)(probe)
    found = ray.get(remote.remote(config, limit=limit, gpu_fraction=args.gpus_per_trial or 1.0))
    micro, why = choose_micro_batch(found, limit)
    if micro < 1:
        raise UsageError(f"auto-batch: even batch 1 runs out of memory on {found['device']}; "
                         f"use {arg('config')} memory_optimized or fewer temporal_frames")
    sizes = ", ".join(f"{size}{'' if ok else ' OOM'}" for size, ok in found["probed"])
    out = []
    for spec in trials:  # the plan's constraints again, with the new size (ConfigError if not)
        batch = micro * spec.config.optim.grad_accum_steps
        if batch > train_samples:
            raise UsageError(f"auto-batch: batch_size={batch} exceeds the {train_samples} "
                             "training samples; lower grad_accum_steps")
        out.append(dataclasses.replace(spec, config=spec.config.replace(batch_size=batch)))
    chosen = micro * config.optim.grad_accum_steps
    events.info(f"auto-batch: batch_size={chosen} (micro-batch {micro} x "
          f"{config.optim.grad_accum_steps}), "
          f"limited by {why}; {train_samples // chosen} optimizer steps per epoch; "
          f"probed on {found['device']}"
          + (f" capped at {found['gpu_share']:g} of the GPU (--gpus-per-trial)"
             if found.get("gpu_share") else "") + f": {sizes}")
    record = {"batch_size": chosen, "micro_batch": micro, "limited_by": why,
              "largest_fitting_micro_batch": found["batch"], "probe_limit": limit,
              "probed": found["probed"], "device": found["device"],
              "gpu_share": found.get("gpu_share"),
              "requested_batch_size": config.optim.batch_size, "train_samples": train_samples}
    return out, record
