"""Parquet writers (atomic) and readers for an experiment folder."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

TRIALS_FILE = "trials.parquet"
EPOCHS_FILE = "epochs.parquet"
PREDICTIONS_FILE = "predictions.parquet"
METADATA_FILE = "experiment.json"


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """Call ``write`` on a temporary file in ``path``'s folder, fsync it and rename it into
    place: readers see the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_parquet_atomic(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write ``frame`` as Parquet, atomically."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    return atomic_write(path, lambda handle: pq.write_table(table, handle))


def write_json_atomic(data: dict[str, Any], path: str | Path) -> Path:
    """Write ``data`` as indented JSON, atomically."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    return atomic_write(path, lambda handle: handle.write(text.encode()))


def read_metadata(directory: str | Path) -> dict[str, Any] | None:
    """``experiment.json`` of an experiment folder, or None if there is none."""
    path = Path(directory) / METADATA_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def remove_stale_temp_files(directory: str | Path) -> list[Path]:
    """Remove temporary files a killed writer left behind (the real files are intact)."""
    removed = []
    for path in Path(directory).glob(".*.tmp"):
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def read_experiment(directory: str | Path) -> dict[str, pd.DataFrame]:
    """The experiment's three tables: ``{"trials": ..., "epochs": ..., "predictions": ...}``.

    Raises:
        FileNotFoundError: naming the missing file.
    """
    root = Path(directory)
    out = {}
    for key, name in (("trials", TRIALS_FILE), ("epochs", EPOCHS_FILE),
                      ("predictions", PREDICTIONS_FILE)):
        path = root / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; is {root} an experiment folder?")
        out[key] = pd.read_parquet(path)
    return out
