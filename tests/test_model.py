"""The model's output shapes for the baseline and every ablation, generated from the table."""

from __future__ import annotations

import pytest
import torch

from ablations.config import apply_overrides
from ablations.trial.loop import model_config_for, model_for_shapes
from ablations.model import ModelConfig, MultimodalRegressionModel
from ablations.model.data import SyntheticSpec, make_synthetic
from ablations.search_spaces import COMPONENT_ABLATIONS
from tests.conftest import tiny_config

DATA = make_synthetic(SyntheticSpec(n_train=8, n_val=4, n_test=4))


@pytest.mark.parametrize("ablation", list(COMPONENT_ABLATIONS))
def test_output_shapes_for_every_ablation(ablation):
    config = apply_overrides(
        tiny_config(cnn_widths="8,16,32"), COMPONENT_ABLATIONS[ablation], source=ablation
    )
    model = model_for_shapes(config, DATA)
    batch = 5
    frames = torch.randn(batch, config.data.temporal_frames, *DATA.image_shape)
    scalars = torch.randn(batch, len(DATA.scalar_names))
    mean, variance = model(frames if config.data.use_images else None,
                           scalars if config.data.use_scalars else None)
    assert mean.shape == (batch,)
    if config.model.head == "point":
        assert variance is None
    else:
        assert variance.shape == (batch,)
        assert bool((variance > 0).all())
    # A component switched off has no parameters at all.
    names = {name.split(".")[0] for name, _ in model.named_parameters()}
    assert ("cnn" in names) == config.data.use_images
    assert ("scalar_mlp" in names) == config.data.use_scalars


def test_widths_follow_the_switch():
    full = model_for_shapes(tiny_config(cnn_widths="64,128,256"), DATA)
    reduced = model_for_shapes(tiny_config(cnn_widths="32,64,128"), DATA)
    assert full.cnn.layers[2][0].out_channels == 256
    assert reduced.cnn.layers[2][0].out_channels == 128


def test_coordinate_planes_follow_their_switch():
    channels = DATA.image_shape[0]
    with_planes = model_for_shapes(tiny_config(cnn_widths="8,16,32"), DATA)
    config = apply_overrides(tiny_config(cnn_widths="8,16,32"), {"coord_channels": "false"},
                             source="--set")
    assert config.model.coord_channels is False  # the string 'false' reads as False
    without = model_for_shapes(config, DATA)
    assert with_planes.cnn.layers[0][0].in_channels == channels + 2
    assert without.cnn.layers[0][0].in_channels == channels
    frames = torch.randn(2, config.data.temporal_frames, *DATA.image_shape)
    mean, _ = without(frames, torch.randn(2, 3))
    assert mean.shape == (2,)


@pytest.mark.parametrize("shape", [(3, 1, 7, 9, 2), (2, 5, 3, 16, 12, 0)])
def test_shapes_come_from_the_data(shape):
    frames, channels, height, width = shape[1:5]
    config = ModelConfig(in_channels=channels, image_height=height, image_width=width,
                         num_scalars=shape[5] if len(shape) > 5 else 4, temporal_frames=frames,
                         cnn_widths=(4, 8, 8), embed_dim=8, num_heads=2,
                         use_scalars=len(shape) <= 5)
    model = MultimodalRegressionModel(config)
    x = torch.randn(shape[0], frames, channels, height, width)
    s = torch.randn(shape[0], config.num_scalars) if config.use_scalars else None
    mean, variance = model(x, s)
    assert mean.shape == (shape[0],) and variance.shape == (shape[0],)


def test_wrong_frame_count_is_a_clear_error():
    model = model_for_shapes(tiny_config(temporal_frames=3), DATA)
    with pytest.raises(ValueError, match="expects 3 frames, got 2"):
        model(torch.randn(2, 2, *DATA.image_shape), torch.randn(2, 3))


def test_model_config_comes_from_data_and_trial():
    config = model_config_for(tiny_config(temporal_frames=2, head="point"), DATA)
    assert (config.in_channels, config.image_height, config.image_width) == DATA.image_shape
    assert config.num_scalars == 3 and config.temporal_frames == 2 and config.head == "point"


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    base = model_for_shapes(tiny_config(dropout=0.0), DATA)
    ckpt = model_for_shapes(tiny_config(dropout=0.0, gradient_checkpointing=True), DATA)
    ckpt.load_state_dict(base.state_dict())
    frames = torch.randn(4, 4, *DATA.image_shape)
    scalars = torch.randn(4, 3)
    grads = []
    for model in (base, ckpt):
        model.train()
        mean, variance = model(frames, scalars)
        (mean.sum() + variance.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-5, atol=1e-6)
