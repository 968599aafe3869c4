"""The Ray Tune function trainable: a thin wrapper around :func:`ablations.trial.run.run_trial`,
the one path of every kind of code (the built-in model, a plugin, a training function, a
command).

Every epoch becomes one ``tune.report``. Resumable state is written after every epoch (every
``checkpoint_every`` epochs, and after the last) to the experiment folder,
``<experiment>/trial_state/<trial>/state.pt``, atomically (temporary file, fsync, rename),
with the per-epoch metrics beside it in ``history.json`` (the driver reads them without loading
weights, and without CUDA when a GPU trial saved them); the last epoch also reports a Ray
checkpoint holding the state, the history and ``predictions.parquet``. A restarted trial
(resume after the driver died, a retry after a failure, a node that died) resumes from the
newest of the two.

Why not a Ray checkpoint every epoch: with ``num_to_keep`` Tune deletes the previous checkpoint
when a new one lands, while its experiment-state snapshot (synced in the background) may still
point at the deleted one; a driver killed in that window leaves a trial that cannot be restored
("Could not recover from checkpoint as it does not exist on storage anymore"); and without it,
every epoch's weights would stay on storage. The state file has one name and is replaced
atomically, so it is always the last completed epoch. A trial that finished after Tune's last
experiment-state snapshot (a driver killed) is restarted on resume: its state file holds the
last epoch, so it reports its results again without training.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import io
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import ray
from ray import tune

from ablations.config import TrialConfig
from ablations.experiment.execution.reported import json_value, packed
from ablations.experiment.provenance.trial_store import MIXED
from ablations.trial.own_code import resolved_device, trial_folder
from ablations.results.io.files import PREDICTIONS_FILE, atomic_write, is_file, join, read_bytes

STATE_FILE = "state.pt"
HISTORY_FILE = "history.json"  # the per-epoch metrics, readable without torch or the weights
STATE_SUBDIR = "trial_state"
OUTPUTS_SUBDIR = "outputs"  # a command's working folder per trial, kept with the experiment
# what a trial's first start trained with (trial_store.run_labels), beside its state
LABELS_FILE = "labels.json"


def trial_name(trial: Any) -> str:
    """``trial_name_creator`` / ``trial_dirname_creator``: the spec's name, e.g. baseline-seed0;
    for a sampled (hpo) trial, hpo-<trial id>."""
    if "params" in trial.config:
        return f"{trial.config['trial']}-{trial.trial_id}"
    return str(trial.config["trial"])


def save_state_atomic(state: dict[str, Any], state_dir: str) -> None:
    """The state, then its history beside it (each atomic). A state of the history alone
    (``trial.save_history``: epochs reported after the last save) replaces the history only,
    so the state file keeps the epoch it was saved with."""
    if set(state) != {"history"}:
        import torch

        atomic_write(join(state_dir, STATE_FILE), lambda handle: torch.save(state, handle))
    history = json.dumps(state["history"], default=json_value).encode()
    atomic_write(join(state_dir, HISTORY_FILE), lambda handle: handle.write(history))


def load_state(path: str) -> dict[str, Any]:
    """A saved state, its tensors on the CPU whatever device saved them (a GPU trial's state
    read by a driver or a worker without CUDA); ``load_state_dict`` moves them back."""
    import torch

    return torch.load(io.BytesIO(read_bytes(path)), weights_only=True, map_location="cpu")


def read_history(state_dir: Optional[str], checkpoint: Optional[Any]
                 ) -> Optional[list[dict[str, Any]]]:
    """A trial's per-epoch metrics from its history file (in ``state_dir``, else its final
    checkpoint), without loading any weights; None when neither has one."""
    if state_dir and is_file(join(state_dir, HISTORY_FILE)):
        return json.loads(read_bytes(join(state_dir, HISTORY_FILE)))
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            local = os.path.join(directory, HISTORY_FILE)
            if os.path.exists(local):
                with open(local, "rb") as handle:
                    return json.loads(handle.read())
    return None


def newest_state(state_path: Optional[str], checkpoint: Optional[Any]
                 ) -> Optional[dict[str, Any]]:
    """The trial's newest resumable state: its state file, else its Ray checkpoint. The state
    file is written before every report, so when it exists it is never older than the
    checkpoint, and the checkpoint is not read."""
    if state_path and is_file(state_path):
        return load_state(state_path)
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            path = os.path.join(directory, STATE_FILE)
            if os.path.exists(path):
                import torch

                return torch.load(path, weights_only=True, map_location="cpu")
    return None


def trained_across_a_change(state_dir: str, labels: dict[str, str], restored: bool) -> bool:
    """Whether a trial continues from a saved epoch under other code, data or package
    versions than it started with (a resume with ``--allow-changed``): its result is then
    neither run's, and it gets no identity (tables.py), so that it is never reused. A first
    start records ``labels`` (what it trains with) for later runs to compare."""
    path = join(state_dir, LABELS_FILE)
    if not restored:
        text = json.dumps(labels, sort_keys=True).encode()
        atomic_write(path, lambda handle: handle.write(text))
        return False
    if not is_file(path):  # a state saved without the record: nothing to compare
        return False
    if json.loads(read_bytes(path)) == labels:
        return False
    # for good: a later resume on the first code would not undo the epochs run on this one
    atomic_write(path, lambda handle: handle.write(b'{"trained_across_a_change": true}'))
    return True


def trial_config(config: dict[str, Any], plan: dict[str, dict[str, Any]]) -> TrialConfig:
    """The typed config of the Tune trial whose Tune config is ``config``: ``plan[name]`` (a
    ``TrialConfig.to_dict()``), with the sampled ``config["params"]`` (flat keys) of a search
    applied. The trainable and the trackers (ablations/experiment/trackers/specs.py) both read
    trials so."""
    trial = TrialConfig.from_dict(plan[config["trial"]])
    if "params" in config:
        trial = trial.replace(**config["params"], ablation=config["trial"])
    return trial


def tune_trainable(config: dict[str, Any], plan: dict[str, dict[str, Any]],
                   state_root: str, pack: bool = True,
                   time_limit_s: Optional[float] = None,
                   labels: Optional[dict[str, dict[str, str]]] = None,
                   folder: Optional[str] = None) -> None:
    """Train trial ``config["trial"]`` (a name) with its resolved config ``plan[name]``
    (a ``TrialConfig.to_dict()``), with the sampled ``config["params"]`` (flat keys) in a search.
    The runner passes ``plan``, ``state_root`` and ``pack`` with ``tune.with_parameters``;
    ``pack=False`` (``--verbose``) reports every figure to Tune as a number, so that Tune's own
    result tables show them (ablations/experiment/execution/reported.py). ``time_limit_s``: each
    run of a trial ends past it, as ``timeout`` (ablations/trial/time_limit.py). ``labels``
    (trial_store.run_labels: plan key -> the fingerprints of the code and data this run of the
    experiment trains with, and its package versions) are sent with the trial's final result,
    so that a trial finished before a resume on changed code, data or packages keeps those it
    ran on. ``folder``: the driver's working folder, given where the trials run on a Ray of the
    driver's own machine (``trial_cwd``)."""
    logging.getLogger("ray.train").setLevel(logging.WARNING)  # no line per checkpoint
    here = trial_cwd(folder)  # before the config: it imports the trial's own code
    trial = trial_config(config, plan)
    name = tune.get_context().get_trial_name()
    state_dir = join(state_root, name)
    resume_state = newest_state(join(state_dir, STATE_FILE), tune.get_checkpoint())
    trained_with = (labels or {}).get(config["trial"], {})
    mixed = trained_across_a_change(state_dir, trained_with, resume_state is not None)

    def send(metrics: dict[str, Any], final: bool, predictions: Optional[pd.DataFrame]) -> None:
        sent = packed(metrics) if pack else metrics
        if not final:
            tune.report(sent)
            return
        sent = {**sent, **trained_with, **({MIXED: True} if mixed else {})}
        with tempfile.TemporaryDirectory() as directory:  # the final checkpoint
            if is_file(join(state_dir, STATE_FILE)):
                with open(os.path.join(directory, STATE_FILE), "wb") as handle:
                    handle.write(read_bytes(join(state_dir, STATE_FILE)))
            with open(os.path.join(directory, HISTORY_FILE), "w") as handle:
                json.dump(read_history(state_dir, None) or [], handle, default=json_value)
            if predictions is not None:
                predictions.to_parquet(os.path.join(directory, PREDICTIONS_FILE), index=False)
            tune.report(sent, checkpoint=tune.Checkpoint.from_directory(directory))

    import torch  # here, in the trial's worker: the driver passes this function without it

    from ablations.trial.run import run_trial
    from ablations.trial.step import cap_gpu_memory

    share = trial_gpu_share(trial, _assigned_gpus())
    cuda = torch.device("cuda")
    if share is not None:
        cap_gpu_memory(cuda, share)
    failed = True
    try:
        run_trial(trial, name=name, send=send,
                  store=lambda state: save_state_atomic(state, state_dir),
                  saved=resume_state, folder=trial_folder(state_dir),
                  device=resolved_device(trial),
                  resources=ray.get_runtime_context().get_assigned_resources(),
                  cwd=here, time_limit_s=time_limit_s,
                  outputs=None if "://" in state_root else
                  Path(state_root).parent / OUTPUTS_SUBDIR / name)
        failed = False
    finally:
        if share is not None:
            cap_gpu_memory(cuda, 1.0)  # the next trial in this worker sets its own
        # not after a failure: the exception's traceback still holds the trial's frames
        return_memory_after_trial(freeze=not failed)


