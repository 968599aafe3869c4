"""The file dataset (``--data DIR``): check a data directory and open it.

``DIR/images.npy``: float or integer array ``(N, T, C, H, W)`` (any width or byte order; each
batch read is cast to native float32, the file stays as it is), opened memory-mapped, never read
whole. ``DIR/table.parquet``: one row per sample in the same order: ``target`` (numbers, km),
``scalar_*`` feature columns (numbers or booleans), optional ``split`` (strings train/val/test,
case and surrounding spaces ignored, each with at least one row; otherwise a seeded 70/15/15
split); every other column is kept as a stratum for analysis (types Parquet and pandas cannot
group by, such as lists, structs, maps and bytes, as text). :func:`load_directory` refuses
everything else with one :class:`DataError` naming the file and the problem.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ablations.model.regression_data import SPLITS, DataError, RegressionData, seeded_split


# Samples, spread over images.npy, checked for NaN/inf before any trial (fewer if they would
# exceed IMAGE_CHECK_BYTES, so a file of large images is checked in a bounded read).
IMAGE_CHECK_SAMPLES = 64
IMAGE_CHECK_BYTES = 64 << 20

# Arrow types a stratum may keep as they are; any other (lists, structs, maps, binary, ...) is
# kept as text, so predictions.parquet can be written and grouped by it.
_PLAIN_STRATUM_TYPES = (
    pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
    pa.types.is_large_string, pa.types.is_timestamp, pa.types.is_date, pa.types.is_time,
    pa.types.is_duration, pa.types.is_decimal, pa.types.is_null, pa.types.is_dictionary,
)


def _images_header(path: Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran_order, dtype, byte offset of the data) from the .npy header alone:
    nothing is unpickled or mapped."""
    try:
        with open(path, "rb") as handle:
            start = handle.read(6)
            if start.startswith(b"PK"):
                raise DataError(f"{path}: a zip archive (.npz?), not a .npy array; write one "
                                "array with np.save")
            if start != b"\x93NUMPY":
                raise DataError(f"{path}: not a .npy file (no numpy header); write it with "
                                "np.save")
            handle.seek(0)
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                raise DataError(f"{path}: .npy format version {version} is not supported; "
                                "write a numeric array with np.save")
            return tuple(shape), bool(fortran_order), dtype, handle.tell()
    except DataError:
        raise
    except OSError as exc:
        hint = "; give this user read access" if isinstance(exc, PermissionError) else ""
        raise DataError(f"{path}: cannot be read ({exc.strerror or exc}){hint}") from None
    except (ValueError, SyntaxError, EOFError) as exc:
        raise DataError(f"{path}: damaged .npy header ({exc}); write it with np.save") from None


