"""The :class:`Trial` a training function gets: the contract between any training code and the
runner (:func:`ablations.trial.run.run_trial` runs the code with it). Plain PyTorch, no Ray:
the trainable (ablations/experiment/execution/trainable.py) passes ``send``, which reports to Tune,
and ``store``, which writes the resumable state.

The contract (docs/own-code.md):

- ``trial.seeds``: the seed of each source (``init``, ``order``, ``data``) the runner chose
  for this trial; ``trial.seed_everything()`` seeds Python's, NumPy's and torch's generators
  from the ``init`` seed; ``trial.generator("order")`` is a torch generator for one source.
- ``trial.report(epoch=..., **metrics)`` once an epoch: the curves (epochs.parquet), the
  progress lines and Tune's schedulers. A declared metric that is not finite ends the trial
  as ``diverged`` (the call raises :class:`Diverged`, which the runner catches).
- ``trial.save(state)`` after a report saves ``state`` (tensors, numbers, strings, lists and
  dicts: it is read back with ``torch.load(weights_only=True)``) with the epoch last reported;
  ``trial.restore()`` gives it back in a restarted trial (a resume, a retry, a lost node), and
  ``trial.start_epoch`` is that epoch (0 in a new trial).
- ``trial.device``, ``trial.resources``: what Ray assigned.
- ``trial.predictions(frame)``: per-sample predictions, with a column per stratum, kept in
  predictions.parquet.
- The function returns its final metrics (name -> number); every declared metric must be
  among them or among the last report's.
"""

from __future__ import annotations

import functools
import hashlib
import io
import math
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

import numpy as np
import pandas as pd

from ablations.config import TrialConfig
from ablations.config.statuses import TrialStatus
from ablations.trial.time_limit import Deadline

if TYPE_CHECKING:  # torch is imported where a trial uses it: the driver plans without it
    import torch

    from ablations.trial.switches import Switches

# send(metrics, final, predictions): one report to Tune; final=True for the last one
Send = Callable[[dict[str, Any], bool, Optional[pd.DataFrame]], None]
# store(state): write the resumable state (its "history" included) atomically
Store = Callable[[dict[str, Any]], None]
SOURCES = ("init", "order", "data")


class Diverged(Exception):
    """A declared metric that is not finite: the trial ends as ``diverged``."""


class OwnCodeError(RuntimeError):
    """Own code broke the contract (a metric missing from its results, a value that is not a
    number); the message says which and how to fix it."""


