"""The parts of a Tune run that need no Ray: the reports a trial sends and reads back, the
memory a reused worker returns after a trial, the results' schema and the components' table
(tests/test_tune.py runs them on a real Ray)."""

from __future__ import annotations

import gc
import re
import weakref

import pytest
from pathlib import Path

import pandas as pd

from ablations.results.io.schema import (
    EPOCH_COLUMNS,
    PREDICTION_COLUMNS,
    TRIAL_COLUMNS,
    column_names,
)
from ablations.search_spaces import COMPONENT_ABLATIONS
from tests.conftest import REPO


def test_packed_results_round_trip():
    import numpy as np

    from ablations.experiment.execution.reported import PACKED, packed, unpacked

    metrics = {"epoch": 3, "val_mae": 0.5, "train_loss": 0.1, "status": "ok", "device": "cpu",
               "test_mae": np.float32(0.25), "test_nll": float("nan"), "oom_retries": 0,
               "peak_mem_mb": float("inf"), "flag": True}
    sent = packed(metrics)
    assert set(sent) == {"epoch", "val_mae", "train_loss", "status", "device", PACKED}
    back = unpacked(sent)
    assert set(back) == set(metrics) and back["test_mae"] == 0.25 and back["flag"] is True
    assert np.isnan(back["test_nll"]) and back["peak_mem_mb"] == float("inf")
    assert unpacked({"epoch": 1, "test_mae": 0.3}) == {"epoch": 1, "test_mae": 0.3}  # old results
    assert unpacked(None) == {}


def test_tunes_table_of_reports_reads_back_unpacked():
    """The epochs' fallback (a trial that saved no history file) reads Tune's table of
    reports: each row's packed per-epoch figures come back as columns."""
    from ablations.experiment.execution.reported import packed, unpacked_frame

    reports = [packed({"epoch": e, "val_mae": 1.0 / e, "train_samples_per_s": 100.0 * e,
                       "micro_batch": 16}) for e in (1, 2)]
    frame = unpacked_frame(pd.DataFrame(reports))
    assert frame["train_samples_per_s"].tolist() == [100.0, 200.0]
    assert frame["micro_batch"].tolist() == [16, 16] and "packed_json" not in frame
    old = pd.DataFrame([{"epoch": 1, "train_samples_per_s": 5.0}])
    assert unpacked_frame(old) is old and unpacked_frame(None) is None


def test_a_trial_resumed_with_verbose_reads_back_both_kinds_of_report():
    """A run started without --verbose (reports packed) and resumed with it (reports as they
    are), or the reverse: one trial's table of reports holds both, and reads back whole."""
    from ablations.experiment.execution.reported import packed, unpacked_frame

    first = packed({"epoch": 1, "val_mae": 1.0, "train_samples_per_s": 100.0})
    later = {"epoch": 2, "val_mae": 0.5, "train_samples_per_s": 200.0}
    for reports in ([first, later], [later, first]):
        frame = unpacked_frame(pd.DataFrame(reports)).sort_values("epoch")
        assert frame["train_samples_per_s"].tolist() == [100.0, 200.0], frame
        assert frame["val_mae"].tolist() == [1.0, 0.5] and "packed_json" not in frame


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_after_a_trial_its_survivors_are_frozen_and_the_next_trials_cycles_still_collected():
    """return_memory_after_trial freezes what survived (the next collection skips the worker's
    imports), still collects a later trial's cycles, and freezes nothing after a failure.
    The test process's own freeze (tests/conftest.py: the collection's imports) stays in
    place, so that each collection here walks only what came after it, as do the later
    tests' collections."""
    from ablations.experiment.execution.trainable import return_memory_after_trial

    frozen = gc.get_freeze_count()
    survivor = [object()]
    return_memory_after_trial()
    assert gc.get_freeze_count() > frozen
    assert not any(obj is survivor for obj in gc.get_objects())  # not scanned again
    left = weakref.ref(_Cycle())  # garbage only the collector can free
    return_memory_after_trial()
    assert left() is None
    frozen, later = gc.get_freeze_count(), [object()]
    return_memory_after_trial(freeze=False)
    assert gc.get_freeze_count() == frozen
    assert any(obj is later for obj in gc.get_objects())  # still scanned


def test_results_readme_is_the_rendered_schema():
    from ablations.results.io.schema import render_markdown

    readme = (REPO / "results" / "README.md").read_text()
    assert readme == render_markdown(), "run: python -m ablations.results.io.schema"
    documented = set(re.findall(r"^\| `([a-z0-9_]+)`", readme, flags=re.MULTILINE))
    for columns in (TRIAL_COLUMNS, EPOCH_COLUMNS, PREDICTION_COLUMNS):
        assert set(column_names(columns)) <= documented


def test_components_table_has_the_baseline_and_eight_ablations():
    assert list(COMPONENT_ABLATIONS) == [
        "baseline", "no_temporal_attention", "no_spatial_attention", "no_attention",
        "no_scalars", "no_images", "single_frame", "reduced_width", "point_estimate",
    ]
    assert COMPONENT_ABLATIONS["baseline"] == {}


def test_a_trial_runs_in_the_drivers_folder_first_on_its_path_where_it_is_there(tmp_path,
                                                                                monkeypatch):
    import sys

    from ablations.experiment.execution.trainable import trial_cwd

    monkeypatch.setattr(sys, "path", [str(REPO), str(tmp_path), "/elsewhere"])
    monkeypatch.setenv("TUNE_ORIG_WORKING_DIR", "/where/the/worker/started")
    assert trial_cwd(str(tmp_path)) == tmp_path
    assert sys.path == [str(tmp_path), str(REPO), "/elsewhere"]  # first, and once
    assert trial_cwd(str(tmp_path)) == tmp_path and sys.path.count(str(tmp_path)) == 1
    # not given (a cluster: the job's working_dir), or not on this node: where Tune says
    for folder in (None, str(tmp_path / "not-on-this-node")):
        assert trial_cwd(folder) == Path("/where/the/worker/started")
    assert sys.path == [str(tmp_path), str(REPO), "/elsewhere"]


def test_tunes_state_naming_a_module_of_an_earlier_release_restores():
    """A callback's function pickled under its module's earlier name (protocol 0 spells the
    module as text) loads while a restore runs, and only then."""
    import functools
    import pickle
    import sys

    from ablations.experiment.designs.search import publish_optuna
    from ablations.experiment.execution.moved_modules import MOVED_MODULES, moved_modules
    from ablations.experiment.execution.trainable import trial_name

    saved = pickle.dumps([trial_name, functools.partial(publish_optuna, "root", "name")], 0)
    for new, old in (("execution.trainable", "trainable"), ("designs.search", "designs.hpo")):
        saved = saved.replace(f"ablations.experiment.{new}\n".encode(),
                              f"ablations.experiment.{old}\n".encode())
    assert b"ablations.experiment.designs.hpo\n" in saved
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(saved)
    with moved_modules():
        function, upload = pickle.loads(saved)
    assert function is trial_name and upload.func is publish_optuna
    assert upload.args == ("root", "name")
    assert sorted(set(MOVED_MODULES) & set(sys.modules)) == []  # the earlier names leave again
