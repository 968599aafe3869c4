"""Live progress while trials run, as events (ablations/experiment/core/events.py): a
:class:`~ablations.experiment.core.events.TrialEnded` per finished trial, a
:class:`~ablations.experiment.core.events.Status` about once a second with the ETA, and
(``--progress epochs``) an :class:`~ablations.experiment.core.events.EpochEnded` per epoch. This
Tune callback prints nothing: the command line draws the events (ablations/cli/progress.py:
a bar on a terminal, a status line every ~30 s in a log). Ray's own table: ``--verbose``.

The ETA comes from the measured epoch times, carried over to the trials not yet measured by
their estimated cost (``ablations/trial/cost.py``: training FLOPs): seconds per FLOP measured so far
× the FLOPs left, plus each trial's time outside its epochs (start, data, test, checkpoint:
measured on the trials that have ended), over the trials that run at once. Before the first
epoch ends there is no measured time; the status line says so.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from ray import tune

from ablations.config.statuses import TrialStatus
from ablations.experiment.core.events import LOGGER, EpochEnded, Status, TrialEnded, emit
from ablations.experiment.execution.fail_fast import error_line, error_text
from ablations.experiment.execution.reported import unpacked

STATUS_EVERY_S = 1.0  # a Status at most this often (a terminal's bar is redrawn with each)


@dataclass(frozen=True)
class Planned:
    """What the progress display knows of a trial before it runs."""

    epochs: int
    cost: float  # estimated training FLOPs of the whole trial (NaN: unknown)


def format_duration(seconds: float) -> str:
    """``42s``, ``4m10s``, ``1h05m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class TrialProgress(tune.Callback):
    """Emits a :class:`TrialEnded` (``[done/total] name status metric (seconds)``) as each
    trial ends, a :class:`Status` (done / running / pending trials, epochs, best and worst
    running trial, ETA) at most every ``every_s`` seconds, and with ``epochs`` an
    :class:`EpochEnded` per reported epoch."""

    def __init__(self, total: int, *, plan: Optional[Mapping[str, Planned]] = None,
                 default: Optional[Planned] = None, every_s: float = STATUS_EVERY_S,
                 epochs: bool = False, clock: Callable[[], float] = time.monotonic,
                 units: Optional[Mapping[str, str]] = None):
        self.total = total
        self.units = dict(units or {})  # own code's declared units by metric (none: bare)
        self.plan = dict(plan or {})
        self.default = default  # for trials not in ``plan`` (a search's samples)
        self.every_s, self.epoch_lines, self.clock = every_s, epochs, clock
        self.done = 0
        self.started = self.last_status = clock()
        self.counted = False
        self.reported = False  # a Status emitted in this fit
        self.epochs_done: dict[str, int] = {}
        self.epoch_s: dict[str, float] = {}
        self.val: dict[str, float] = {}
        self.finished: set[str] = set()
        self.running: list[str] = []
        self.first_seen: dict[str, float] = {}  # when a trial was first seen running
        self.outside_epochs: list[float] = []  # per ended trial: wall time less its epochs
        self.trial_s: list[float] = []  # per ended trial: its wall time since first seen

    def setup(self, **info: Any) -> None:
        """Each fit; after ``--resume`` too, on the callback Tune restores with the experiment
        (one pickled by an earlier version drops the stream and bar it held, and takes this
        version's pace of a status a second)."""
        for legacy in ("stream", "bar", "live", "live_given"):
            self.__dict__.pop(legacy, None)
        self.every_s = min(self.every_s, STATUS_EVERY_S)
        self.started = self.last_status = self.clock()
        self.counted = self.reported = False

    # ---------------------------------------------------------------- Tune's hooks
    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if not self.counted:  # on a resume, the trials that finished before count as done
            ended = [t for t in trials if t.status in ("TERMINATED", "ERROR")]
            self.done = len(ended)
            self.finished = {str(t) for t in ended}
            self.counted = True
        self.running = [str(t) for t in trials if t.status == "RUNNING"]
        for name in self.running:
            self.first_seen.setdefault(name, self.clock())
        # the first step's at once (a bar starts drawn), then one every every_s
        if not self.reported or \
                self.clock() - self.last_status >= self.every_s:
            self._status()

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._status()  # the last; the runner emits FitEnded once the fit returns or raises

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict,
                        **info: Any) -> None:
        name = str(trial)
        if "epoch" not in result:
            return
        self.epochs_done[name] = int(result["epoch"])
        if result.get("epoch_s") is not None:
            self.epoch_s[name] = float(result["epoch_s"])
        if result.get("val_mae") is not None:
            self.val[name] = float(result["val_mae"])
        if self.epoch_lines:
            planned = self._planned(name)
            epochs = planned.epochs if planned and planned.epochs else 0
            # own code plans no epochs the runner knows (0): the epoch alone
            parts = [f"  {name} epoch {result['epoch']}" + (f"/{epochs}" if epochs else "")]
            if "val_mae" in result:
                parts.append(f"val_mae={result['val_mae']:.3f} km")
            if result.get("epoch_s") is not None:
                parts.append(f"{result['epoch_s']:.1f} s/epoch")
            emit(EpochEnded("info", " ".join(parts), trial=name, epoch=int(result["epoch"]),
                            epochs=epochs, val_mae=_number(result.get("val_mae")),
                            epoch_s=_number(result.get("epoch_s"))))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._line(trial, TrialStatus.OK)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if _timed_out(trial):
            self._line(trial, "TIMEOUT")
        else:  # the error's last line; its traceback is in the trial's error file
            self._line(trial, "FAILED", why=error_line(trial))

    # ---------------------------------------------------------------- events
    def _line(self, trial: Any, status: str, why: str = "") -> None:
        self.done += 1
        name = str(trial)
        self.finished.add(name)
        if name in self.first_seen:
            self.trial_s.append(self.clock() - self.first_seen[name])
        if name in self.first_seen and name in self.epoch_s:
            epochs = self.epochs_done.get(name, 0)
            self.outside_epochs.append(max(0.0, self.clock() - self.first_seen[name]
                                           - epochs * self.epoch_s[name]))
        result = unpacked(trial.last_result)
        if result.get("status") == TrialStatus.DIVERGED:
            status = TrialStatus.DIVERGED
        parts = [f"[{self.done}/{self.total}]", f"{trial}", status]
        shown: dict[str, float] = {}
        own = [name for name in str(result.get("own_metrics") or "").split(",") if name]
        if own:  # own code: its test metrics (else all it returned), in their declared units
            for metric in ([name for name in own if name.startswith("test_")] or own)[:3]:
                if isinstance(result.get(metric), (int, float)):
                    unit = self.units.get(metric)
                    shown[metric] = result[metric]
                    parts.append(f"{metric}={result[metric]:.4g}" + (f" {unit}" if unit else ""))
        elif "test_mae" in result:
            shown["test_mae"] = result["test_mae"]
            parts.append(f"test_mae={result['test_mae']:.3f} km")
        elif "val_mae" in result:
            shown["val_mae"] = result["val_mae"]
            parts.append(f"val_mae={result['val_mae']:.3f} km (epoch {result.get('epoch', '?')})")
        elapsed = self.clock() - self.started
        parts.append(f"({elapsed:.0f}s elapsed)")
        emit(TrialEnded("info", " ".join(parts) + (f": {why}" if why else ""), trial=name,
                        status=str(status), done=self.done, total=self.total,
                        elapsed_s=elapsed, metrics=shown, why=why))

    def _status(self) -> None:
        self.last_status, self.reported = self.clock(), True
        if not LOGGER.isEnabledFor(logging.DEBUG):  # no listener: not worth its ETA's cost
            return
        running_now = [name for name in self.running if name not in self.finished]
        epochs_total = sum(p.epochs for p in self.plan.values()) or (
            self.default.epochs * self.total if self.default else None)
        eta = self.eta_s()  # once: O(trials), and both lines show it
        emit(Status("status", self._status_text(False, eta), done=self.done, total=self.total,
                    running=len(running_now),
                    pending=max(0, self.total - self.done - len(running_now)),
                    epochs_done=sum(self.epochs_done.values()), epochs_total=epochs_total,
                    eta_s=eta, elapsed_s=self.clock() - self.started,
                    short=self._status_text(True, eta)))

    def _planned(self, name: str) -> Optional[Planned]:
        return self.plan.get(name, self.default)

    def eta_s(self) -> Optional[float]:
        """Seconds until every trial has ended, from the measured epoch times; for code that
        reports no epochs (a program's final metrics alone), from the ended trials' times;
        None before either is known."""
        per_flop, per_epoch = [], []
        for name, seconds in self.epoch_s.items():
            planned = self._planned(name)
            if planned and planned.epochs and math.isfinite(planned.cost) and planned.cost > 0:
                per_flop.append(seconds / (planned.cost / planned.epochs))
            per_epoch.append(seconds)
        if not per_epoch:
            return self._eta_from_trials()
        rate = statistics.median(per_flop) if per_flop else None
        typical_epoch = statistics.median(per_epoch)
        outside = statistics.median(self.outside_epochs) if self.outside_epochs else 0.0
        left: dict[str, float] = {}
        names = set(self.plan) | set(self.epochs_done) | set(self.running)
        for name in names - self.finished:
            planned = self._planned(name)
            if planned is None:
                continue
            epochs_left = max(0, planned.epochs - self.epochs_done.get(name, 0))
            if name in self.epoch_s:  # measured: its own pace
                left[name] = epochs_left * self.epoch_s[name]
            elif rate is not None and math.isfinite(planned.cost):
                left[name] = epochs_left * rate * planned.cost / max(planned.epochs, 1)
            else:
                left[name] = epochs_left * typical_epoch
            if name not in self.first_seen:  # not started: its time outside the epochs too
                left[name] += outside
        unplanned = max(0, self.total - self.done - len(left))  # search samples not yet made
        if unplanned and self.default is not None:
            left.update({f"_sample{i}": self.default.epochs * typical_epoch + outside
                         for i in range(unplanned)})
        if not left:
            return 0.0
        slots = max(1, len(self.running))
        return max(sum(left.values()) / slots, max(left.values()) if self.running else 0.0)

    def _eta_from_trials(self) -> Optional[float]:
        """The ETA of trials that report no epochs: each one left takes the ended trials'
        median time (a running one, that less its time so far), spread over the running
        slots."""
        if not self.trial_s:
            return None
        typical = statistics.median(self.trial_s)
        running = [name for name in self.running if name not in self.finished]
        left = [max(0.0, typical - (self.clock() - self.first_seen.get(name, self.clock())))
                for name in running]
        left += [typical] * max(0, self.total - self.done - len(running))
        if not left:
            return 0.0
        return max(sum(left) / max(1, len(running)), max(left))

    def status_line(self, live: bool = False) -> str:
        """The status; ``live``: for the terminal's bar, which shows the epochs itself, with
        the ETA before the running trials (a narrow terminal cuts the end)."""
        return self._status_text(live, self.eta_s())

    def _status_text(self, live: bool, eta: Optional[float]) -> str:
        epochs_total = sum(p.epochs for p in self.plan.values()) or None
        epochs_done = sum(self.epochs_done.values())
        # as of now: a trial that has just ended is not running, and pending is the rest
        running_now = [name for name in self.running if name not in self.finished]
        pending = max(0, self.total - self.done - len(running_now))
        counts = (f"{'' if live else '[status] '}{self.done}/{self.total} done, "
                  f"{len(running_now)} running, {pending} pending")
        epochs = (f"epochs {epochs_done}/{epochs_total}" if epochs_total
                  else f"epochs {epochs_done}")
        timing = [f"ETA {format_duration(eta)}" if eta is not None
                  else "ETA after the first epoch or trial",
                  f"{format_duration(self.clock() - self.started)} elapsed"]
        running = {n: v for n, v in self.val.items() if n in running_now}
        extremes = []
        if running:
            best = min(running, key=running.get)
            worst = max(running, key=running.get)
            extremes.append(f"running val_mae best {running[best]:.3f} km ({best}), worst "
                            f"{running[worst]:.3f} km ({worst})")
        parts = [counts, *timing, *extremes] if live else [counts, epochs, *extremes, *timing]
        return "; ".join(parts)


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) else None


def _timed_out(trial: Any) -> bool:
    """Whether the trial's error is its time limit (ablations/trial/time_limit.py)."""
    return "TrialTimeout" in error_text(trial)
