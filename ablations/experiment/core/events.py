"""What an experiment tells its caller while it runs, as events: a round or a stage starting,
what ``auto_batch`` chose, a tracker that could not log, and (asked for with ``progress``)
each trial's end, each epoch and the run's progress. The library emits them on the standard
logger ``ablations.events`` and prints nothing; whoever runs it decides where they go: the
command line prints them (its program and flags in place of the library's markers, a bar on a
terminal), :meth:`~ablations.experiment.api.Experiment.run` hands them to ``on_event``.
Without a listener they go to Python's logging, where the logger's ``NullHandler`` keeps them
off stderr until the application configures logging (``logging.basicConfig()`` shows them).

Every event is an :class:`Event` (``level``, ``message``); the progress events are subclasses
that carry their numbers as fields (:class:`TrialEnded`, :class:`EpochEnded`,
:class:`Status`, :class:`FitEnded`), so a listener can draw them its own way.

A message may hold :func:`~ablations.config.values.arg` and
:func:`~ablations.config.values.command` markers; :class:`Event` renders them for a reader
of the library (``str(event)``).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, Mapping, Optional

from ablations.config.values import named

LOGGER = logging.getLogger("ablations.events")
LOGGER.addHandler(logging.NullHandler())  # a library's logger: silent until configured

# ``status``: a snapshot of the run's progress, about once a second while trials run (a
# listener that draws a bar redraws it; one that writes lines keeps one now and then)
Level = Literal["info", "warning", "status"]
_LOG_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "status": logging.DEBUG}


@dataclass(frozen=True)
class Event:
    """One thing the experiment says: ``level`` ``info`` (a line of the run's story) or
    ``warning`` (something the user should know; the run goes on); ``message`` with the
    library's markers, ``str()`` rendered for a reader of the library."""

    level: Level
    message: str

    def __str__(self) -> str:
        return named(self.message)


@dataclass(frozen=True)
class TrialEnded(Event):
    """A trial ended: ``status`` ok, diverged, FAILED or TIMEOUT; ``done`` of ``total``
    trials have ended; ``metrics`` the values its line shows; ``why`` a failure's last line."""

    trial: str
    status: str
    done: int
    total: int
    elapsed_s: float
    metrics: Mapping[str, float] = field(default_factory=dict)
    why: str = ""


@dataclass(frozen=True)
class EpochEnded(Event):
    """A trial reported an epoch (with ``progress_epochs``): ``epochs`` planned (0: not known,
    a program's own), its validation MAE and seconds where reported."""

    trial: str
    epoch: int
    epochs: int
    val_mae: Optional[float] = None
    epoch_s: Optional[float] = None


@dataclass(frozen=True)
class Status(Event):
    """The run's progress (level ``status``): trials done, running and pending, epochs done
    of those planned (None: not known), the ETA (None: before the first epoch or trial) and
    the time elapsed; ``message`` is the status line, ``short`` the same for a bar that shows
    the epochs itself."""

    done: int
    total: int
    running: int
    pending: int
    epochs_done: int
    epochs_total: Optional[int]
    eta_s: Optional[float]
    elapsed_s: float
    short: str = ""


@dataclass(frozen=True)
class FitEnded(Event):
    """Tune's fit ended (level ``status``): a listener's bar is complete."""


Listener = Callable[[Event], None]


def emit(event: Event) -> None:
    """Emit ``event`` (its level decides where Python's logging sends it without a listener)."""
    LOGGER.log(_LOG_LEVELS[event.level], "%s", event.message, extra={"event": event})


def info(message: str) -> None:
    """Emit an ``info`` event."""
    emit(Event("info", message))


def warning(message: str) -> None:
    """Emit a ``warning`` event."""
    emit(Event("warning", message))


class _ToListener(logging.Handler):
    def __init__(self, listener: Listener) -> None:
        super().__init__(logging.DEBUG)
        self.listener = listener

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        if not isinstance(event, Event):  # logged on this logger by other code
            level: Level = "warning" if record.levelno >= logging.WARNING else "info"
            event = Event(level, record.getMessage())
        self.listener(event)


@contextlib.contextmanager
def listening(listener: Optional[Listener]) -> Iterator[None]:
    """Within: every event goes to ``listener`` alone (not to an outer listener, nor on to the
    root logger); None leaves them where they go."""
    if listener is None:
        yield
        return
    handlers, level, propagate = LOGGER.handlers[:], LOGGER.level, LOGGER.propagate
    LOGGER.handlers = [_ToListener(listener)]  # an inner listener replaces an outer one
    LOGGER.setLevel(logging.DEBUG)
    LOGGER.propagate = False
    try:
        yield
    finally:
        LOGGER.handlers = handlers
        LOGGER.setLevel(level)
        LOGGER.propagate = propagate
