"""The command line's view of a run: the library's events (ablations/experiment/core/events.py) as
lines, and its progress as a tqdm bar at the bottom of a terminal (epochs done of the total,
redrawn with each status, about once a second, with the trials, the best and worst running
trial and the ETA) with the lines scrolling above it; piped to a file or in CI, a status line
every ~30 s instead."""

from __future__ import annotations

import sys
from typing import Any, Optional, TextIO

from ablations.cli.console import print_event
from ablations.experiment.core.events import Event, FitEnded, Status

LINE_EVERY_S = 30.0  # a status line this often where there is no bar


class ConsoleView:
    """A listener (``Experiment.run(on_event=ConsoleView())``) that prints the events as the
    command line says them and draws the progress: a bar on a terminal (``live`` None: when
    ``stream`` is one), else a status line every ``every_s`` seconds of the run."""

    def __init__(self, stream: Optional[TextIO] = None, *, live: Optional[bool] = None,
                 every_s: float = LINE_EVERY_S):
        # the console as it is now: while Tune runs, sys.stdout is the filter that keeps Tune's
        # own lines in tune_console.log
        self.stream = stream or sys.stdout
        self.live = live if live is not None else is_terminal(self.stream)
        self.every_s = every_s
        self.bar: Any = None
        self.last_line_s = 0.0  # the run's elapsed time at the last status line

    def __call__(self, event: Event) -> None:
        if isinstance(event, Status):
            self._status(event)
        elif isinstance(event, FitEnded):
            self.last_line_s = 0.0  # the next fit counts its time from its start
            if self.bar is not None:
                self.bar.close()
                self.bar = None
        elif event.level != "status":
            self._line(event)

    def _status(self, status: Status) -> None:
        if self.live:
            self._draw(status)
        elif status.elapsed_s - self.last_line_s >= self.every_s:
            self.last_line_s = status.elapsed_s
            print(status.message, file=self.stream, flush=True)

    def _line(self, event: Event) -> None:
        """A line for the log: above the bar on a terminal (a warning on stderr)."""
        if self.bar is None:
            print_event(event, stream=self.stream)
            return
        from tqdm import tqdm

        with tqdm.external_write_mode(file=self.stream):  # the bar cleared, then redrawn
            print_event(event, stream=self.stream)

    def _draw(self, status: Status) -> None:
        if self.bar is None:
            import shutil

            from tqdm import tqdm

            # the terminal's size as shutil reads it (80 x 24 where a pty reports 0, where
            # tqdm's own reading would draw nothing)
            columns, lines = shutil.get_terminal_size()
            self.bar = tqdm(total=status.epochs_total, file=self.stream, unit="epoch",
                            ncols=columns, nrows=lines, mininterval=0, leave=True,
                            bar_format="{n_fmt}/{total_fmt} epochs |{bar:20}| {desc}")
        self.bar.n = status.epochs_done
        self.bar.set_description_str(status.short, refresh=False)
        self.bar.refresh()


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False
