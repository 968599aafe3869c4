"""Code paths that only run on a GPU, exercised on the CPU through the same code: state saved
on a CUDA device, the fp16 GradScaler after an OOM, the OOM snapshot, the compile mode an OOM
switched, reused workers, precisions a GPU has no native support for, evaluation OOM,
auto-batch bounds. Tests that need CUDA itself are skipped without it."""

from __future__ import annotations

import copy
import dataclasses
import functools
import gc
import io
import json
import re
import time
import tomllib

import pytest
import torch

from ablations.trial.memory import (
    MIN_STEPS_PER_EPOCH,
    auto_batch_limit,
    choose_micro_batch,
)
from ablations.trial.step import (
    CompiledModel,
    cap_gpu_memory,
    compile_mode_for,
    is_out_of_memory,
    release_memory,
    resumed_compile_mode,
    make_optimizer,
)
from ablations.trial.state import cpu_copy, restart_epoch
from ablations.config.safety import find_conflicts, resolve_systems
from ablations.experiment.execution.trainable import (
    HISTORY_FILE,
    STATE_FILE,
    load_state,
    newest_state,
    read_history,
    save_state_atomic,
)
from ablations.trial.loop import train
from ablations.model.model import build_model
from ablations.experiment.planning import preflight
from tests.conftest import REPO, run_here, tiny_config
from tests.faulty import InjectedFailure, hooks, oom_probe

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def worker_heap():
    """The heap as a reused Ray worker's is when a trial starts: what came before survives
    frozen (ablations.experiment.execution.trainable.return_memory_after_trial), so that the
    ``gc.collect()`` of each OOM recovery walks what this trial made, not every object the
    earlier tests of this test worker left behind (up to a second each, late in a run)."""
    gc.collect()
    gc.freeze()


# ------------------------------------------------------------------ 1. state saved on a GPU


@pytest.fixture
def saved_as_on_a_gpu():
    """Within the block, torch.save tags CPU storages 'cuda:0', as a GPU trial's state is tagged:
    loading such a file without map_location needs CUDA."""
    from torch import serialization

    def tag(obj):
        device = getattr(obj, "device", None)
        return "cuda:0" if device is not None and device.type == "cpu" else None

    entry = (-1, tag, lambda obj, location: None)  # priority -1: before the built-in taggers
    serialization._package_registry.append(entry)
    serialization._package_registry.sort(key=lambda item: item[0])
    try:
        yield
    finally:
        serialization._package_registry.remove(entry)


def _trained_state(epoch: int = 2):
    """The resumable state after ``epoch`` of a 2-epoch trial."""
    states = []
    train(tiny_config(epochs=2), report=lambda m, state, p: states.append(copy.deepcopy(state)))
    return states[epoch - 1]


def test_a_gpu_trials_state_is_read_on_a_driver_without_cuda(tmp_path, saved_as_on_a_gpu):
    state = _trained_state()
    save_state_atomic(state, str(tmp_path))
    raw = (tmp_path / STATE_FILE).read_bytes()
    if not torch.cuda.is_available():  # the file really is a CUDA one: a plain load fails here
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(io.BytesIO(raw), weights_only=True)
    loaded = load_state(str(tmp_path / STATE_FILE))
    assert loaded["epoch"] == 2 and loaded["model"]
    assert all(t.device.type == "cpu" for t in loaded["model"].values())
    assert newest_state(str(tmp_path / STATE_FILE), None)["epoch"] == 2  # what --resume reads


def test_the_history_is_read_without_loading_weights(tmp_path):
    state = _trained_state()
    save_state_atomic(state, str(tmp_path))
    (tmp_path / STATE_FILE).write_bytes(b"not a torch file")  # weights unreadable: no matter
    history = read_history(str(tmp_path), None)
    assert [row["epoch"] for row in history] == [1, 2]
    assert history[-1]["val_mae"] == pytest.approx(state["history"][-1]["val_mae"])
    assert json.loads((tmp_path / HISTORY_FILE).read_text()) == history


def test_a_gpu_state_resumes_on_the_cpu(tmp_path, saved_as_on_a_gpu):
    save_state_atomic(_trained_state(epoch=1), str(tmp_path))
    resumed = train(tiny_config(epochs=2), resume_state=load_state(str(tmp_path / STATE_FILE)))
    assert resumed.status == "ok" and resumed.metrics["resumed_from_epoch"] == 1


# ------------------------------------------------------------------ 2. fp16 scaler after an OOM


def test_a_retry_after_an_oom_between_unscale_and_update_can_step(tmp_path):
    # CPU GradScaler: the same per-optimizer stage tracking as CUDA's.
    config = tiny_config(precision="fp16")
    model = build_model(_model_config(config))
    optimizer, _ = make_optimizer(model, config, torch.device("cpu"))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    scaler = torch.amp.GradScaler("cpu", enabled=True)
    snapshot = cpu_copy({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                         "torch_rng": torch.get_rng_state()})

    def backward_and_unscale(scaler):
        mean, _ = model(torch.randn(4, config.data.temporal_frames, 2, 12, 12), torch.randn(4, 3))
        scaler.scale(mean.square().mean()).backward()
        scaler.unscale_(optimizer)  # then clipping; the OOM strikes before step/update

    backward_and_unscale(scaler)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(optimizer)  # what a retry on the restored old scaler would hit
    scaler = restart_epoch(snapshot, model, optimizer, scheduler, config, torch.device("cpu"))
    optimizer.zero_grad(set_to_none=True)
    backward_and_unscale(scaler)  # the retry's first step: no "already been called"
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == snapshot["scaler"]["scale"]  # the scale itself came back


def _model_config(config):
    from ablations.trial.loop import model_config_for_shape

    return model_config_for_shape(config, (2, 12, 12), 3)


# ------------------------------------------------------------------ 3. the compile mode that ran


def test_an_oom_under_cuda_graphs_switches_the_mode_and_the_state_keeps_it():
    # torch.compile is lazy: building the CUDA-graph model on CPU compiles nothing
    config = tiny_config(compile="reduce-overhead")
    compiled = CompiledModel(build_model(_model_config(config)), config)
    assert compiled.uses_cuda_graphs
    compiled.after_oom(accum_steps=2)
    assert compiled.mode == "default" and not compiled.uses_cuda_graphs
    assert compile_mode_for("max-autotune", 4) == "max-autotune-no-cudagraphs"
    assert compile_mode_for("reduce-overhead", 1) == "reduce-overhead"


def test_a_resumed_trial_runs_the_compile_mode_its_state_recorded():
    # what an OOM retry switched to is what resumes, with accumulation under the rules again
    assert resumed_compile_mode("reduce-overhead", "default", 2) == "default"
    assert resumed_compile_mode("max-autotune", "max-autotune-no-cudagraphs", 2) == \
        "max-autotune-no-cudagraphs"
    assert resumed_compile_mode("reduce-overhead", "reduce-overhead", 2) == "default"
    assert resumed_compile_mode("reduce-overhead", None, 1) == "reduce-overhead"
    # a saved mode this worker's checked config could not have switched to is not trusted
    # (a state from a GPU node resumed where the rules mapped the mode)
    assert resumed_compile_mode("default", "reduce-overhead", 1) == "default"
    states = []
    config = tiny_config(epochs=2, compile="default")
    eager = hooks(compile_backend="eager")
    train(config, report=lambda m, state, p: states.append(copy.deepcopy(state)), hooks=eager)
    assert states[0]["compile_mode"] == "default"
    resumed = train(config, resume_state=states[0], hooks=eager)
    assert resumed.metrics["compile_used"] == "default" and resumed.metrics["compiled_graphs"] >= 1


# ------------------------------------------------------------------ 4. the OOM snapshot


def test_the_snapshot_is_a_cpu_copy_that_shares_no_storage():
    model = torch.nn.Linear(3, 3)
    snapshot = cpu_copy({"model": model.state_dict(), "steps": [torch.ones(2)]})
    for name, tensor in model.state_dict().items():
        assert snapshot["model"][name].device.type == "cpu"
        assert snapshot["model"][name].data_ptr() != tensor.data_ptr()
        assert torch.equal(snapshot["model"][name], tensor)


@pytest.mark.usefixtures("worker_heap")
def test_two_ooms_in_one_epoch_with_adam_moments_restart_from_a_clean_snapshot():
    # Epoch 2 starts with Adam moments. Two OOMs in it (16 -> 8 -> 4): after the first
    # restore, a snapshot aliased by the optimizer would hold moments the 8-sample retry
    # updated, and the second restore would start from them.
    config = tiny_config(epochs=2, batch_size=16, dropout=0.0)
    states = []
    train(config, report=lambda m, s, p: states.append(copy.deepcopy(s)))
    after_one = states[0]
    recovered = train(config, resume_state=after_one, hooks=hooks(oom_above_batch=5))
    assert recovered.metrics["oom_retries"] == 2
    clean = train(config, resume_state=dict(after_one, micro_batch=4, accum_steps=4))
    assert recovered.metrics["val_loss"] == pytest.approx(clean.metrics["val_loss"], rel=1e-5)
    assert recovered.metrics["train_loss"] == pytest.approx(clean.metrics["train_loss"], rel=1e-5)


# ------------------------------------------------------------------ 5. RNG


@pytest.fixture
def deterministic(monkeypatch):
    """Deterministic CUDA kernels, as the reproducibility notes ask
    (https://pytorch.org/docs/stable/notes/randomness.html): cuBLAS's workspace config, cuDNN's
    deterministic algorithms without benchmarking, and torch.use_deterministic_algorithms."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_dropout_continues_identically_after_a_resume(request, device):
    # An interrupted run (the failure injected as epoch 3 starts) resumed from its state after
    # epoch 2 must continue as the same config run without interruption: the same OneCycleLR
    # schedule (same total steps), the generators dropout draws from (CPU, and CUDA's there).
    if device == "cuda":
        request.getfixturevalue("deterministic")
    config = tiny_config(epochs=3, device=device, dropout=0.3)
    whole = train(config)
    states = []
    failing = hooks(fail_at_epoch=3)
    with pytest.raises(InjectedFailure, match="at epoch 3"):
        train(config, report=lambda m, s, p: states.append(copy.deepcopy(s)), hooks=failing)
    assert [state["epoch"] for state in states] == [1, 2]
    resumed = train(config, resume_state=states[-1], hooks=failing)
    assert resumed.status == "ok" and resumed.metrics["resumed_from_epoch"] == 2
    assert [row["epoch"] for row in resumed.history] == [1, 2, 3]
    for key in ("train_loss", "val_loss", "lr", "val_mae"):
        assert resumed.history[-1][key] == whole.history[-1][key], key
    assert resumed.metrics["test_mae"] == whole.metrics["test_mae"]


def test_the_state_holds_the_generators_the_trial_draws_from():
    state = _trained_state()
    assert isinstance(state["torch_rng"], torch.Tensor)
    assert ("cuda_rng" in state) == torch.cuda.is_available()


# ------------------------------------------------------------------ 6. reused workers


def test_a_later_compiled_trial_in_the_same_worker_still_compiles():
    import torch._dynamo

    # Each trial's model is new code for Dynamo; past the recompile limit it silently runs
    # eager. Limit 1 here: the second trial hits it unless the trial starts from a reset.
    eager = hooks(compile_backend="eager")
    with torch._dynamo.config.patch(recompile_limit=1):
        first = train(tiny_config(epochs=1, compile="default"), hooks=eager)
        second = train(tiny_config(epochs=1, compile="default", cnn_widths="8,8,16"),
                       hooks=eager)
    torch._dynamo.reset()
    assert first.metrics["compiled_graphs"] >= 1
    assert second.metrics["compiled_graphs"] >= 1


@needs_cuda
def test_a_trial_does_not_inherit_the_previous_trials_cuda_cache():
    big = train(tiny_config(device="cuda", cnn_widths="64,128,256", eval_batch_size=512))
    small = train(tiny_config(device="cuda"))
    assert small.metrics["peak_mem_reserved_mb"] < big.metrics["peak_mem_reserved_mb"]


# ------------------------------------------------------------------ 7. native precisions


@pytest.mark.parametrize(("precision", "capability", "mapped"), [
    ("bf16", (7, 5), "fp16"),  # T4: bf16 emulated; fp16 tensor cores
    ("tf32", (7, 5), "fp32"),
    ("bf16", (6, 0), "fp32"),  # P100: no fp16 tensor cores either
])
def test_bf16_and_tf32_need_capability_8(precision, capability, mapped):
    config = tiny_config(precision=precision)
    assert find_conflicts(config, "cuda", (8, 0)) == []
    assert find_conflicts(config, "cuda") == []  # capability unknown (a driver without it)
    with pytest.raises(Exception, match="needs compute capability 8.0"):
        resolve_systems(config, device="cuda", capability=capability)
    resolved, notes = resolve_systems(config, device="cuda", capability=capability,
                                      resolve=True)
    assert resolved.systems.precision == mapped
    assert resolved.systems.precision_requested == precision
    assert "capability" in notes[0]


# ------------------------------------------------------------------ 8. the torch floor


def test_the_torch_floor_has_out_of_memory_error():
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    floor = next(re.search(r">=\s*([\d.]+)", dep).group(1) for dep in dependencies
                 if dep.startswith("torch"))
    assert tuple(int(part) for part in floor.split(".")[:2]) >= (2, 5)  # OutOfMemoryError


# ------------------------------------------------------------------ 9. evaluation memory


@pytest.mark.usefixtures("worker_heap")
def test_an_oom_in_evaluation_halves_the_evaluation_batch():
    clean = train(tiny_config(dropout=0.0))
    halved = train(tiny_config(dropout=0.0, batch_size=16), hooks=hooks(oom_above_batch=20))
    assert halved.metrics["eval_batch_used"] == 16  # 64 -> 32 -> 16
    assert halved.metrics["oom_retries"] == 0  # training at 16 never hit it
    assert halved.metrics["val_loss"] == pytest.approx(clean.metrics["val_loss"], rel=1e-5)
    assert halved.metrics["test_mae"] == pytest.approx(clean.metrics["test_mae"], rel=1e-5)


def test_training_and_evaluation_peaks_are_recorded_apart():
    # 512 evaluation samples at once through full-width CNN maps (~75 MiB a layer) vs
    # training micro-batches of 8: the evaluation peak is well above the training one.
    metrics = train(tiny_config(epochs=1, batch_size=8, cnn_widths="64,64,64",
                                synthetic_val=512, eval_batch_size=512)).metrics
    assert metrics["peak_mem_eval_mb"] > metrics["peak_mem_train_mb"] + 30, metrics
    assert metrics["peak_mem_mb"] == max(metrics["peak_mem_eval_mb"],
                                         metrics["peak_mem_train_mb"])


# ------------------------------------------------------------------ 10. auto-batch bounds


def test_auto_batch_keeps_enough_steps_per_epoch():
    assert auto_batch_limit(1280, 1) == 1280 // MIN_STEPS_PER_EPOCH == 80
    assert auto_batch_limit(1280, 4) == 20  # micro-batches of a 4-step accumulation
    assert auto_batch_limit(10, 1) == 1
    # nothing ran out of memory up to the limit: the limit decides, as a power of two
    assert choose_micro_batch({"batch": 64, "limited": True}, 80) == (
        64, "epoch length: at most 80 keeps >= 16 optimizer steps per epoch")
    # memory decides: 80% of what fitted, down to a power of two
    micro, why = choose_micro_batch({"batch": 150, "limited": False}, 1024)
    assert micro == 64 and why.startswith("memory: 150 fitted")
    assert choose_micro_batch({"batch": 0, "limited": False}, 80)[0] == 0


@pytest.mark.slow
def test_auto_batch_prints_and_records_its_choice_and_a_rerun_resumes(tmp_path, monkeypatch):
    # The command line in this process (run_here), its probe on the CPU with every batch above
    # 12 out of memory (auto_batch's probe=, which the command line leaves to the real one on
    # CUDA); the run imports auto_batch from preflight as it starts, and Ray ships the probe
    # to its worker, which imports tests.faulty from the repository as the driver does
    monkeypatch.setattr(preflight, "auto_batch",
                        functools.partial(preflight.auto_batch, probe=oom_probe(12)))

    def run_cli(*args):
        return run_here(*args, cwd=tmp_path)

    args = ["--space", "components", "--only", "baseline", "--seeds", "1", "--epochs", "1",
            "--auto-batch", "--set", "synthetic_train=512",
            "--set", "synthetic_val=32", "--set", "synthetic_test=32", "--set",
            "cnn_widths=8,16,16", "--set", "embed_dim=16", "--set", "num_heads=2",
            "--name", "auto", "--no-dashboard"]
    first = run_cli(*args)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    # 512 samples / 16 steps -> at most 32; 12 fitted one step; 80% of it -> 8
    assert "auto-batch: batch_size=8 (micro-batch 8 x 1), limited by memory: 12 fitted" \
        in first.stdout, first.stdout
    root = tmp_path / "ablation_results" / "auto"
    record = json.loads((root / "experiment.json").read_text())["auto_batch"]
    assert record["batch_size"] == 8 and record["largest_fitting_micro_batch"] == 12
    assert record["probe_limit"] == 32
    trials = __import__("pandas").read_parquet(root / "trials.parquet")
    assert trials["batch_size"].tolist() == [8]
    again = run_cli(*args)  # the same command: resumed, not another plan
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming it" in again.stdout and "auto-batch:" not in again.stdout


# ------------------------------------------------------------------ 12. hpo --resolve-conflicts


def test_hpo_samples_start_from_the_resolved_base(capsys):
    from tests.test_cli import in_process

    code, out, err = in_process(capsys, "--space", "hpo", "--resolve-conflicts", "--set",
                                "compile=reduce-overhead", "--dry-run")
    assert code == 0, err
    assert "  compile: default" in out.splitlines()  # mapped, and kept
    assert "  compile_requested: reduce-overhead" in out.splitlines()
    assert "warning:" in err and "using compile=default" in err


# ------------------------------------------------------------------ 18. time before a resume


def test_wall_time_includes_the_runs_before_a_resume():
    states = []
    train(tiny_config(epochs=2), report=lambda m, s, p: states.append(copy.deepcopy(s)))
    assert 0 < states[0]["wall_s"] < states[1]["wall_s"]
    started = time.monotonic()
    resumed = train(tiny_config(epochs=2), resume_state=dict(states[0], wall_s=1000.0))
    took = time.monotonic() - started
    # the runs before the resume, plus this one's own time (no more than the call took)
    assert 1000.0 < resumed.metrics["wall_s"] <= 1000.0 + took


# ------------------------------------------------------------------ 19. out-of-memory errors


@pytest.mark.parametrize(("error", "recoverable"), [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; ...)"), True),
    (RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"), True),  # older torch's type
    # allocations outside the caching allocator: the CUDA runtime's cudaErrorMemoryAllocation
    (torch.AcceleratorError("CUDA error: out of memory\nCUDA kernel errors might be "
                            "asynchronously reported at some other API call"), True),
    (RuntimeError("CUDA error: out of memory\nCompile with `TORCH_USE_CUDA_DSA` to enable "
                  "device-side assertions."), True),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
     True),
    (torch.AcceleratorError("CUDA error: device-side assert triggered"), False),  # sticky
    (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
    (ValueError("CUDA error: out of memory"), False),  # not an error torch raises
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x8 and 16x2)"), False),
])
def test_out_of_memory_errors_are_recognised_by_type_and_text(error, recoverable):
    assert is_out_of_memory(error) is recoverable


@pytest.mark.usefixtures("worker_heap")
def test_a_cuda_runtime_out_of_memory_error_halves_the_micro_batch():
    # raised where a batch's memory peaks, with the text and type of an allocation outside
    # the caching allocator (cuBLAS workspace, a kernel's own cudaMalloc)
    from ablations.trial.step import LoopHooks

    def runtime_oom(batch, where):
        if batch > 10:
            raise torch.AcceleratorError("CUDA error: out of memory\nCUDA kernel errors might be "
                                         "asynchronously reported at some other API call")

    # with a memory hook set, the CPU keeps the OOM snapshot a GPU keeps
    outcome = train(tiny_config(epochs=1, batch_size=16),
                    hooks=LoopHooks(on_memory_peak=runtime_oom))
    assert outcome.status == "ok"
    assert outcome.metrics["oom_retries"] == 1 and outcome.metrics["final_micro_batch"] == 8


def test_memory_is_released_in_order_after_an_oom(monkeypatch):
    # gradients, compiled code, gc, and only then the CUDA cache (a block still referenced
    # when the cache is emptied stays reserved)
    calls = []
    monkeypatch.setattr(torch.compiler, "reset", lambda: calls.append("compiler.reset"))
    monkeypatch.setattr(gc, "collect", lambda *args: calls.append("gc.collect") or 0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("cuda.empty_cache"))

    class Optimizer:
        def zero_grad(self, set_to_none=True):
            calls.append(f"zero_grad(set_to_none={set_to_none})")

    compiled = CompiledModel(torch.nn.Linear(2, 2), tiny_config(compile="default"),
                             backend="eager")
    release_memory(torch.device("cuda"), Optimizer(), compiled)
    assert calls == ["zero_grad(set_to_none=True)", "compiler.reset", "gc.collect",
                     "cuda.empty_cache"]
    calls.clear()
    release_memory(torch.device("cpu"), Optimizer(),
                   CompiledModel(torch.nn.Linear(2, 2), tiny_config()))  # compile off, CPU
    assert calls == ["zero_grad(set_to_none=True)", "gc.collect"]
    calls.clear()
    compiled.after_oom(accum_steps=2)  # already dropped: compiles again, no second reset
    assert calls == [] and compiled.forward is not compiled.model


@pytest.mark.usefixtures("worker_heap")
def test_a_trial_releases_memory_in_order_after_an_oom(monkeypatch):
    calls = []

    def recorded(name, function):
        def call(*args, **kwargs):
            if name != "zero_grad" or kwargs.get("set_to_none", True):
                calls.append(name)
            return function(*args, **kwargs)
        return call

    injected = hooks(oom_above_batch=10, compile_backend="eager")

    def oom(batch, where):
        try:
            injected.memory_peak(batch, where)
        except torch.OutOfMemoryError:
            calls.append("oom")
            raise

    monkeypatch.setattr(torch.compiler, "reset", recorded("compiler.reset", torch.compiler.reset))
    monkeypatch.setattr(gc, "collect", recorded("gc.collect", gc.collect))
    monkeypatch.setattr(torch.optim.Optimizer, "zero_grad",
                        recorded("zero_grad", torch.optim.Optimizer.zero_grad))
    outcome = train(tiny_config(epochs=1, batch_size=16, compile="default"),
                    hooks=dataclasses.replace(injected, on_memory_peak=oom))
    torch._dynamo.reset()
    assert outcome.metrics["oom_retries"] == 1
    after = calls[calls.index("oom") + 1:]
    assert after[:3] == ["zero_grad", "compiler.reset", "gc.collect"], calls


# ------------------------------------------------------------------ 20. peaks of what ran


HUGE_MB = 80_000.0  # about a whole GPU: what the allocator's peak says after a failed attempt


@pytest.mark.usefixtures("worker_heap")
@pytest.mark.parametrize(("oom_above", "eval_batch_size", "phase"), [
    (10, 8, "train"),  # 16 -> 8 in training
    (20, 64, "eval"),  # 64 -> 32 -> 16
])
def test_the_peak_memory_is_the_peak_of_the_attempt_that_succeeded(monkeypatch, oom_above,
                                                                  eval_batch_size, phase):
    # The peak reader is faked: from an out-of-memory error until the next reset of the peak
    # statistics, it reports a whole GPU, as torch.cuda.max_memory_allocated does after a
    # failed attempt.
    from ablations.trial import step

    window = {"failed": False}
    real_reset, real_peak = step.reset_peak_memory, step.peak_memory_mb
    injected = hooks(oom_above_batch=oom_above)

    def oom(batch, where):
        try:
            injected.memory_peak(batch, where)
        except torch.OutOfMemoryError:
            window["failed"] = True
            raise

    def reset(device):
        window["failed"] = False
        real_reset(device)

    monkeypatch.setattr(step, "reset_peak_memory", reset)
    monkeypatch.setattr(step, "peak_memory_mb",
                        lambda device: HUGE_MB if window["failed"] else real_peak(device))
    metrics = train(tiny_config(epochs=2, batch_size=16, eval_batch_size=eval_batch_size),
                    hooks=dataclasses.replace(injected, on_memory_peak=oom)).metrics
    if phase == "train":
        assert metrics["oom_retries"] == 1 and metrics["eval_batch_used"] == 8
    else:
        assert metrics["oom_retries"] == 0 and metrics["eval_batch_used"] == 16
    assert 10 < metrics[f"peak_mem_{phase}_mb"] < HUGE_MB, metrics
    assert metrics["peak_mem_mb"] < HUGE_MB


# ------------------------------------------------------------------ 21. the mode that ran


def _conv3d(**changes):
    from ablations.config import TrialConfig

    return TrialConfig.of(model="examples.conv3d:PLUGIN", width=4, depth=1, temporal_frames=2,
                          batch_size=16, synthetic_train=32, synthetic_val=16, synthetic_test=16,
                          eval_batch_size=8, **changes)


def _forced(monkeypatch):
    """The worker's safety rules let a CUDA-graph mode through on the CPU (they would refuse
    it: no CUDA graphs here), so that the OOM recovery's switch runs."""
    from ablations.trial import loop

    monkeypatch.setattr(loop, "resolve_systems", lambda config, **kwargs: (config, []))


@pytest.mark.usefixtures("worker_heap")
def test_after_an_oom_a_cuda_graph_trial_reports_the_mode_that_ran(monkeypatch):
    # torch.compile recorded, compiling with the eager backend (fast): what the trial built
    _forced(monkeypatch)
    built, real_compile = [], torch.compile

    def compile_(model, *, mode=None, dynamic=None, **kwargs):
        built.append(mode)
        return real_compile(model, backend="eager", dynamic=dynamic)

    monkeypatch.setattr(torch, "compile", compile_)
    config = _conv3d(epochs=2, compile="reduce-overhead")
    states = []
    outcome = train(config, report=lambda m, s, p: states.append(copy.deepcopy(s)),
                    hooks=hooks(oom_above_batch=10))
    torch._dynamo.reset()
    assert built == ["reduce-overhead", "default"]  # accumulation 2: no CUDA graphs
    assert outcome.metrics["oom_retries"] == 1 and outcome.metrics["final_accum_steps"] == 2
    assert outcome.metrics["compile_used"] == "default"  # trials.parquet's compile_used
    assert [state["compile_mode"] for state in states] == ["default", "default"]


@pytest.mark.slow
def test_after_an_oom_a_cuda_graph_trial_reports_the_mode_that_ran_with_inductor(monkeypatch):
    # the same with inductor itself (on a CPU, reduce-overhead compiles without CUDA graphs):
    # 10 s on 2 cores, a minute and a half with inductor's disk cache cold
    from ablations.config.safety import has_cpp_compiler

    if not has_cpp_compiler():
        pytest.skip("inductor on the CPU needs a C++ compiler")
    _forced(monkeypatch)
    outcome = train(_conv3d(epochs=1, compile="reduce-overhead"),
                    hooks=hooks(oom_above_batch=10))
    torch._dynamo.reset()
    assert outcome.status == "ok" and outcome.metrics["oom_retries"] == 1
    assert outcome.metrics["compile_used"] == "default"
    assert outcome.metrics["compiled_graphs"] >= 2  # compiled again after the recovery


