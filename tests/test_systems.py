"""Switches that must be safe together: the conflict rules, compile, precision, accumulation,
OOM recovery, auto-batch, and the systems/batch/frames spaces."""

from __future__ import annotations

import gc
import math

import pytest
import torch
import yaml

from ablations.config import ConfigError
from ablations.trial.memory import probe_max_batch
from ablations.config.safety import (
    cpu_autocast_supported,
    find_conflicts,
    resolve_systems,
)
from ablations.trial.loop import train
from ablations.trial.step import TrialOutOfMemory
from ablations.search_spaces import PRESETS, SYSTEMS_MATRIX, expand, get_space
from tests.conftest import REPO, tiny_config
from tests.faulty import hooks


# ------------------------------------------------------------------ the rules


@pytest.mark.parametrize(
    ("changes", "device", "fragment", "mapped"),
    [
        ({"compile": "reduce-overhead"}, "cpu", "device cpu has no CUDA graphs",
         {"compile": "default"}),
        ({"compile": "max-autotune"}, "cpu", "no CUDA graphs",
         {"compile": "max-autotune-no-cudagraphs"}),
        ({"compile": "reduce-overhead", "gradient_checkpointing": True}, "cuda",
         "gradient_checkpointing breaks", {"compile": "default"}),
        ({"compile": "max-autotune", "grad_accum_steps": 2}, "cuda",
         "gradient accumulation breaks", {"compile": "max-autotune-no-cudagraphs"}),
        ({"precision": "tf32"}, "cpu", "tf32 is a CUDA", {"precision": "fp32"}),
    ],
)
def test_conflicts_are_refused_or_mapped(changes, device, fragment, mapped):
    config = tiny_config(**changes)
    with pytest.raises(ConfigError, match=fragment):
        resolve_systems(config, device=device, resolve=False)
    resolved, notes = resolve_systems(config, device=device, resolve=True)
    for key, value in mapped.items():
        assert resolved.flat()[key] == value
    assert notes and fragment.split()[0] in notes[0]
    # what was asked for is kept beside what runs
    assert resolved.systems.compile_requested == config.systems.compile
    assert resolved.systems.precision_requested == config.systems.precision


@pytest.mark.parametrize("mode", ["off", "default", "max-autotune-no-cudagraphs"])
def test_modes_without_cuda_graphs_are_safe_with_checkpointing(mode):
    config = tiny_config(compile=mode, gradient_checkpointing=True, grad_accum_steps=2)
    assert [c for c in find_conflicts(config, "cuda") if "compile" in c.problem] == []


def test_cuda_graph_mode_is_safe_only_in_its_own_conditions():
    assert find_conflicts(tiny_config(compile="reduce-overhead"), "cuda") == []


def test_training_refuses_a_cuda_graph_mode_before_the_first_step():
    # never a crash at epoch 2: the loop checks the rules itself
    with pytest.raises(ConfigError, match="CUDA graphs"):
        train(tiny_config(compile="reduce-overhead"))


# ------------------------------------------------------------------ the switches run


@pytest.fixture(scope="module")
def eager_epoch():
    """One epoch of the tiny trial without dropout, eager, fp32, the optimizer kernel left to
    ``auto``: what the compiled, checkpointed, accumulated and bf16 runs are compared with
    (the tests only read it)."""
    return train(tiny_config(dropout=0.0, batch_size=16, epochs=1))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_matches_eager(backend, eager_epoch):
    import torch._dynamo

    torch._dynamo.reset()
    compiled = train(tiny_config(dropout=0.0, batch_size=16, epochs=1, compile="default"),
                     hooks=hooks(compile_backend=backend))
    torch._dynamo.reset()
    assert compiled.metrics["compile_used"] == "default"
    for key in ("train_loss", "val_loss"):
        assert compiled.metrics[key] == pytest.approx(eager_epoch.metrics[key], rel=1e-3), key


