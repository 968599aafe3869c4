"""What is safe to combine: checkpointing, torch.compile modes, precision, accumulation, device.

One function, :func:`resolve_systems`, applies the rules (``docs/training-rules.md``, with
their sources) to a trial config before anything runs: a conflicting combination is refused with
a message naming the fix, or, with ``resolve=True`` (``--resolve-conflicts``), mapped to the
nearest safe setting with a note. The setting actually used is what the trial config then holds
(``compile``, ``precision``); what was asked for is kept in ``compile_requested`` /
``precision_requested`` (the same values unless mapped).
The training loop calls it again with the GPU it got (strictly unless the trial config says
``resolve_conflicts``), so that no path can reach a CUDA-graph crash.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import shutil
from typing import Optional

from ablations.config.sections import CUDA_GRAPH_MODES
from ablations.config.trial import TrialConfig
from ablations.config.values import ConfigError, arg

RESOLVE = arg("resolve_conflicts")  # the argument that maps an unsafe combination instead

# The nearest mode without CUDA graphs.
NO_CUDA_GRAPH_MODE = {"reduce-overhead": "default", "max-autotune": "max-autotune-no-cudagraphs"}
# Tune runs each trial in a new thread. Before torch 2.13, Inductor's CUDA-graph trees kept their
# containers in thread-local state set up only in the thread that imported them and asserted it
# existed (torch._inductor.cudagraph_trees.get_obj; pytorch #123177): the second CUDA-graph trial
# in a reused worker failed. torch 2.13 sets the state up lazily in any thread.
CUDA_GRAPH_TREES_IN_ANY_THREAD = (2, 13)


@functools.lru_cache(maxsize=None)
def installed_torch() -> str:
    """The installed torch's version, e.g. '2.13.0+cpu', read from its distribution's metadata:
    the driver plans and checks trials without importing torch (seconds of CPU); torch's own
    ``__version__`` where no distribution is installed (a source tree on the path)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        import torch

        return torch.__version__


def cpu_only_torch() -> bool:
    """Whether the installed torch is a CPU-only build (PyTorch's CPU wheels: '2.13.0+cpu'):
    then there is no CUDA, known without importing torch."""
    return installed_torch().endswith("+cpu")


def torch_release(version: Optional[str] = None) -> tuple[int, int]:
    """(major, minor) of ``version`` (default: the installed torch), e.g. (2, 13) for
    '2.13.0+cpu'."""
    major, minor = (version or installed_torch()).split("+")[0].split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


@dataclasses.dataclass(frozen=True)
class Conflict:
    """One unsafe combination: what is wrong, the fix, and the safe replacement (if any)."""

    problem: str
    fix: str
    replacement: Optional[dict[str, str]]  # fields to set with resolve=True; None: refuse only


@functools.lru_cache(maxsize=None)
def cpu_autocast_supported(dtype_name: str) -> bool:
    """Whether autocast on CPU runs a conv and a matmul in ``dtype`` here (checked, not assumed)."""
    import torch

    dtype = getattr(torch, dtype_name)
    try:
        with torch.autocast("cpu", dtype=dtype):
            x = torch.randn(2, 3, 8, 8)
            conv = torch.nn.functional.conv2d(x, torch.randn(4, 3, 3, 3), padding=1)
            out = conv.flatten(1) @ torch.randn(4 * 64, 2)
        out.float().sum().item()
        return True
    except (RuntimeError, TypeError):
        return False


def has_cpp_compiler() -> bool:
    """Inductor (torch.compile's backend) on CPU compiles C++."""
    return any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))


# bf16 and TF32 run on tensor cores from compute capability 8.0 (Ampere). Below it,
# torch.cuda.is_bf16_supported() can still be True (a T4, 7.5: bf16 emulated, far slower than
# fp16) and allow_tf32 is a no-op; fp16 with a GradScaler is native from 7.0 (Volta).
NATIVE_BF16_TF32_CAPABILITY = (8, 0)
NATIVE_FP16_CAPABILITY = (7, 0)


