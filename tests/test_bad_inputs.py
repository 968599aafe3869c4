"""A file dataset as a hostile user would write it: every malformed file, column type, split and
size either works (dry-run plans it and a real trial trains on it) or stops the command before
any trial with one line on stderr and exit code 2. No Ray."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ablations.cli.main import main
from tests.conftest import REPO, tiny_config, write_data_dir

N, FRAMES = 60, 4  # write_data_dir's split: N-16 train, 8 val, 8 test
DRY_RUN = ["--only", "baseline", "--seeds", "1", "--set", "batch_size=8", "--dry-run"]


# ------------------------------------------------------------------------- how to break it


def _images(root: Path) -> np.ndarray:
    return np.load(root / "images.npy")


def _save_images(array: np.ndarray):
    def change(root: Path) -> None:
        np.save(root / "images.npy", array, allow_pickle=array.dtype.hasobject)
    return change


def _cast_images(dtype, scale: float = 1.0):
    def change(root: Path) -> None:
        np.save(root / "images.npy", (_images(root) * scale).astype(dtype))
    return change


def _set_pixel(sample: int, value: float):
    def change(root: Path) -> None:
        images = _images(root)
        images[sample, -1, 0, 0, 0] = value
        np.save(root / "images.npy", images)
    return change


def _table(root: Path) -> pd.DataFrame:
    return pd.read_parquet(root / "table.parquet")


def _with_table(edit):
    def change(root: Path) -> None:
        edit(_table(root)).to_parquet(root / "table.parquet", index=False)
    return change


def _column(name: str, values):
    """Set column ``name`` to ``values`` (a callable of n, or a list / array)."""
    def edit(table: pd.DataFrame) -> pd.DataFrame:
        table[name] = values(len(table)) if callable(values) else values
        return table
    return _with_table(edit)


def _arrow_column(name: str, array_of_n):
    """Replace or add column ``name`` with an Arrow array (types pandas cannot write)."""
    def change(root: Path) -> None:
        table = pq.read_table(root / "table.parquet")
        array = array_of_n(table.num_rows)
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, array)
        else:
            table = table.append_column(name, array)
        pq.write_table(table, root / "table.parquet")
    return change


def _split(values_of_n):
    return _column("split", values_of_n)


def _standard_split(n: int) -> list[str]:
    return ["train"] * (n - 16) + ["val"] * 8 + ["test"] * 8


def _write(name: str, content: bytes):
    def change(root: Path) -> None:
        (root / name).write_bytes(content)
    return change


def _remove(name: str):
    def change(root: Path) -> None:
        (root / name).unlink()
    return change


def _as_directory(name: str):
    def change(root: Path) -> None:
        (root / name).unlink()
        (root / name).mkdir()
    return change


def _truncate(name: str, keep: int | None = None):
    def change(root: Path) -> None:
        data = (root / name).read_bytes()
        (root / name).write_bytes(data[: keep if keep is not None else len(data) // 2])
    return change


def _npz(root: Path) -> None:
    images = _images(root)
    with open(root / "images.npy", "wb") as handle:
        np.savez(handle, images=images)


def _pickled(root: Path) -> None:
    images = _images(root)
    with open(root / "images.npy", "wb") as handle:
        pickle.dump(images.tolist()[:2], handle)


def _object_images(root: Path) -> None:
    images = np.empty((N, FRAMES, 2, 8, 8), dtype=object)
    images[...] = 1.0
    np.save(root / "images.npy", images, allow_pickle=True)


def _structured_images(root: Path) -> None:
    np.save(root / "images.npy", np.zeros((N, FRAMES, 2, 8, 8), dtype=[("a", "f4"), ("b", "i2")]))


def _drop_rows(count: int):
    return _with_table(lambda t: t.iloc[: len(t) - count])


def _zero_rows(root: Path) -> None:
    _table(root).iloc[:0].to_parquet(root / "table.parquet", index=False)


def _duplicate_target(root: Path) -> None:
    table = pq.read_table(root / "table.parquet")
    pq.write_table(table.append_column("target", table.column("target")),
                   root / "table.parquet")


def _dir_is_file(root: Path) -> None:
    shutil.rmtree(root)
    root.write_text("not a directory")


def _tiny(n: int, split: bool):
    def change(root: Path) -> None:
        shutil.rmtree(root)
        root.mkdir()
        rng = np.random.default_rng(0)
        np.save(root / "images.npy", rng.standard_normal((n, FRAMES, 2, 8, 8)).astype("f4"))
        table = pd.DataFrame({"target": rng.uniform(0, 1, n), "scalar_a": rng.normal(size=n)})
        if split:
            table["split"] = ["train", "val", "test"][:n]
        table.to_parquet(root / "table.parquet", index=False)
    return change


def _images_shape(shape, dtype="f4"):
    return _save_images(np.zeros(shape, dtype=dtype))


def _no_scalars(root: Path) -> None:
    _table(root).drop(columns=["scalar_a", "scalar_b"]).to_parquet(root / "table.parquet",
                                                                    index=False)


def _indexed_table(root: Path) -> None:
    table = _table(root)
    table.index = pd.Index([f"id{i}" for i in range(len(table))], name="sample_id")
    table.to_parquet(root / "table.parquet", index=True)


# (id, change, extra CLI args, expected error (regex) or None: it works)
CASES = [
    # the directory and its files
    ("missing dir", lambda root: shutil.rmtree(root), [], "data directory not found"),
    ("dir is a file", _dir_is_file, [], "a file, not a data directory"),
    ("missing images", _remove("images.npy"), [], r"images\.npy: missing"),
    ("missing table", _remove("table.parquet"), [], r"table\.parquet: missing"),
    ("images is a dir", _as_directory("images.npy"), [], r"images\.npy: not a file"),
    ("table is a dir", _as_directory("table.parquet"), [], r"table\.parquet: not a file"),
    # images.npy that is not a .npy array
    ("images text", _write("images.npy", b"1 2 3\n4 5 6\n"), [], r"not a \.npy file"),
    ("images empty file", _write("images.npy", b""), [], r"not a \.npy file"),
    ("images truncated", _truncate("images.npy"), [], r"images\.npy: truncated"),
    ("images header cut", _truncate("images.npy", 30), [], r"images\.npy: damaged \.npy header"),
    ("images npz renamed", _npz, [], r"a zip archive \(\.npz\?\), not a \.npy array"),
    ("images pickled list", _pickled, [], r"not a \.npy file"),
    ("images object array", _object_images, [], r"holds Python objects"),
    # shape
    ("images 4 dims", _images_shape((N, FRAMES, 8, 8)), [], "expected 5 dimensions"),
    ("images 6 dims", _images_shape((N, FRAMES, 2, 8, 8, 1)), [], "expected 5 dimensions"),
    ("images zero channels", _images_shape((N, FRAMES, 0, 8, 8)), [], "empty dimension"),
    ("images zero samples", _images_shape((0, FRAMES, 2, 8, 8)), [], "empty dimension"),
    ("images 1x1 pixels", _images_shape((N, FRAMES, 2, 1, 1)), [], None),
    # dtypes
    ("images bool", _cast_images(bool), [], "dtype bool"),
    ("images complex", _cast_images(np.complex64), [], "dtype complex64"),
    ("images strings", _cast_images("U4"), [], "dtype <U4"),
    ("images datetime", _images_shape((N, FRAMES, 2, 8, 8), "M8[s]"), [], r"dtype datetime64"),
    ("images structured", _structured_images, [], "not numbers"),
    ("images float16", _cast_images(np.float16), [], None),
    ("images float64", _cast_images(np.float64), [], None),
    ("images int8", _cast_images(np.int8, 50), [], None),
    ("images uint16", _cast_images(np.uint16, 1000), [], None),
    ("images int64", _cast_images(np.int64, 1000), [], None),
    ("images big-endian float32", _cast_images(">f4"), [], None),
    ("images big-endian float64", _cast_images(">f8"), [], None),
    ("images Fortran order", lambda root: np.save(root / "images.npy",
                                                  np.asfortranarray(_images(root))), [], None),
    # values
    ("images NaN", _set_pixel(0, np.nan), [], "sample 0 has NaN/inf pixels"),
    ("images inf", _set_pixel(N - 1, np.inf), [], f"sample {N - 1} has NaN/inf pixels"),
    ("images beyond float32", lambda root: np.save(root / "images.npy", _images(root)
                                                   .astype("f8") * 1e300),
     [], "beyond float32's range"),
    # table.parquet that is not a table
    ("table text", _write("table.parquet", b"target,split\n1,train\n"), [],
     r"table\.parquet: not a readable Parquet file"),
    ("table empty file", _write("table.parquet", b""), [],
     r"table\.parquet: not a readable Parquet file"),
    ("table truncated", _truncate("table.parquet"), [],
     r"table\.parquet: not a readable Parquet file"),
    ("table zero rows", _zero_rows, [], r"table\.parquet: no rows"),
    ("table one row short", _drop_rows(1), [], rf"{N - 1} rows but images\.npy has {N} samples"),
    ("table duplicate column", _duplicate_target, [], r"duplicate column names \['target'\]"),
    ("table with a stored index", _indexed_table, [], None),
    # target
    ("target missing", _with_table(lambda t: t.drop(columns="target")), [],
     "missing column 'target'"),
    ("target strings", _column("target", lambda n: [str(i) for i in range(n)]), [],
     "column 'target' has type string, not numbers"),
    ("target bool", _column("target", lambda n: [i % 2 == 0 for i in range(n)]), [],
     "column 'target' is boolean"),
    ("target timestamps", _column("target", lambda n: pd.date_range("2024-01-01", periods=n)),
     [], "column 'target' has type timestamp"),
    ("target nullable with NULL", _column("target", lambda n: pd.array([1] * (n - 1) + [None],
                                                                       dtype="Int64")),
     [], rf"column 'target' has 1 NaN/inf values \(first at row {N - 1}\)"),
    ("target NaN", _column("target", lambda n: [np.nan] + [1.0] * (n - 1)), [],
     r"column 'target' has 1 NaN/inf values \(first at row 0\)"),
    ("target inf", _column("target", lambda n: [1.0] * (n - 1) + [-np.inf]), [],
     "column 'target' has 1 NaN/inf values"),
    ("target integers", _column("target", lambda n: list(range(n))), [], None),
    ("target decimals", _arrow_column("target", lambda n: pa.array(
        [decimal.Decimal(f"{i}.25") for i in range(n)], pa.decimal128(6, 2))), [], None),
    # scalar features
    ("scalar strings", _column("scalar_a", lambda n: ["x"] * n), [],
     "column 'scalar_a' has type string"),
    ("scalar all null", _column("scalar_b", lambda n: [None] * n), [],
     "column 'scalar_b' is all null"),
    ("scalar all NaN", _column("scalar_b", lambda n: [np.nan] * n), [],
     f"column 'scalar_b' has {N} NaN/inf values"),
    ("scalar beyond float32", _column("scalar_a", lambda n: [1e300] * n), [],
     r"column 'scalar_a' has 60 values beyond float32's range \(first at row 0\); rescale"),
    ("scalar bool", _column("scalar_a", lambda n: [i % 2 == 0 for i in range(n)]), [], None),
    ("no scalar columns", _no_scalars, [], "no scalar_\\* columns; set use_scalars=false"),
    ("no scalar columns, scalars off", _no_scalars, ["--set", "use_scalars=false"], None),
    # split
    ("split nulls", _split(lambda n: [None] + _standard_split(n)[1:]), [],
     r"column 'split' has 1 null values \(first at row 0\)"),
    ("split unknown value", _split(lambda n: ["training"] + _standard_split(n)[1:]), [],
     r"column 'split' has unknown values \['training'\]"),
    ("split other case and spaces", _split(lambda n: [s.title() if i % 2 else f" {s.upper()} "
                                                      for i, s in enumerate(_standard_split(n))]),
     [], None),
    ("split without test", _split(lambda n: ["train"] * (n - 8) + ["val"] * 8), [],
     "column 'split' has no 'test' rows"),
    ("split without val", _split(lambda n: ["train"] * (n - 8) + ["test"] * 8), [],
     "column 'split' has no 'val' rows"),
    ("split without train", _split(lambda n: ["val"] * (n - 8) + ["test"] * 8), [],
     "column 'split' has no 'train' rows"),
    ("split categorical", _split(lambda n: pd.Categorical(_standard_split(n))), [], None),
    ("split numeric", _split(lambda n: [0] * (n - 16) + [1] * 8 + [2] * 8), [],
     "column 'split' has type int64; use the strings train/val/test"),
    ("split bool", _split(lambda n: [True] * (n - 8) + [False] * 8), [],
     "column 'split' has type bool"),
    # strata of every Arrow type (they go into predictions.parquet)
    ("strata lists", _arrow_column("tags", lambda n: pa.array([[i, i + 1] for i in range(n)])),
     [], None),
    ("strata structs", _arrow_column("site_info", lambda n: pa.array(
        [{"name": f"s{i % 3}", "height_m": float(i)} for i in range(n)])), [], None),
    ("strata maps", _arrow_column("attrs", lambda n: pa.array(
        [[("k", i % 2)] for i in range(n)], pa.map_(pa.string(), pa.int64()))), [], None),
    ("strata timestamps with tz", _column("time", lambda n: pd.date_range(
        "2024-01-01", periods=n, freq="h", tz="Europe/Berlin")), [], None),
    ("strata binary", _arrow_column("blob", lambda n: pa.array(
        [bytes([i % 4, 255]) for i in range(n)], pa.binary())), [], None),
    ("strata all null", _arrow_column("empty", lambda n: pa.nulls(n)), [], None),
    ("strata float16", _arrow_column("half", lambda n: pa.array(
        np.arange(n, dtype=np.float16))), [], None),
    ("strata dates and decimals", lambda root: (
        _arrow_column("day", lambda n: pa.array([dt.date(2024, 1, 1 + i % 28)
                                                  for i in range(n)]))(root),
        _arrow_column("price", lambda n: pa.array([decimal.Decimal(i % 5) for i in range(n)],
                                                   pa.decimal128(4, 0)))(root)),
     [], None),
    # sizes
    ("two samples, no split", _tiny(2, split=False), [], "2 rows; a train/val/test split needs "
                                                         "at least 3"),
    ("two samples, split", _tiny(2, split=True), [], "column 'split' has no 'test' rows"),
    ("three samples", _tiny(3, split=True), ["--set", "batch_size=1"], None),
    ("fewer training samples than batch", lambda root: None, ["--set", "batch_size=64"],
     "batch_size=64 exceeds the 44 training samples"),
    ("temporal_frames beyond T", lambda root: None, ["--set", "temporal_frames=5"],
     "temporal_frames=5 but .* has 4 frames"),
]


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory) -> Path:
    return write_data_dir(tmp_path_factory.mktemp("good") / "d", n=N, frames=FRAMES)


def _prepared(good_dir: Path, tmp_path: Path, change) -> Path:
    root = tmp_path / "data"
    shutil.copytree(good_dir, root)
    change(root)
    return root


@pytest.mark.parametrize(("case", "change", "extra", "error"), CASES,
                         ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_before_any_trial_or_works(good_dir, tmp_path, capsys, case,
                                                         change, extra, error):
    root = _prepared(good_dir, tmp_path, change)
    argv = ["--data", str(root), "--storage", str(tmp_path / "results"), *DRY_RUN, *extra]
    code = main(argv)
    captured = capsys.readouterr()
    if error is not None:
        assert code == 2, captured.out
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("run_ablations.py: error: "), lines
        assert re.search(error, lines[0]), lines[0]
        assert not (tmp_path / "results").exists()  # nothing started, nothing written
        return
    assert code == 0, captured.err
    assert "Data: " in captured.out
    _trains_one_epoch(root, extra)


def _trains_one_epoch(root: Path, extra: list[str]) -> None:
    """A real trial on the data; its predictions survive the trainable's and the runner's
    Parquet round trip (a second trial's rows concatenated) and the stratified analysis."""
    from ablations.trial.loop import train
    from ablations.results.stats.analysis import stratified_errors
    from ablations.results.io.files import write_parquet_atomic

    changes = dict(pair.split("=") for pair in extra[1::2])
    config = tiny_config(data_dir=str(root), epochs=1, batch_size=int(changes.get("batch_size", 8)),
                         temporal_frames=3, use_scalars=changes.get("use_scalars") != "false")
    outcome = train(config)
    assert np.isfinite(outcome.metrics["test_mae"])
    predictions = outcome.predictions
    assert np.isfinite(predictions["pred_mean"]).all()
    worker_file = root.parent / "worker.parquet"
    predictions.to_parquet(worker_file, index=False)  # as the trainable writes them
    read = pd.read_parquet(worker_file)
    both = pd.concat([read.assign(ablation="baseline", seed=0),
                      read.assign(ablation="other", seed=0)], ignore_index=True)
    write_parquet_atomic(both, root.parent / "predictions.parquet")
    assert len(pd.read_parquet(root.parent / "predictions.parquet")) == 2 * len(predictions)
    assert len(stratified_errors(both)) > 0


@pytest.mark.slow
def test_unreadable_data_is_one_line(good_dir):
    """As an unprivileged user (root reads files whatever their permissions), in one process:
    an unreadable images.npy, table.parquet and data directory."""
    folder = Path(tempfile.mkdtemp(prefix="unreadable-"))
    names = ["images.npy", "table.parquet", ""]  # "": the directory itself
    try:
        folder.chmod(0o755)
        for index, name in enumerate(names):
            shutil.copytree(good_dir, folder / str(index))
            (folder / str(index) / name).chmod(0)
        drop = "os.setgid(65534); os.setuid(65534)" if os.geteuid() == 0 else ""
        code = f"""
import contextlib, io, json, os, sys
import ablations.cli.main as cli, ablations.search_spaces.components
# one dry run as root first: it imports what a dry run loads lazily (the standard library
# under the interpreter's home is not readable after dropping to nobody)
with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
    assert cli.main(["--data", {str(good_dir)!r}, *{DRY_RUN!r}]) == 0
{drop}
out = []
for index in range({len(names)}):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["--data", os.path.join({str(folder)!r}, str(index)), *{DRY_RUN!r}])
    out.append([code, err.getvalue()])
print(json.dumps(out))
"""
        run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                             text=True, timeout=120)
    finally:
        for index in range(len(names)):
            (folder / str(index)).chmod(0o755)
        shutil.rmtree(folder)
    assert run.returncode == 0, run.stderr
    for name, (code, err) in zip(names, json.loads(run.stdout.strip().splitlines()[-1])):
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (name, err)
        assert "cannot be read" in lines[0] and "ermission denied" in lines[0], lines[0]


