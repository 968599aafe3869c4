"""Parquet writers (atomic) and readers for an experiment folder, local or at a URI.

An experiment root is a local path or a URI that ``pyarrow.fs`` understands (``s3://``,
``gs://``, ``hdfs://``, ``file://``): the same forms Ray Tune accepts as ``storage_path``.
Paths are handled as strings joined with ``/``.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable

import pyarrow.fs as pafs

if TYPE_CHECKING:  # pandas and Parquet load where a table is read or written: the command
    import pandas as pd  # line's --help and its one-line errors need neither

TRIALS_FILE = "trials.parquet"
EPOCHS_FILE = "epochs.parquet"
PREDICTIONS_FILE = "predictions.parquet"
METADATA_FILE = "experiment.json"
# experiment.json's key of a plug-in design's spec (``package.module:Class``): a resume
# rebuilds the design from it, the results side imports its module for its analysis
DESIGN_PLUGIN_KEY = "design_plugin"
# The layout of experiment.json (results/io/schema.py describes it): written into every record,
# and a record of another version is refused (read_metadata). Raise it when a key's meaning
# changes or a key the readers need is added, and say in UPGRADES how an older record reads.
SCHEMA_VERSION = 2
# What each older version's record needs to read as this version's: version 1 kept the search's
# record under "hpo" and the rounds' under "sequential", the designs' names since version 2
UPGRADES: dict[int, dict[str, str]] = {1: {"hpo": "search", "sequential": "rounds"}}


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name if it has none): the one-line
    errors the command line prints."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_uri(location: str | Path) -> bool:
    return "://" in str(location)


def join(root: str | Path, *parts: str) -> str:
    """``root/part/...`` for a path or a URI."""
    if not is_uri(root):
        return str(Path(root).joinpath(*parts))
    return "/".join([str(root).rstrip("/"), *parts])


def filesystem(location: str | Path) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path within it) for a local path or a URI."""
    if is_uri(location):
        return pafs.FileSystem.from_uri(str(location))
    return pafs.LocalFileSystem(), str(Path(location).resolve())


GCS_CHECK_S = 10  # how long the bucket check retries a Google Cloud Storage request


def check_bucket(location: str) -> None:
    """Raise ``ValueError`` (one line) when ``location`` is in an object store (``s3://``,
    ``gs://``) whose bucket does not exist or cannot be reached with the credentials at hand:
    before any trial starts, not when the first file is written. The endpoint and credentials
    come from the environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ... for S3)."""
    fs, path = filesystem(location)
    if fs.type_name not in ("s3", "gcs"):
        return
    bucket = path.split("/", 1)[0]
    scheme = str(location).split("://", 1)[0]
    if fs.type_name == "gcs":  # its client retries for 15 minutes by default: answer in seconds
        fs = pafs.GcsFileSystem(retry_time_limit=datetime.timedelta(seconds=GCS_CHECK_S))
    try:
        info = fs.get_file_info(bucket)
    except OSError as exc:  # unreachable endpoint, refused credentials
        first = first_line(exc).split(" error_info=")[0]  # Google's status: its message
        if access_denied(first):
            return  # credentials for a prefix only (no ListBucket): the writes will tell
        check = ("the endpoint (AWS_ENDPOINT_URL) and the credentials" if scheme == "s3" else
                 "the network and the credentials (GOOGLE_APPLICATION_CREDENTIALS, or "
                 "`gcloud auth application-default login`)")
        raise ValueError(f"cannot reach bucket {bucket!r}: {first}; check {check}") from None
    if info.type == pafs.FileType.NotFound:
        create = f"aws s3 mb s3://{bucket}" if scheme == "s3" \
            else f"gcloud storage buckets create {scheme}://{bucket}"
        raise ValueError(f"bucket {bucket!r} does not exist; create it first (e.g. "
                         f"`{create}`) or name another")


def access_denied(message: str) -> bool:
    """Whether an object store's error line is a refusal of the credentials rather than a
    failure to reach the store. Only the forms the stores state a refusal in count: pyarrow's
    ``AWS Error ACCESS_DENIED`` and ``AWS Error UNKNOWN (HTTP status 403)``, S3's
    ``AccessDenied`` code, and Google Cloud's ``PERMISSION_DENIED`` or ``http_status_code``
    403. A 403 anywhere else (the endpoint's port, a bucket's name, a request id, a time in
    ms) is not one."""
    return REFUSED.search(message) is not None


REFUSED = re.compile(r"AWS Error (?:ACCESS_DENIED|UNKNOWN \(HTTP status 403\))|\bAccessDenied\b"
                     r"|\bPERMISSION_DENIED\b|http_status_code\W{0,3}403\b")


def process_umask() -> int:
    """This process's umask, read without changing it where Linux shows it (/proc/self/status,
    since 4.7); elsewhere set and restored at once."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> str:
    """Call ``write`` on a temporary file beside ``path`` and move it into place: readers see
    the old file or the new one, never half of one. Locally the file is fsynced and renamed
    (atomic); on an object store the object appears whole when its upload completes."""
    if not is_uri(path):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            # mkstemp's file is the owner's alone (0600); a result file is created as any
            # other file the process writes, with its umask (a group's shared folder reads it)
            os.fchmod(fd, 0o666 & ~process_umask())
            with os.fdopen(fd, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return str(path)
    fs, target = filesystem(path)
    parent, name = target.rsplit("/", 1)
    fs.create_dir(parent, recursive=True)
    buffer = io.BytesIO()
    write(buffer)
    tmp = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
    with fs.open_output_stream(tmp) as out:
        out.write(buffer.getvalue())
    fs.move(tmp, target)
    return str(path)


def write_parquet_atomic(frame: pd.DataFrame, path: str | Path) -> str:
    """Write ``frame`` as Parquet, atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    return atomic_write(path, lambda handle: pq.write_table(table, handle))


