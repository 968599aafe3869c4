"""Data: an embedded synthetic default with planted effects, and a file format for real data.

Both give a :class:`RegressionData`: images ``(N, T, C, H, W)`` (an in-memory float32 array or
a read-only memory map of the file, any numeric dtype; batches come out float32), scalar
features ``(N, S)``, the target ``(N,)`` in km, a split label per sample (train/val/test) and a
table of strata kept for analysis.

Synthetic data, planted effects (see :func:`make_synthetic`)
-------------------------------------------------------------
Each sample shows one Gaussian blob moving in a straight line across the frames.

    target_km = 2.0
              + 2.5 * speed_px_per_frame          # motion: needs >= 2 frames (0 .. 3 km)
              + 1.7 * (blob_sigma_px - 1.5)       # spatial structure: blob size (-1.2 .. 1.2 km)
              + 0.8 * scalar_0 - 0.5 * scalar_1   # scalar features (std ~0.94 km)
              + noise_km                          # heteroscedastic, by regime
    scalar_2 is pure noise.
    regime:      clear   hazy   storm
    noise_km:    0.15    0.35   0.70     (standard deviation of the target noise)
    pixel noise: 0.05    0.20   0.40     (so the regime can be seen in the images)

Strata kept: ``regime``, ``speed_px_per_frame``, ``blob_sigma_px``.

File dataset (``--data DIR``)
-----------------------------
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

import contextlib
import functools
import hashlib
import inspect
import os
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

SPLITS = ("train", "val", "test")
MAX_SYNTHETIC_FRAMES = 8
SYNTHETIC_SCALARS = 3  # scalar_0, scalar_1 carry signal; scalar_2 is noise

REGIMES = ("clear", "hazy", "storm")
REGIME_TARGET_NOISE_KM = (0.15, 0.35, 0.70)
REGIME_PIXEL_NOISE = (0.05, 0.20, 0.40)


class DataError(ValueError):
    """Bad input data; the message names the file and the problem."""


@dataclass(frozen=True)
class SyntheticSpec:
    """Size and seed of the synthetic set. The same spec always gives the same arrays."""

    n_train: int = 1280
    n_val: int = 256
    n_test: int = 512
    frames: int = MAX_SYNTHETIC_FRAMES
    channels: int = 2
    height: int = 12
    width: int = 12
    seed: int = 0  # the data seed: the same for every trial, so trials differ only by model seed

    def __post_init__(self) -> None:
        for name in ("n_train", "n_val", "n_test"):
            if getattr(self, name) < 1:
                raise ValueError(f"synthetic {name} must be >= 1, got {getattr(self, name)}")
        if not 1 <= self.frames <= MAX_SYNTHETIC_FRAMES:
            raise ValueError(f"synthetic frames must be in 1..{MAX_SYNTHETIC_FRAMES}")
        if self.channels < 1 or self.height < 8 or self.width < 8:
            raise ValueError("synthetic images need >= 1 channel and H, W >= 8")

    def key(self) -> str:
        return hashlib.sha1(repr(sorted(asdict(self).items())).encode()).hexdigest()[:12]


@dataclass
class RegressionData:
    """Arrays of one dataset, all splits together, in sample order."""

    images: np.ndarray  # (N, T, C, H, W), possibly a read-only memmap of any numeric dtype:
    #                     read batches with frames(), which returns float32
    scalars: np.ndarray  # (N, S) float32
    target: np.ndarray  # (N,) float64, km
    split: np.ndarray  # (N,) str: train / val / test
    strata: pd.DataFrame  # (N, k): columns kept for analysis, index 0..N-1
    scalar_names: list[str]
    source: str  # "synthetic:<key>" or the directory
    # Set for a file dataset: images.npy and the byte offset of its C-ordered array. Batches
    # are then read with plain file reads instead of through the memory map, so the pages
    # read do not stay mapped into the process (and counted in its RSS) for the whole run.
    images_file: str = ""
    images_offset: int = 0

    @property
    def num_frames(self) -> int:
        return int(self.images.shape[1])

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W)."""
        return tuple(int(s) for s in self.images.shape[2:])  # type: ignore[return-value]

    def indices(self, split: str) -> np.ndarray:
        return np.flatnonzero(self.split == split)

    def frames(self, idx: np.ndarray, temporal_frames: int) -> np.ndarray:
        """Images of samples ``idx``, the most recent ``temporal_frames`` frames:
        (b, t, C, H, W), native-endian float32 whatever the file holds (float16/64, integers,
        big-endian: the batch read is cast, the file stays as it is).

        Raises:
            DataError: if a pixel of the batch is NaN or inf (or beyond float32's range),
                naming the sample.
        """
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]  # ascending reads are kind to the disk
        if self.images_file:
            out = self._read_frames(sorted_idx, order, temporal_frames)
        else:
            block = np.asarray(self.images[sorted_idx, self.num_frames - temporal_frames :])
            out = np.empty_like(block)
            out[order] = block
        with np.errstate(over="ignore"):  # beyond float32's range: inf, refused below
            out = out.astype(np.float32, copy=False)  # also native byte order
        if not np.isfinite(out).all():
            bad = ~np.isfinite(out.reshape(len(out), -1)).all(axis=1)
            sample = int(np.asarray(idx)[np.flatnonzero(bad)[0]])
            where = self.images_file or self.source
            raise DataError(f"{where}: sample {sample} has NaN/inf pixels (or values beyond "
                            "float32's range); fix or drop that sample")
        return out

    def _read_frames(self, sorted_idx: np.ndarray, order: np.ndarray,
                     temporal_frames: int) -> np.ndarray:
        """The last ``temporal_frames`` frames of each sample are one contiguous run of bytes
        in images.npy: one read each, straight into the output array."""
        total, rest = self.num_frames, self.images.shape[2:]
        frame_bytes = int(np.prod(rest)) * self.images.itemsize
        out = np.empty((len(sorted_idx), temporal_frames, *rest), dtype=self.images.dtype)
        with open(self.images_file, "rb", buffering=0) as handle:
            for sample, row in zip(sorted_idx, order):
                handle.seek(self.images_offset
                            + (int(sample) * total + total - temporal_frames) * frame_bytes)
                view = memoryview(out[row]).cast("B")
                if handle.readinto(view) != len(view):
                    raise DataError(f"{self.images_file}: file ends inside sample {sample}")
        return out


