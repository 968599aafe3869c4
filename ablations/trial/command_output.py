"""What a command's program writes, read while it runs (ablations/trial/command.py): the lines
appended to a file since the last read, as JSON objects (its metrics file) or as text (its
stdout, for printed metrics), and the numbers of a line's metrics."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Collection, Mapping

from ablations.config.printed import PrintedMetrics, PrintedValueError
from ablations.trial.own_code import OwnCodeError


class NewBytes:
    """What was appended to a file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read_bytes(self, *, complete_only: bool) -> bytes:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return b""
        if complete_only:  # a line still being written waits for its newline
            data = data[:data.rfind(b"\n") + 1]
        self.offset += len(data)
        return data


class NewLines(NewBytes):
    """The JSON objects of the lines appended to a file since the last read."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.line_number = 0

    def read(self, *, complete_only: bool) -> list[dict[str, Any]]:
        pieces = self.read_bytes(complete_only=complete_only).split(b"\n")
        if pieces[-1] == b"":  # what follows the last newline
            pieces.pop()
        records = []
        for raw in pieces:
            self.line_number += 1
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                record = json.loads(text)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                raise OwnCodeError(
                    f"{self.path.name} line {self.line_number} is not a JSON object: "
                    f"{text[:80]!r}; write one json.dumps({{...}}) a line")
            records.append(record)
        return records


class NewText(NewBytes):
    """The text lines appended to a file since the last read."""

    def read(self, *, complete_only: bool) -> list[str]:
        data = self.read_bytes(complete_only=complete_only)
        # a progress bar's carriage returns end its updates as lines do
        text = data.decode("utf-8", errors="replace").replace("\r", "\n")
        return [line for line in text.split("\n") if line.strip()]


def printed_points(printed: PrintedMetrics, line: str) -> list[tuple[int, dict[str, float]]]:
    """The points of the printed metrics that one line of stdout gives (``printed.feed``)."""
    try:
        return printed.feed(line)
    except PrintedValueError as exc:
        raise OwnCodeError(f"{exc}; make the pattern's group match the number alone") from None


def epoch_number(value: Any, path: Path) -> int:
    """A metrics line's ``epoch`` as a whole number from 1 up; else the trial fails."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and float(value).is_integer() and value >= 1:
        return int(value)
    raise OwnCodeError(f"{path.name}: epoch {value!r} is not a whole number from 1 up; write "
                       '{"epoch": 1, ...} with epochs counted from 1')


def metric_numbers(record: Mapping[str, Any], declared: Collection[str]) -> dict[str, float]:
    """The numbers of a JSON line (``null`` as NaN: what e.g. JavaScript writes for NaN).
    A declared metric that is no number (``true``, text, a list) or an integer too large
    for a 64-bit float fails the trial naming it; other keys that are no number are left
    out."""
    out = {}
    for key, value in record.items():
        if value is None:
            out[key] = math.nan
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                out[key] = float(value)
                continue
            except OverflowError:
                problem = f"{value} is too large for a 64-bit float"
        else:
            problem = f"{json.dumps(value)[:80]} is not a number"
        if key in declared:
            raise OwnCodeError(f"metric {key}: {problem}; write numbers (e.g. loss.item())")
    return out


__all__ = ["NewBytes", "NewLines", "NewText", "epoch_number", "metric_numbers",
           "printed_points"]
