"""Stopping an experiment: the command that continues it, and Tune's log lines that mislead.

The signal handlers (SIGTERM as Ctrl-C) belong to the command line (ablations/cli/signals.py);
a stop inside ``Tuner.fit`` lets Tune stop the trials and save its state, and the user is told
:func:`resume_command`; Tune's own resume hint is dropped from its log (:func:`quiet_tune_logs`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from typing import Any, Iterator, Optional

from ablations.config.values import command


def resume_command(storage: str, name: str, address: Optional[str] = None) -> str:
    """The command that continues experiment ``name`` (finished trials are kept), as a
    :func:`~ablations.config.values.command` marker: spelled as the user invoked the tool."""
    parts = ["--resume", "--name", name, "--storage", storage]
    if address:
        parts += ["--address", address]
    return command(*parts)


class _DropTuneLines(logging.Filter):
    """Drops Tune's log lines that mislead a CLI user: its resume hint (``Tuner.restore(...)``;
    the CLI prints its own ``--resume`` command), for trials that had not started, "Could
    not fetch metrics" (there is nothing to fetch), the warning that the experiment state
    is snapshotted often (a small file here), and a failed trial's traceback (some 30 lines
    each: the progress line says the error, the trial's error.txt keeps the traceback), with
    the lines after a stop that list the trials it cut off."""

    DROPPED = ("has been interrupted, but the most recent state was saved",
               # the stop's own line: the run says why it stopped and how to continue
               "Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run",
               "Failed to fetch metrics for",
               # short trials ending together snapshot the (small) experiment state often
               "Experiment state snapshotting has been triggered multiple times",
               "Trial task failed for trial",
               "Trials did not complete:",
               # a trial the stop cut off, its actor's error never fetched
               "Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1')")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in self.DROPPED)


_TUNE_LOGGERS = ("ray.tune.tune", "ray.tune.analysis.experiment_analysis",
                 "ray.tune.execution.experiment_state", "ray.tune.execution.tune_controller",
                 "ray._private.worker")


# Tune's reporter prints each failed trial's block itself (print(), no logger): "Trial X errored
# after N iterations at ... Error file: ...", beside the runner's own line for it
_TRIAL_ERRORED = re.compile(r"^Trial \S+ errored after \d+ iterations at .*\nError file: \S+\n?$")


class _DropErroredBlocks:
    """``stream`` less Tune's printed block for a failed trial (the progress line says it, with
    the error; the trial's error file keeps the traceback)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.dropped = False  # the block went: print()'s newline after it goes too

    def write(self, text: str) -> int:
        if _TRIAL_ERRORED.match(text) or (self.dropped and text == "\n"):
            self.dropped = not self.dropped
            return len(text)
        self.dropped = False
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, encoding, fileno, ...: the stream's
        return getattr(self.stream, name)


@contextlib.contextmanager
def quiet_tune_logs() -> Iterator[None]:
    drop = _DropTuneLines()
    for name in _TUNE_LOGGERS:
        logging.getLogger(name).addFilter(drop)
    stdout = sys.stdout
    sys.stdout = _DropErroredBlocks(stdout)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _DropErroredBlocks) and sys.stdout.stream is stdout:
            sys.stdout = stdout
        for name in _TUNE_LOGGERS:
            logging.getLogger(name).removeFilter(drop)
