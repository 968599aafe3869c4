"""Live progress while trials run: a line per finished trial, a status line every ~30 s with
an ETA, and (``--progress epochs``) a line per epoch. Ray's own table: ``--verbose``.

On a terminal the status is a tqdm bar at the bottom instead (epochs done of the total,
redrawn every second, with the trials, the best and worst running trial and the ETA), and the
lines scroll above it; piped to a file or in CI, the plain lines.

The ETA comes from the measured epoch times, carried over to the trials not yet measured by
their estimated cost (``ablations/trial/cost.py``: training FLOPs): seconds per FLOP measured so far
× the FLOPs left, plus each trial's time outside its epochs (start, data, test, checkpoint:
measured on the trials that have ended), over the trials that run at once. Before the first
epoch ends there is no measured time; the status line says so.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, TextIO

from ray import tune

from ablations.config.statuses import TrialStatus
from ablations.experiment.fail_fast import error_line, error_text
from ablations.experiment.reported import unpacked

STATUS_EVERY_S = 30.0
LIVE_EVERY_S = 1.0  # a terminal's bar: redrawn at most this often


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
    """Prints ``[done/total] name status metric (seconds)`` as each trial ends, a status line
    (done / running / pending trials, epochs, best and worst running trial, ETA) every
    ``every_s`` seconds, and with ``epochs`` a line per reported epoch."""

    def __init__(self, total: int, *, plan: Optional[Mapping[str, Planned]] = None,
                 default: Optional[Planned] = None, stream: TextIO | None = None,
                 every_s: float = STATUS_EVERY_S, epochs: bool = False,
                 clock: Callable[[], float] = time.monotonic, live: Optional[bool] = None,
                 units: Optional[Mapping[str, str]] = None):
        self.total = total
        self.units = dict(units or {})  # own code's declared units by metric (none: bare)
        # a bar on a terminal (None: when the stream is one), plain lines otherwise
        self.live_given = live
        self.live = live if live is not None else _is_terminal(stream or sys.stdout)
        self.bar: Any = None
        self.plan = dict(plan or {})
        self.default = default  # for trials not in ``plan`` (a search's samples)
        self.stream = stream or sys.stdout
        self.every_s, self.epoch_lines, self.clock = every_s, epochs, clock
        self.done = 0
        self.started = self.last_status = clock()
        self.counted = False
        self.epochs_done: dict[str, int] = {}
        self.epoch_s: dict[str, float] = {}
        self.val: dict[str, float] = {}
        self.finished: set[str] = set()
        self.running: list[str] = []
        self.first_seen: dict[str, float] = {}  # when a trial was first seen running
        self.outside_epochs: list[float] = []  # per ended trial: wall time less its epochs
        self.trial_s: list[float] = []  # per ended trial: its wall time since first seen

    def setup(self, **info: Any) -> None:
        """Each fit; after ``--resume`` too, on the callback Tune restores with the experiment."""
        self.started = self.last_status = self.clock()
        self.counted = False
        # a resumed experiment may run where the first did not (a terminal, a log file)
        if getattr(self, "live_given", None) is None:
            self.live = _is_terminal(self.stream)

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
        if self.live:
            self._draw()
        elif self.clock() - self.last_status >= self.every_s:
            self.last_status = self.clock()
            print(self.status_line(), file=self.stream, flush=True)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        if self.bar is not None:
            self._draw(force=True)
            self.bar.close()
            self.bar = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()  # Tune pickles its callbacks (tuner.pkl): not the bar
        state["bar"] = None
        return state

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
            # own code plans no epochs the runner knows (0): the epoch alone
            of = f"/{planned.epochs}" if planned and planned.epochs else ""
            parts = [f"  {name} epoch {result['epoch']}{of}"]
            if "val_mae" in result:
                parts.append(f"val_mae={result['val_mae']:.3f} km")
            if result.get("epoch_s") is not None:
                parts.append(f"{result['epoch_s']:.1f} s/epoch")
            self._emit(" ".join(parts))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._line(trial, TrialStatus.OK)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if _timed_out(trial):
            self._line(trial, "TIMEOUT")
        else:  # the error's last line; its traceback is in the trial's error file
            self._line(trial, "FAILED", why=error_line(trial))

    # ---------------------------------------------------------------- lines
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
        parts = [f"[{self.done}/{self.total}]", f"{trial}", status]
        if result.get("status") == TrialStatus.DIVERGED:
            parts[-1] = TrialStatus.DIVERGED
        own = [name for name in str(result.get("own_metrics") or "").split(",") if name]
        if own:  # own code: its test metrics (else all it returned), in their declared units
            shown = [name for name in own if name.startswith("test_")] or own
            for name in shown[:3]:
                if isinstance(result.get(name), (int, float)):
                    unit = self.units.get(name)
                    parts.append(f"{name}={result[name]:.4g}" + (f" {unit}" if unit else ""))
        elif "test_mae" in result:
            parts.append(f"test_mae={result['test_mae']:.3f} km")
        elif "val_mae" in result:
            parts.append(f"val_mae={result['val_mae']:.3f} km (epoch {result.get('epoch', '?')})")
        parts.append(f"({self.clock() - self.started:.0f}s elapsed)")
        self._emit(" ".join(parts) + (f": {why}" if why else ""))

    def _emit(self, line: str) -> None:
        """A line for the log: above the bar on a terminal."""
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
            self._draw(force=True)
        else:
            print(line, file=self.stream, flush=True)

    def _draw(self, force: bool = False) -> None:
        """The terminal's bar: epochs done of the total, the rest of the status line after it."""
        if not force and self.bar is not None and self.clock() - self.last_status < LIVE_EVERY_S:
            return
        import shutil

        from tqdm import tqdm

        self.last_status = self.clock()
        total = sum(p.epochs for p in self.plan.values()) or (
            self.default.epochs * self.total if self.default else None)
        if self.bar is None:
            # the terminal's size as shutil reads it (80 x 24 where a pty reports 0, where
            # tqdm's own reading would draw nothing)
            columns, lines = shutil.get_terminal_size()
            self.bar = tqdm(total=total, file=self.stream, unit="epoch", ncols=columns,
                            nrows=lines, mininterval=0, leave=True,
                            bar_format="{n_fmt}/{total_fmt} epochs |{bar:20}| {desc}")
        self.bar.n = sum(self.epochs_done.values())
        self.bar.set_description_str(self.status_line(live=True), refresh=False)
        self.bar.refresh()

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
        epochs_total = sum(p.epochs for p in self.plan.values()) or None
        epochs_done = sum(self.epochs_done.values())
        # as of now: a trial that has just ended is not running, and pending is the rest
        running_now = [name for name in self.running if name not in self.finished]
        pending = max(0, self.total - self.done - len(running_now))
        counts = (f"{'' if live else '[status] '}{self.done}/{self.total} done, "
                  f"{len(running_now)} running, {pending} pending")
        epochs = (f"epochs {epochs_done}/{epochs_total}" if epochs_total
                  else f"epochs {epochs_done}")
        eta = self.eta_s()
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


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False


def _timed_out(trial: Any) -> bool:
    """Whether the trial's error is its time limit (ablations/trial/time_limit.py)."""
    return "TrialTimeout" in error_text(trial)
