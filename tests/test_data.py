"""Synthetic data (deterministic, planted effects) and the file dataset (loading, rejection)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ablations.model.data import (
    REGIME_TARGET_NOISE_KM,
    DataError,
    SyntheticSpec,
    load_directory,
    load_synthetic,
    make_synthetic,
    seeded_split,
)
from tests.conftest import write_data_dir


def test_synthetic_is_deterministic_per_seed():
    spec = SyntheticSpec(n_train=32, n_val=8, n_test=8)
    a, b = make_synthetic(spec), make_synthetic(spec)
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.target, b.target)
    c = make_synthetic(SyntheticSpec(n_train=32, n_val=8, n_test=8, seed=1))
    assert not np.array_equal(a.target, c.target)


def test_synthetic_shapes_splits_and_strata():
    data = make_synthetic(SyntheticSpec(n_train=30, n_val=10, n_test=20))
    assert data.images.shape == (60, 8, 2, 12, 12) and data.images.dtype == np.float32
    assert data.scalars.shape == (60, 3)
    assert [int((data.split == s).sum()) for s in ("train", "val", "test")] == [30, 10, 20]
    assert list(data.strata.columns) == ["regime", "speed_px_per_frame", "blob_sigma_px"]
    # the most recent frames: frame t of a 4-frame view is frame 4+t of the full stack
    idx = np.array([5, 1, 3])
    np.testing.assert_array_equal(data.frames(idx, 4), data.images[idx, 4:])


def test_planted_effects_are_there():
    data = make_synthetic(SyntheticSpec(n_train=3000, n_val=10, n_test=10))
    target, strata = data.target, data.strata
    corr = lambda a, b: float(np.corrcoef(a, b)[0, 1])  # noqa: E731
    assert corr(target, strata["speed_px_per_frame"]) > 0.4  # motion
    assert corr(target, strata["blob_sigma_px"]) > 0.2  # spatial structure
    assert corr(target, data.scalars[:, 0]) > 0.3  # scalar signal
    assert abs(corr(target, data.scalars[:, 2])) < 0.06  # pure noise feature
    # residual noise grows with the regime
    signal = (2.0 + 2.5 * strata["speed_px_per_frame"] + 1.7 * (strata["blob_sigma_px"] - 1.5)
              + 0.8 * data.scalars[:, 0] - 0.5 * data.scalars[:, 1])
    residual = pd.Series(target - signal).groupby(strata["regime"].to_numpy()).std()
    for regime, expected in zip(("clear", "hazy", "storm"), REGIME_TARGET_NOISE_KM):
        assert residual[regime] == pytest.approx(expected, rel=0.15)
    # motion is visible: the blob's brightest pixel moves between first and last frame
    fast = int(np.argmax(strata["speed_px_per_frame"].to_numpy()))
    first, last = data.images[fast, 0, 0], data.images[fast, -1, 0]
    assert np.unravel_index(first.argmax(), first.shape) != np.unravel_index(last.argmax(),
                                                                              last.shape)


def test_file_dataset_loads_memory_mapped(tmp_path):
    root = write_data_dir(tmp_path / "d")
    data = load_directory(root)
    assert isinstance(data.images, np.memmap)
    assert data.images.shape == (40, 3, 2, 8, 8)
    assert data.scalar_names == ["scalar_a", "scalar_b"]
    assert list(data.strata.columns) == ["site", "season"]
    assert int((data.split == "train").sum()) == 24


@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.float64, ">f4", np.float16, np.uint16])
def test_file_dataset_batches_are_file_reads_equal_to_the_memory_map(tmp_path, dtype):
    root = write_data_dir(tmp_path / "d", frames=5)
    images = np.load(root / "images.npy")
    np.save(root / "images.npy", (images * 100).astype(dtype))
    data = load_directory(root)
    assert data.images_file == str(root / "images.npy") and data.images_offset > 0
    idx = np.array([17, 3, 39, 0, 3, 22])  # unsorted, with a repeat, first and last sample
    for frames in (1, 3, 5):
        got = data.frames(idx, frames)
        assert got.dtype == np.dtype("float32") and got.dtype.isnative  # whatever the file holds
        np.testing.assert_array_equal(got, np.asarray(data.images)[idx, 5 - frames:]
                                      .astype(np.float32))
    # a Fortran-ordered file falls back to the memory map
    np.save(root / "images.npy", np.asfortranarray((images * 100).astype(dtype)))
    fortran = load_directory(root)
    assert fortran.images_file == ""
    got = fortran.frames(idx, 2)
    assert got.dtype == np.dtype("float32") and got.dtype.isnative
    np.testing.assert_array_equal(got, np.asarray(fortran.images)[idx, 3:].astype(np.float32))


def test_synthetic_set_is_cached_in_the_process_and_on_disk(tmp_path, monkeypatch):
    import ablations.model.synthetic as data_module

    monkeypatch.setenv(data_module.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(data_module, "_RECENT", {})
    spec = SyntheticSpec(n_train=40, n_val=8, n_test=8, seed=3)
    fresh = make_synthetic(spec)
    first = load_synthetic(spec)
    files = list(tmp_path.glob("synthetic-*.npz"))
    assert len(files) == 1
    for got in (first, load_synthetic(spec)):  # generated, then from this process
        np.testing.assert_array_equal(got.images, fresh.images)
        pd.testing.assert_frame_equal(got.strata, fresh.strata)
    second = load_synthetic(spec)
    assert second is not first and second.images is first.images  # shared, read-only
    assert not second.images.flags.writeable
    second.split = np.array(["train"] * 56)  # a trial's caps do not leak into the next
    assert (load_synthetic(spec).split == fresh.split).all()

    monkeypatch.setattr(data_module, "_RECENT", {})  # a new process: read from disk
    from_disk = load_synthetic(spec)
    for name in ("images", "scalars", "target", "split"):
        np.testing.assert_array_equal(getattr(from_disk, name), getattr(fresh, name))
    pd.testing.assert_frame_equal(from_disk.strata, fresh.strata)
    assert from_disk.scalar_names == fresh.scalar_names and from_disk.source == fresh.source

    files[0].write_bytes(b"not an npz")  # a broken cache file is made again
    monkeypatch.setattr(data_module, "_RECENT", {})
    np.testing.assert_array_equal(load_synthetic(spec).images, fresh.images)
    assert np.load(files[0])["images"].shape == fresh.images.shape
    other = load_synthetic(SyntheticSpec(n_train=40, n_val=8, n_test=8, seed=4))
    assert len(list(tmp_path.glob("synthetic-*.npz"))) == 2
    assert not np.array_equal(other.target, fresh.target)


def test_file_dataset_without_split_gets_a_seeded_split(tmp_path):
    root = write_data_dir(tmp_path / "d", split=False, n=100)
    a, b = load_directory(root, split_seed=3), load_directory(root, split_seed=3)
    np.testing.assert_array_equal(a.split, b.split)
    assert {s: int((a.split == s).sum()) for s in ("train", "val", "test")} == \
        {"train": 70, "val": 15, "test": 15}
    assert not np.array_equal(a.split, load_directory(root, split_seed=4).split)


def _corrupt(kind: str, root):
    table = pd.read_parquet(root / "table.parquet")
    if kind == "missing images":
        (root / "images.npy").unlink()
    elif kind == "missing table":
        (root / "table.parquet").unlink()
    elif kind == "missing target":
        table.drop(columns="target").to_parquet(root / "table.parquet")
    elif kind == "row count":
        table.iloc[:-1].to_parquet(root / "table.parquet")
    elif kind == "nan target":
        table.loc[3, "target"] = np.nan
        table.to_parquet(root / "table.parquet")
    elif kind == "inf scalar":
        table.loc[5, "scalar_b"] = np.inf
        table.to_parquet(root / "table.parquet")
    elif kind == "wrong ndim":
        np.save(root / "images.npy", np.zeros((40, 2, 8, 8), dtype=np.float32))
    elif kind == "unknown split":
        table.loc[0, "split"] = "training"
        table.to_parquet(root / "table.parquet")
    elif kind == "not npy":
        (root / "images.npy").write_text("not an array")


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("missing images", r"images\.npy: missing"),
        ("missing table", r"table\.parquet: missing"),
        ("missing target", r"table\.parquet: missing column 'target'"),
        ("row count", r"table\.parquet: 39 rows but images\.npy has 40 samples"),
        ("nan target", r"table\.parquet: column 'target' has 1 NaN/inf values \(first at row 3\)"),
        ("inf scalar", r"column 'scalar_b' has 1 NaN/inf values \(first at row 5\)"),
        ("wrong ndim", r"images\.npy: expected 5 dimensions"),
        ("unknown split", r"column 'split' has unknown values \['training'\]"),
        ("not npy", r"images\.npy: not a \.npy file"),
    ],
)
def test_bad_data_is_rejected_naming_file_and_problem(tmp_path, kind, message):
    root = write_data_dir(tmp_path / "d")
    _corrupt(kind, root)
    with pytest.raises(DataError, match=message):
        load_directory(root)


def test_missing_directory(tmp_path):
    with pytest.raises(DataError, match="data directory not found"):
        load_directory(tmp_path / "nope")


def test_seeded_split_needs_three_samples():
    with pytest.raises(DataError):
        seeded_split(2, seed=0)


@pytest.mark.parametrize(("name", "value"), [
    ("REGIME_PIXEL_NOISE", (0.05, 0.20, 0.50)),
    ("REGIME_TARGET_NOISE_KM", (0.15, 0.35, 0.71)),
    ("REGIMES", ("clear", "hazy", "fog")),
    ("MAX_SYNTHETIC_FRAMES", 9),
    ("SYNTHETIC_SCALARS", 4),
])
def test_synthetic_cache_key_covers_the_generators_constants(monkeypatch, name, value):
    import ablations.model.synthetic as data_module

    spec = SyntheticSpec(n_train=40, n_val=8, n_test=8)
    before = data_module.synthetic_cache_key(spec)
    assert data_module.synthetic_cache_key(spec) == before  # stable
    monkeypatch.setattr(data_module, name, value)
    assert data_module.synthetic_cache_key(spec) != before
