"""examples/climate.py on the real data (docs/real-data.md): the Met Office model output that
``iris-sample-data`` ships becomes a file dataset the runner accepts (its own checks, shapes,
columns, the dry run of both spaces), with a time split that lets no later year into training.

Needs the climate extra (``pip install -e ".[climate]"``, part of the test extra); skipped
without it. The conversion reads two 1.8 MB netCDF files and takes about a second."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

iris_sample_data = pytest.importorskip(
    "iris_sample_data",
    reason="iris-sample-data is not installed: pip install -e '.[climate]' (docs/real-data.md)")
pytest.importorskip("h5netcdf", reason="h5netcdf (the netCDF-4 reader) is not installed: "
                    "pip install -e '.[climate]' (docs/real-data.md)")

from examples import climate  # noqa: E402
from ablations.model.files import check_directory, load_directory  # noqa: E402
from tests.test_cli import in_process  # noqa: E402

SHAPE = (2 * (240 - climate.FRAMES), climate.FRAMES, 1, 37, 49)  # 236 target years x 2


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("climate")
    shape, rows = climate.convert(out)
    assert shape == SHAPE and rows == SHAPE[0]
    return out


@pytest.fixture(scope="module")
def table(data_dir):
    return pd.read_parquet(data_dir / "table.parquet")


def test_the_dataset_passes_the_runners_checks_with_the_expected_shapes(data_dir):
    shape, columns = check_directory(data_dir)
    assert shape == SHAPE
    assert set(columns) == {"target", "scalar_year", "scalar_a1b", "split", "scenario", "year"}
    data = load_directory(data_dir)  # the loader's checks: numbers, finite, splits, NaN pixels
    assert data.images.dtype == np.float32 and data.num_frames == climate.FRAMES
    assert data.scalar_names == ["scalar_year", "scalar_a1b"]
    assert list(data.strata.columns) == ["scenario", "year"]
    assert {name: int((data.split == name).sum()) for name in ("train", "val", "test")} == {
        "train": 2 * (2039 - 1864 + 1), "val": 2 * 30, "test": 2 * 30}
    # Kelvin, a plausible regional mean; the images are standardised anomalies.
    assert 285 < data.target.min() < data.target.max() < 295
    images = np.load(data_dir / "images.npy", mmap_mode="r")
    assert np.isfinite(images).all()
    train_images = images[np.flatnonzero(data.split == "train")]
    assert abs(float(train_images.mean())) < 0.2 and 0.8 < float(train_images.std()) < 1.2


def test_the_split_is_by_time_without_overlap_in_each_scenario(table):
    assert set(table["scenario"]) == {"E1", "A1B"}
    assert not table.duplicated(["scenario", "year"]).any()
    for scenario, rows in table.groupby("scenario"):
        years = {name: rows.loc[rows["split"] == name, "year"] for name in ("train", "val", "test")}
        assert years["train"].min() == 1860 + climate.FRAMES, scenario
        assert years["train"].max() < years["val"].min(), scenario
        assert years["val"].max() < years["test"].min(), scenario
        assert years["test"].max() == 2099, scenario
    assert (table["scalar_year"] == table["year"]).all()
    assert (table["scalar_a1b"] == (table["scenario"] == "A1B")).all()


def test_samples_are_the_past_years_and_the_target_is_the_next_years_mean(data_dir, table):
    images = np.load(data_dir / "images.npy", mmap_mode="r")
    years, fields, latitudes = climate.read_scenario(
        Path(iris_sample_data.path) / "A1B_north_america.nc")
    weights = np.cos(np.deg2rad(latitudes))[:, None] * np.ones(fields.shape[2])
    rows = table.index[(table["scenario"] == "A1B")].to_numpy()
    for row in rows[[0, 100, -1]]:
        year = table.at[row, "year"]
        expected = (fields[years == year][0] * weights).sum() / weights.sum()
        assert table.at[row, "target"] == pytest.approx(expected, abs=1e-6)
    # Consecutive samples share frames shifted by one year: the window ends the year before.
    first, second = rows[0], rows[1]
    np.testing.assert_array_equal(images[second, :-1], images[first, 1:])


def test_later_years_do_not_reach_the_training_samples(tmp_path, monkeypatch, data_dir):
    """Change every field after the last training year: the training rows stay the same (the
    anomalies' climatology and scale come from training years only)."""
    read = climate.read_scenario

    def warmer_future(path):
        years, fields, latitudes = read(path)
        return years, np.where((years > climate.LAST_TRAIN_YEAR)[:, None, None],
                               fields + 10.0, fields), latitudes

    monkeypatch.setattr(climate, "read_scenario", warmer_future)
    climate.convert(tmp_path)
    table = pd.read_parquet(data_dir / "table.parquet")
    changed = pd.read_parquet(tmp_path / "table.parquet")
    train = (table["split"] == "train").to_numpy()
    pd.testing.assert_frame_equal(table[train], changed[train])
    np.testing.assert_array_equal(np.load(data_dir / "images.npy")[train],
                                  np.load(tmp_path / "images.npy")[train])
    assert not np.allclose(table.loc[~train, "target"], changed.loc[~train, "target"])


def test_both_spaces_plan_on_it(capsys, data_dir):
    """The dry run validates every trial against the data (batch size, frames, columns)."""
    code, out, err = in_process(capsys, "--space", "components", "--data", str(data_dir),
                                "--dry-run")
    assert code == 0, err
    assert "27 trials" in out
    code, out, err = in_process(capsys, "--space", "features", "--data", str(data_dir),
                                "--dry-run")
    assert code == 0, err
    assert "12 trials" in out
    for variant in ("baseline", "no_scalar_year", "no_scalar_a1b", "no_images"):
        assert f"{variant}-seed0" in out


def test_the_change_target_is_the_level_minus_the_last_years_with_the_same_frames(
        tmp_path, data_dir, table):
    """--target change: the same samples and frames, the target relative to persistence (so
    its mean predictor is about persistence and its errors are the level forecast's)."""
    climate.convert(tmp_path, target="change")
    change = pd.read_parquet(tmp_path / "table.parquet")
    np.testing.assert_array_equal(np.load(tmp_path / "images.npy", mmap_mode="r"),
                                  np.load(data_dir / "images.npy", mmap_mode="r"))
    for scenario in ("E1", "A1B"):
        rows = table.index[table["scenario"] == scenario].to_numpy()
        level = table.loc[rows, "target"].to_numpy()
        np.testing.assert_allclose(change.loc[rows[1:], "target"], np.diff(level), atol=1e-9)
    with pytest.raises(ValueError, match="target must be one of level, change"):
        climate.convert(tmp_path, target="anomaly")


@pytest.fixture(scope="module")
def e1_dir(tmp_path_factory):
    """``examples/climate.py OUT --scenario E1``: one scenario's dataset."""
    out = tmp_path_factory.mktemp("climate-e1")
    climate.main([str(out), "--scenario", "E1"])
    return out


def test_one_scenario_is_that_scenarios_samples_without_the_constant_scalar(e1_dir, table):
    shape, columns = check_directory(e1_dir)
    assert shape == (SHAPE[0] // 2, *SHAPE[1:])
    assert set(columns) == {"target", "scalar_year", "split", "scenario", "year"}
    assert load_directory(e1_dir).scalar_names == ["scalar_year"]
    e1 = pd.read_parquet(e1_dir / "table.parquet")
    both = table[table["scenario"] == "E1"].drop(columns="scalar_a1b").reset_index(drop=True)
    pd.testing.assert_frame_equal(e1, both)  # the same targets, years and splits


def test_one_scenario_is_normalised_on_its_own_training_years(e1_dir, data_dir, table):
    years, fields, _ = climate.read_scenario(Path(iris_sample_data.path) / "E1_north_america.nc")
    train = fields[years <= climate.LAST_TRAIN_YEAR]
    climatology = train.mean(axis=0)
    expected = (fields - climatology) / (train - climatology).std()
    images = np.load(e1_dir / "images.npy", mmap_mode="r")
    first = years.tolist().index(1860 + climate.FRAMES)
    np.testing.assert_allclose(images[0, :, 0], expected[first - climate.FRAMES : first],
                               atol=1e-5)
    # the dataset of both scenarios is normalised on both scenarios' training years
    rows = table.index[table["scenario"] == "E1"].to_numpy()
    assert not np.allclose(np.load(data_dir / "images.npy", mmap_mode="r")[rows[0]], images[0])


def test_one_scenarios_features_space_ablates_only_its_own_scalars(capsys, e1_dir):
    code, out, err = in_process(capsys, "--space", "features", "--data", str(e1_dir),
                                "--dry-run")
    assert code == 0, err
    assert "9 trials" in out
    for variant in ("baseline", "no_scalar_year", "no_images"):
        assert f"{variant}-seed0" in out
    assert "no_scalar_a1b" not in out
    with pytest.raises(ValueError, match="scenario must be one of E1, A1B, both"):
        climate.convert(e1_dir, scenario="B2")
