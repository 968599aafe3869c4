"""The trial's model: the built-in multimodal model from the runner's switches, or a plugin's
(``model`` set: ablations/config/plugins.py) from its own. One builder for training, the memory
probe (--auto-batch) and the cost estimate, so each sees the model the trial trains."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ablations.config import ConfigError, TrialConfig
from ablations.config.plugins import load_plugin
from ablations.model.model import build_model
from ablations.trial.model_config import builtin_model_config, data_shape


def build_trial_model(config: TrialConfig, image_shape: tuple[int, int, int],
                      num_scalars: int) -> nn.Module:
    """The trial's model, weights from torch's current RNG state (on the current default
    device: the meta device for the cost estimate). A plugin's model gets the runner's
    gradient checkpointing (its ``checkpoint_blocks`` wrapped); either model gets
    ``channels_last`` here (:func:`to_channels_last`), the one conversion a trial makes."""
    if not config.plugin:
        model = build_model(builtin_model_config(config, image_shape, num_scalars))
        return to_channels_last(model) if config.systems.channels_last else model
    plugin = load_plugin(config.plugin)
    model = plugin.build(config.model, data_shape(config, image_shape, num_scalars))
    if config.systems.gradient_checkpointing:
        names = list(plugin.checkpoint_blocks(model)) if plugin.checkpoint_blocks else []
        if not names:
            raise ConfigError(f"gradient_checkpointing: model {plugin.name} exposes no blocks "
                              "to checkpoint (ModelPlugin.checkpoint_blocks)")
        wrap_checkpoint_blocks(model, names)
    return to_channels_last(model) if config.systems.channels_last else model


# The channels-last memory format of each tensor rank: NHWC for 4-D (Conv2d weights), NDHWC
# for 5-D (Conv3d weights). ``Module.to(memory_format=torch.channels_last)`` would apply the
# 4-D format to every parameter with 4 *or more* dimensions and fail on a 5-D one ("required
# rank 4 tensor to use channels_last format").
CHANNELS_LAST_FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}


def to_channels_last(model: nn.Module) -> nn.Module:
    """``model`` with its 4-D and 5-D parameters and buffers in the channels-last format of
    their rank (in place, before the optimizer and compile see the parameters; ``.to(device)``
    afterwards keeps each tensor's format). Inputs are not converted here: a model that wants
    channels-last inputs converts them in its forward (the built-in model does)."""
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            memory_format = CHANNELS_LAST_FORMATS.get(tensor.dim())
            if memory_format is not None:
                tensor.data = tensor.data.contiguous(memory_format=memory_format)
    return model


class Checkpointed(nn.Module):
    """``module`` recomputed in the backward pass (training only)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args: Any) -> Any:
        if self.training and torch.is_grad_enabled():
            return checkpoint(self.module, *args, use_reentrant=False)
        return self.module(*args)


def wrap_checkpoint_blocks(model: nn.Module, names: Sequence[str]) -> int:
    """Wrap each named submodule of ``model`` in :class:`Checkpointed`; returns how many."""
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, Checkpointed(getattr(parent, child)))
    return len(names)
