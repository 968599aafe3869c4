"""The example plugin (examples/conv3d.py: Conv3d weights, 5-D) under every systems switch of the
runner, alone and in a pair: one epoch on tiny data, each cell ends ``ok`` or is refused before
training with a one-line ConfigError. Cells that change only how the same arithmetic runs
(memory format, recomputation, accumulation, compile) must also reach the switch-free cell's
result."""

from __future__ import annotations

import math

import pytest
import torch

from ablations.config import ConfigError, TrialConfig
from ablations.config.safety import cpu_autocast_supported, has_cpp_compiler
from ablations.trial.loop import train
from tests.faulty import hooks

CONV3D = "examples.conv3d:PLUGIN"

bf16_on_this_cpu = pytest.mark.skipif(
    not torch.cuda.is_available() and not cpu_autocast_supported("bfloat16"),
    reason="this CPU's autocast has no bf16 (the rules refuse it here)")
needs_cpp = pytest.mark.skipif(not torch.cuda.is_available() and not has_cpp_compiler(),
                               reason="inductor on the CPU needs a C++ compiler")


def cell(**switches) -> TrialConfig:
    """One epoch of the smallest conv3d on tiny synthetic data, with ``switches``."""
    return TrialConfig.of(model=CONV3D, width=4, depth=2, temporal_frames=2, epochs=1,
                          batch_size=16, synthetic_train=32, synthetic_val=16,
                          synthetic_test=16, eval_batch_size=16, **switches)


def run(config: TrialConfig, compile_backend: str = "inductor"):
    """("ok", outcome), or ("refused", the error's text): refused before any epoch trained."""
    reported = []
    try:
        outcome = train(config, report=lambda metrics, state, predictions:
                        reported.append(metrics), hooks=hooks(compile_backend=compile_backend))
    except ConfigError as error:
        assert reported == [], "refused after training had started"
        assert len(str(error).strip().splitlines()) == 1, str(error)
        return "refused", str(error)
    return outcome.status, outcome


@pytest.fixture(scope="module")
def baseline():
    status, outcome = run(cell())
    assert status == "ok"
    return outcome


# (switches, the relative tolerance on the switch-free cell's val_loss); "backend": the
# tests' compile backend (LoopHooks.compile_backend, tests/faulty.py), not a switch
SAME_ARITHMETIC = [
    pytest.param({"channels_last": True}, 1e-5, id="channels_last"),
    pytest.param({"gradient_checkpointing": True}, 1e-5, id="gradient_checkpointing"),
    pytest.param({"grad_accum_steps": 2}, 1e-4, id="grad_accum_steps=2"),
    pytest.param({"compile": "default", "backend": "aot_eager"}, 1e-4,
                 id="compile=default,aot_eager"),
    pytest.param({"compile": "default"}, 1e-3, id="compile=default,inductor",
                 marks=[pytest.mark.slow, needs_cpp]),  # a cold inductor: a minute or more
    pytest.param({"channels_last": True, "gradient_checkpointing": True}, 1e-5,
                 id="channels_last+gradient_checkpointing"),
]


@pytest.mark.parametrize(("switches", "rel"), SAME_ARITHMETIC)
def test_the_plugin_trains_under_the_switch(baseline, switches, rel):
    switches = dict(switches)
    backend = switches.pop("backend", "inductor")
    status, outcome = run(cell(**switches), backend)
    assert status == "ok", outcome
    metrics = outcome.metrics
    assert metrics["epochs_run"] == 1 and math.isfinite(metrics["test_mae"])
    assert len(outcome.predictions) == 16
    assert metrics["compile_used"] == switches.get("compile", "off")
    assert metrics["final_accum_steps"] == switches.get("grad_accum_steps", 1)
    assert metrics["val_loss"] == pytest.approx(baseline.metrics["val_loss"], rel=rel)


@bf16_on_this_cpu
def test_the_plugin_trains_in_bf16(baseline):
    status, outcome = run(cell(precision="bf16"))
    assert status == "ok", outcome
    assert outcome.metrics["precision_used"] == "bf16"
    assert math.isfinite(outcome.metrics["test_mae"])
    assert outcome.metrics["val_loss"] != baseline.metrics["val_loss"]  # bf16 really ran


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's rules")
@pytest.mark.parametrize(("switches", "fragment"), [
    ({"compile": "reduce-overhead", "gradient_checkpointing": True},
     "compile=reduce-overhead uses CUDA graphs"),
    ({"precision": "fp16", "channels_last": True}, "precision=fp16 on CPU has no fast kernels"),
])
def test_a_combination_the_rules_refuse_is_one_line_before_training(switches, fragment):
    status, message = run(cell(**switches))
    assert status == "refused" and fragment in message, message
