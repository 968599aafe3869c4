"""What Ray Tune prints on stdout while it runs (its configuration box, its results folder, a
TensorBoard command, other lines): kept off the caller's console, in the experiment's
tune_console.log, unless asked for (``--verbose``; ``Console.verbose``)."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any, Iterator, Optional, TextIO

from ablations.results.io.files import is_uri

TUNE_CONSOLE_FILE = "tune_console.log"


class TuneLines(io.TextIOBase):
    """stdout while Tune runs: Tune's own start-up lines (its configuration box, "View
    detailed results here" with its folder, and a TensorBoard command for that folder) go to
    ``log``; every other line (a trial's error and its error file, anything else) reaches
    ``console``, or ``log`` too where there is none. The command line prints its own lines
    for the first three (the results folder, TensorBoard on the experiment, progress)."""

    OWN = ("View detailed results here:", "To visualize your results with TensorBoard")
    BOX = ("\u256d", "\u2502", "\u251c", "\u2570")  # the corners and sides of Tune's table

    def __init__(self, console: Any, log: Any) -> None:
        self.console, self.log, self.pending = console, log, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            self._route(line + "\n")
        return len(text)

    def _route(self, line: str) -> None:
        stripped = line.strip()
        tunes = not stripped or stripped.startswith(self.BOX) or stripped.startswith(self.OWN)
        (self.log if tunes or self.console is None else self.console).write(line)

    def flush(self) -> None:
        if self.pending:
            self._route(self.pending)
            self.pending = ""
        if self.console is not None:
            self.console.flush()
        self.log.flush()


@contextlib.contextmanager
def tune_lines(root: str, console: Optional[TextIO] = None) -> Iterator[None]:
    """While it is open, what Tune prints goes to ``<experiment>/tune_console.log`` (a local
    experiment; nowhere for a bucket): its start-up lines, and the rest too unless ``console``
    takes it (:class:`TuneLines`)."""
    target = os.devnull if is_uri(root) else str(Path(root) / TUNE_CONSOLE_FILE)
    with open(target, "a") as log:
        stream = TuneLines(console, log)
        with contextlib.redirect_stdout(stream):
            try:
                yield
            finally:
                stream.flush()
