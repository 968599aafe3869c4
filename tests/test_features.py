"""Feature ablations: the drop_scalars key, its validation before any trial, the `features`
space generated from the data's scalar columns (a real run of it: tests/test_cli.py's
end-to-end run)."""

from __future__ import annotations

import pytest

from ablations.trial.loading import load_data
from ablations.config import ConfigError, TrialConfig, apply_overrides, load_yaml_overrides
from ablations.trial.cost import estimated_cost
from ablations.trial.loop import train
from ablations.model.data import DataError
from ablations.search_spaces import feature_variants
from tests.conftest import tiny_config, write_data_dir
from tests.test_cli import assert_one_line_error, in_process


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A file dataset with the scalar columns scalar_a and scalar_b (4 frames: the default
    temporal_frames)."""
    return write_data_dir(tmp_path_factory.mktemp("features") / "data", n=40, frames=4)


# ------------------------------------------------------------------------------ the key


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("scalar_2", "scalar_2"),
        (" scalar_2 , scalar_0 ", "scalar_0,scalar_2"),  # sorted: order does not matter
        ("scalar_1,scalar_1", "scalar_1"),
        (["scalar_b", "scalar_a"], "scalar_a,scalar_b"),  # a YAML list
        ("", ""),
        ([], ""),
    ],
)
def test_drop_scalars_has_one_canonical_form(value, canonical):
    config = apply_overrides(TrialConfig(), {"drop_scalars": value}, source="test")
    assert config.data.drop_scalars == canonical
    assert config.data.dropped_scalars == (tuple(canonical.split(",")) if canonical else ())
    assert TrialConfig.from_dict(config.to_dict()) == config


def test_drop_scalars_from_a_yaml_list(tmp_path):
    (tmp_path / "c.yaml").write_text("drop_scalars: [scalar_2, scalar_0]\n")
    overrides = load_yaml_overrides(tmp_path / "c.yaml")
    config = apply_overrides(TrialConfig(), overrides, source="c.yaml")
    assert config.data.drop_scalars == "scalar_0,scalar_2"


@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        ("wind", "'wind' is not a scalar column name"),
        ("scalar_1,speed", "'speed' is not a scalar column name"),
        ({"scalar_1": "x"}, "got a mapping"),
        (["scalar_a,scalar_b"], "cannot contain a comma"),
    ],
)
def test_bad_drop_scalars_values_are_refused(value, pattern):
    with pytest.raises(ConfigError, match=pattern):
        apply_overrides(TrialConfig(), {"drop_scalars": value}, source="test")


# ------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["--set", "drop_scalars=scalar_9"],
         ("drop_scalars: the synthetic data has no scalar column 'scalar_9'; its scalar "
          "columns: scalar_0, scalar_1, scalar_2")),
        (["--set", "drop_scalars=scalar_0,scalar_1,scalar_2"],
         ("leaves out every scalar column of the synthetic data; to train without scalars set "
          "use_scalars=false")),
        (["--set", "drop_scalars=temperature"], "'temperature' is not a scalar column name"),
        (["--space", "features", "--set", "drop_scalars=scalar_7"], "no scalar column 'scalar_7'"),
        (["--space", "features", "--only", "no_scalar_9"], "unknown variant(s) ['no_scalar_9']"),
    ],
)
def test_bad_drop_scalars_is_one_line_before_any_trial(capsys, args, pattern):
    code, out, err = in_process(capsys, *args, "--dry-run")
    assert_one_line_error(code, err, pattern)
    assert "trials" not in out  # refused before the plan is printed


def test_drop_scalars_is_checked_against_a_file_datasets_columns(capsys, data_dir):
    code, _, err = in_process(capsys, "--data", str(data_dir), "--set", "drop_scalars=scalar_2",
                              "--set", "batch_size=8", "--dry-run")
    assert_one_line_error(code, err, "has no scalar column 'scalar_2'; its scalar columns: "
                          "scalar_a, scalar_b")
    code, _, err = in_process(capsys, "--data", str(data_dir), "--set",
                              "drop_scalars=scalar_a,scalar_b", "--set", "batch_size=8",
                              "--dry-run")
    assert_one_line_error(code, err, "leaves out every scalar column")
    # Without scalars at all, dropping them all is allowed: no_scalars in components does it.
    code, out, _ = in_process(capsys, "--data", str(data_dir), "--set",
                              "drop_scalars=scalar_a,scalar_b", "--set", "use_scalars=false",
                              "--set", "batch_size=8", "--only", "baseline", "--dry-run")
    assert code == 0 and "3 trials" in out


def test_the_worker_refuses_a_column_its_data_lacks(data_dir):
    config = tiny_config(data_dir=str(data_dir), drop_scalars="scalar_0")
    with pytest.raises(DataError, match="no scalar column 'scalar_0'"):
        load_data(config)


# ------------------------------------------------------------------------------ the space


def test_feature_variants_leave_one_column_out_each_and_the_images():
    assert feature_variants(["scalar_0", "scalar_1", "scalar_2"]) == {
        "baseline": {},
        "no_scalar_0": {"drop_scalars": "scalar_0"},
        "no_scalar_1": {"drop_scalars": "scalar_1"},
        "no_scalar_2": {"drop_scalars": "scalar_2"},
        "no_images": {"use_images": False},
    }
    # Columns the base already drops get no row and stay dropped in every row.
    assert feature_variants(["scalar_0", "scalar_1", "scalar_2"], ["scalar_2"]) == {
        "baseline": {},
        "no_scalar_0": {"drop_scalars": "scalar_2,scalar_0"},
        "no_scalar_1": {"drop_scalars": "scalar_2,scalar_1"},
        "no_images": {"use_images": False},
    }
    # Leaving out the only column left is training without scalars.
    assert feature_variants(["scalar_a"])["no_scalar_a"] == {"use_scalars": False}


def test_features_dry_run_on_the_synthetic_data(capsys):
    code, out, _ = in_process(capsys, "--space", "features", "--seeds", "2", "--dry-run")
    assert code == 0, out
    assert "10 trials" in out
    for variant in ("baseline", "no_scalar_0", "no_scalar_1", "no_scalar_2", "no_images"):
        assert f"{variant}-seed0" in out and f"{variant}-seed1" in out
    assert "no_scalar_2-seed1" in out and "drop_scalars=scalar_2" in out
    assert "use_images=False" in out
    code, out, _ = in_process(capsys, "--space", "features", "--seeds", "1", "--only",
                              "no_scalar_2,baseline", "--dry-run")
    assert code == 0 and "2 trials" in out and "no_scalar_2-seed0" in out
    assert "no_scalar_1" not in out


def test_features_dry_run_on_a_file_dataset_uses_its_columns(capsys, data_dir):
    code, out, _ = in_process(capsys, "--space", "features", "--seeds", "1", "--data",
                              str(data_dir), "--set", "batch_size=8", "--dry-run")
    assert code == 0, out
    assert "4 trials" in out
    for variant in ("baseline", "no_scalar_a", "no_scalar_b", "no_images"):
        assert f"{variant}-seed0" in out
    assert "no_scalar_0" not in out


def test_features_with_a_column_the_base_drops(capsys):
    code, out, _ = in_process(capsys, "--space", "features", "--seeds", "1",
                              "--set", "drop_scalars=scalar_2", "--dry-run")
    assert code == 0, out
    assert "4 trials" in out
    assert "drop_scalars: scalar_2" in out  # the base leaves scalar_2 out ...
    assert "no_scalar_0-seed0" in out and "drop_scalars=scalar_0,scalar_2" in out  # ... and so
    assert "no_scalar_2" not in out  # does every row, so it has no row of its own


def test_list_shows_the_features_space(capsys):
    code, out, _ = in_process(capsys, "list")
    assert code == 0
    assert "features:" in out and "no_scalar_2" in out and "drop_scalars=scalar_2" in out


# ------------------------------------------------------------------------------ training


def test_a_trial_without_a_column_trains_a_model_with_one_scalar_fewer():
    states = []
    outcome = train(tiny_config(drop_scalars="scalar_2", epochs=1),
                    report=lambda metrics, state, predictions: states.append(
                        state["model"]["scalar_mlp.0.weight"].shape))
    assert outcome.status == "ok"
    assert states[-1][1] == 2  # scalar_0 and scalar_1 only; all three without drop_scalars
    assert load_data(tiny_config(drop_scalars="scalar_2")).scalar_names == ["scalar_0",
                                                                            "scalar_1"]


def test_the_cost_estimate_counts_only_the_kept_scalars():
    assert estimated_cost(tiny_config(drop_scalars="scalar_0,scalar_2")) < \
        estimated_cost(tiny_config())
