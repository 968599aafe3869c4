"""What a finished table may take under its name (Design.added_variants) and what its
unfinished trials refuse (resuming.growth); the run itself: tests/test_trial_store.py."""

from __future__ import annotations

import pandas as pd
import pytest

from ablations.experiment.designs.factorial import Factorial
from ablations.experiment.designs.table import Table
from ablations.experiment.core.request import UsageError
from ablations.experiment.resuming import growth
from ablations.search_spaces import TrialSpec
from tests.conftest import tiny_config


def table(variants, seeds=(0, 1), **changes):
    return [TrialSpec(f"{v}-seed{s}", v, s, tiny_config(ablation=v, seed=s, **changes))
            for v in variants for s in seeds]


def test_a_grid_grows_by_whole_new_variants_at_the_recorded_seeds():
    was = table(["baseline", "no_images"])
    assert Table().added_variants(table(["baseline", "no_images", "no_x", "no_y"]), was) == \
        ["no_x", "no_y"]
    assert Table().added_variants(was, was) == []  # the same table: a resume, not a growth
    # a new variant at other seeds, a recorded trial changed, a recorded variant dropped
    assert Table().added_variants(was + table(["no_x"], seeds=(0,)), was) == []
    assert Table().added_variants(table(["baseline", "no_images", "no_x"], epochs=3), was) == []
    assert Table().added_variants(table(["baseline", "no_x"]), was) == []
    # more seeds for a recorded variant is not a new variant
    assert Table().added_variants(table(["baseline", "no_images"], seeds=(0, 1, 2)), was) == []


def test_a_new_variant_counts_its_skipped_cells_among_the_recorded_datasets():
    """On two datasets, a new variant whose cell on one of them cannot run (skipped) is still a
    whole variant; one that just leaves a dataset out is not."""
    def on(variants, dataset, seeds=(0, 1)):
        return [TrialSpec(f"{dataset}.{v}-seed{s}", v, s,
                          tiny_config(ablation=v, seed=s, dataset=dataset))
                for v in variants for s in seeds]

    was = on(["baseline", "no_images"], "a") + on(["baseline", "no_images"], "b")
    runs_on_a = was + on(["frames8"], "a")
    assert Table().added_variants(runs_on_a, was, on(["frames8"], "b")) == ["frames8"]
    assert Table().added_variants(runs_on_a, was) == []
    assert Table().added_variants(runs_on_a, was, on(["frames8"], "b", seeds=(0,))) == []


def test_a_design_that_does_not_grow_adds_nothing():
    was = table(["baseline", "no_images"])
    assert Factorial.grows is False
    assert Factorial.added_variants(Factorial.__new__(Factorial),
                                    table(["baseline", "no_images", "no_x"]), was) == []


def test_growth_needs_every_recorded_trial_finished(tmp_path):
    was = table(["baseline", "no_images"])
    now = was + table(["no_x"])
    statuses = ["ok", "diverged", "ok", "failed"]
    pd.DataFrame({"trial_name": [s.name for s in was], "status": statuses}).to_parquet(
        tmp_path / "trials.parquet")
    with pytest.raises(UsageError, match=r"no_images-seed1 did not finish ok or diverged; "
                                         r"finish it first with \S*resume"):
        growth({"space": "components"}, str(tmp_path), was, now, ["no_x"], "components")
    statuses[3] = "diverged"
    pd.DataFrame({"trial_name": [s.name for s in was], "status": statuses}).to_parquet(
        tmp_path / "trials.parquet")
    record = growth({"space": "components"}, str(tmp_path), was, now, ["no_x"], "components")
    assert record["added"] == ["no_x"] and record["variants_before"] == ["baseline", "no_images"]
    assert record["kept"] == [s.name for s in was]
    assert record["trials_added"] == ["no_x-seed0", "no_x-seed1"]


def test_a_grown_tables_kept_trials_are_taken_by_name_and_lend_no_key(tmp_path):
    """A kept trial comes from the table's own rows by its name, whatever its key now (other
    package versions or CPUs per trial change the key); another planned trial with the key
    of a row trained here (a variant that computes the same) is not labelled as trained
    here: it trains."""
    from ablations.experiment.provenance.trial_store import find_reusable

    folder = tmp_path / "first"
    folder.mkdir()
    rows = pd.DataFrame({"experiment": "first", "trial_name": ["baseline-seed0", "no_x-seed0"],
                         "ablation": ["baseline", "no_x"], "status": ["ok", "diverged"],
                         "trial_key": ["K0", "K1"], "reused_from": ["", ""],
                         "test_mae": [1.0, 2.0]})
    rows.to_parquet(folder / "trials.parquet")
    rows[["experiment", "trial_name"]].to_parquet(folder / "epochs.parquet")
    rows[["experiment", "trial_name"]].to_parquet(folder / "predictions.parquet")
    specs = {spec.name: spec for spec in table(["baseline", "no_x", "alias"], seeds=(0,))}
    found = find_reusable(str(tmp_path), "first",
                          {"baseline-seed0": "CHANGED", "no_x-seed0": "K1-NOW",
                           "alias-seed0": "K0"},
                          specs=specs, round_number=1, phase="evaluation", space="s",
                          own_trained={"baseline-seed0", "no_x-seed0"})
    assert found.sources == {"baseline-seed0": "", "no_x-seed0": ""}
    assert sorted(found.trials["trial_name"]) == ["baseline-seed0", "no_x-seed0"]
    assert found.trials.set_index("trial_name")["test_mae"].to_dict() == {
        "baseline-seed0": 1.0, "no_x-seed0": 2.0}
    assert found.summary(3, "first") == "2 of 3 trials kept; 1 to train"
    # without the growth's names its own trained rows are Tune's: none is taken
    assert find_reusable(str(tmp_path), "first", {"alias-seed0": "K0"}, specs=specs,
                         round_number=1, phase="evaluation", space="s") is None