def test_nan_pixels_outside_the_checked_samples_fail_the_trial_naming_the_sample(tmp_path):
    from ablations.trial.loop import train
    from ablations.model.data import IMAGE_CHECK_SAMPLES, DataError, load_directory

    n = 4 * IMAGE_CHECK_SAMPLES
    root = write_data_dir(tmp_path / "d", n=n, frames=FRAMES)
    checked = set(np.linspace(0, n - 1, IMAGE_CHECK_SAMPLES).astype(int).tolist())
    hidden = next(i for i in range(1, n - 16) if i not in checked)  # a training sample
    images = np.load(root / "images.npy")
    images[hidden, -1, 1, 2, 3] = np.nan
    np.save(root / "images.npy", images)
    load_directory(root)  # passes the sampled check
    with pytest.raises(DataError, match=f"sample {hidden} has NaN/inf pixels"):
        train(tiny_config(data_dir=str(root), epochs=1, temporal_frames=3))


@pytest.mark.parametrize(("case", "change"), [
    ("images npz renamed", _npz),
    ("split without test", _split(lambda n: ["train"] * (n - 8) + ["val"] * 8)),
])
@pytest.mark.slow
def test_bad_input_through_the_command_is_one_line_exit_2(good_dir, tmp_path, case, change):
    root = _prepared(good_dir, tmp_path, change)
    run = subprocess.run([sys.executable, str(REPO / "run_ablations.py"), "--data", str(root),
                          "--storage", str(tmp_path / "results"), *DRY_RUN],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    assert lines[0].startswith("run_ablations.py: error: ") and str(root) in lines[0]
    assert not (tmp_path / "results").exists()


def test_strata_parquet_cannot_group_by_are_kept_as_text(good_dir, tmp_path):
    from ablations.model.data import load_directory

    root = _prepared(good_dir, tmp_path, lambda root: [change(root) for change in (
        _arrow_column("tags", lambda n: pa.array([[i, i + 1] for i in range(n)])),
        _arrow_column("info", lambda n: pa.array([{"name": f"s{i}"} for i in range(n)])),
        _arrow_column("raw", lambda n: pa.array([bytes([i, 255]) for i in range(n)])),
        _arrow_column("word", lambda n: pa.array([b"abc"] * n)),
        _arrow_column("half", lambda n: pa.array(np.arange(n, dtype=np.float16))),
    )])
    strata = load_directory(root).strata
    assert strata.loc[1, ["tags", "info", "raw", "word"]].tolist() == \
        ["[1, 2]", "{'name': 's1'}", "0x01ff", "abc"]
    assert strata["half"].dtype == np.float32 and strata["season"].dtype == np.int64
    assert strata["site"].tolist() == _table(good_dir)["site"].tolist()  # plain types as they are


def test_a_dataframe_index_written_with_the_table_is_not_a_stratum(good_dir, tmp_path):
    from ablations.model.data import load_directory

    data = load_directory(_prepared(good_dir, tmp_path, _indexed_table))
    assert list(data.strata.columns) == ["site", "season"] and len(data.strata) == N


def test_a_damaged_experiment_record_is_one_line_and_nothing_is_touched(capsys, tmp_path):
    from ablations.cli.main import main

    root = tmp_path / "results" / "damaged"
    root.mkdir(parents=True)
    (root / "experiment.json").write_text('{"space": "components", ')  # cut off
    for args in (["--resume", "--name", "damaged"], ["--name", "damaged"]):
        code = main([*args, "--storage", str(tmp_path / "results"), "--only", "baseline"]
                    if args[0] == "--name" else [*args, "--storage", str(tmp_path / "results")])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "experiment.json: not valid JSON" in err and "Traceback" not in err
    assert (root / "experiment.json").read_text() == '{"space": "components", '
    # --resume without --name skips a damaged record when it looks for the newest experiment
    code = main(["--resume", "--storage", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2 and "no experiment in" in err, err


@pytest.mark.parametrize(("record", "found"), [
    ({"space": "components"}, "has no schema_version"),
    ({"schema_version": 99, "space": "components"}, "has schema_version 99"),
])
def test_a_record_of_another_schema_version_is_refused_in_one_line(tmp_path, record, found):
    from ablations.results.io.files import SCHEMA_VERSION, MetadataError, read_metadata

    (tmp_path / "experiment.json").write_text(json.dumps(record))
    with pytest.raises(MetadataError) as refused:
        read_metadata(tmp_path)
    message = str(refused.value)
    assert len(message.splitlines()) == 1 and found in message
    assert f"reads schema_version 1 or {SCHEMA_VERSION} only" in message
    (tmp_path / "experiment.json").write_text(json.dumps({**record,
                                                          "schema_version": SCHEMA_VERSION}))
    assert read_metadata(tmp_path)["space"] == "components"


def test_a_record_of_schema_version_1_reads_with_the_designs_names(tmp_path):
    from ablations.results.io.files import SCHEMA_VERSION, read_metadata

    older = {"schema_version": 1, "space": "components", "hpo": None,
             "sequential": {"rounds": [{"round": 1}]}, "tuned": None}
    (tmp_path / "experiment.json").write_text(json.dumps(older))
    meta = read_metadata(tmp_path)
    assert meta == {"schema_version": SCHEMA_VERSION, "space": "components", "search": None,
                    "rounds": {"rounds": [{"round": 1}]}, "tuned": None}
    assert list(meta) == ["schema_version", "space", "search", "rounds", "tuned"]
    assert json.loads((tmp_path / "experiment.json").read_text()) == older  # read, not written
