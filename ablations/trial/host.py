"""The machine a trial runs on: its CPU's name (the metrics and the provenance record it) and
what ``run_ablations.py diagnose`` reports (devices, memory, what this torch supports, a
suggested command). torch and the safety rules are imported by :func:`diagnose` only: the
provenance record needs the CPU's name without them."""

from __future__ import annotations

import os
import platform
from typing import Any, Optional

from ablations.config.values import command


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def diagnose() -> dict[str, Any]:
    """Devices, memory, what this torch supports here, and a suggested configuration."""
    import torch

    from ablations.config.safety import (
        NATIVE_BF16_TF32_CAPABILITY,
        cpu_autocast_supported,
        cpu_fused_adamw_supported,
        has_cpp_compiler,
    )

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_cores": os.cpu_count(),
        "ram_total_gib": ram_gib("MemTotal"),
        "ram_available_gib": ram_gib("MemAvailable"),
        "cpu_bf16_autocast": cpu_autocast_supported("bfloat16"),
        "cpu_fp16_autocast": cpu_autocast_supported("float16"),
        "cpu_fused_adamw": cpu_fused_adamw_supported(),
        "cpp_compiler_for_inductor": has_cpp_compiler(),
        "gpus": [],
    }
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            props = torch.cuda.get_device_properties(index)
            info["gpus"].append({
                "index": index,
                "name": props.name,
                "free_gib": round(free / 2**30, 2),
                "total_gib": round(total / 2**30, 2),
                "capability": f"{props.major}.{props.minor}",
                # native from 8.0 (ablations/config/safety.py); is_bf16_supported() is also True
                # on a T4 (7.5), where bf16 is emulated and slow
                "bf16": (props.major, props.minor) >= NATIVE_BF16_TF32_CAPABILITY,
                "bf16_emulated": (props.major, props.minor) < NATIVE_BF16_TF32_CAPABILITY
                and bf16_supported_on(index),
                "tf32": (props.major, props.minor) >= NATIVE_BF16_TF32_CAPABILITY,
            })
    info["suggestion"] = suggest(info)
    return info


def bf16_supported_on(index: int) -> bool:
    """``is_bf16_supported`` asks about the current device: ask about GPU ``index``."""
    import torch

    with torch.cuda.device(index):
        return torch.cuda.is_bf16_supported(including_emulation=True)


def suggest(info: dict[str, Any]) -> str:
    """A command line for this machine: a preset by free GPU memory, or CPU trials per core."""
    gpus = info["gpus"]
    if gpus:
        free = min(gpu["free_gib"] for gpu in gpus)
        preset = "full_optimized" if free >= 12 else "full_stable" if free >= 6 \
            else "memory_optimized"
        flags = ["--space", "components", "--config", preset, "--gpus-per-trial", "1",
                 "--auto-batch", *(["--set", "precision=bf16"] if all(g["bf16"] for g in gpus)
                                   else [])]
        return (f"{command(*flags)}   "
                f"# {len(gpus)} GPU(s), {free:.1f} GiB free on the fullest")
    cores = info["cpu_cores"] or 1
    flags = ["--space", "components", "--cpus-per-trial", "1", "--max-concurrent", str(cores)]
    return (f"{command(*flags)}   # CPU only: one single-threaded trial per core, "
            "no compile (its compile time outweighs the gain on short CPU trials)")


def ram_gib(key: str) -> Optional[float]:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None
