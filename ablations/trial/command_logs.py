"""A command's logs (``stdout.log`` and ``stderr.log`` of its trial's folder) read back for
its trial (ablations/trial/command.py): their last lines in a failed or stopped trial's
error, and the final metrics a program printed as its last JSON line."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, Optional

STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"
TAIL_BYTES = 65536  # how much of the end of a log is read for stderr's last lines
ERROR_LINES = 5  # stderr's last non-empty lines in a failed trial's error
ERROR_CHARS = 400


def exit_message(code: int, folder: Path) -> str:
    """One line: the exit code (or the signal) and stderr's last non-empty lines."""
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    said = last_lines(folder / STDERR_LOG)
    return (f"command {how}: {said}" if said else
            f"command {how} and wrote nothing on stderr (its output: {folder / STDOUT_LOG})")


def last_output(folder: Path) -> str:
    """A stopped program's last lines, stderr's else stdout's, for its trial's error."""
    for log in (STDERR_LOG, STDOUT_LOG):
        said = last_lines(folder / log)
        if said:
            return f"the program was stopped; its last output ({log}): {said}"
    return "the program was stopped; it wrote nothing on stderr or stdout"


def last_lines(path: Path) -> str:
    """The last non-empty lines of a log, joined by ' | ', at most ERROR_CHARS long."""
    tail = [line.strip() for line in _tail(path).splitlines() if line.strip()]
    said = " | ".join(tail[-ERROR_LINES:])
    return "..." + said[-ERROR_CHARS:] if len(said) > ERROR_CHARS else said


def last_json_line(path: Path) -> Optional[dict[str, Any]]:
    """The last line of ``path`` that is a JSON object, else None."""
    for line in reversed(_tail(path).splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                return record
    return None


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - TAIL_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


__all__ = ["STDERR_LOG", "STDOUT_LOG", "exit_message", "last_json_line", "last_lines",
           "last_output"]
