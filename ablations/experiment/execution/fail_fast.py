"""Stop launching trials when they fail alike: a bad flag, a missing file or an import error
fails every trial the same way, and running them all costs the whole experiment's time before
the table says so.

:class:`FailAlike` is a Tune callback. It stops the run, whichever trials end first, when

- trials of :data:`MIN_VARIANTS` variants have failed with the same error line (the trial's own
  name and the numbers taken out), and no trial has ended otherwise (an ok trial, a different
  failure's variant still counts: one broken variant is that variant's result, not the
  experiment's; a timeout is the trial's time, not a failure alike); or
- every seed of the reference this run trains failed with the same error line: no verdict can
  follow (only where no trial of the reference was reused or trained before: a resumed or
  later round has its reference's rows).

It stops the run as Ctrl-C does (Tune's stop signal, SIGUSR1, which Tune handles by saving its
state and returning): the failed trials keep their rows and errors, the others stay unfinished
and no other starts, and ``--resume --retry-failed`` runs everything once the cause is fixed (a
resume never stops so). Tune installs that handler only when ``Tuner.fit`` runs in the main
thread; elsewhere the run goes on as before.
"""

from __future__ import annotations

import re
import signal
from collections import defaultdict
from typing import Any, Optional

from ray.tune import Callback

MIN_VARIANTS = 2  # variants whose trials failed alike, none ended otherwise, to stop
TUNE_STOP_HANDLER = "signal_interrupt_tune_run"  # ray/tune/tune.py's SIGINT/SIGUSR1 handler
EXCEPTION_NAME = re.compile(r"^[A-Za-z_][\w.]*\.\w+: ")  # e.g. ablations.trial.x.OwnCodeError:
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


class FailAlike(Callback):
    """Stops the run once its trials failed alike (the module's two rules); :attr:`reason`
    then says so, with the error. ``total``: the trials this run trains (a run of
    :data:`MIN_VARIANTS` or fewer never stops); ``reference`` and ``reference_trials``: the
    reference's name and how many of its trials this run trains, 0 where it has rows from
    before (then only the first rule holds)."""

    def __init__(self, total: int, reference: Optional[str] = None,
                 reference_trials: int = 0) -> None:
        self.total = total
        self.reference = reference
        self.reference_trials = reference_trials
        self.alike: dict[str, set[str]] = defaultdict(set)  # error line -> variants failed so
        self.reference_lines: list[str] = []  # the reference's failed trials' error lines
        self.ended_otherwise = False  # a trial ended ok, or by its time limit
        self.first_error: dict[str, str] = {}  # error line -> the first such error, as it was
        self.reason: Optional[str] = None

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.ended_otherwise = True

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        text = error_text(trial)
        if "TrialTimeout" in text:  # the trial's time (ablations/trial/time_limit.py)
            self.ended_otherwise = True
            return
        line, variant = _error_line(trial), _variant(trial)
        if line not in self.first_error:
            self.first_error[line] = error_line(trial, 500) or "an error that left no message"
        self.alike[line].add(variant)
        if variant == self.reference:
            self.reference_lines.append(line)
        if self.reason is not None or self.total <= MIN_VARIANTS:
            return
        variants = sorted(self.alike[line])
        if not self.ended_otherwise and len(variants) >= MIN_VARIANTS:
            why = f"trials of {len(variants)} variants ({', '.join(variants)}) failed alike"
        elif (self.reference_trials and len(self.reference_lines) == self.reference_trials
              and set(self.reference_lines) == {line}):
            why = (f"every seed of the reference {self.reference} failed alike, so no verdict "
                   "can follow")
        else:
            return
        stop = getattr(signal, "SIGUSR1", None)
        if stop is None or getattr(signal.getsignal(stop), "__name__", "") != TUNE_STOP_HANDLER:
            return  # Tune catches no stop signal here (not the main thread): run them all
        self.reason = (f"stopped launching trials: {why}: {self.first_error[line]}; fix the "
                       "cause, then resume the experiment with --retry-failed, which runs the "
                       "failed trials again and the others")
        signal.raise_signal(stop)

    def __getstate__(self) -> dict[str, Any]:
        """Tune pickles its callbacks with its state; a resume restores them: there it never
        stops (total 0), since a resume is what follows the fix."""
        return {"total": 0, "reference": None, "reference_trials": 0, "alike": defaultdict(set),
                "reference_lines": [], "ended_otherwise": False, "first_error": {},
                "reason": None}


def error_text(trial: Any) -> str:
    """The trial's error as Tune wrote it in the trial's local folder (the copy in its storage
    is synced later), "" when there is none to read."""
    try:
        with open(trial.error_file) as handle:
            return handle.read()
    except (OSError, TypeError):  # no error file (yet), or no local folder
        return ""


def error_line(trial: Any, width: int = 200) -> str:
    """The last line of the trial's error as it was (its exception's name taken out), cut to
    ``width`` characters; "" when there is none to read."""
    lines = [line.strip() for line in error_text(trial).splitlines() if line.strip()]
    if not lines:
        return ""
    last = EXCEPTION_NAME.sub("", lines[-1])
    return last if len(last) <= width else last[:width - 1] + "…"


def _variant(trial: Any) -> str:
    """The trial's variant: its name without the seed (``no_x-seed2``: ``no_x``)."""
    return str(trial).rsplit("-seed", 1)[0]


def _error_line(trial: Any) -> str:
    """The last line of the trial's error, what makes trials differ taken out: its own name
    (paths name it) and the numbers (a variant's values in an argument error)."""
    lines = [line.strip() for line in error_text(trial).splitlines() if line.strip()]
    line = lines[-1] if lines else "an error that left no message"
    return NUMBER.sub("#", line.replace(str(trial), "<trial>"))[:500]


__all__ = ["FailAlike", "error_line"]
