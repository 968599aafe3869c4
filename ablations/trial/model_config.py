"""The configuration a trial's model is built from: the built-in model's
(:class:`ablations.model.config.ModelConfig`) or the data's shape a plugin's model gets. No
torch here: the driver's cost estimate keys its kept FLOP counts by these before any trial
(ablations/trial/cost.py); ablations/trial/model_builder.py builds the model."""

from __future__ import annotations

import dataclasses

from ablations.config import TrialConfig
from ablations.config.plugins import DataShape
from ablations.model.config import ModelConfig


def builtin_model_config(config: TrialConfig, image_shape: tuple[int, int, int],
                         num_scalars: int) -> ModelConfig:
    """The built-in model's config for images of ``image_shape`` (C, H, W) and
    ``num_scalars`` scalars (the columns the model sees: those of the data less
    ``drop_scalars``)."""
    channels, height, width = image_shape
    return ModelConfig(
        **dataclasses.asdict(config.model),  # the switches, as they are
        in_channels=channels, image_height=height, image_width=width, num_scalars=num_scalars,
        temporal_frames=config.data.temporal_frames, use_images=config.data.use_images,
        use_scalars=config.data.use_scalars,
        gradient_checkpointing=config.systems.gradient_checkpointing,
        channels_last=config.systems.channels_last,
    )


def data_shape(config: TrialConfig, image_shape: tuple[int, int, int],
               num_scalars: int) -> DataShape:
    channels, height, width = image_shape
    return DataShape(frames=config.data.temporal_frames, channels=channels, height=height,
                     width=width, scalars=num_scalars if config.data.use_scalars else 0,
                     uses_images=config.data.use_images)
