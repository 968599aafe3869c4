"""What fit.py and lightning_module.py share: the digits data, its split, the classifier and
its config.

The data is scikit-learn's bundled digits (1,797 8x8 images of the digits 0-9, no download),
split 60/20/20 into train, validation and test by the trial's ``data`` seed, pixels scaled
from 0..16 to [0, 1]. The classifier is a small MLP on the 64 pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

CLASSES = 10
SIDE = 8  # the images are SIDE x SIDE pixels


@dataclass(frozen=True)
class DigitsConfig:
    """The classifier's and its training's keys: an ablation is a diff of these."""

    hidden: int = 128  # width of the hidden layers
    second_layer: bool = True  # no_second_layer: one hidden layer
    dropout: float = 0.2  # no_dropout: 0, no dropout after the hidden layers
    augment: bool = True  # no_augment: no random shifts of the training images by one pixel
    label_smoothing: float = 0.1  # no_label_smoothing: 0, plain cross-entropy
    epochs: int = 40
    lr: float = 0.002  # Adam's learning rate
    batch_size: int = 32
    # The data, as an experiment over several datasets varies it (examples/digits/datasets.yaml):
    # the share of the training split kept (a low-data regime) and the standard deviation of
    # Gaussian noise added to every image's pixels (a harder, noisier set).
    train_share: float = 1.0
    pixel_noise: float = 0.0

    def validate(self) -> None:
        if self.hidden < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ValueError("hidden, epochs and batch_size must be at least 1")
        if not 0 <= self.dropout < 1 or not 0 <= self.label_smoothing < 1:
            raise ValueError("dropout and label_smoothing must be in [0, 1)")
        if not 0 < self.train_share <= 1 or self.pixel_noise < 0:
            raise ValueError("train_share must be in (0, 1] and pixel_noise at least 0")


@dataclass(frozen=True)
class DigitsSplit:
    """Images (N, 8, 8) in [0, 1] and labels (N,) of each part."""

    train: TensorDataset
    val: TensorDataset
    test: TensorDataset


def load_split(data_seed: int, train_share: float = 1.0, pixel_noise: float = 0.0
               ) -> DigitsSplit:
    """The digits split 60/20/20 by a permutation drawn from ``data_seed``; with
    ``train_share`` < 1 only that share of the training split (its first images), with
    ``pixel_noise`` > 0 Gaussian noise of that standard deviation added to every image (drawn
    from ``data_seed`` after the permutation, so the split is the same)."""
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    rng = np.random.default_rng(data_seed)
    order = rng.permutation(len(labels))
    images = images[order] / 16.0
    if pixel_noise > 0:
        images = images + rng.normal(0.0, pixel_noise, images.shape)
    images = torch.tensor(images, dtype=torch.float32).view(-1, SIDE, SIDE)
    labels = torch.tensor(labels[order], dtype=torch.int64)
    train_end, val_end = int(0.6 * len(labels)), int(0.8 * len(labels))
    kept = max(1, int(round(train_share * train_end)))
    return DigitsSplit(train=TensorDataset(images[:kept], labels[:kept]),
                       val=TensorDataset(images[train_end:val_end], labels[train_end:val_end]),
                       test=TensorDataset(images[val_end:], labels[val_end:]))


def shift(images: torch.Tensor) -> torch.Tensor:
    """Each image moved by -1, 0 or +1 pixel in each direction (zeros fill the edge), drawn
    from torch's generator of the images' device: (B, 8, 8) -> (B, 8, 8)."""
    batch = images.shape[0]
    padded = F.pad(images, (1, 1, 1, 1))  # (B, 10, 10)
    dy, dx = torch.randint(0, 3, (2, batch, 1), device=images.device)  # window offsets, (B, 1)
    pixels = torch.arange(SIDE, device=images.device)
    rows, cols = (dy + pixels)[:, :, None], (dx + pixels)[:, None, :]  # (B, 8, 1), (B, 1, 8)
    return padded[torch.arange(batch, device=images.device)[:, None, None], rows, cols]


class DigitsNet(nn.Module):
    """An MLP on the 64 pixels: one or two hidden layers (ReLU, dropout), 10 logits."""

    def __init__(self, config: DigitsConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten(), nn.Linear(SIDE * SIDE, config.hidden),
                                   nn.ReLU(), nn.Dropout(config.dropout)]
        if config.second_layer:
            layers += [nn.Linear(config.hidden, config.hidden), nn.ReLU(),
                       nn.Dropout(config.dropout)]
        layers.append(nn.Linear(config.hidden, CLASSES))
        self.layers = nn.Sequential(*layers)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.layers(images)  # (B, 8, 8) -> (B, 10)


def predictions_frame(logits: torch.Tensor, labels: torch.Tensor) -> pd.DataFrame:
    """One row per test image: ``target``, ``predicted``, ``correct`` and its stratum,
    ``stratum_digit``, the true digit (predictions.parquet's ``stratum_*`` columns)."""
    predicted = logits.argmax(dim=1).cpu().numpy()
    target = labels.cpu().numpy()
    return pd.DataFrame({"target": target, "predicted": predicted,
                         "correct": (predicted == target).astype(float), "stratum_digit": target})