class Trial:
    """What a training function gets beside its config; see the module docstring."""

    def __init__(self, config: TrialConfig, *, name: str, send: Send, store: Store,
                 saved: Optional[dict[str, Any]], folder: Path, device: torch.device,
                 resources: Mapping[str, float], cwd: Optional[Path] = None,
                 deadline: Optional[Deadline] = None, outputs: Optional[Path] = None) -> None:
        self._config = config
        self._send = send
        self._store = store
        code = config.own_code  # None: the built-in model or a plugin (builtin_fit.py)
        self._metrics = dict(code.metrics) if code is not None else {}
        self._saved = saved
        self.history: list[dict[str, Any]] = list(saved["history"]) if saved else []
        self.start_epoch: int = int(saved["epoch"]) if saved else 0
        self.last_epoch: int = self.start_epoch
        self.folder = folder  # the trial's own folder: kept across restarts on local storage
        # where the experiment was started: relative paths (a command's script) resolve here
        self.cwd = cwd or Path.cwd()
        # the working folder a command runs in, its own (ablations/trial/work_folder.py): kept
        # with the experiment on local storage; None: one in ``folder``
        self.outputs = outputs
        self.device = device
        self.resources = dict(resources)
        self.name = name  # the trial's name, e.g. baseline-seed0
        self.ablation = config.ablation
        self.dataset = config.dataset  # its name in an experiment over several datasets
        self.seed = config.seed  # the pairing key: every arm runs each seed
        self.seeds = config.seeds  # .init, .order, .data
        self._predictions: Optional[pd.DataFrame] = None
        self._saved_at: tuple[int, int] = (-1, -1)  # (epoch, history rows) of the last save
        self._wall_before_s = float(saved.get("wall_s", 0.0)) if saved else 0.0
        self._started = time.perf_counter()
        self.deadline = deadline or Deadline(None)  # the trial's time limit (time_limit.py)

    # ----------------------------------------------------------------------- seeds
    def seed_everything(self) -> None:
        """Seed Python's ``random``, NumPy's global generator and torch's (CPU and CUDA) with
        the trial's ``init`` seed. Call it first in ``fit``, before building the model."""
        import torch

        seed = self.seeds.init
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def generator(self, source: str = "order") -> torch.Generator:
        """A CPU torch generator seeded with one source's seed (e.g. a DataLoader's
        ``generator=`` with ``"order"``, a split with ``"data"``)."""
        import torch

        return torch.Generator().manual_seed(self.seed_of(source))

    def seed_of(self, source: str) -> int:
        if source not in SOURCES:
            raise ValueError(f"seed source {source!r}: choose one of {', '.join(SOURCES)}")
        return int(getattr(self.seeds, source))

    # --------------------------------------------------------------------- reports
    def report(self, epoch: Optional[int] = None, **metrics: Any) -> None:
        """One epoch's metrics (numbers; text is kept as text); ``epoch`` counts from 1
        (default: the last + 1)."""
        row = self._row(epoch, metrics)
        self._send(row, False, None)
        if row["status"] == TrialStatus.DIVERGED.value:
            raise Diverged(row["error"])
        if self.deadline.passed():  # this epoch counts; the trial ends after it
            raise self.deadline.error(f"it stopped after epoch {row['epoch']}")

    def last_report(self, epoch: Optional[int] = None, **metrics: Any) -> None:
        """The last epoch's metrics, sent with the final result as one report (Tune's
        schedulers then count one report per epoch) rather than on their own."""
        self._row(epoch, metrics)

    def _row(self, epoch: Optional[int], metrics: Mapping[str, Any]) -> dict[str, Any]:
        epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        if epoch < 1:
            raise OwnCodeError(f"trial.report(epoch={epoch}): epochs count from 1; report the "
                               "first epoch as epoch=1 (or leave epoch out)")
        row = {"epoch": epoch, "status": TrialStatus.OK.value, "reported_at": time.time(),
               **{k: final_value(k, v) for k, v in metrics.items() if k != "epoch"}}
        declared = [k for k in metrics if k in self._metrics]
        for key in declared:
            if not isinstance(row[key], (int, float)) or isinstance(row[key], bool):
                raise OwnCodeError(f"metric {key}={row[key]!r} is not a number; report "
                                   "numbers (e.g. loss.item())")
        bad = [k for k in declared if not _finite(row[k])]
        if bad:
            row.update(status=TrialStatus.DIVERGED.value, failure_reason="non-finite-metric",
                       error=f"{bad[0]}={row[bad[0]]} at epoch {epoch}")
        self.history = [h for h in self.history if h["epoch"] < epoch] + [row]
        self.last_epoch = epoch
        return row

    def save(self, state: Mapping[str, Any]) -> None:
        """Keep ``state`` as the trial's resumable state after the epoch last reported.

        Raises:
            OwnCodeError: (the first save) a state that ``torch.load(weights_only=True)``
                cannot read back, such as a NumPy array: found now, not when a restart
                needs it.
        """
        if self._saved_at == (-1, -1) and self._config.own_code is not None:
            readable(state)  # the built-in loop's state is tensors and numbers
        self._saved_at = (self.last_epoch, len(self.history))
        self._store({"epoch": self.last_epoch, "user": dict(state),
                     "history": list(self.history), "wall_s": self.wall_s()})

    def save_history(self) -> None:
        """Store the epochs reported since the last save (the end of the trial), without a
        state: the state stays the one saved with its epoch, so that a restart continues from
        it and reports those epochs again."""
        if self._saved_at != (self.last_epoch, len(self.history)):
            self._store({"history": list(self.history)})

    def restore(self) -> Optional[dict[str, Any]]:
        """The state last saved (a restarted trial), else None. A saved state without
        ``user`` is the built-in loop's own (a state file of the runner's loop alone), which
        is what :func:`ablations.trial.builtin_fit.builtin_fit` resumes from."""
        if not self._saved:
            return None
        return self._saved["user"] if "user" in self._saved else self._saved

    def predictions(self, frame: pd.DataFrame) -> None:
        """Per-sample predictions of the final model (e.g. ``target``, ``pred_mean``, a column
        per stratum); kept in predictions.parquet."""
        frame = pd.DataFrame(frame).reset_index(drop=True)
        if "sample_index" not in frame:
            frame.insert(0, "sample_index", np.arange(len(frame)))
        self._predictions = frame

    @functools.cached_property
    def switches(self) -> Switches:
        """Precision, compile, checkpointing and channels-last where the code calls them
        (made on first use: the built-in loop applies its own)."""
        from ablations.trial.switches import Switches

        return Switches(self._config, self.device)

    @property
    def kept_predictions(self) -> Optional[pd.DataFrame]:
        """What :meth:`predictions` was last given (None: nothing)."""
        return self._predictions

    def wall_s(self) -> float:
        return self._wall_before_s + time.perf_counter() - self._started


def readable(state: Mapping[str, Any]) -> None:
    """Raise :class:`OwnCodeError` unless ``torch.load(weights_only=True)`` reads ``state``
    back (tensors, numbers, strings, lists, dicts, ...)."""
    import torch

    buffer = io.BytesIO()
    torch.save(dict(state), buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch's UnpicklingError names the type
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        what = found.group(1) if found else type(exc).__name__
        raise OwnCodeError(f"trial.save: the state holds {what}, which torch.load("
                           "weights_only=True) does not read back; save tensors, numbers, "
                           "strings, lists and dicts (e.g. torch.get_rng_state(), not "
                           "np.random.get_state())") from None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _number(name: str, value: Any) -> float:
    torch = sys.modules.get("torch")  # a tensor comes only from code that imported torch
    if torch is not None and isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise OwnCodeError(f"metric {name}={value!r} is not a number; report numbers "
                           "(e.g. loss.item())") from None
    except OverflowError:
        raise OwnCodeError(f"metric {name}={value} is too large for a 64-bit float; report "
                           "numbers a float holds") from None


def final_value(name: str, value: Any) -> Any:
    """A reported value as the tables keep it: text, None and Python numbers as they are,
    a one-element tensor or a NumPy scalar as its number.

    Raises:
        OwnCodeError: an integer too large for a 64-bit float (the tables' columns)."""
    if isinstance(value, int) and not isinstance(value, bool):
        _number(name, value)  # raises for an integer no float holds
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    return _number(name, value)


def trial_folder(state_dir: str) -> Path:
    """The trial's own folder: its state folder on local storage (kept across restarts),
    else a folder in the worker's temporary directory."""
    if "://" not in state_dir:
        return Path(state_dir) / "work"
    digest = hashlib.sha256(state_dir.encode()).hexdigest()[:16]  # one per experiment's trial
    return Path(tempfile.gettempdir()) / "ablations-own-code" / digest


def resolved_device(config: TrialConfig) -> torch.device:
    """``cuda`` when the trial was given a GPU and CUDA is there, else the CPU."""
    import torch

    if config.systems.device == "cuda" and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


__all__ = ["Diverged", "OwnCodeError", "Trial"]