def test_checkpointing_trains_to_the_same_result(eager_epoch):
    checkpointed = train(tiny_config(dropout=0.0, batch_size=16, epochs=1,
                                     gradient_checkpointing=True))
    assert checkpointed.metrics["val_loss"] == pytest.approx(eager_epoch.metrics["val_loss"],
                                                             rel=1e-4)


@pytest.mark.skipif(not cpu_autocast_supported("bfloat16"),
                    reason="this CPU's autocast has no bf16 (the rules refuse it there)")
def test_bf16_runs_on_cpu(eager_epoch):
    outcome = train(tiny_config(dropout=0.0, batch_size=16, epochs=1, precision="bf16"))
    assert outcome.status == "ok" and outcome.metrics["precision_used"] == "bf16"
    assert math.isfinite(outcome.metrics["test_mae"])
    # bf16 really ran: the result differs from fp32's (same seed, same data)
    assert eager_epoch.metrics["precision_used"] == "fp32"
    assert outcome.metrics["val_loss"] != eager_epoch.metrics["val_loss"]


def test_fp16_on_cpu_is_refused_or_mapped_to_bf16():
    config = tiny_config(precision="fp16")
    with pytest.raises(ConfigError, match="fp16 on CPU has no fast kernels"):
        train(config)
    resolved, _ = resolve_systems(config, device="cpu", resolve=True)
    assert resolved.systems.precision == "bf16" and resolved.systems.precision_requested == "fp16"
    assert find_conflicts(config, "cuda") == []  # fp16 + GradScaler is fine on CUDA


def test_accumulation_channels_last_and_optimizer_kernels(eager_epoch):
    outcome = train(tiny_config(batch_size=16, grad_accum_steps=4, channels_last=True,
                                optimizer_impl="single", epochs=1))
    assert outcome.status == "ok"
    assert outcome.metrics["final_micro_batch"] == 4 and outcome.metrics["final_accum_steps"] == 4
    assert outcome.metrics["optimizer_used"] == "single"
    assert eager_epoch.metrics["optimizer_used"] == "foreach"  # auto on CPU


def test_channels_last_reaches_the_builtin_models_convolutions():
    # one conversion for every model (the builder's, per rank): the built-in model's 4-D
    # weights are trained in NHWC
    def trained_4d_weights(channels_last):
        states = []
        train(tiny_config(epochs=1, channels_last=channels_last),
              report=lambda metrics, state, predictions: states.append(state))
        return [t for t in states[-1]["model"].values() if t.dim() == 4]

    assert not all(t.is_contiguous(memory_format=torch.channels_last)
                   for t in trained_4d_weights(False))
    weights = trained_4d_weights(True)
    assert weights and all(t.is_contiguous(memory_format=torch.channels_last) for t in weights)


def test_accumulation_gives_the_same_step_as_one_big_batch(eager_epoch):
    # same samples per optimizer step, no dropout: the same trajectory up to float error
    four = train(tiny_config(dropout=0.0, batch_size=16, grad_accum_steps=4, epochs=1))
    assert four.metrics["val_loss"] == pytest.approx(eager_epoch.metrics["val_loss"], rel=1e-3)


def test_measurements_are_reported():
    config = tiny_config()
    metrics = train(config).metrics
    train_samples = config.data.synthetic_train // config.optim.batch_size * config.optim.batch_size
    # throughput: samples over training time, so at most the samples an epoch over its time
    assert 0 < metrics["steady_train_samples_per_s"]
    assert metrics["mean_epoch_s"] > train_samples / metrics["steady_train_samples_per_s"] * 0.5
    assert 0 < metrics["mean_epoch_s"] * config.optim.epochs <= metrics["wall_s"]
    assert 0 <= metrics["compile_s"] < metrics["wall_s"]
    assert metrics["peak_mem_mb"] > 10  # MiB: the process holds torch at least
    assert metrics["peak_mem_mb"] == max(metrics["peak_mem_train_mb"], metrics["peak_mem_eval_mb"])
    assert metrics["epochs_run"] == config.optim.epochs and metrics["torch_threads"] == 1


# ------------------------------------------------------------------ OOM recovery


@pytest.fixture
def worker_heap():
    """What came before survives frozen, as in a reused Ray worker at a trial's start
    (tests/test_gpu_paths.py's fixture of that name): each OOM recovery's ``gc.collect()``
    walks what this test made."""
    gc.collect()
    gc.freeze()


@pytest.mark.usefixtures("worker_heap")
def test_oom_halves_the_micro_batch_and_keeps_the_effective_batch():
    outcome = train(tiny_config(batch_size=16, epochs=2), hooks=hooks(oom_above_batch=5))
    metrics = outcome.metrics
    assert outcome.status == "ok"
    assert metrics["oom_retries"] == 2  # 16 -> 8 -> 4
    assert metrics["final_micro_batch"] == 4 and metrics["final_accum_steps"] == 4
    assert metrics["final_micro_batch"] * metrics["final_accum_steps"] == 16
    # the retried epoch started over from its snapshot: the result is the clean run's
    clean = train(tiny_config(batch_size=16, grad_accum_steps=4, epochs=2))
    assert metrics["val_loss"] == pytest.approx(clean.metrics["val_loss"], rel=1e-4)


@pytest.mark.usefixtures("worker_heap")
def test_oom_past_the_floor_fails_with_reason_oom():
    with pytest.raises(TrialOutOfMemory, match="oom: out of memory at micro-batch 8"):
        train(tiny_config(batch_size=16, min_micro_batch=8), hooks=hooks(oom_above_batch=5))


@pytest.mark.usefixtures("worker_heap")
def test_auto_batch_probe_finds_the_largest_fitting_batch():
    found = probe_max_batch(tiny_config(), hooks=hooks(oom_above_batch=20))
    assert found["batch"] == 20 and not found["limited"]
    sizes = [size for size, _ in found["probed"]]
    assert sizes[:6] == [1, 2, 4, 8, 16, 32]  # doubling, then bisection between 16 and 32
    assert (32, False) in found["probed"] and (20, True) in found["probed"]
    assert (21, False) in found["probed"]


# ------------------------------------------------------------------ spaces and presets


def test_systems_matrix_is_the_full_product():
    assert len(SYSTEMS_MATRIX) == 2 * 5 * 4
    assert SYSTEMS_MATRIX["ckpt-reduce-overhead-bf16"] == {
        "gradient_checkpointing": True, "compile": "reduce-overhead", "precision": "bf16"}


def test_batch_and_frames_spaces_expand():
    base = tiny_config()
    batch = expand(get_space("batch"), base, [0, 1])
    assert [t.config.optim.batch_size for t in batch[::2]] == [4, 8, 16, 20, 32, 64]
    assert len(batch) == 12
    frames = expand(get_space("frames"), base, [0])
    assert [t.config.data.temporal_frames for t in frames] == list(range(1, 9))


def test_lr_scaling():
    assert tiny_config(batch_size=64, lr=1e-3, lr_scaling="linear").optim.effective_lr == \
        pytest.approx(2e-3)
    assert tiny_config(batch_size=8, lr=1e-3, lr_scaling="sqrt").optim.effective_lr == \
        pytest.approx(5e-4)
    assert tiny_config(batch_size=8, lr=1e-3).optim.effective_lr == pytest.approx(1e-3)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_yaml_files_match_the_presets(name):
    path = REPO / "configs" / f"{name}.yaml"
    assert yaml.safe_load(path.read_text()) == PRESETS[name]  # unambiguous for any YAML reader
    from ablations.config import TrialConfig, apply_overrides, config_from_sources
    assert config_from_sources(yaml_path=path) == apply_overrides(TrialConfig(), PRESETS[name],
                                                                   source=name)
