"""The embedded synthetic dataset: a generator with planted effects, and its cache.

Each sample shows one Gaussian blob moving in a straight line across the frames
(see :func:`make_synthetic`).

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

:func:`load_synthetic` generates a set once per process and caches it on disk
(:func:`cache_dir`), keyed by the spec, the generator's source and the module-level constants
it reads (:func:`synthetic_cache_key`).
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

from ablations.model.cache import CACHE_DIR_ENV, cache_dir  # noqa: F401 - re-exported
from ablations.model.config import SYNTHETIC_SCALARS
from ablations.model.regression_data import RegressionData

MAX_SYNTHETIC_FRAMES = 8

REGIMES = ("clear", "hazy", "storm")
REGIME_TARGET_NOISE_KM = (0.15, 0.35, 0.70)
REGIME_PIXEL_NOISE = (0.05, 0.20, 0.40)


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


def make_synthetic(spec: SyntheticSpec = SyntheticSpec()) -> RegressionData:
    """Generate the synthetic set for ``spec``, deterministically (see the module docstring)."""
    rng = np.random.default_rng(spec.seed)
    n = spec.n_train + spec.n_val + spec.n_test
    t, c, h, w = spec.frames, spec.channels, spec.height, spec.width

    regime = rng.integers(0, len(REGIMES), size=n)
    speed = rng.uniform(0.0, 1.2, size=n)  # px per frame
    angle = rng.uniform(0.0, 2 * np.pi, size=n)
    sigma = rng.uniform(0.8, 2.2, size=n)  # blob size, px
    # scalar_0 and scalar_1 carry signal; scalar_2 is noise
    scalars = rng.standard_normal(size=(n, SYNTHETIC_SCALARS)).astype(np.float32)

    # Trajectory centred on the middle frame; keep every frame's centre inside the image.
    half_path = speed * (MAX_SYNTHETIC_FRAMES - 1) / 2
    margin_y = np.minimum(half_path + 1.0, h / 2 - 0.5)
    margin_x = np.minimum(half_path + 1.0, w / 2 - 0.5)
    centre_y = rng.uniform(margin_y, h - 1 - margin_y)
    centre_x = rng.uniform(margin_x, w - 1 - margin_x)
    # Use the last `frames` of an 8-frame trajectory, so the most recent frame is the same
    # whatever `frames` is.
    steps = (np.arange(MAX_SYNTHETIC_FRAMES - t, MAX_SYNTHETIC_FRAMES)
             - (MAX_SYNTHETIC_FRAMES - 1) / 2)
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


_RECENT: dict[str, RegressionData] = {}  # this process's synthetic sets, newest last


def load_synthetic(spec: SyntheticSpec = SyntheticSpec()) -> RegressionData:
    """``make_synthetic(spec)``, generated once: kept in this process (a reused Ray worker
    serves its next trials from memory) and in :func:`cache_dir` as an ``.npz`` keyed by the
    spec, the generator's source code and the constants it reads (:func:`synthetic_cache_key`),
    so a change to any makes a new file. The arrays are shared read-only; each call gets its
    own ``RegressionData`` (its own ``split``)."""
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
