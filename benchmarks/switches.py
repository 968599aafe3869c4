#!/usr/bin/env python3
"""Benchmark the training-step switches: checkpointing x compile mode x precision.

    python benchmarks/switches.py                      # the available device, markdown table
    python benchmarks/switches.py --size 64 --steps 30 --modes off,default,reduce-overhead

Runs the full model (CNN 64/128/256, spatial + temporal attention, Gaussian head) at batch 20
and 5 frames, one training step = forward, backward, AdamW step, on random inputs. Each cell
runs in its own process (clean peak memory and compile caches): warm-up steps first (the first
compiles; `compile_s` is its time above a steady step), then `--steps` timed steps between two
synchronisations, no `.item()` inside. Memory: on GPU, CUDA max allocated / reserved over the
warm-up and the timed steps (a CUDA graph's pool is allocated at capture, in the warm-up); on
CPU, the process's peak RSS (dominated by the ~600 MiB of libraries, so it hides
activations) and the MiB autograd saves for backward in one eager forward (what checkpointing
trades for recomputation). The memory ratio uses peak allocated on GPU, saved activations on
CPU. Cells the rules refuse (CUDA graphs with checkpointing or off CUDA, tf32 off CUDA) are
listed as skipped, not run, unless `--run-conflicts` (to reproduce a crash on a GPU).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_cell(cell: dict) -> dict:
    """One cell, in this process. Returns the measurements."""
    import torch

    from ablations.config import TrialConfig
    from ablations.trial.step import (
        CompiledModel,
        autocast_for,
        loss_fn,
        make_optimizer,
        peak_memory_mb,
        reset_peak_memory,
        set_float32_precision,
    )
    from ablations.model.model import ModelConfig, build_model

    torch.set_num_threads(cell["threads"])
    torch.manual_seed(0)
    device = torch.device(cell["device"])
    config = TrialConfig.of(compile=cell["compile"], precision=cell["precision"],
                         gradient_checkpointing=cell["checkpointing"], device=device.type,
                         batch_size=cell["batch"], temporal_frames=cell["frames"])
    set_float32_precision(config.systems.precision, device)
    model = build_model(ModelConfig(
        in_channels=2, image_height=cell["size"], image_width=cell["size"], num_scalars=3,
        temporal_frames=cell["frames"], gradient_checkpointing=cell["checkpointing"],
    )).to(device)
    optimizer, _ = make_optimizer(model, config, device)
    scaler = torch.amp.GradScaler(device.type, enabled=config.systems.precision == "fp16")
    compiled = CompiledModel(model, config)
    batch, frames, size = cell["batch"], cell["frames"], cell["size"]
    x = torch.randn(batch, frames, 2, size, size, device=device)
    s = torch.randn(batch, 3, device=device)
    y = torch.randn(batch, device=device)

    def step() -> None:
        compiled.mark_step()
        with autocast_for(config.systems.precision, device.type):
            mean, variance = compiled.forward(x, s)
        loss = loss_fn(mean.float(), variance.float(), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    model.train()
    saved_mb = saved_activation_mb(model, x, s, config.systems.precision, device)
    # The peak covers the warm-up and the timed steps: a CUDA graph allocates its memory pool
    # when it is captured (in the warm-up) and nothing when replayed, so a window that starts
    # after the warm-up shows a CUDA-graph cell falsely small (pytorch #121932).
    reset_peak_memory(device)
    warm = []
    for _ in range(cell["warmup"]):
        started = time.perf_counter()
        step()
        sync()
        warm.append(time.perf_counter() - started)
    steady_warm = statistics.median(warm[1:]) if len(warm) > 1 else 0.0
    sync()
    started = time.perf_counter()
    for _ in range(cell["steps"]):
        step()
    sync()
    elapsed = time.perf_counter() - started
    peak = peak_memory_mb(device)
    return {
        "samples_per_s": cell["steps"] * batch / elapsed,
        "step_ms": 1000 * elapsed / cell["steps"],
        "compile_s": max(0.0, warm[0] - steady_warm),
        "peak_mb": peak,
        "peak_reserved_mb": torch.cuda.max_memory_reserved() / 2**20
        if device.type == "cuda" else None,
        "saved_mb": saved_mb,
    }


def saved_activation_mb(model, x, s, precision: str, device) -> float:
    """MiB of tensors autograd saves for backward in one eager forward: the activation memory
    that checkpointing trades for recomputation (inputs of checkpointed blocks only)."""
    import torch

    from ablations.trial.step import autocast_for

    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with autocast_for(precision, device.type):
            mean, variance = model(x, s)
    del mean, variance
    model.zero_grad(set_to_none=True)
    return total / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--frames", type=int, default=5)
    parser.add_argument("--size", type=int, default=32, help="H = W of the frames")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per cell")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (the first compiles)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--modes", default="off,default,reduce-overhead,max-autotune-no-cudagraphs")
    parser.add_argument("--precisions", default="fp32,tf32,bf16,fp16")
    parser.add_argument("--run-conflicts", action="store_true",
                        help="run cells the rules refuse (to reproduce their failure)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--cell-timeout", type=float, default=600,
                        help="seconds a cell may take (compile included) before it is reported")
    parser.add_argument("--cell", default=None, help=argparse.SUPPRESS)  # internal
    args = parser.parse_args()
    if args.cell:
        print("RESULT " + json.dumps(run_cell(json.loads(args.cell))), flush=True)
        return 0

    import torch

    from ablations.config import TrialConfig
    from ablations.config.safety import local_cuda_capability, skip_reason

    device = args.device if args.device != "auto" else \
        ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(0) if device == "cuda" else _cpu_name()
    rows = []
    cells = itertools.product((False, True), args.modes.split(","), args.precisions.split(","))
    for checkpointing, mode, precision in cells:
        cell = {"checkpointing": checkpointing, "compile": mode, "precision": precision,
                "device": device, "batch": args.batch, "frames": args.frames, "size": args.size,
                "steps": args.steps, "warmup": args.warmup, "threads": args.threads}
        config = TrialConfig.of(compile=mode, precision=precision, device=device,
                                gradient_checkpointing=checkpointing)
        reason = skip_reason(config, device, local_cuda_capability())
        row = {k: cell[k] for k in ("checkpointing", "compile", "precision")}
        if reason and not args.run_conflicts:
            rows.append({**row, "note": f"skipped: {reason}"})
            print(f"# skip {row}: {reason}", file=sys.stderr, flush=True)
            continue
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        started = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, __file__, "--cell", json.dumps(cell)],
                                  capture_output=True, text=True, env=env,
                                  timeout=args.cell_timeout)
        except subprocess.TimeoutExpired:
            rows.append({**row, "note": f"error: over --cell-timeout {args.cell_timeout:g}s"})
            continue
        result_lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode or not result_lines:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:160]
            rows.append({**row, "note": f"error: {tail}"})
        else:
            rows.append({**row, **json.loads(result_lines[-1][7:]), "note": reason or ""})
        print(f"# {row} done in {time.perf_counter() - started:.0f}s", file=sys.stderr,
              flush=True)
    print(render(rows, device, name, args))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": name, "rows": rows}, indent=2))
    return 0


def render(rows: list[dict], device: str, name: str, args: argparse.Namespace) -> str:
    base = next((r for r in rows if not r["checkpointing"] and r["compile"] == "off"
                 and r["precision"] == "fp32" and "samples_per_s" in r), None)
    memory = "peak alloc MiB" if device == "cuda" else "peak RSS MiB"
    extra = "reserved MiB" if device == "cuda" else "saved activations MiB"
    lines = [
        f"Device: {name} ({device}); torch {_torch_version()}; full model (CNN 64/128/256), "
        f"batch {args.batch}, {args.frames} frames of 2x{args.size}x{args.size}, "
        f"{args.steps} timed steps after {args.warmup} warm-up, {args.threads} threads.",
        "",
        f"| checkpointing | compile | precision | samples/s | x eager fp32 | step ms | "
        f"compile s | {memory} | {extra} | memory x eager fp32 | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "samples_per_s" not in r:
            lines.append(f"| {'on' if r['checkpointing'] else 'off'} | {r['compile']} | "
                         f"{r['precision']} | | | | | | | | {r['note']} |")
            continue
        mem_key = "peak_mb" if device == "cuda" else "saved_mb"
        speed = f"{r['samples_per_s'] / base['samples_per_s']:.2f}" if base else ""
        mem_ratio = f"{r[mem_key] / base[mem_key]:.2f}" if base and base[mem_key] else ""
        second = r["peak_reserved_mb"] if device == "cuda" else r["saved_mb"]
        lines.append(
            f"| {'on' if r['checkpointing'] else 'off'} | {r['compile']} | {r['precision']} | "
            f"{r['samples_per_s']:.1f} | {speed} | {r['step_ms']:.0f} | {r['compile_s']:.1f} | "
            f"{r['peak_mb']:.0f} | {second:.0f} | {mem_ratio} | {r['note']} |")
    return "\n".join(lines)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f", {os.cpu_count()} cores"
    except OSError:
        pass
    return "CPU"


def _torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    sys.exit(main())
