"""One trial of any code through one path: :func:`run_trial` gives the trial's ``fit`` a
:class:`~ablations.trial.own_code.Trial` and turns what it reports and returns into the runner's
results. The ``fit`` is the built-in model's or a plugin's
(:func:`ablations.trial.builtin_fit.builtin_fit`), a training function's, or a command's
(:func:`ablations.trial.command.run_command`). Plain PyTorch, no Ray: the trainable
(ablations/experiment/execution/trainable.py) passes ``send`` (to Tune) and ``store`` (the state
file).
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import torch

from ablations.config import TrialConfig
from ablations.config.statuses import TrialStatus
from ablations.trial.builtin_fit import builtin_fit
from ablations.trial.contracts import contract_of
from ablations.trial.host import cpu_model
from ablations.trial.time_limit import Deadline, TrialTimeout
from ablations.trial.own_code import (
    Diverged,
    OwnCodeError,
    Send,
    Store,
    Trial,
    final_value,
)

# What a final result's last-epoch row holds beside metrics: not carried into the result
BOOKKEEPING = ("epoch", "status", "reported_at", "failure_reason", "error")


def fit_of(config: TrialConfig) -> Callable[[Trial], Mapping[str, Any]]:
    """The function that trains ``config``'s trial, given its Trial."""
    code = config.own_code
    if code is None:
        return lambda trial: builtin_fit(config, trial)
    fit = contract_of(code).fit
    return lambda trial: fit(code, config.model, trial)


def run_trial(config: TrialConfig, *, name: str, send: Send, store: Store,
              saved: Optional[dict[str, Any]], folder: Path, device: torch.device,
              resources: Mapping[str, float], cwd: Optional[Path] = None,
              time_limit_s: Optional[float] = None,
              outputs: Optional[Path] = None) -> dict[str, Any]:
    """Train the trial ``config`` describes and send its final result; returns it.

    The final result holds the last epoch's metrics (reported, or held by
    ``trial.last_report``), what ``fit`` returned over them, the trial's record
    (``epochs_run``, ``resumed_from_epoch``, ``wall_s``, ``device``: where ``fit`` returned
    none of its own) and ``status``: what ``fit`` returned, else ``ok``; ``diverged`` for a
    declared metric that is not finite. A declared metric found nowhere raises
    :class:`OwnCodeError`, a failed trial; a trial past ``time_limit_s`` (seconds of this
    run) raises :class:`~ablations.trial.time_limit.TrialTimeout` once the epochs it
    reported are stored (ablations/trial/time_limit.py). ``outputs``: the working folder a
    command runs in (:attr:`Trial.outputs`)."""
    code = config.own_code
    if code is not None:  # the built-in loop sets its threads itself
        torch.set_num_threads(max(1, config.systems.num_threads))
    folder.mkdir(parents=True, exist_ok=True)
    deadline = Deadline(time_limit_s)
    trial = Trial(config, name=name, send=send, store=store, saved=saved, folder=folder,
                  device=device, resources=resources, cwd=cwd, deadline=deadline,
                  outputs=outputs)
    diverged: Optional[str] = None
    returned: Any = {}
    # a program's poll loop ends it at the limit itself, with its last output
    in_process = code is None or not contract_of(code).program
    try:
        with (deadline.watchdog(lambda: last_words(trial)) if in_process
              else contextlib.nullcontext()):
            returned = fit_of(config)(trial) or {}
    except Diverged as exc:
        diverged = str(exc)
    except TrialTimeout as exc:
        trial.save_history()  # the epochs it ran are the trial's curves
        raise (exc if str(exc) else deadline.error(last_words(trial))) from None
    if not isinstance(returned, Mapping):
        raise OwnCodeError(f"model {code.name}: fit returned {type(returned).__name__}; return "
                           "a dict of final metrics, e.g. {'test_acc': 0.97}")
    last = trial.history[-1] if trial.history else {}
    result: dict[str, Any] = {
        "status": last.get("status", TrialStatus.OK.value),
        **{k: v for k, v in last.items() if k not in BOOKKEEPING},
        **{k: final_value(k, v) for k, v in returned.items()},
        "final": True}
    if code is not None:  # what own code's switches ran (the built-in loop records its own)
        for key, value in trial.switches.record().items():
            result.setdefault(key, value)
    for key, value in (("epochs_run", len(trial.history)),
                       ("resumed_from_epoch", trial.start_epoch), ("wall_s", trial.wall_s()),
                       ("device", device.type), ("device_name", device_name(device))):
        result.setdefault(key, value)
    if trial.history:
        result["epoch"] = last["epoch"]
    if diverged is not None:
        result.update(status=TrialStatus.DIVERGED.value, failure_reason="non-finite-metric",
                      error=diverged)
    elif code is not None:
        check_declared(code, result, returned, last)
    if code is not None:  # the columns of own code's metrics in trials.parquet
        result["own_metrics"] = ",".join(
            k for k in sorted(result) if k not in BOOKKEEPING and k not in RECORD
            and isinstance(result[k], (int, float)) and not isinstance(result[k], bool))
    trial.save_history()
    ok = result["status"] == TrialStatus.OK.value
    send(result, True, trial.kept_predictions if ok or code is None else None)
    return result


def last_words(trial: Trial) -> str:
    """What a trial ended past its time limit last did, for its error."""
    if trial.last_epoch > trial.start_epoch:
        return f"it was in epoch {trial.last_epoch + 1} (epoch {trial.last_epoch} reported)"
    return "it reported no epoch in this run"


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model (as the built-in loop records it)."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


# The final result's record of how the trial ran, beside own code's metrics
RECORD = ("final", "epochs_run", "resumed_from_epoch", "wall_s", "device", "device_name",
          "precision_used", "compile_used", "channels_last", "gradient_checkpointing")


def check_declared(code: Any, result: dict[str, Any], returned: Mapping[str, Any],
                   last: Mapping[str, Any]) -> None:
    """Every metric ``code`` declares is a number in ``result`` (else :class:`OwnCodeError`);
    one that is not finite makes the trial ``diverged``."""
    missing = [name for name in code.metrics if name not in result]
    if missing:
        reported = sorted(k for k in last if k not in BOOKKEEPING)
        raise OwnCodeError(
            f"model {code.name}: declared metric {missing[0]!r} is neither returned nor "
            f"reported; it returned {', '.join(sorted(returned)) or 'nothing'}"
            + (f" and reported {', '.join(reported)}" if reported else ""))
    for name in code.metrics:
        if not isinstance(result[name], (int, float)) or isinstance(result[name], bool):
            raise OwnCodeError(f"model {code.name}: metric {name}={result[name]!r} is not a "
                               "number; return numbers (e.g. loss.item())")
    bad = [name for name in code.metrics if not math.isfinite(result[name])]
    if bad and result["status"] == TrialStatus.OK.value:
        result.update(status=TrialStatus.DIVERGED.value, failure_reason="non-finite-metric",
                      error=f"{bad[0]}={result[bad[0]]} in the final metrics")


__all__ = ["fit_of", "run_trial"]