def check_directory(directory: str | Path) -> tuple[tuple[int, ...], list[str]]:
    """Validate a data directory from the headers of its files (no image data is read);
    return (images shape, table columns).

    Raises:
        DataError: naming the file and the problem.
    """
    root = Path(directory)
    images_path, table_path = root / "images.npy", root / "table.parquet"
    try:
        if root.is_file():
            raise DataError(f"{root}: a file, not a data directory; --data takes a directory "
                            "holding images.npy and table.parquet")
        if not root.is_dir():
            raise DataError(f"{root}: data directory not found")
        for path in (images_path, table_path):
            if not path.exists():
                raise DataError(f"{path}: missing (a data directory needs images.npy and "
                                "table.parquet)")
            if not path.is_file():
                raise DataError(f"{path}: not a file (a data directory needs images.npy and "
                                "table.parquet files)")
        size = images_path.stat().st_size
    except PermissionError as exc:
        raise DataError(f"{exc.filename or root}: cannot be read (permission denied); "
                        "give this user read access") from None
    shape, _, dtype, offset = _images_header(images_path)
    if dtype.hasobject or dtype.kind not in "fiu":
        kind = "Python objects" if dtype.hasobject else f"dtype {dtype}"
        raise DataError(f"{images_path}: holds {kind}, not numbers; save a float or integer "
                        "array (float32 is best)")
    if len(shape) != 5:
        raise DataError(
            f"{images_path}: expected 5 dimensions (N, T, C, H, W), got shape {shape}"
        )
    if min(shape) < 1:
        raise DataError(f"{images_path}: empty dimension in shape {shape}")
    expected = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size < expected:
        raise DataError(f"{images_path}: truncated: {size} bytes, but shape {shape} of "
                        f"{dtype} needs {expected}; write it again")
    try:
        table_file = pq.ParquetFile(table_path)
    except OSError as exc:
        raise DataError(f"{table_path}: cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a bad file
        raise DataError(f"{table_path}: not a readable Parquet file ({exc})") from None
    columns = list(table_file.schema_arrow.names)
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise DataError(f"{table_path}: duplicate column names {duplicates}")
    if "target" not in columns:
        raise DataError(f"{table_path}: missing column 'target'")
    rows = table_file.metadata.num_rows
    if rows == 0:
        raise DataError(f"{table_path}: no rows")
    if rows != shape[0]:
        raise DataError(
            f"{table_path}: {rows} rows but {images_path.name} has {shape[0]} samples"
        )
    return shape, columns


def load_directory(directory: str | Path, *, split_seed: int = 0) -> RegressionData:
    """Open a data directory: images memory-mapped, the table read whole (it is small).

    Raises:
        DataError: naming the file and the problem (see :func:`check_directory`, plus: a
            target or scalar column that is not numeric or holds nulls/NaN/inf, a bad split
            column, NaN/inf in the images sampled at :data:`IMAGE_CHECK_SAMPLES` samples).
    """
    root = Path(directory)
    shape, _ = check_directory(root)
    images_path, table_path = root / "images.npy", root / "table.parquet"
    try:
        arrow = pq.read_table(table_path)
    except OSError as exc:
        raise DataError(f"{table_path}: cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001
        raise DataError(f"{table_path}: not a readable Parquet file ({exc})") from None
    n = arrow.num_rows
    scalar_names = [col for col in arrow.column_names if col.startswith("scalar_")]
    numeric = {col: _numeric_column(arrow, col, table_path) for col in ["target", *scalar_names]}
    with np.errstate(over="ignore"):  # beyond float32's range: inf, refused below
        scalars = (
            np.stack([numeric[col] for col in scalar_names], axis=1).astype(np.float32)
            if scalar_names
            else np.zeros((n, 0), dtype=np.float32)
        )
    for position, col in enumerate(scalar_names):  # finite as float64: inf means overflow
        _check_finite(scalars[:, position], col, table_path,
                      what="values beyond float32's range", fix="rescale the column")
    if "split" in arrow.column_names:
        split = _split_column(arrow, table_path)
    else:
        if n < 3:
            raise DataError(f"{table_path}: {n} rows; a train/val/test split needs at least 3")
        split = seeded_split(n, seed=split_seed)
    pandas_index = [c for c in (arrow.schema.pandas_metadata or {}).get("index_columns", [])
                    if isinstance(c, str)]  # a DataFrame index written with the table
    strata_cols = [c for c in arrow.column_names
                   if c not in ("target", "split", *scalar_names, *pandas_index)]
    strata = arrow.select(strata_cols)
    try:
        strata_frame = strata.to_pandas().reset_index(drop=True)
    except Exception as exc:  # noqa: BLE001
        raise DataError(f"{table_path}: columns {strata_cols} cannot be read into pandas "
                        f"({exc})") from None
    for col, field in zip(strata_cols, strata.schema):
        if pa.types.is_float16(field.type):  # pandas cannot group or bin float16
            strata_frame[col] = strata_frame[col].astype(np.float32)
        elif not any(test(field.type) for test in _PLAIN_STRATUM_TYPES):
            strata_frame[col] = strata_frame[col].map(_as_text)  # e.g. lists, structs, bytes
    try:
        images = np.load(images_path, mmap_mode="r", allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - numpy raises several kinds for a bad file
        raise DataError(f"{images_path}: not a readable .npy array ({exc})") from None
    data = RegressionData(
        images=images,
        scalars=scalars,
        target=numeric["target"],
        split=split,
        strata=strata_frame,
        scalar_names=scalar_names,
        source=str(root.resolve()),
        images_file=str(images_path) if images.flags.c_contiguous else "",
        images_offset=int(images.offset),
    )
    # NaN/inf pixels: checked here on samples spread over the file; any other fails the batch
    # holding it.
    sample_bytes = int(np.prod(shape[1:], dtype=np.int64)) * max(images.itemsize, 4)
    count = max(1, min(IMAGE_CHECK_SAMPLES, IMAGE_CHECK_BYTES // sample_bytes))
    data.frames(np.unique(np.linspace(0, shape[0] - 1, count).astype(np.int64)), shape[1])
    return data


def _numeric_column(arrow: pa.Table, col: str, table_path: Path) -> np.ndarray:
    """Column ``col`` as float64; refused unless numbers, none null, NaN or inf."""
    kind = arrow.schema.field(col).type
    if pa.types.is_null(kind):
        raise DataError(f"{table_path}: column {col!r} is all null; fill or drop it")
    if col == "target" and pa.types.is_boolean(kind):
        raise DataError(f"{table_path}: column 'target' is boolean; the target is a number (km)")
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
            or pa.types.is_boolean(kind) or pa.types.is_decimal(kind)):
        raise DataError(f"{table_path}: column {col!r} has type {kind}, not numbers; "
                        "store it as float")
    # nulls (what pandas writes for NaN) become NaN
    values = arrow.column(col).cast(pa.float64()).to_numpy(zero_copy_only=False)
    _check_finite(values, col, table_path)
    return values


def _check_finite(values: np.ndarray, col: str, table_path: Path, *,
                  what: str = "NaN/inf values",
                  fix: str = "nulls count as NaN: fill or drop those rows") -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise DataError(f"{table_path}: column {col!r} has {int(bad.sum())} {what} "
                        f"(first at row {first}); {fix}")


def _split_column(arrow: pa.Table, table_path: Path) -> np.ndarray:
    """The ``split`` column as train/val/test strings (case and surrounding spaces ignored)."""
    column = arrow.column("split")
    kind = column.type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise DataError(f"{table_path}: column 'split' has type {column.type}; use the strings "
                        "train/val/test (or drop the column for a seeded 70/15/15 split)")
    if column.null_count:
        first = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(f"{table_path}: column 'split' has {column.null_count} null values "
                        f"(first at row {first}); give every row train/val/test")
    split = np.char.lower(np.char.strip(
        column.cast(pa.string()).to_numpy(zero_copy_only=False).astype(str)))
    unknown = sorted(set(split.tolist()) - set(SPLITS))
    if unknown:
        raise DataError(
            f"{table_path}: column 'split' has unknown values {unknown[:5]}; use train/val/test"
        )
    for name in SPLITS:
        if not (split == name).any():
            raise DataError(f"{table_path}: column 'split' has no {name!r} rows; every split "
                            "needs at least one sample")
    return split


def _as_text(value: object) -> object:
    """A stratum value Parquet and pandas cannot group by as it is, as text (None stays)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + bytes(value).hex()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    return str(value)
