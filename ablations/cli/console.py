"""How the command line speaks: the library's messages with its flags and its program as the
user started it (:func:`spoken`), its events as lines (:func:`print_event`), a bad input's one
line (:func:`error_text`) and planning's warnings (:func:`say_notes`)."""

from __future__ import annotations

import sys
from typing import Optional, Sequence, TextIO

from ablations.cli.flags import PROGRAM
from ablations.config.values import NamesArguments, flag_of, named
from ablations.experiment.core.events import Event


def spoken(text: str) -> str:
    """A message of the library as the command line says it: the arguments it names as flags
    (``max_seeds``: ``--max-seeds``), the commands it suggests as the user started the tool."""
    return named(text, flag_of, PROGRAM)


def print_event(event: Event, stream: Optional[TextIO] = None) -> None:
    """What the library says while it runs, as the command line says it: a warning on
    stderr, the rest on ``stream`` (None: stdout); the progress snapshots (level ``status``)
    are drawn by ablations/cli/progress.py's view, not printed as lines."""
    if event.level == "status":
        return
    if event.level == "warning":
        print(f"warning: {spoken(event.message)}", file=sys.stderr, flush=True)
    else:
        print(spoken(event.message), file=stream or sys.stdout, flush=True)


def error_text(error: Exception) -> str:
    """A bad input's one line as the command line says it: the arguments it names are flags."""
    return error.render(flag_of, PROGRAM) if isinstance(error, NamesArguments) \
        else spoken(str(error))


def say_notes(notes: Sequence[str]) -> None:
    """Planning's warnings (e.g. ``--only`` adding the reference), on stderr."""
    for note in notes:
        print(f"warning: {spoken(note)}", file=sys.stderr)
