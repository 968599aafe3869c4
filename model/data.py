"""Data: an embedded synthetic default with planted effects, and a file format for real data.

Both give a :class:`RegressionData`: images ``(N, T, C, H, W)`` float32 (an in-memory array or
a read-only memory map), scalar features ``(N, S)``, the target ``(N,)`` in km, a split label
per sample (train/val/test) and a table of strata kept for analysis.

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
``DIR/images.npy``: float array ``(N, T, C, H, W)``, opened memory-mapped, never read whole.
``DIR/table.parquet``: one row per sample in the same order: ``target`` (float), ``scalar_*``
feature columns, optional ``split`` (train/val/test; otherwise a seeded 70/15/15 split); every
other column is kept as a stratum for analysis.
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

    images: np.ndarray  # (N, T, C, H, W) float32, possibly a read-only memmap
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
        """Images of samples ``idx``, the most recent ``temporal_frames`` frames: (b, t, C, H, W)."""
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]  # ascending reads are kind to the disk
        if self.images_file:
            return self._read_frames(sorted_idx, order, temporal_frames)
        block = np.asarray(self.images[sorted_idx, self.num_frames - temporal_frames :])
        out = np.empty_like(block)
        out[order] = block
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
    spec and the generator's source code, so a change to either makes a new file. The arrays
    are shared read-only; each call gets its own ``RegressionData`` (its own ``split``)."""
    key = hashlib.sha1((spec.key() + _generator_source()).encode()).hexdigest()[:16]
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


@functools.cache
def _generator_source() -> str:
    return inspect.getsource(make_synthetic)


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


def check_directory(directory: str | Path) -> tuple[tuple[int, ...], list[str]]:
    """Validate a data directory without reading the images; return (images shape, columns).

    Raises:
        DataError: naming the file and the problem.
    """
    root = Path(directory)
    if not root.is_dir():
        raise DataError(f"{root}: data directory not found")
    images_path, table_path = root / "images.npy", root / "table.parquet"
    for path in (images_path, table_path):
        if not path.is_file():
            raise DataError(f"{path}: missing (a data directory needs images.npy and table.parquet)")
    try:
        images = np.load(images_path, mmap_mode="r")
    except Exception as exc:  # noqa: BLE001 - numpy raises several kinds for a bad file
        raise DataError(f"{images_path}: not a readable .npy array ({exc})") from None
    if images.ndim != 5:
        raise DataError(
            f"{images_path}: expected 5 dimensions (N, T, C, H, W), got shape {images.shape}"
        )
    if not np.issubdtype(images.dtype, np.floating) and not np.issubdtype(images.dtype, np.integer):
        raise DataError(f"{images_path}: dtype {images.dtype} is not numeric")
    if min(images.shape) < 1:
        raise DataError(f"{images_path}: empty dimension in shape {images.shape}")
    try:
        schema = pq.read_schema(table_path)
    except Exception as exc:  # noqa: BLE001
        raise DataError(f"{table_path}: not a readable Parquet file ({exc})") from None
    columns = list(schema.names)
    if "target" not in columns:
        raise DataError(f"{table_path}: missing column 'target'")
    rows = pq.ParquetFile(table_path).metadata.num_rows
    if rows != images.shape[0]:
        raise DataError(
            f"{table_path}: {rows} rows but {images_path.name} has {images.shape[0]} samples"
        )
    return tuple(int(s) for s in images.shape), columns


def load_directory(directory: str | Path, *, split_seed: int = 0) -> RegressionData:
    """Open a data directory: images memory-mapped, the table read whole (it is small).

    Raises:
        DataError: naming the file and the problem (missing file or column, row count, NaN/inf,
            wrong ndim, unknown split value).
    """
    root = Path(directory)
    check_directory(root)
    images_path, table_path = root / "images.npy", root / "table.parquet"
    table = pq.read_table(table_path).to_pandas()
    scalar_names = [col for col in table.columns if col.startswith("scalar_")]
    for col in ["target", *scalar_names]:
        if not pd.api.types.is_numeric_dtype(table[col]):
            raise DataError(f"{table_path}: column {col!r} is not numeric ({table[col].dtype})")
        values = table[col].to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"{table_path}: column {col!r} has {int(bad.sum())} NaN/inf values "
                f"(first at row {first})"
            )
    if "split" in table.columns:
        split = table["split"].astype(str).to_numpy()
        unknown = sorted(set(split) - set(SPLITS))
        if unknown:
            raise DataError(
                f"{table_path}: column 'split' has unknown values {unknown}; use train/val/test"
            )
        for name in ("train", "val"):
            if not (split == name).any():
                raise DataError(f"{table_path}: column 'split' has no {name!r} rows")
    else:
        split = seeded_split(len(table), seed=split_seed)
    images = np.load(images_path, mmap_mode="r")
    strata_cols = [c for c in table.columns if c not in ("target", "split", *scalar_names)]
    scalars = (
        table[scalar_names].to_numpy(dtype=np.float32)
        if scalar_names
        else np.zeros((len(table), 0), dtype=np.float32)
    )
    return RegressionData(
        images=images,
        scalars=scalars,
        target=table["target"].to_numpy(dtype=np.float64),
        split=split,
        strata=table[strata_cols].reset_index(drop=True),
        scalar_names=scalar_names,
        source=str(root.resolve()),
        images_file=str(images_path) if images.flags.c_contiguous else "",
        images_offset=int(images.offset),
    )


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
