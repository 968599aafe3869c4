"""Named presets: the configurations users run today. Also shipped as YAML in configs/."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # Full widths, checkpointing, compile(default), batch 20: the users' T4 setting.
    "full_optimized": {
        "cnn_widths": "64,128,256",
        "gradient_checkpointing": True,
        "compile": "default",
        "batch_size": 20,
    },
    # Full widths, checkpointing, no compile, batch 16.
    "full_stable": {
        "cnn_widths": "64,128,256",
        "gradient_checkpointing": True,
        "compile": "off",
        "batch_size": 16,
    },
    # Reduced widths, no checkpointing, no compile, batch 16.
    "memory_optimized": {
        "cnn_widths": "32,64,128",
        "gradient_checkpointing": False,
        "compile": "off",
        "batch_size": 16,
    },
}
