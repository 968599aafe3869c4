"""The systems switches own code applies to its model and step (ablations/trial/switches.py):
each does what the built-in model's does when on, and nothing when off."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ablations.config import TrialConfig
from ablations.config.safety import has_cpp_compiler
from ablations.trial.model_builder import Checkpointed
from ablations.trial.step import compiled_graph_count
from ablations.trial.switches import Switches

CPU = torch.device("cpu")


class Counted(nn.Module):
    """A Linear that counts its forward calls."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.relu(self.linear(x))


class Net(nn.Module):
    """A conv (channels-last), a counted block (checkpointing) and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 3, padding=1)
        self.block = Counted()
        self.head = nn.Linear(8, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # (B, 3, 2, 2) -> (B, 1)
        return self.head(self.block(self.conv(images).flatten(1)))


def switches(**systems) -> Switches:
    return Switches(TrialConfig.of(**systems), CPU)


def train_step(sw: Switches, model: nn.Module) -> torch.optim.Optimizer:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with sw.autocast():
        loss = model(torch.randn(4, 3, 2, 2)).float().pow(2).mean()
    sw.step(loss, optimizer)
    return optimizer


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches are per process: drop what a compile test left."""
    yield
    torch._dynamo.reset()


# --------------------------------------------------------------------------- precision


def test_autocast_bf16_runs_a_linear_in_bfloat16():
    with switches(precision="bf16").autocast():
        out = nn.Linear(4, 2)(torch.randn(3, 4))
    assert out.dtype == torch.bfloat16


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_autocast_off_for_fp32_and_tf32_leaves_float32(precision):
    with switches(precision=precision).autocast():
        out = nn.Linear(4, 2)(torch.randn(3, 4))
        assert not torch.is_autocast_enabled("cpu")
    assert out.dtype == torch.float32


def test_scaler_is_enabled_for_fp16_only_and_scales_the_loss():
    loss = torch.tensor(2.0, requires_grad=True)
    fp16 = switches(precision="fp16").scaler()
    assert fp16.is_enabled()
    assert fp16.scale(loss).item() == pytest.approx(2.0 * fp16.get_scale())
    for precision in ("fp32", "bf16"):
        scaler = switches(precision=precision).scaler()
        assert not scaler.is_enabled()
        assert scaler.scale(loss) is loss  # the loss passes through unscaled


def test_step_updates_the_weights_and_clears_the_gradients():
    sw = switches()
    model = sw.prepare(Net())
    before = model.head.weight.detach().clone()
    train_step(sw, model)
    assert not torch.equal(model.head.weight, before)
    assert all(p.grad is None for p in model.parameters())


def test_step_clips_the_unscaled_gradients():
    sw = switches(precision="fp16")
    weight = nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    sw.step((weight * torch.tensor([100.0, 0.0, 0.0])).sum(), optimizer, max_grad_norm=1.0)
    # gradient (100, 0, 0) unscaled, clipped to norm 1: one SGD step of lr 1 moves it by 1
    assert weight.detach().tolist() == pytest.approx([-1.0, 0.0, 0.0], abs=1e-4)


# --------------------------------------------------------------------------- model


def test_channels_last_converts_conv_weights_only_when_on():
    on = switches(channels_last=True).prepare(Net())
    off = switches().prepare(Net())
    assert on.conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert not off.conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_checkpointing_recomputes_the_named_block_in_backward():
    sw = switches(gradient_checkpointing=True)
    net = Net()
    model = sw.prepare(net, checkpoint=["block"])
    assert model is net and isinstance(net.block, Checkpointed)
    train_step(sw, model)
    assert net.block.module.calls == 2  # the forward, then its recomputation in backward


def test_without_checkpointing_the_named_block_runs_once():
    sw = switches()
    net = Net()
    train_step(sw, sw.prepare(net, checkpoint=["block"]))
    assert isinstance(net.block, Counted) and net.block.calls == 1


def test_checkpointing_without_names_says_what_to_pass():
    with pytest.raises(ValueError, match=r"checkpoint=\[submodule names\]"):
        switches(gradient_checkpointing=True).prepare(Net())


def test_checkpointing_an_unknown_submodule_is_refused_before_wrapping():
    net = Net()
    with pytest.raises(ValueError, match="no submodule 'encoder'"):
        switches(gradient_checkpointing=True).prepare(net, checkpoint=["block", "encoder"])
    assert isinstance(net.block, Counted)


def test_prepare_applies_nothing_when_every_switch_is_off():
    net = Net()
    sw = switches()
    assert sw.prepare(net, checkpoint=["block"]) is net
    assert sw.record() == {"precision_used": "fp32", "compile_used": "off",
                           "channels_last": False, "gradient_checkpointing": False}


# --------------------------------------------------------------------------- compile


@pytest.mark.skipif(not has_cpp_compiler(), reason="inductor on CPU needs a C++ compiler")
def test_compile_default_returns_a_compiled_module_sharing_the_weights(fresh_dynamo):
    net = Net()
    model = switches(compile="default").prepare(net)  # torch.compile is lazy: no compile yet
    assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    assert model._orig_mod is net
    assert [p for p in model.parameters()] == [p for p in net.parameters()]


def test_compiled_module_trains_with_the_test_backend(fresh_dynamo):
    sw = Switches(TrialConfig.of(compile="default", gradient_checkpointing=True,
                                 channels_last=True), CPU, compile_backend="eager")
    net = Net()
    model = sw.prepare(net, checkpoint=["block"])
    assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    images = torch.randn(4, 3, 2, 2)
    with torch.no_grad():
        assert torch.allclose(model(images), net(images))
    train_step(sw, model)
    assert sw.record()["compile_used"] == "default"


@pytest.mark.slow  # inductor compiles C++: about 20 s on a 2-core CPU
@pytest.mark.skipif(not has_cpp_compiler(), reason="inductor on CPU needs a C++ compiler")
def test_inductor_compiles_the_prepared_model_with_every_switch_on(fresh_dynamo):
    sw = switches(compile="default", gradient_checkpointing=True, channels_last=True)
    net = Net()
    model = sw.prepare(net, checkpoint=["block"])
    graphs = compiled_graph_count()
    images = torch.randn(4, 3, 2, 2)
    with torch.no_grad():
        assert torch.allclose(model(images), net(images), atol=1e-6)
    train_step(sw, model)
    assert compiled_graph_count() > graphs
    assert sw.record()["compile_used"] == "default"


# --------------------------------------------------------------------------- record


def test_record_names_what_ran():
    sw = switches(precision="bf16", channels_last=True, gradient_checkpointing=True)
    assert sw.record()["precision_used"] == "fp32"  # autocast never entered yet
    model = sw.prepare(Net(), checkpoint="block")  # one name as a string
    train_step(sw, model)
    assert sw.record() == {"precision_used": "bf16", "compile_used": "off",
                           "channels_last": True, "gradient_checkpointing": True}
