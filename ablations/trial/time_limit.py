"""A trial's time limit: past it, the trial ends with status ``timeout``.

The limit counts from the start of this run of the trial (a resumed trial gets it again). Three
places enforce it:

- a command's program: the poll loop of :func:`ablations.trial.command.run_command` ends the
  program's whole tree when the limit passes, and the trial's error holds its last output;
- code that reports epochs (the built-in loop, a training function): ``trial.report`` ends
  the trial after the first epoch that finishes past the limit;
- code that hangs between reports: a watchdog raises :class:`TrialTimeout` in the training
  thread a grace period after the limit (CPython's asynchronous exception: it lands at the
  next Python instruction, so a call blocked inside C, e.g. a stuck collective, is ended only
  when it returns to Python; a command's program has no such gap).

The trial layer raises :class:`TrialTimeout`; the experiment layer records the trial as
``timeout`` (ablations/experiment/execution/tables.py) from the exception's name in Tune's error,
as it does for out-of-memory.
"""

from __future__ import annotations

import ctypes
import re
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

# What a hung in-process trial gets beyond its limit before the watchdog raises in its thread:
# a trial between epochs ends at its next report instead, with that epoch recorded.
WATCHDOG_GRACE_S = 5.0
UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smh]?)\s*")


class TrialTimeout(BaseException):
    """The trial ran past its time limit; the message says how long and what it last did.
    A BaseException, as KeyboardInterrupt is: training code's ``except Exception`` (a retry
    loop, a logged and skipped batch) does not swallow it."""


def parse_duration(text: str | float | int) -> float:
    """Seconds of a duration: a number of seconds, or ``90s``, ``15m``, ``2h``.

    Raises:
        ValueError: not such a duration, or not above zero.
    """
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        match = DURATION.fullmatch(str(text))
        if not match:
            raise ValueError(f"{text!r} is not a duration; give seconds, or e.g. 90s, 15m, 2h")
        seconds = float(match.group(1)) * UNITS[match.group(2)]
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{text!r}: give a time limit above zero, e.g. 90s, 15m, 2h")
    return seconds


def spoken_duration(seconds: float) -> str:
    """``90 s``, ``15 min``, ``2 h``: a limit as a person writes it."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


class Deadline:
    """When this run of a trial must end (None: no limit)."""

    def __init__(self, limit_s: Optional[float]) -> None:
        self.limit_s = limit_s
        self.started = time.monotonic()

    def passed(self) -> bool:
        return self.limit_s is not None and time.monotonic() - self.started > self.limit_s

    def error(self, what: str) -> TrialTimeout:
        """The trial's timeout, ``what`` saying what it last did."""
        return TrialTimeout(f"ran past its time limit of {spoken_duration(self.limit_s or 0)}; "
                            f"{what}")

    @contextmanager
    def watchdog(self, last_words: Callable[[], str]) -> Iterator[None]:
        """Raise :class:`TrialTimeout` in the calling thread if its block is still running
        :data:`WATCHDOG_GRACE_S` after the limit. On leaving the block the watchdog is
        disarmed under a lock, and an exception it set that has not landed yet is cleared and
        raised here, so it can never land in the caller's code after the block."""
        if self.limit_s is None:
            yield
            return
        thread = threading.get_ident()
        lock = threading.Lock()
        state = {"running": True, "fired": False}

        def fire() -> None:
            with lock:
                if state["running"]:
                    state["fired"] = True
                    _raise_in(thread, TrialTimeout)

        timer = threading.Timer(self.limit_s + WATCHDOG_GRACE_S, fire)
        timer.daemon = True
        timer.start()
        try:
            yield
        except TrialTimeout as exc:
            with lock:
                state["running"] = False
            timer.cancel()
            if str(exc):  # raised by the trial's own checks, with its words
                raise
            raise self.error(last_words()) from None
        finally:
            with lock:
                state["running"] = False
            timer.cancel()
        if state["fired"]:  # set, but the block ended before it landed
            _raise_in(thread, None)
            raise self.error(last_words())


def _raise_in(thread: int, exception: Optional[type]) -> None:
    """Set (or, with None, clear) an exception to be raised in ``thread`` at its next Python
    instruction (CPython's ``PyThreadState_SetAsyncExc``)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread), ctypes.py_object(exception) if exception else None)


__all__ = ["Deadline", "TrialTimeout", "parse_duration", "spoken_duration"]
