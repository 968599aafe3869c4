"""Stop launching trials when the first ones fail alike: a bad flag, a missing file or an import
error fails every trial the same way, and running them all costs the whole experiment's time
before the table says so.

:class:`FailAlike` is a Tune callback: when the first :data:`FIRST_FAILURES` trials to end have
all failed with the same error line (the trial's own name and the numbers taken out), of at
least :data:`MIN_VARIANTS` variants (one broken variant is that variant's result, not the
experiment's), and none ended otherwise (a timeout is not a failure alike), it
stops the run as Ctrl-C does (Tune's stop signal, SIGUSR1, which Tune handles by saving its state
and returning): the failed trials keep their rows and errors, the others stay unfinished, and
``--resume --retry-failed`` runs everything once the cause is fixed (a resume never stops so).
Tune installs that handler only when ``Tuner.fit`` runs in the main thread; elsewhere the run goes
on as before.
"""

from __future__ import annotations

import re
import signal
from typing import Any, Optional

from ray.tune import Callback

FIRST_FAILURES = 3  # the trials that must fail alike, with none ended otherwise, to stop
MIN_VARIANTS = 2  # ... of at least this many variants: one broken variant is its own result
TUNE_STOP_HANDLER = "signal_interrupt_tune_run"  # ray/tune/tune.py's SIGINT/SIGUSR1 handler
EXCEPTION_NAME = re.compile(r"^[A-Za-z_][\w.]*\.\w+: ")  # e.g. ablations.trial.x.OwnCodeError:
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


class FailAlike(Callback):
    """Stops the run once its first :data:`FIRST_FAILURES` trials to end failed alike;
    :attr:`reason` then says so, with the error. Only for runs of more trials than that."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.ended: list[Optional[str]] = []  # each ended trial's error line; None: not failed
        self.variants: list[str] = []  # each ended trial's variant
        self.first_error = ""  # the first failure's last line, as it was
        self.reason: Optional[str] = None

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.ended.append(None)
        self.variants.append(_variant(trial))

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if not self.ended:
            lines = [line.strip() for line in error_text(trial).splitlines() if line.strip()]
            last = lines[-1] if lines else "an error that left no message"
            self.first_error = EXCEPTION_NAME.sub("", last)[:500]
        # a timeout is the trial's time, not a failure alike (ablations/trial/time_limit.py)
        self.ended.append(None if "TrialTimeout" in error_text(trial) else _error_line(trial))
        self.variants.append(_variant(trial))
        first = self.ended[:FIRST_FAILURES]
        if (self.reason is not None or self.total <= FIRST_FAILURES
                or len(first) < FIRST_FAILURES or None in first or len(set(first)) > 1
                or len(set(self.variants[:FIRST_FAILURES])) < MIN_VARIANTS):
            return
        stop = getattr(signal, "SIGUSR1", None)
        if stop is None or getattr(signal.getsignal(stop), "__name__", "") != TUNE_STOP_HANDLER:
            return  # Tune catches no stop signal here (not the main thread): run them all
        self.reason = (f"stopped launching trials: the first {FIRST_FAILURES} trials failed "
                       f"alike, none ended otherwise: {self.first_error}; fix the cause, then "
                       "resume the experiment with --retry-failed, which runs the failed "
                       "trials again and the others")
        signal.raise_signal(stop)

    def __getstate__(self) -> dict[str, Any]:
        """Tune pickles its callbacks with its state; a resume restores them: there it never
        stops (total 0), since a resume is what follows the fix."""
        return {"total": 0, "ended": [], "variants": [], "first_error": "", "reason": None}


def error_text(trial: Any) -> str:
    """The trial's error as Tune wrote it in the trial's local folder (the copy in its storage
    is synced later), "" when there is none to read."""
    try:
        with open(trial.error_file) as handle:
            return handle.read()
    except (OSError, TypeError):  # no error file (yet), or no local folder
        return ""


def _variant(trial: Any) -> str:
    """The trial's variant: its name without the seed (``no_x-seed2``: ``no_x``)."""
    return str(trial).rsplit("-seed", 1)[0]


def _error_line(trial: Any) -> str:
    """The last line of the trial's error, what makes trials differ taken out: its own name
    (paths name it) and the numbers (a variant's values in an argument error)."""
    lines = [line.strip() for line in error_text(trial).splitlines() if line.strip()]
    line = lines[-1] if lines else "an error that left no message"
    return NUMBER.sub("#", line.replace(str(trial), "<trial>"))[:500]


__all__ = ["FailAlike"]