def trial_cwd(folder: Optional[str]) -> Path:
    """The folder a trial's command runs in and its own code is imported from, first on the
    module path: the driver's ``folder`` where the driver gave it and it is there, whatever
    folder and path the Ray worker started with (a Ray started earlier in the driver's process,
    from another folder: a notebook's, or a test session's shared one); else the folder Tune
    says the worker started in (on a cluster, the job's unpacked working_dir)."""
    if folder and os.path.isdir(folder):
        if sys.path[:1] != [folder]:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)
            sys.path.insert(0, folder)
        return Path(folder)
    return Path(os.environ.get("TUNE_ORIG_WORKING_DIR", os.getcwd()))


def _assigned_gpus() -> float:
    """The GPUs Ray assigned to this trial's worker (0.5 for --gpus-per-trial 0.5)."""
    return float(ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0))


def trial_gpu_share(trial: TrialConfig, assigned_gpus: float) -> Optional[float]:
    """The share of its GPU a trial's memory is capped at: the fraction of one GPU Ray assigned
    it, for a trial on CUDA; None (no cap) on the CPU or with whole GPUs."""
    if trial.systems.device != "cuda" or assigned_gpus <= 0:
        return None
    from ablations.trial.memory import gpu_share

    return gpu_share(assigned_gpus)


def return_memory_after_trial(freeze: bool = True) -> None:
    """Give freed memory back at the end of a trial. Tune runs each trial in a new thread of a
    reused worker; glibc gives threads their own malloc arenas and keeps what they freed, so
    without this a worker's RSS grew by ~47 MiB per trial (8 trials: 661 -> 1120 MiB). On a
    GPU, the caching allocator's blocks go back to the driver for the next trial.

    With ``freeze``, what survives the collection (the worker's imports of torch, Ray and
    pandas, caches: some 200,000 objects) is then frozen, moved to the collector's permanent
    generation, so that the next trial's collection scans only what that trial created: a full
    collection took ~90 ms each time here, half the runner's overhead per tiny trial above
    bare Tune (benchmarks/scale.py). Reference counting still frees frozen objects; only a
    cycle among them would stay, and what outlives a trial is the worker's own state anyway."""
    import torch

    gc.collect()
    if freeze:
        gc.freeze()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass
