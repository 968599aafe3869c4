"""Provenance: fingerprints of code, git state and data; a resume refuses changed code or data
unless --allow-changed (ablations/experiment/provenance/provenance.py, the CLI's
check_unchanged)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ablations.cli.main as cli
from ablations.experiment.provenance import provenance as prov
from ablations.config import TrialConfig
from tests.conftest import REPO, write_data_dir


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        value = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([value[0] ^ 0xFF]))


def change_a_target(directory: Path) -> None:
    """A valid table.parquet with one target changed."""
    table = pd.read_parquet(directory / "table.parquet")
    table.loc[0, "target"] += 1.0
    table.to_parquet(directory / "table.parquet", index=False)


def sample_offset(directory: Path, index: int) -> int:
    """Byte offset in images.npy of sample ``index``'s first value."""
    images = np.load(directory / "images.npy", mmap_mode="r")
    return int(images.offset) + index * int(images[0].nbytes)


# ----------------------------------------------------------------------------------- data


@pytest.fixture
def data_dir(tmp_path):
    return write_data_dir(tmp_path / "data", n=200)


def test_data_fingerprint_is_the_same_when_nothing_changed(data_dir):
    first = prov.file_data_fingerprint(data_dir)
    os.utime(data_dir / "table.parquet", (1, 1))  # a new mtime is not new data (a copy)
    second = prov.file_data_fingerprint(data_dir)
    assert second["fingerprint"] == first["fingerprint"]
    assert second["files"]["table.parquet"]["mtime_ns"] != first["files"]["table.parquet"][
        "mtime_ns"]  # recorded all the same
    assert first["images"]["samples"] == prov.IMAGE_SAMPLES


