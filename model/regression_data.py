"""The container both data sources fill, and the train/val/test split helpers they share.

A :class:`RegressionData` holds images ``(N, T, C, H, W)`` (an in-memory float32 array or a
read-only memory map of the file, any numeric dtype; batches come out float32), scalar features
``(N, S)``, the target ``(N,)`` in km, a split label per sample (train/val/test) and a table of
strata kept for analysis. :mod:`ablations.model.synthetic` and :mod:`ablations.model.files` make
one; :mod:`ablations.model.data` re-exports all three modules' public names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

SPLITS = ("train", "val", "test")


class DataError(ValueError):
    """Bad input data; the message names the file and the problem."""


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
