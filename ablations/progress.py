"""A compact live progress line per finished trial (Ray's own table: ``--verbose``)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from ray import tune


class TrialProgress(tune.Callback):
    """Prints ``[done/total] name status metric (seconds)`` as each trial ends."""

    def __init__(self, total: int, *, stream: TextIO | None = None):
        self.total = total
        self.done = 0
        self.stream = stream or sys.stdout
        self.started = time.monotonic()
        self.counted = False

    def setup(self, **info: Any) -> None:
        """Each fit; after ``--resume`` too, on the callback Tune restores with the experiment."""
        self.started = time.monotonic()
        self.counted = False

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if not self.counted:  # on a resume, the trials that finished before count as done
            self.done = sum(trial.status in ("TERMINATED", "ERROR") for trial in trials)
            self.counted = True

    def _line(self, trial: Any, status: str) -> None:
        self.done += 1
        result = trial.last_result or {}
        parts = [f"[{self.done}/{self.total}]", f"{trial}", status]
        if result.get("status") == "diverged":
            parts[-1] = "diverged"
        if "test_mae" in result:
            parts.append(f"test_mae={result['test_mae']:.3f} km")
        elif "val_mae" in result:
            parts.append(f"val_mae={result['val_mae']:.3f} km (epoch {result.get('epoch', '?')})")
        parts.append(f"({time.monotonic() - self.started:.0f}s elapsed)")
        print(" ".join(parts), file=self.stream, flush=True)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._line(trial, "ok")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._line(trial, "FAILED")