def test_data_fingerprint_changes_with_one_byte_of_the_table(data_dir):
    before = prov.file_data_fingerprint(data_dir)
    flip_byte(data_dir / "table.parquet", (data_dir / "table.parquet").stat().st_size // 2)
    after = prov.file_data_fingerprint(data_dir)
    assert after["fingerprint"] != before["fingerprint"]
    assert after["table_sha256"] != before["table_sha256"]
    assert after["images"] == before["images"]


def test_data_fingerprint_changes_with_one_byte_of_a_sampled_image(data_dir):
    before = prov.file_data_fingerprint(data_dir)
    picked = prov.sampled_indices(200)
    flip_byte(data_dir / "images.npy", sample_offset(data_dir, int(picked[len(picked) // 2])) + 5)
    after = prov.file_data_fingerprint(data_dir)
    assert after["fingerprint"] != before["fingerprint"]
    assert after["images"]["sample_sha256"] != before["images"]["sample_sha256"]


def test_data_fingerprint_reads_only_the_sampled_images(data_dir):
    """The file is never read whole: a byte of a sample that is not picked goes unseen."""
    before = prov.file_data_fingerprint(data_dir)
    unpicked = sorted(set(range(200)) - set(prov.sampled_indices(200).tolist()))[0]
    flip_byte(data_dir / "images.npy", sample_offset(data_dir, unpicked))
    assert prov.file_data_fingerprint(data_dir)["fingerprint"] == before["fingerprint"]


def test_large_samples_are_read_in_a_window(data_dir):
    fingerprint = prov.file_data_fingerprint(data_dir, max_bytes_per_sample=64)
    assert fingerprint["images"]["samples"] == prov.IMAGE_SAMPLES
    assert fingerprint != prov.file_data_fingerprint(data_dir)


def test_synthetic_data_source_is_its_cache_key():
    source = prov.data_source(TrialConfig())
    assert source.startswith("synthetic:") and len(source) > len("synthetic:")
    assert prov.data_source(TrialConfig.of(data_seed=1)) != source
    held = TrialConfig.of(seed_sources="init,order")
    fingerprints = prov.data_fingerprints([held, held.replace(seed=2)])
    assert list(fingerprints) == [source]  # the draw held: one source, whatever the seed
    drawn = prov.data_fingerprints([TrialConfig(), TrialConfig.of(seed=2)])
    assert len(drawn) == 2 and source in drawn  # the default: one draw per seed
    assert fingerprints[source]["spec"]["n_train"] == TrialConfig().data.synthetic_train


# ----------------------------------------------------------------------------- code, git


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c",
                           "user.email=t@example.com", *args],
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "ablations").mkdir(parents=True)
    (root / "ablations" / "train.py").write_text("x = 1\n")
    (root / "README.md").write_text("docs\n")
    (root / "run_ablations.py").write_text("main()\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


@pytest.mark.slow
def test_git_state_dirty_flag_and_diff_hash(repo):
    clean = prov.git_state(repo)
    assert clean["commit"] == git(repo, "rev-parse", "HEAD").strip()
    assert clean["dirty"] is False and clean["diff_sha256"] is None
    assert prov.git_commit_label(clean) == clean["commit"]

    (repo / "ablations" / "train.py").write_text("x = 2\n")
    dirty = prov.git_state(repo)
    assert dirty["dirty"] is True and dirty["diff_sha256"]
    assert dirty["commit"] == clean["commit"]
    assert prov.git_commit_label(dirty) == clean["commit"] + "-dirty"

    (repo / "ablations" / "train.py").write_text("x = 3\n")
    assert prov.git_state(repo)["diff_sha256"] != dirty["diff_sha256"]

    (repo / "ablations" / "train.py").write_text("x = 1\n")
    (repo / "scratch.txt").write_text("notes\n")
    untracked = prov.git_state(repo)
    assert untracked["dirty"] is False and untracked["untracked"] == ["scratch.txt"]


@pytest.mark.slow
def test_git_state_is_none_outside_the_top_of_a_checkout(repo, tmp_path):
    assert prov.git_state(tmp_path / "nowhere") is None
    assert prov.git_state(repo / "ablations") is None  # inside another repository's tree


@pytest.mark.slow
def test_code_fingerprint_follows_the_source_not_the_docs(repo):
    (repo / "model").mkdir()
    (repo / "model" / "net.py").write_text("y = 1\n")
    folders = {"ablations": repo / "ablations", "ablations.model": repo / "model"}
    before = prov.code_fingerprint(folders)
    (repo / "README.md").write_text("other docs\n")
    (repo / "ablations" / "__pycache__").mkdir()
    (repo / "ablations" / "__pycache__" / "x.py").write_text("cache")
    assert prov.code_fingerprint(folders) == before
    (repo / "ablations" / "new.py").write_text("")  # an untracked source file counts
    added = prov.code_fingerprint(folders)
    assert added != before
    (repo / "model" / "net.py").write_text("y = 2\n")
    assert prov.code_fingerprint(folders) not in (before, added)
    assert prov.code_fingerprint({"ablations": repo / "nowhere"}) is None  # no source here


def test_code_fingerprint_is_the_same_for_a_checkout_and_an_installed_layout(tmp_path):
    """A package inside another (an installed wheel: ablations/model/) is hashed under its own
    import name, once: the same fingerprint as the checkout's side-by-side folders."""
    checkout, wheel = tmp_path / "checkout", tmp_path / "site"
    for root, model in ((checkout, checkout / "model"), (wheel, wheel / "ablations" / "model")):
        model.mkdir(parents=True)
        (root / "ablations").mkdir(exist_ok=True)
        (root / "ablations" / "__init__.py").write_text("x = 1\n")
        (model / "__init__.py").write_text("y = 1\n")
    side_by_side = prov.code_fingerprint({"ablations": checkout / "ablations",
                                          "ablations.model": checkout / "model"})
    nested = prov.code_fingerprint({"ablations": wheel / "ablations",
                                    "ablations.model": wheel / "ablations" / "model"})
    assert side_by_side == nested


def test_the_runner_source_is_its_packages_under_one_import_root():
    folders = prov.runner_source()
    assert sorted(folders) == ["ablations", "ablations.model", "ablations.results",
                               "ablations.search_spaces"]
    assert (folders["ablations.model"] / "synthetic.py").is_file()
    assert prov.checkout_root() == REPO  # the tests run from the checkout


# --------------------------------------------------------------------------- comparison


@pytest.fixture
def checkout(monkeypatch):
    """A clean checkout's git state without running git (the unit loop starts no subprocess)."""
    state = {"commit": "a" * 40, "dirty": False, "diff_sha256": None, "untracked": [],
             "untracked_count": 0}
    monkeypatch.setattr(prov, "git_state", lambda root=None: dict(state))
    return state


def test_changes_block_code_and_data_and_report_the_rest(data_dir, checkout):
    configs = [TrialConfig.of(data_dir=str(data_dir))]
    recorded = prov.collect(configs)
    assert prov.changes(recorded, prov.collect(configs)) == ([], [])
    assert prov.changes(None, recorded) == ([], [])  # an experiment from before provenance

    other = json.loads(json.dumps(recorded))
    other["packages"]["torch"] = "0.0.1"
    other["git"] = {"commit": "f" * 40, "diff_sha256": None}
    blocking, notes = prov.changes(other, recorded)
    assert blocking == []
    assert any(note.startswith("torch 0.0.1 ->") for note in notes)
    assert any(note.startswith("git commit ffffffffffff ->") for note in notes)

    other["code"]["sha256"] = "0" * 64
    assert prov.changes(other, recorded)[0][0].startswith("the code (000000000000 -> ")

    flip_byte(data_dir / "table.parquet", (data_dir / "table.parquet").stat().st_size // 2)
    blocking, _ = prov.changes(recorded, prov.collect(configs))
    before = recorded["data"][str(data_dir)]["fingerprint"][:12]
    after = prov.collect(configs)["data"][str(data_dir)]["fingerprint"][:12]
    assert blocking == [f"the data {data_dir} ({before} -> {after}: table.parquet changed)"]


def test_trial_columns(checkout):
    config = TrialConfig()
    recorded = prov.collect([config])
    columns = prov.trial_columns(recorded, config)
    assert columns["data_source"] == prov.data_source(config)
    assert columns["data_fingerprint"] == recorded["data"][columns["data_source"]]["fingerprint"]
    assert columns["code_fingerprint"] == recorded["code"]["sha256"][:16]
    assert prov.trial_columns(None, config)["data_fingerprint"] is None


# ---------------------------------------------------------------------------------- CLI

ARGS = ["--space", "components", "--only", "baseline", "--seeds", "1", "--epochs", "1",
        "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16", "--set", "num_heads=2",
        "--set", "batch_size=8", "--quiet"]


def write_experiment(storage: Path, name: str, argv: list[str]) -> Path:
    """experiment.json exactly as a run of ``argv`` writes it when it starts (no Ray)."""
    from ablations.cli.commands import parser_of
    from ablations.experiment.core.options import RunOptions
    from ablations.experiment.prepare import prepare
    from ablations.cli.requests import request_from
    from ablations.experiment.provenance.experiment_record import experiment_metadata
    from ablations.results.io.files import METADATA_FILE, write_json_atomic

    run = parser_of("run")
    prepared = prepare(request_from(run.parse_args(argv)))  # as the command
    options = RunOptions(storage=storage, name=name, space=prepared.space.name)
    meta = experiment_metadata(prepared.trials, options, dt.datetime.now(dt.timezone.utc),
                               prepared.skipped, prepared.design.configs(prepared.trials))
    prepared.design.record(meta)
    folder = storage / name
    folder.mkdir(parents=True)
    write_json_atomic(meta, str(folder / METADATA_FILE))
    return folder / METADATA_FILE


@pytest.mark.parametrize("how", ["--resume", "same --name"])
def test_a_resume_with_changed_data_is_refused_before_ray(capsys, tmp_path, how, checkout):
    data = write_data_dir(tmp_path / "data", n=60, frames=4)
    argv = [*ARGS, "--data", str(data)]
    metadata = write_experiment(tmp_path / "results", "exp", argv)
    recorded = metadata.read_bytes()
    change_a_target(data)

    where = ["--storage", str(tmp_path / "results"), "--name", "exp"]
    code = cli.main(["--resume", *where] if how == "--resume" else [*argv, *where])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "cannot be resumed: changed since it started: " in lines[0]
    assert f"the data {data} (" in lines[0] and "table.parquet changed" in lines[0]
    assert "--allow-changed" in lines[0]
    assert metadata.read_bytes() == recorded  # nothing written
    import ray

    assert not ray.is_initialized()


def test_a_resume_with_changed_code_is_refused(capsys, tmp_path, checkout):
    argv = list(ARGS)
    metadata = write_experiment(tmp_path / "results", "exp", argv)
    meta = json.loads(metadata.read_text())
    meta["provenance"]["code"]["sha256"] = "0" * 64  # as if the source had changed since
    metadata.write_text(json.dumps(meta))
    code = cli.main(["--resume", "--storage", str(tmp_path / "results"), "--name", "exp"])
    err = capsys.readouterr().err
    assert code == 2 and "changed since it started: the code (000000000000 -> " in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_allow_changed_resumes_and_records_what_changed(capsys, tmp_path, ray_local):
    data = write_data_dir(tmp_path / "data", n=60, frames=4)
    storage = tmp_path / "results"
    where = ["--storage", str(storage), "--name", "exp"]
    assert cli.main([*ARGS, "--data", str(data), *where]) == 0
    folder = storage / "exp"
    first = json.loads((folder / "experiment.json").read_text())
    trials = pd.read_parquet(folder / "trials.parquet")
    source = str(data)
    assert trials["data_source"].tolist() == [source]
    assert trials["data_fingerprint"].tolist() == [first["provenance"]["data"][source][
        "fingerprint"]]
    assert trials["code_fingerprint"].tolist() == [first["provenance"]["code"]["sha256"][:16]]
    assert first["resume_history"] == []

    change_a_target(data)
    capsys.readouterr()
    assert cli.main(["--resume", *where]) == 2
    assert "table.parquet changed" in capsys.readouterr().err

    assert cli.main(["--resume", "--allow-changed", *where]) == 0
    err = capsys.readouterr().err
    assert "warning: resuming although it changed (--allow-changed): the data" in err
    assert "table.parquet changed" in err
    meta = json.loads((folder / "experiment.json").read_text())
    new = meta["provenance"]["data"][source]["fingerprint"]
    assert new != first["provenance"]["data"][source]["fingerprint"]
    (entry,) = meta["resume_history"]
    assert any("table.parquet changed" in change for change in entry["changed"])
    assert entry["previous"]["data"][source]["fingerprint"] == first["provenance"]["data"][
        source]["fingerprint"]
    # the trial finished on the old data: its row keeps that data's fingerprint and identity,
    # so that no later experiment on the new data reuses it
    again = pd.read_parquet(folder / "trials.parquet")
    assert again["data_fingerprint"].tolist() == trials["data_fingerprint"].tolist()
    assert again["trial_key"].tolist() == trials["trial_key"].tolist()