# --------------------------------------------------------------------------------------------
# Synthetic data
# --------------------------------------------------------------------------------------------


def make_synthetic(spec: SyntheticSpec = SyntheticSpec()) -> RegressionData:
    """Generate the synthetic set for ``spec``, deterministically (see the module docstring)."""
    rng = np.random.default_rng(spec.seed)
    n = spec.n_train + spec.n_val + spec.n_test
    t, c, h, w = spec.frames, spec.channels, spec.height, spec.width

    regime = rng.integers(0, len(REGIMES), size=n)
    speed = rng.uniform(0.0, 1.2, size=n)  # px per frame
    angle = rng.uniform(0.0, 2 * np.pi, size=n)
    sigma = rng.uniform(0.8, 2.2, size=n)  # blob size, px
    scalars = rng.standard_normal(size=(n, SYNTHETIC_SCALARS)).astype(np.float32)

    # Trajectory centred on the middle frame; keep every frame's centre inside the image.
    half_path = speed * (MAX_SYNTHETIC_FRAMES - 1) / 2
    margin_y = np.minimum(half_path + 1.0, h / 2 - 0.5)
    margin_x = np.minimum(half_path + 1.0, w / 2 - 0.5)
    centre_y = rng.uniform(margin_y, h - 1 - margin_y)
    centre_x = rng.uniform(margin_x, w - 1 - margin_x)
    # Use the last `frames` of an 8-frame trajectory, so the most recent frame is the same
    # whatever `frames` is.
    steps = np.arange(MAX_SYNTHETIC_FRAMES - t, MAX_SYNTHETIC_FRAMES) - (MAX_SYNTHETIC_FRAMES - 1) / 2
    pos_y = centre_y[:, None] + speed[:, None] * np.sin(angle)[:, None] * steps  # (N, T)
    pos_x = centre_x[:, None] + speed[:, None] * np.cos(angle)[:, None] * steps

    yy = np.arange(h, dtype=np.float64)[None, None, :, None]
    xx = np.arange(w, dtype=np.float64)[None, None, None, :]
    dist2 = (yy - pos_y[:, :, None, None]) ** 2 + (xx - pos_x[:, :, None, None]) ** 2
    blob = np.exp(-dist2 / (2 * sigma[:, None, None, None] ** 2))  # (N, T, H, W)

    channel_gain = np.linspace(1.0, 0.5, c)  # the blob is fainter in later channels
    images = blob[:, :, None] * channel_gain[None, None, :, None, None]
    # A static texture per sample in the last channel: structure unrelated to the target.
    if c > 1:
        texture = rng.standard_normal(size=(n, 1, 1, h, w)) * 0.3
        images[:, :, -1:] += texture
    pixel_noise = np.asarray(REGIME_PIXEL_NOISE)[regime][:, None, None, None, None]
    images = images + rng.standard_normal(size=images.shape) * pixel_noise

    target_noise = np.asarray(REGIME_TARGET_NOISE_KM)[regime]
    target = (
        2.0
        + 2.5 * speed
        + 1.7 * (sigma - 1.5)
        + 0.8 * scalars[:, 0].astype(np.float64)
        - 0.5 * scalars[:, 1].astype(np.float64)
        + rng.standard_normal(size=n) * target_noise
    )
    split = np.array(["train"] * spec.n_train + ["val"] * spec.n_val + ["test"] * spec.n_test)
    strata = pd.DataFrame(
        {
            "regime": pd.Categorical.from_codes(regime, categories=list(REGIMES)),
            "speed_px_per_frame": speed,
            "blob_sigma_px": sigma,
        }
    )
    return RegressionData(
        images=images.astype(np.float32),
        scalars=scalars,
        target=target,
        split=split,
        strata=strata,
        scalar_names=[f"scalar_{i}" for i in range(scalars.shape[1])],
        source=f"synthetic:{spec.key()}",
    )


