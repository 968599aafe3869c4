"""The multimodal spatiotemporal regression model, every component behind a switch.

Input: a stack of T image frames ``(B, T, C, H, W)`` and scalar features ``(B, S)``.
Output: the predicted mean of the target and, with the Gaussian head, its variance.

    frames ─► per-frame CNN over (B·T) ─► spatial attention ─► temporal attention ─┐
                                              (frames in order ─► linear read-out) ├► fusion ─► head
    scalars ─► scalar MLP ─────────────────────────────────────────────────────────┘

Each field of :class:`ModelConfig` names the ablation that switches it off. Shapes
(frames, channels, H, W, number of scalars) come from the data, never from constants here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ablations.model.config import ModelConfig

# Lower bound on the predicted variance (standardised target units): keeps the NLL finite.
MIN_VARIANCE = 1e-4


def _conv_block(c_in: int, c_out: int, stride: int) -> nn.Sequential:
    groups = math.gcd(8, c_out)
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel_size=3, stride=stride, padding=1, bias=False),
        nn.GroupNorm(groups, c_out),  # not BatchNorm: recomputation under checkpointing is exact
        nn.GELU(),
    )


class FrameCNN(nn.Module):
    """Per-frame CNN: (N, C, H, W) -> (N, widths[2], h, w) with h, w = H/4, W/4 (rounded up)."""

    def __init__(self, in_channels: int, widths: tuple[int, int, int], coord_channels: bool,
                 channels_last: bool = False):
        super().__init__()
        self.coord_channels = coord_channels
        self.channels_last = channels_last
        c_in = in_channels + (2 if coord_channels else 0)
        self.layers = nn.Sequential(
            _conv_block(c_in, widths[0], stride=1),
            _conv_block(widths[0], widths[1], stride=2),
            _conv_block(widths[1], widths[2], stride=2),
        )

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        if self.coord_channels:
            n, _, height, width = frames.shape
            ys = torch.linspace(-1.0, 1.0, height, device=frames.device, dtype=frames.dtype)
            xs = torch.linspace(-1.0, 1.0, width, device=frames.device, dtype=frames.dtype)
            grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
            coords = torch.stack((grid_x, grid_y)).expand(n, 2, height, width)
            frames = torch.cat((frames, coords), dim=1)
        if self.channels_last:
            frames = frames.contiguous(memory_format=torch.channels_last)
        return self.layers(frames)


class SelfAttentionBlock(nn.Module):
    """Pre-norm transformer block: x + MHA(LN(x)), then x + MLP(LN(x)). (N, L, D) -> (N, L, D)."""

    def __init__(self, dim: int, num_heads: int, dropout: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, num_heads, dropout=dropout, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 2 * dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(2 * dim, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class MultimodalRegressionModel(nn.Module):
    """Frames + scalars -> mean (and variance) of one regression target.

    ``forward`` returns ``(mean, variance)``, each ``(B,)``; ``variance`` is ``None`` with the
    point head. Both are in the units the model was trained on (the trainer standardises).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        dim = config.embed_dim
        branches = 0
        if config.use_images:
            branches += 1
            widths = config.widths
            self.cnn = FrameCNN(config.in_channels, widths, config.coord_channels,
                                config.channels_last)
            map_h, map_w = config.feature_map_size
            self.spatial_proj = nn.Linear(widths[2], dim)
            self.spatial_pos = nn.Parameter(torch.zeros(1, map_h * map_w, dim))
            self.spatial_block = (
                SelfAttentionBlock(dim, config.num_heads, config.dropout)
                if config.spatial_attention
                else None
            )
            self.temporal_pos = nn.Parameter(torch.zeros(1, config.temporal_frames, dim))
            self.temporal_block = (
                SelfAttentionBlock(dim, config.num_heads, config.dropout)
                if config.temporal_attention
                else None
            )
            # Frames in order -> one embedding; a linear map of the ordered frames keeps motion
            # (differences between frames) learnable with or without temporal attention.
            self.temporal_readout = nn.Sequential(
                nn.Flatten(1), nn.Linear(config.temporal_frames * dim, dim)
            )
            nn.init.normal_(self.spatial_pos, std=0.02)
            nn.init.normal_(self.temporal_pos, std=0.02)
        if config.use_scalars:
            branches += 1
            self.scalar_mlp = nn.Sequential(
                nn.Linear(config.num_scalars, dim), nn.GELU(), nn.Linear(dim, dim)
            )
        self.fusion = nn.Sequential(
            nn.Linear(branches * dim, dim),
            nn.GELU(),
            nn.Dropout(config.dropout),
            nn.Linear(dim, dim),
            nn.GELU(),
        )
        self.head = nn.Linear(dim, 2 if config.head == "gaussian" else 1)

    def _checkpointed(self, fn, x: torch.Tensor) -> torch.Tensor:
        if self.config.gradient_checkpointing and self.training and torch.is_grad_enabled():
            return checkpoint(fn, x, use_reentrant=False)
        return fn(x)

    def encode_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """(B, T, C, H, W) -> (B, D)."""
        batch, steps = frames.shape[:2]
        if steps != self.config.temporal_frames:
            raise ValueError(
                f"model expects {self.config.temporal_frames} frames, got {steps} "
                f"(input shape {tuple(frames.shape)})"
            )
        # One CNN call over all frames: (B·T, C, H, W) -> (B·T, w3, h, w)
        maps = self._checkpointed(self.cnn, frames.flatten(0, 1))
        # (B·T, h·w, D): one token per position of the CNN map
        tokens = self.spatial_proj(maps.flatten(2).transpose(1, 2)) + self.spatial_pos
        if self.spatial_block is not None:
            tokens = self._checkpointed(self.spatial_block, tokens)
        per_frame = tokens.mean(dim=1).view(batch, steps, -1) + self.temporal_pos  # (B, T, D)
        if self.temporal_block is not None:
            per_frame = self._checkpointed(self.temporal_block, per_frame)
        return self.temporal_readout(per_frame)

    def forward(
        self, frames: torch.Tensor | None, scalars: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        parts = []
        if self.config.use_images:
            if frames is None:
                raise ValueError("this model uses images but no frames were given")
            parts.append(self.encode_frames(frames))
        if self.config.use_scalars:
            if scalars is None:
                raise ValueError("this model uses scalars but none were given")
            parts.append(self.scalar_mlp(scalars))
        out = self.head(self.fusion(torch.cat(parts, dim=1)))  # (B, 1 or 2)
        mean = out[:, 0]
        if self.config.head == "point":
            return mean, None
        return mean, F.softplus(out[:, 1]) + MIN_VARIANCE


def build_model(config: ModelConfig) -> MultimodalRegressionModel:
    """The model for ``config``, weights initialised from torch's current RNG state."""
    return MultimodalRegressionModel(config)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
