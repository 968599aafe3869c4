"""Fault injection for the tests of the failure paths, out of reach of a trial's configuration.

No key of a config file, ``--set`` or a space reaches it: a test names a JSON file in the
environment variable ``ABLATIONS_TEST_FAULTS`` (set before Ray starts, so that Ray's workers
inherit it) and writes to that file, for a trial's ablation name or ``"*"`` (every trial), the
faults below, e.g. ``{"broken": {"fail_at_epoch": 2}}``. The file is read where a fault can
strike (a trial's start, each batch an OOM can be injected into), so a test can change it
while one local Ray serves several tests. Without the variable or the file, or without an entry
for the trial, nothing is injected.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

ENV = "ABLATIONS_TEST_FAULTS"


@dataclass(frozen=True)
class Faults:
    """What a test injects into one trial."""

    # Raise at the start of this epoch (1-based, 0 = never), only in a run that did not resume
    # from a checkpoint, so that a retry gets past it.
    fail_at_epoch: int = 0
    # Out of memory on CPU: raise torch.OutOfMemoryError for micro-batches above this
    # (0 = never), in training, evaluation and the auto-batch probe.
    oom_above_batch: int = 0
    # torch.compile's backend: "eager" or "aot_eager" compile without a C++ compiler and in a
    # fraction of inductor's time (tests of the compile paths on CPU).
    compile_backend: str = "inductor"


NONE = Faults()


def faults_for(ablation: str) -> Faults:
    """The faults a test asked for the trial of ``ablation`` (:data:`NONE` outside tests)."""
    path = os.environ.get(ENV, "")
    if not path or not Path(path).is_file():
        return NONE
    table = json.loads(Path(path).read_text() or "{}")
    return Faults(**table.get(ablation, table.get("*", {})))
