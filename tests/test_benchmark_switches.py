"""benchmarks/switches.py measures a cell's peak memory over its warm-up and its timed steps: a
CUDA graph allocates its pool when captured (the warm-up) and nothing when replayed, so a window
that starts after the warm-up reports CUDA-graph cells falsely small (pytorch #121932). One tiny
cell on the CPU, the peak window's start recorded."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_peak_window_opens_before_the_first_warm_up_step(monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import switches
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    import ablations.trial.step as step

    events: list[str] = []
    real_loss = step.loss_fn
    monkeypatch.setattr(step, "reset_peak_memory", lambda device: events.append("reset"))
    monkeypatch.setattr(step, "loss_fn", lambda *a: (events.append("step"), real_loss(*a))[1])
    cell = {"device": "cpu", "compile": "off", "precision": "fp32", "checkpointing": False,
            "batch": 4, "frames": 2, "size": 16, "warmup": 2, "steps": 2, "threads": 1}
    result = switches.run_cell(cell)
    assert result["samples_per_s"] > 0
    steps = events.count("step")
    assert steps == 4 and events.index("reset") < events.index("step")
    assert events.count("reset") == 1  # and no second window after the warm-up
