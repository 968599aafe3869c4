"""What an experiment tells its caller while it runs, as events: a round or a stage starting,
what ``auto_batch`` chose, a tracker that could not log. The library emits them on the
standard logger ``ablations.events`` and prints nothing; whoever runs it decides the words and
where they go: the command line prints them (its program and flags in place of the library's
markers), :meth:`~ablations.experiment.api.Experiment.run` hands them to ``on_event``.
Without a listener, Python's logging shows the warnings on stderr and drops the rest.

A message may hold :func:`~ablations.config.values.arg` and
:func:`~ablations.config.values.command` markers; :class:`Event` renders them for a reader
of the library (``str(event)``).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Callable, Iterator, Literal, Optional

from ablations.config.values import named

LOGGER = logging.getLogger("ablations.events")

Level = Literal["info", "warning"]


@dataclass(frozen=True)
class Event:
    """One thing the experiment says: ``level`` ``info`` (a line of the run's story) or
    ``warning`` (something the user should know; the run goes on); ``message`` with the
    library's markers, ``str()`` rendered for a reader of the library."""

    level: Level
    message: str

    def __str__(self) -> str:
        return named(self.message)


Listener = Callable[[Event], None]


def info(message: str) -> None:
    """Emit an ``info`` event."""
    LOGGER.info(message)


def warning(message: str) -> None:
    """Emit a ``warning`` event."""
    LOGGER.warning(message)


class _ToListener(logging.Handler):
    def __init__(self, listener: Listener) -> None:
        super().__init__(logging.INFO)
        self.listener = listener

    def emit(self, record: logging.LogRecord) -> None:
        level: Level = "warning" if record.levelno >= logging.WARNING else "info"
        self.listener(Event(level, record.getMessage()))


@contextlib.contextmanager
def listening(listener: Optional[Listener]) -> Iterator[None]:
    """Within: every event goes to ``listener`` alone (not to an outer listener, nor on to the
    root logger); None leaves them where they go."""
    if listener is None:
        yield
        return
    handlers, level, propagate = LOGGER.handlers[:], LOGGER.level, LOGGER.propagate
    LOGGER.handlers = [_ToListener(listener)]  # an inner listener replaces an outer one
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False
    try:
        yield
    finally:
        LOGGER.handlers = handlers
        LOGGER.setLevel(level)
        LOGGER.propagate = propagate