def find_conflicts(config: TrialConfig, device: str,
                   capability: Optional[tuple[int, int]] = None) -> list[Conflict]:
    """Every unsafe combination in ``config`` for ``device`` ('cpu' or 'cuda'); with the GPU's
    compute ``capability`` (None: not known here, e.g. a driver without the trials' GPU), also
    the precisions that GPU has no native support for."""
    systems = config.systems
    found = []
    if device == "cuda" and capability is not None \
            and tuple(capability) < NATIVE_BF16_TF32_CAPABILITY \
            and systems.precision in ("bf16", "tf32"):
        native_fp16 = tuple(capability) >= NATIVE_FP16_CAPABILITY
        safe = "fp16" if systems.precision == "bf16" and native_fp16 else "fp32"
        found.append(Conflict(
            problem=f"precision={systems.precision} needs compute capability 8.0 (Ampere) for "
                    f"native support; this GPU has {capability[0]}.{capability[1]}"
                    + (" (bf16 would be emulated, slowly)" if systems.precision == "bf16" else
                       " (TF32 would silently be fp32)"),
            fix=f"use precision={safe} (or {RESOLVE} to map it)",
            replacement={"precision": safe},
        ))
    if systems.compile in CUDA_GRAPH_MODES:
        reasons = []
        if device != "cuda":
            reasons.append(f"device {device} has no CUDA graphs")
        if systems.gradient_checkpointing:
            reasons.append("gradient_checkpointing breaks under CUDA graphs (pytorch #154306)")
        if config.optim.grad_accum_steps > 1:
            reasons.append("gradient accumulation breaks under CUDA graphs (pytorch #169545)")
        if torch_release() < CUDA_GRAPH_TREES_IN_ANY_THREAD:
            reasons.append(f"torch {installed_torch()} fails from the second such trial in a "
                           "reused worker (pytorch #123177; fixed in torch 2.13)")
        if reasons:
            safe = NO_CUDA_GRAPH_MODE[systems.compile]
            found.append(Conflict(
                problem=f"compile={systems.compile} uses CUDA graphs but " + "; ".join(reasons),
                fix=f"use compile={safe} (or {RESOLVE} to map it)",
                replacement={"compile": safe},
            ))
    if systems.precision == "tf32" and device != "cuda":
        found.append(Conflict(
            problem=f"precision=tf32 is a CUDA tensor-core mode; {device} has none",
            fix=f"use precision=fp32 (or {RESOLVE} to map it)",
            replacement={"precision": "fp32"},
        ))
    if systems.precision == "fp16" and device == "cpu":
        # It runs, but without fast kernels: 14x slower than fp32 in benchmarks/switches.py.
        found.append(Conflict(
            problem="precision=fp16 on CPU has no fast kernels (measured 14x slower than fp32, "
                    "docs/benchmarks.md)",
            fix=f"use precision=bf16 (or {RESOLVE} to map it)",
            replacement={"precision": "bf16"},
        ))
    if systems.precision == "bf16" and device == "cpu" and not cpu_autocast_supported("bfloat16"):
        found.append(Conflict(
            problem="precision=bf16: autocast on this CPU does not support it",
            fix=f"use precision=fp32 (or {RESOLVE} to map it)",
            replacement={"precision": "fp32"},
        ))
    if systems.compile != "off" and device == "cpu" and not has_cpp_compiler():
        found.append(Conflict(
            problem=f"compile={systems.compile} on CPU needs a C++ compiler (inductor generates "
                    "C++); none found",
            fix=f"install g++ or use compile=off (or {RESOLVE} to map it)",
            replacement={"compile": "off"},
        ))
    if systems.optimizer_impl == "fused" and device == "cpu" and not cpu_fused_adamw_supported():
        found.append(Conflict(
            problem="optimizer_impl=fused: this torch has no fused AdamW on CPU",
            fix=f"use optimizer_impl=foreach (or {RESOLVE})",
            replacement={"optimizer_impl": "foreach"},
        ))
    return found


def local_cuda_capability() -> Optional[tuple[int, int]]:
    """The lowest compute capability among this machine's GPUs; None without CUDA (at once,
    without importing torch, for a CPU-only build)."""
    if cpu_only_torch():
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return min(tuple(torch.cuda.get_device_capability(i))  # type: ignore[misc]
               for i in range(torch.cuda.device_count()))


@functools.lru_cache(maxsize=None)
def cpu_fused_adamw_supported() -> bool:
    import torch

    try:
        param = torch.nn.Parameter(torch.zeros(2))
        param.grad = torch.ones(2)
        torch.optim.AdamW([param], fused=True).step()
        return True
    except (RuntimeError, TypeError, ValueError):
        return False


def resolve_systems(config: TrialConfig, *, device: str, resolve: bool = False,
                    capability: Optional[tuple[int, int]] = None
                    ) -> tuple[TrialConfig, list[str]]:
    """Check ``config`` for ``device``; return the config to run and notes on what was mapped.

    Raises:
        ConfigError: for the first conflict when ``resolve`` is False, naming the fix.
    """
    notes: list[str] = []
    requested = {
        "compile_requested": config.systems.compile_requested or config.systems.compile,
        "precision_requested": config.systems.precision_requested or config.systems.precision,
    }
    for _ in range(4):  # a replacement can expose another conflict; the chain is short
        conflicts = find_conflicts(config, device, capability)
        if not conflicts:
            break
        first = conflicts[0]
        if not resolve or first.replacement is None:
            raise ConfigError(f"{first.problem}; {first.fix}")
        notes.append(f"{first.problem}: using "
                     + ", ".join(f"{k}={v}" for k, v in first.replacement.items()))
        config = config.replace(**first.replacement)
    return config.replace(**requested), notes


def skip_reason(config: TrialConfig, device: str,
                capability: Optional[tuple[int, int]] = None) -> Optional[str]:
    """Why a sweep cell cannot run on ``device`` (its first conflict), or None."""
    conflicts = find_conflicts(config, device, capability)
    return conflicts[0].problem if conflicts else None
