"""The runner's modules of an earlier release, importable while a run of then restores:
Tune's saved state (tuner.pkl, the searcher's) names the callbacks and functions a run was
started with by their modules."""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Iterator

# Modules of an earlier release -> where their code is: Tune's saved state (tuner.pkl, the
# searcher's) names the callbacks and functions a run was started with by their modules, so a
# run stopped then restores with these names importable (moved_modules). The earlier
# ``provenance`` and ``planning`` modules are not among them: packages have those names, and
# neither module's code is in Tune's state
MOVED_MODULES = {
    f"ablations.experiment.{old}": f"ablations.experiment.{new}" for old, new in {
        "progress": "execution.progress", "fail_fast": "execution.fail_fast",
        "trainable": "execution.trainable", "reported": "execution.reported",
        "tables": "execution.tables", "interrupt": "execution.interrupt",
        "tune_console": "execution.tune_console", "tune_state": "execution.tune_state",
        "tune_usage": "execution.tune_usage", "cluster": "execution.cluster",
        "runner": "execution.runner", "designs.tune_setup": "execution.tune_setup",
        "options": "core.options", "events": "core.events", "request": "core.request",
        "groups": "core.groups", "plans": "core.plans", "designs.options": "core.design_options",
        "trial_store": "provenance.trial_store",
        "own_code_files": "provenance.own_code_files",
        "data_fingerprint": "provenance.data_fingerprint",
        "experiment_record": "provenance.experiment_record",
        "designs.hpo": "designs.search", "designs.seeds_auto": "designs.rounds",
        "designs.grid": "designs.table"}.items()}


@contextlib.contextmanager
def moved_modules() -> Iterator[None]:
    """Each of :data:`MOVED_MODULES`' earlier names importable as the module its code is in
    now, while a run restores; the names leave ``sys.modules`` again after."""
    added = [old for old in MOVED_MODULES if old not in sys.modules]
    for old in added:
        sys.modules[old] = importlib.import_module(MOVED_MODULES[old])
    try:
        yield
    finally:
        for old in added:
            sys.modules.pop(old, None)
