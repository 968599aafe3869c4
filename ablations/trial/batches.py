"""A trial's data as training batches (the data as ablations/trial/loading.py loads it):
normalisation fitted on the training split, batches read whole and moved to the device, the
epoch's shuffle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

import numpy as np
import torch

from ablations.config import TrialConfig
from ablations.model.data import RegressionData

# Image normalisation reads this many training samples, a seeded random subset (bounded reads).
NORMALISATION_SAMPLES = 512


@dataclass(frozen=True)
class Normaliser:
    """Standardisation fitted on the train split: images per channel, scalars, target."""

    image_mean: np.ndarray  # (C,)
    image_std: np.ndarray  # (C,)
    scalar_mean: np.ndarray  # (S,)
    scalar_std: np.ndarray  # (S,)
    target_mean: float
    target_std: float

    @classmethod
    def fit(cls, data: RegressionData, train_idx: np.ndarray, *, seed: int = 0) -> "Normaliser":
        """Image statistics from a seeded random subset of ``NORMALISATION_SAMPLES`` training
        samples (not the first ones: files are often in time order), read in index order;
        scalars and target from the whole training split."""
        sample = train_idx
        if len(train_idx) > NORMALISATION_SAMPLES:
            rng = np.random.default_rng([seed, NORMALISATION_SAMPLES])
            sample = np.sort(rng.choice(train_idx, NORMALISATION_SAMPLES, replace=False))
        channels = data.image_shape[0]
        total, total_sq, count = np.zeros(channels), np.zeros(channels), 0
        for start in range(0, len(sample), 64):  # in chunks: a bounded copy of the images
            chunk = data.frames(sample[start : start + 64], data.num_frames).astype(np.float64)
            total += chunk.sum(axis=(0, 1, 3, 4))
            total_sq += np.square(chunk).sum(axis=(0, 1, 3, 4))
            count += chunk.size // channels
        image_mean = total / count
        image_std = np.sqrt(np.maximum(total_sq / count - image_mean**2, 0.0))
        scalars = data.scalars[train_idx].astype(np.float64)
        target = data.target[train_idx]
        return cls(
            image_mean=image_mean.astype(np.float32),
            image_std=np.maximum(image_std, 1e-6).astype(np.float32),
            scalar_mean=scalars.mean(axis=0).astype(np.float32) if scalars.size else scalars[:0],
            scalar_std=np.maximum(scalars.std(axis=0), 1e-6).astype(np.float32)
            if scalars.size
            else scalars[:0],
            target_mean=float(target.mean()),
            target_std=float(max(target.std(), 1e-6)),
        )


class BatchSource(torch.utils.data.Dataset):
    """A list of sample indices -> CPU tensors (raw frames, normalised scalars, normalised
    target). Indexed by whole batches, so a DataLoader with a BatchSampler reads each batch
    with one sorted read of the (memory-mapped) images."""

    def __init__(self, data: RegressionData, norm: Normaliser, config: TrialConfig):
        self.data, self.norm, self.config = data, norm, config

    def __len__(self) -> int:
        return len(self.data.target)

    def __getitem__(self, idx: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        idx = np.asarray(idx)
        frames = torch.empty(0)
        if self.config.data.use_images:
            frames = torch.from_numpy(self.data.frames(idx, self.config.data.temporal_frames))
        scalars = torch.empty(0)
        if self.config.data.use_scalars:
            s = (self.data.scalars[idx] - self.norm.scalar_mean) / self.norm.scalar_std
            scalars = torch.from_numpy(s.astype(np.float32))
        target = (self.data.target[idx] - self.norm.target_mean) / self.norm.target_std
        return frames, scalars, torch.from_numpy(target.astype(np.float32))


class Batches:
    """Moves CPU batches to the device and normalises the frames there."""

    def __init__(self, data: RegressionData, norm: Normaliser, config: TrialConfig,
                 device: torch.device):
        self.source = BatchSource(data, norm, config)
        self.config, self.device = config, device
        shape = (1, 1, -1, 1, 1)
        self.image_mean = torch.from_numpy(norm.image_mean).view(shape).to(device)
        self.image_std = torch.from_numpy(norm.image_std).view(shape).to(device)

    def to_device(self, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
                  ) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor], torch.Tensor]:
        frames, scalars, target = batch
        blocking = not (self.config.systems.pin_memory and self.device.type == "cuda")
        out_frames = None
        if self.config.data.use_images:
            out_frames = (frames.to(self.device, non_blocking=not blocking) - self.image_mean) \
                / self.image_std
        out_scalars = scalars.to(self.device, non_blocking=not blocking) \
            if self.config.data.use_scalars else None
        return out_frames, out_scalars, target.to(self.device, non_blocking=not blocking)

    def __call__(self, idx: np.ndarray):
        return self.to_device(self.source[idx])

    def loader(self, order: np.ndarray, micro_batch: int) -> Iterable:
        """Training micro-batches in ``order`` (drop_last: every batch has the same shape)."""
        sampler = torch.utils.data.BatchSampler(order.tolist(), micro_batch, drop_last=True)
        if self.config.systems.num_workers == 0 and not self.config.systems.pin_memory:
            return (self.source[idx] for idx in sampler)
        return torch.utils.data.DataLoader(
            self.source, sampler=sampler, batch_size=None,
            num_workers=self.config.systems.num_workers,
            pin_memory=self.config.systems.pin_memory and self.device.type == "cuda",
            prefetch_factor=2 if self.config.systems.num_workers else None,
        )


def epoch_order(train_idx: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """Shuffle for ``epoch``, a pure function of (seed, epoch) so resumed runs shuffle alike;
    ``seed`` is the trial's order seed (``config.seeds.order``)."""
    return np.random.default_rng([seed, epoch]).permutation(train_idx)
