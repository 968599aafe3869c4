"""A model plugin unlike the built-in one: a 3-D convolution over (time, height, width).

The built-in model runs a 2-D CNN per frame and then attends over frames; this one mixes time
and space in the same convolutions, so its ablations are its own: the temporal extent of the
kernels (``temporal_kernel=1`` sees each frame alone until the pooling), the depth of the
stack, and whether the head also predicts a variance.

Run its ablation table (examples/conv3d_ablations.yaml) with::

    python run_ablations.py --model examples.conv3d:PLUGIN --space examples/conv3d_ablations.yaml

The plugin protocol is in docs/plugins.md: a typed config (a frozen dataclass with defaults
and a ``validate`` that raises ``ValueError``), a ``build(config, shape)`` that returns an
``nn.Module`` whose ``forward(frames, scalars)`` returns ``(mean, variance or None)``, and the
names of the blocks gradient checkpointing may wrap.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ablations.config.plugins import DataShape, ModelPlugin

MIN_VARIANCE = 1e-4


@dataclass(frozen=True)
class Conv3dConfig:
    """The switches of :class:`Conv3dRegressor`, with their defaults."""

    width: int = 32  # channels of the first 3-D convolution (doubling per block)
    depth: int = 3  # 3-D convolution blocks, 1..4
    temporal_kernel: int = 3  # kernel extent over time: 1 = no temporal mixing in the stack
    variance_head: bool = True  # False: mean only, trained with MSE

    def validate(self) -> None:
        if self.width < 4:
            raise ValueError(f"width must be >= 4, got {self.width}")
        if not 1 <= self.depth <= 4:
            raise ValueError(f"depth must be in 1..4, got {self.depth}")
        if self.temporal_kernel not in (1, 3):
            raise ValueError(f"temporal_kernel must be 1 or 3, got {self.temporal_kernel}")


class Conv3dBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, temporal_kernel: int):
        super().__init__()
        pad = temporal_kernel // 2
        self.conv = nn.Conv3d(c_in, c_out, (temporal_kernel, 3, 3), stride=(1, 2, 2),
                              padding=(pad, 1, 1))
        self.norm = nn.GroupNorm(min(8, c_out), c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.norm(self.conv(x)))


class Conv3dRegressor(nn.Module):
    """(B, T, C, H, W) frames and (B, S) scalars -> mean and variance of the target."""

    def __init__(self, config: Conv3dConfig, shape: DataShape):
        super().__init__()
        self.config = config
        blocks, channels = [], shape.channels
        for i in range(config.depth):
            out = config.width * 2 ** i
            blocks.append(Conv3dBlock(channels, out, config.temporal_kernel))
            channels = out
        self.blocks = nn.Sequential(*blocks) if shape.uses_images else None
        self.uses_scalars = shape.scalars > 0
        features = (channels if shape.uses_images else 0) + shape.scalars
        self.head = nn.Sequential(nn.Linear(features, 64), nn.GELU(),
                                  nn.Linear(64, 2 if config.variance_head else 1))

    def forward(self, frames: torch.Tensor, scalars: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        parts = []  # an unused input is an empty tensor (use_images / use_scalars false)
        if self.blocks is not None:
            x = self.blocks(frames.transpose(1, 2))  # (B, C, T, H, W) for Conv3d
            parts.append(x.mean(dim=(2, 3, 4)))
        if self.uses_scalars:
            parts.append(scalars)
        out = self.head(torch.cat(parts, dim=1))
        if not self.config.variance_head:
            return out[:, 0], None
        return out[:, 0], F.softplus(out[:, 1]) + MIN_VARIANCE


PLUGIN = ModelPlugin(
    name="conv3d",
    config=Conv3dConfig,
    build=Conv3dRegressor,
    checkpoint_blocks=lambda model: [f"blocks.{i}" for i in range(len(model.blocks))]
    if model.blocks is not None else [],
)