CACHE_DIR_ENV = "ABLATION_CACHE_DIR"
_RECENT: dict[str, RegressionData] = {}  # this process's synthetic sets, newest last


def cache_dir() -> Path:
    """Where synthetic sets are cached: $ABLATION_CACHE_DIR, else ~/.cache/ablation-runner."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "ablation-runner")


def load_synthetic(spec: SyntheticSpec = SyntheticSpec()) -> RegressionData:
    """``make_synthetic(spec)``, generated once: kept in this process (a reused Ray worker
    serves its next trials from memory) and in :func:`cache_dir` as an ``.npz`` keyed by the
    spec, the generator's source code and the constants it reads
    (:func:`synthetic_cache_key`), so a change to any makes a new file. The arrays
    are shared read-only; each call gets its own ``RegressionData`` (its own ``split``)."""
    key = synthetic_cache_key(spec)
    data = _RECENT.pop(key, None)
    if data is None:
        path = cache_dir() / f"synthetic-{key}.npz"
        data = _read_cached(path)
        if data is None:
            data = make_synthetic(spec)
            _write_cached(data, path)
        for array in (data.images, data.scalars, data.target, data.split):
            array.flags.writeable = False
    _RECENT[key] = data
    while len(_RECENT) > 2:
        _RECENT.pop(next(iter(_RECENT)))
    return replace(data)


def synthetic_cache_key(spec: SyntheticSpec) -> str:
    """The cache key of ``spec``'s set: the spec, the generator's source and the values of the
    module-level names it reads (REGIMES, the noise tables, MAX_SYNTHETIC_FRAMES, ...), so a
    change to any of them makes a new set."""
    constants = {name: repr(globals()[name]) for name in _generator_globals()}
    text = spec.key() + _generator_source() + repr(sorted(constants.items()))
    return hashlib.sha1(text.encode()).hexdigest()[:16]


@functools.cache
def _generator_source() -> str:
    return inspect.getsource(make_synthetic)


@functools.cache
def _generator_globals() -> tuple[str, ...]:
    """Module-level data (not functions, classes or modules) that make_synthetic reads."""
    names: set[str] = set()
    codes = [make_synthetic.__code__]
    while codes:  # nested code objects too (lambdas, comprehensions)
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if inspect.iscode(c))
    return tuple(sorted(
        name for name in names
        if name in globals() and not callable(globals()[name])
        and not inspect.ismodule(globals()[name])
    ))


def _write_cached(data: RegressionData, path: Path) -> None:
    """Write atomically (temporary file, rename); a cache that cannot be written is skipped."""
    arrays = {"images": data.images, "scalars": data.scalars, "target": data.target,
              "split": data.split, "scalar_names": np.array(data.scalar_names),
              "source": np.array(data.source)}
    for column in data.strata.columns:
        values = data.strata[column]
        if isinstance(values.dtype, pd.CategoricalDtype):
            arrays[f"strata_codes:{column}"] = values.cat.codes.to_numpy()
            arrays[f"strata_categories:{column}"] = np.asarray(values.cat.categories, dtype=str)
        else:
            arrays[f"strata:{column}"] = values.to_numpy()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _read_cached(path: Path) -> RegressionData | None:
    """The cached set, or None when it is missing or unreadable (then it is made again)."""
    try:
        with np.load(path, allow_pickle=False) as cached:
            columns: dict[str, object] = {}
            for name in cached.files:
                kind, _, column = name.partition(":")
                if kind == "strata":
                    columns[column] = cached[name]
                elif kind == "strata_codes":
                    columns[column] = pd.Categorical.from_codes(
                        cached[name], categories=list(cached[f"strata_categories:{column}"]))
            return RegressionData(
                images=cached["images"], scalars=cached["scalars"], target=cached["target"],
                split=cached["split"], strata=pd.DataFrame(columns),
                scalar_names=[str(n) for n in cached["scalar_names"]],
                source=str(cached["source"]),
            )
    except (OSError, KeyError, ValueError, EOFError):
        return None


# --------------------------------------------------------------------------------------------
# File dataset
# --------------------------------------------------------------------------------------------


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
    # NaN/inf pixels: samples spread over the file now; any other fails the batch holding it.
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


def seeded_split(n: int, *, seed: int, fractions: tuple[float, float] = (0.7, 0.15)) -> np.ndarray:
    """A reproducible train/val/test split of ``n`` samples (70/15/15 by default)."""
    if n < 3:
        raise DataError(f"need at least 3 samples for a train/val/test split, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    n_train = max(1, int(round(fractions[0] * n)))
    n_val = max(1, int(round(fractions[1] * n)))
    n_train = min(n_train, n - 2)
    n_val = min(n_val, n - n_train - 1)
    split = np.empty(n, dtype=object)
    split[order[:n_train]] = "train"
    split[order[n_train : n_train + n_val]] = "val"
    split[order[n_train + n_val :]] = "test"
    return split.astype(str)


def cap_split(split: np.ndarray, name: str, limit: int, *, seed: int) -> np.ndarray:
    """Keep at most ``limit`` samples of split ``name`` (a seeded choice); others become ''."""
    idx = np.flatnonzero(split == name)
    if limit <= 0 or len(idx) <= limit:
        return split
    keep = np.random.default_rng(seed).choice(idx, size=limit, replace=False)
    out = split.copy()
    drop = np.setdiff1d(idx, keep)
    out[drop] = ""
    return out