def write_json_atomic(data: dict[str, Any], path: str | Path) -> str:
    """Write ``data`` as indented JSON, atomically."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    return atomic_write(path, lambda handle: handle.write(text.encode()))


def exists(path: str | Path) -> bool:
    fs, target = filesystem(path)
    return fs.get_file_info(target).type != pafs.FileType.NotFound


def is_file(path: str | Path) -> bool:
    fs, target = filesystem(path)
    return fs.get_file_info(target).type == pafs.FileType.File


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes. In an object store a reader asks for the object's size, then for that
    many bytes: an object replaced in between (a state file saved again) would give a mix of
    two versions of different sizes, so the read is repeated until the size before, the bytes
    read and the size after agree."""
    fs, target = filesystem(path)
    for _ in range(5 if is_uri(path) else 1):
        before = fs.get_file_info(target).size if is_uri(path) else None
        with fs.open_input_stream(target) as handle:
            data = handle.read()
        if before is None or before == len(data) == fs.get_file_info(target).size:
            return data
    return data


def list_dir(path: str | Path) -> list[str]:
    """Names of the entries of a directory; [] if it does not exist."""
    fs, target = filesystem(path)
    if fs.get_file_info(target).type != pafs.FileType.Directory:
        return []
    return [info.base_name for info in fs.get_file_info(pafs.FileSelector(target))]


def remove_file(path: str | Path) -> None:
    """Remove a file (local or in a bucket)."""
    fs, target = filesystem(path)
    fs.delete_file(target)


def delete_dir(path: str | Path) -> None:
    fs, target = filesystem(path)
    if fs.get_file_info(target).type == pafs.FileType.Directory:
        fs.delete_dir(target)


class MetadataError(ValueError):
    """An experiment.json that cannot be read; the message names the file."""


def read_metadata(directory: str | Path) -> dict[str, Any] | None:
    """``experiment.json`` of an experiment folder, or None if there is none.

    Raises:
        MetadataError: the file is there but is not a JSON object (damaged by hand or a tool),
            its ``schema_version`` is neither :data:`SCHEMA_VERSION` nor one of
            :data:`UPGRADES` (none: a record written before the versions were kept), or a key
            the runner reads back has another shape (ablations/results/io/record.py).
    """
    path = join(directory, METADATA_FILE)
    if not is_file(path):
        return None
    try:
        meta = json.loads(read_bytes(path))
    except (ValueError, UnicodeDecodeError) as exc:
        raise MetadataError(f"{path}: not valid JSON ({str(exc).splitlines()[0]}); the "
                            "experiment's record is damaged: restore it or use another --name"
                            ) from None
    if not isinstance(meta, dict):
        raise MetadataError(f"{path}: not a JSON object; the experiment's record is damaged: "
                            "restore it or use another --name")
    version = meta.get("schema_version")
    if version in UPGRADES:
        meta = upgraded(meta, UPGRADES[version])
    elif version != SCHEMA_VERSION:
        found = "has no schema_version" if version is None else f"has schema_version {version!r}"
        readable = " or ".join(str(known) for known in (*UPGRADES, SCHEMA_VERSION))
        raise MetadataError(f"{path} {found}; this runner reads schema_version {readable} "
                            "only: run the experiment again with this runner (another --name)")
    from ablations.results.io.record import record_problem

    problem = record_problem(meta)
    if problem:
        raise MetadataError(f"{path}: {problem}; the experiment's record is damaged: restore "
                            "it or use another --name")
    return meta


def upgraded(meta: dict[str, Any], renamed: dict[str, str]) -> dict[str, Any]:
    """An older record ``meta`` in this version's layout: its keys ``renamed``, in their order,
    and this version's number (the next write of the record keeps it so)."""
    out = {renamed.get(key, key): value for key, value in meta.items()}
    out["schema_version"] = SCHEMA_VERSION
    return out


def remove_stale_temp_files(directory: str | Path) -> list[str]:
    """Remove temporary files a killed writer left behind (the real files are intact)."""
    removed = []
    for name in list_dir(directory):
        if name.startswith(".") and name.endswith(".tmp"):
            fs, target = filesystem(join(directory, name))
            fs.delete_file(target)
            removed.append(name)
    return removed


def read_experiment(directory: str | Path) -> dict[str, pd.DataFrame]:
    """The experiment's three tables: ``{"trials": ..., "epochs": ..., "predictions": ...}``.

    Raises:
        FileNotFoundError: naming the missing file.
    """
    import pyarrow.parquet as pq

    out = {}
    for key, name in (("trials", TRIALS_FILE), ("epochs", EPOCHS_FILE),
                      ("predictions", PREDICTIONS_FILE)):
        path = join(directory, name)
        if not is_file(path):
            raise FileNotFoundError(f"{path}: missing; is {directory} an experiment folder?")
        fs, target = filesystem(path)
        out[key] = pq.read_table(target, filesystem=fs).to_pandas()
    return out
