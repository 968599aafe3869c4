"""Metrics a program writes to a log file of its own: a CSV log, a JSON file, TensorBoard events.

Lightning's CSVLogger writes ``metrics.csv``, its default logger and ``SummaryWriter``
TensorBoard event files, the Hugging Face Trainer ``all_results.json`` and
``trainer_state.json``. A command's metric names the file (a path from the folder the program
runs in; a glob such as ``lightning_logs/version_*/metrics.csv`` takes the newest match) and,
where it differs from the metric's name, the column, key or tag::

    metrics:
      val_loss: {direction: lower, csv: lightning_logs/version_*/metrics.csv}
      eval_accuracy: {direction: higher, json: out/all_results.json}
      val_acc: {direction: higher, tensorboard: runs, key: val/acc}

The file is read every two seconds while the program runs (an epoch once a later point of
every file metric follows it: ablations/trial/command.py's ``epochs_written``) and once more
when it has ended (:func:`read_points`): each value is a point of the metric's curve, the last
its final value. A point's epoch is the CSV's ``epoch`` column,
the TensorBoard step, a JSON ``log_history`` entry's ``epoch`` (each counted from 1: a count
that starts at 0 is shifted by one; an epoch logged twice keeps its last value), else the
value's ordinal. A JSON file's top-level key is a
final value alone. TensorBoard files are read with the ``tensorboard`` package
(``pip install -e ".[tensorboard]"``), imported only when such a metric is read.
"""

from __future__ import annotations

import glob
import json
import math
import os
from typing import Any, Mapping, Optional

from ablations.config.values import ConfigError

KINDS = ("csv", "json", "tensorboard")


def file_source(name: str, declared: Mapping[str, Any], *, source: str
                ) -> Optional[dict[str, str]]:
    """Metric ``name``'s file (``{"kind", "path", "key"}``) from its declaration's ``csv:``,
    ``json:`` or ``tensorboard:`` and ``key:``; None where it names none.

    Raises:
        ConfigError: two sources, a path that is not a text, or ``key:`` without a file.
    """
    kinds = [kind for kind in KINDS if kind in declared]
    example = (f"e.g. {name}: {{direction: lower, csv: lightning_logs/version_*/metrics.csv}}, "
               f"or json: out/all_results.json, or tensorboard: runs with key: val/loss")
    if not kinds:
        if "key" in declared:
            raise ConfigError(f"{source}: {name}: key: names a column, key or tag of a file; "
                              f"give the file too, {example}")
        return None
    if len(kinds) > 1 or "printed" in declared:
        given = kinds + (["printed"] if "printed" in declared else [])
        raise ConfigError(f"{source}: {name}: one source per metric, not {' and '.join(given)}")
    path = declared[kinds[0]]
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{source}: {name}: {kinds[0]}: {path!r} is not a file's path; "
                          f"{example}")
    key = declared.get("key", name)
    if not isinstance(key, str) or not key:
        raise ConfigError(f"{source}: {name}: key: {key!r} is not a column, key or tag")
    return {"kind": kinds[0], "path": path.strip(), "key": key}


def read_points(spec: Mapping[str, str], folder: str) -> list[tuple[int, float]]:
    """The points ``(epoch, value)`` of one metric's file, from ``folder`` (where the program
    ran), in order.

    Raises:
        MetricFileError: no such file, no such column, key or tag, or a value that is no number.
    """
    pattern = os.path.join(folder, spec["path"])
    found = sorted(glob.glob(pattern), key=os.path.getmtime)
    if not found:
        raise MetricFileError(f"no {spec['kind']} file {spec['path']} where the program ran "
                              f"({folder})")
    path = found[-1]  # the newest: a logger's latest version_N
    reader = {"csv": _csv_points, "json": _json_points, "tensorboard": _tensorboard_points}
    return reader[spec["kind"]](path, spec["key"])


class MetricFileError(ValueError):
    """A metric's file that does not hold it."""


def _counted_from_1(epochs: list[float]) -> Optional[list[int]]:
    """Whole epochs counted from 1 (a count from 0 shifted); None where they are not whole."""
    if not epochs or any(not math.isfinite(e) or not float(e).is_integer() for e in epochs):
        return None
    shift = 1 if min(epochs) == 0 else 0
    whole = [int(e) + shift for e in epochs]
    return whole if min(whole) >= 1 else None


def _points(values: list[float], epochs: Optional[list[float]]) -> list[tuple[int, float]]:
    """One point per epoch: an epoch logged again (a Trainer's last ``evaluate()`` at the
    epoch its evaluation strategy logged, a step-logged metric's rows) keeps its last value;
    epochs that go back, or are not whole, give way to the values' ordinals."""
    counted = _counted_from_1(epochs) if epochs is not None else None
    if counted is None or any(b < a for a, b in zip(counted, counted[1:])):
        return list(zip(range(1, len(values) + 1), values))
    return list(dict(zip(counted, values)).items())


def _number(value: Any, key: str, path: str) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise MetricFileError(f"{os.path.basename(path)}: {key} holds {value!r}, not a "
                              "number") from None


def _csv_points(path: str, key: str) -> list[tuple[int, float]]:
    import pandas as pd

    table = pd.read_csv(path)
    if key not in table:
        raise MetricFileError(f"{os.path.basename(path)} has no column {key} (its columns: "
                              f"{', '.join(map(str, table.columns))})")
    rows = table[table[key].notna()]  # a logger's rows hold some columns each
    values = [_number(value, key, path) for value in rows[key]]
    epochs = ([float(e) for e in rows["epoch"]] if "epoch" in rows
              and rows["epoch"].notna().all() else None)
    return _points(values, epochs)


def _json_points(path: str, key: str) -> list[tuple[int, float]]:
    with open(path) as handle:
        data = json.load(handle)
    if not isinstance(data, dict):
        raise MetricFileError(f"{os.path.basename(path)} holds no JSON object")
    history = [entry for entry in data.get("log_history") or []
               if isinstance(entry, dict) and key in entry]
    if history:  # the Trainer's trainer_state.json: one entry a log
        values = [_number(entry[key], key, path) for entry in history]
        epochs = ([float(entry["epoch"]) for entry in history]
                  if all(isinstance(entry.get("epoch"), (int, float)) for entry in history)
                  else None)
        return _points(values, epochs)
    if key not in data:
        raise MetricFileError(f"{os.path.basename(path)} has no key {key} (its keys: "
                              f"{', '.join(list(data)[:20])})")
    return [(1, _number(data[key], key, path))]


def _tensorboard_points(path: str, key: str) -> list[tuple[int, float]]:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise MetricFileError("reading TensorBoard files needs the tensorboard package: pip "
                              "install -e \".[tensorboard]\"") from None
    events = EventAccumulator(path, size_guidance={"scalars": 0})
    events.Reload()
    tags = events.Tags().get("scalars", [])
    if key not in tags:
        raise MetricFileError(f"the TensorBoard events in {path} have no scalar {key} (its "
                              f"scalars: {', '.join(tags) or 'none'})")
    scalars = events.Scalars(key)
    return _points([float(event.value) for event in scalars],
                   [float(event.step) for event in scalars])


__all__ = ["KINDS", "MetricFileError", "file_source", "read_points"]
