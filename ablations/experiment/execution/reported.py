"""What a trial reports to Tune, and how the driver reads it back.

Tune keeps, for every numeric key of every result, a running analysis in the driver (max, min,
mean, last, and the last-5 and last-10 means with their deques; ``Trial.update_last_result``),
for the whole experiment, and again in the result grid it returns: about 2 KB per key per
trial each time. A trial's last result holds some 44 numbers, most of them final figures
(test metrics, peaks, throughput, OOM and timing records) that no callback of Tune needs as
numbers. So the trainable sends the numbers that are read while trials run (the epoch, the
training and validation metrics, the learning rate, the epoch's time: what the progress lines,
schedulers and searchers read) as they are, and the others as one JSON string, ``PACKED``,
which Tune does not analyse. :func:`unpacked` gives back the full dictionary; every reader of a
Tune result in the runner (the tables, the progress lines, the trackers, the status of a
trial) goes through it, and :func:`unpacked_frame` through Tune's per-report table of a trial
(the epochs' fallback when a trial saved no history). The results of a run with ``--verbose``
have no ``PACKED`` and read as they are: Tune's own result tables then show every figure (a
packed string would show as a truncated JSON text), at the cost of Tune's analysis of every
key.
"""

from __future__ import annotations

import json
import numbers
from typing import Any, Mapping

import pandas as pd

PACKED = "packed_json"  # the final figures of a result, as one JSON object

# Read as numbers while trials run: the progress lines (epoch, epoch_s, val_mae), a search's
# metric and scheduler (any val_* metric), the trackers' per-epoch curves.
LIVE = frozenset({"epoch", "train_loss", "lr", "epoch_s"})
LIVE_PREFIXES = ("val_",)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number)  # bools too: Tune analyses those as well


def json_value(value: Any) -> Any:
    """``json``'s ``default`` for what a trial records: numpy scalars as numbers, the rest as
    text."""
    return value.item() if hasattr(value, "item") else str(value)


def packed(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` as reported to Tune: the live numbers and every non-number as they are,
    the other numbers in one JSON string under ``PACKED``."""
    out: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, value in metrics.items():
        live = key in LIVE or key.startswith(LIVE_PREFIXES) or not _is_number(value)
        (out if live else rest)[key] = value
    if rest:
        out[PACKED] = json.dumps(rest, default=json_value)  # NaN and inf as JSON's NaN/Infinity
    return out


def unpacked(result: Mapping[str, Any] | None) -> dict[str, Any]:
    """A Tune result (or ``last_result``) with its packed figures back in place; a copy."""
    out = dict(result or {})
    text = out.pop(PACKED, None)
    if isinstance(text, str):
        out.update(json.loads(text))
    return out


def unpacked_frame(frame: Any) -> Any:
    """Tune's table of a trial's reports (``Result.metrics_dataframe``: one row a report, a
    ``PACKED`` column of JSON) with each row's packed figures as columns; None stays None."""
    if frame is None or PACKED not in frame:
        return frame
    return pd.DataFrame([unpacked(row) for row in frame.to_dict("records")])
