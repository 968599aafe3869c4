"""Whether a folder is a finished experiment the report can read: :func:`check_experiment`
refuses anything else in one line (:class:`NotAnExperimentError`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ablations.config.values import NamesArguments, command
from ablations.results.io.files import (
    EPOCHS_FILE,
    METADATA_FILE,
    PREDICTIONS_FILE,
    TRIALS_FILE,
    filesystem,
    first_line,
    is_uri,
    join,
)


class NotAnExperimentError(NamesArguments, ValueError):
    """The folder given to the report is not a finished experiment; the message says why."""


def check_experiment(directory: str | Path) -> None:
    """Refuse, with one line naming the problem, a folder that is not a finished experiment.

    Raises:
        NotAnExperimentError: the folder is missing, a file, not an experiment, unfinished, or
            one of its Parquet files is unreadable.
    """
    try:
        fs, root = filesystem(directory)
        kind = fs.get_file_info(root).type
        if kind == pafs.FileType.NotFound:
            raise NotAnExperimentError(f"{join(directory, TRIALS_FILE)}: missing; {directory} "
                                       "does not exist: pass an experiment folder "
                                       "(<storage>/<experiment>)")
        if kind != pafs.FileType.Directory:
            raise NotAnExperimentError(f"{directory}: a file, not an experiment folder")
        infos = {info.base_name: info for info in fs.get_file_info(pafs.FileSelector(root))}
    except (OSError, pa.ArrowException) as exc:
        raise NotAnExperimentError(f"{directory}: cannot be read ({first_line(exc)})") from None
    for name in (TRIALS_FILE, EPOCHS_FILE, PREDICTIONS_FILE):
        path = join(directory, name)
        if name not in infos:
            if METADATA_FILE in infos:
                where = str(directory) if is_uri(str(directory)) \
                    else str(Path(directory).resolve())  # `report .`: its name and storage
                storage, _, name = where.rstrip("/").rpartition("/")
                raise NotAnExperimentError(
                    f"{path}: missing; the experiment has not finished: continue it with "
                    f"{command('--resume', '--name', name, '--storage', storage or '.')}")
            raise NotAnExperimentError(f"{path}: missing; is {directory} an experiment folder?")
        try:
            with fs.open_input_file(f"{root}/{name}") as handle:
                pq.ParquetFile(handle).close()  # reads the footer: a Parquet file?
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise NotAnExperimentError(f"{path}: not a readable Parquet file "
                                       f"({first_line(exc)})") from None