# ------------------------------------------------------------------ 22. a fraction of a GPU


def test_a_fraction_of_a_gpu_caps_the_allocator(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda fraction, device=None: calls.append((fraction, device)))
    cuda = torch.device("cuda", 0)
    cap_gpu_memory(torch.device("cpu"), 0.5)  # no GPU: nothing
    assert calls == []
    cap_gpu_memory(cuda, 0.25)
    cap_gpu_memory(cuda, 1)  # a whole GPU: an earlier trial's cap lifted (torch wants a float)
    cap_gpu_memory(cuda, 2)  # two GPUs: the trial's device is a whole one
    assert calls == [(0.25, cuda), (1.0, cuda), (1.0, cuda)]
    assert all(isinstance(fraction, float) for fraction, _ in calls)
    for bad in (0, -0.5, float("nan"), float("inf"), "0.5", None, True):
        with pytest.raises(ValueError, match="GPU memory fraction must be a positive number"):
            cap_gpu_memory(torch.device("cpu"), bad)
    assert len(calls) == 3


@needs_cuda
def test_a_capped_process_runs_out_of_memory_past_its_fraction():
    device = torch.device("cuda", torch.cuda.current_device())
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.empty_cache()
    try:
        cap_gpu_memory(device, 0.1)
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(int(total * 0.2), dtype=torch.uint8, device=device)
    finally:
        cap_gpu_memory(device, 1.0)
        torch.cuda.empty_cache()
    assert torch.cuda.get_per_process_memory_fraction(device) == 1.0
