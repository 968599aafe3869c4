"""The researcher's code is part of what an experiment ran (ablations/experiment/
own_code_files.py): a resume on edited code is refused in one line naming the files, and with
--allow-changed trials.parquet says which trials ran on which code."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from ablations.config.code import command_from
from ablations.config.trial import TrialConfig
from ablations.experiment.provenance.own_code_files import (
    combined_fingerprint,
    own_code_change,
    own_code_record,
)
from ablations.experiment.provenance.provenance import changes
from tests.conftest import run_here

SPACE = """\
name: tiny
command: "{python} train.py --x {x} --seed {seed} --metrics-file {metrics_file}"
config: {x: 1.0}
metrics: {score: lower}
reference: baseline
variants:
  baseline: {}
  bigger: {x: 2.0}
"""
SCRIPT = """\
import argparse, json
parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float); parser.add_argument("--seed", type=int)
parser.add_argument("--metrics-file")
args = parser.parse_args()
if args.x == 2.0 and args.seed == 1:
    raise SystemExit("a bug in bigger's second seed")
with open(args.metrics_file, "a") as handle:
    handle.write(json.dumps({"score": args.x + 0.01 * args.seed}) + "\\n")
"""


def project(folder: Path) -> Path:
    """A researcher's flat folder: the script, a helper module, the space file, a venv."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(SCRIPT)
    (folder / "utils.py").write_text("HELP = 1\n")
    (folder / "space.yaml").write_text(SPACE)
    (folder / ".venv" / "lib").mkdir(parents=True)
    (folder / ".venv" / "lib" / "site.py").write_text("# an environment, not the code\n")
    return folder


def configs(folder: Path) -> list[TrialConfig]:
    from ablations.experiment.api import Experiment

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return [spec.config for spec in Experiment(str(folder / "space.yaml"), seeds=1)
                .plan()]
    finally:
        os.chdir(cwd)


def test_a_commands_record_holds_the_folders_python_files_and_what_it_names(tmp_path):
    folder = project(tmp_path / "proj")
    record = own_code_record(configs(folder), folder)
    assert set(record["files"]) == {"train.py", "utils.py"}  # not the environment's
    assert record["root"] == str(folder.resolve()) and not record["truncated"]
    (folder / "train.py").write_text(SCRIPT + "# tuned\n")
    (folder / "extra.py").write_text("X = 2\n")
    again = own_code_record(configs(folder), folder)
    assert again["files"]["utils.py"] == record["files"]["utils.py"]
    assert own_code_change(record, again) == "your code (train.py changed; extra.py added)"
    assert own_code_change(record, record) is None
    blocking, _ = changes({"own_code": record}, {"own_code": again})
    assert blocking == ["your code (train.py changed; extra.py added)"]
    assert combined_fingerprint("a" * 64, record["sha256"]) != \
        combined_fingerprint("a" * 64, again["sha256"])
    assert combined_fingerprint("a" * 64, None) == "a" * 16
    assert own_code_record([TrialConfig()], folder) is None  # the built-in model


def test_an_editors_lock_file_and_an_unreadable_file_do_not_stop_the_fingerprint(
        tmp_path, monkeypatch):
    folder = project(tmp_path / "proj")
    # Emacs's lock while train.py is edited: a link to a name that is no file
    os.symlink("root@host.1234:1700000000", folder / ".#train.py")
    os.symlink(folder / "gone.py", folder / "dangling.py")
    (folder / ".hidden.py").write_text("X = 1\n")
    record = own_code_record(configs(folder), folder)
    assert set(record["files"]) == {"train.py", "utils.py"}
    real = Path.read_bytes

    def refuse(path):  # a file made unreadable between the walk and the read
        if path.name == "utils.py":
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    unreadable = own_code_record(configs(folder), folder)
    assert own_code_change(record, unreadable) == "your code (utils.py changed)"


def test_the_record_names_the_installed_packages_the_code_imports_with_their_versions(
        tmp_path):
    """What a trial's identity takes beyond torch and numpy (trial_store.own_imports): the
    distributions the researcher's files import, not the standard library, their own modules
    (a `yaml.py` of theirs shadows PyYAML), a relative import or the runner."""
    import importlib.metadata

    from ablations.experiment.provenance.own_code_files import imported_packages

    (tmp_path / "train.py").write_text(
        "import os, json\nimport utils\nfrom . import sibling\nimport ablations.contract\n"
        "from numpy.random import default_rng\nimport optuna.samplers as s\n")
    (tmp_path / "utils.py").write_text("def helper():\n    import pyarrow.parquet\n")
    (tmp_path / "broken.py").write_text("import pandas\ndef (:\n")  # does not parse
    files = sorted(tmp_path.glob("*.py"))
    version = importlib.metadata.version
    assert imported_packages(tmp_path, files) == {
        "numpy": version("numpy"), "optuna": version("optuna"), "pyarrow": version("pyarrow")}
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "optuna.py").write_text("X = 1\n")  # not the top-level name
    (tmp_path / "pyarrow.py").write_text("X = 1\n")  # a module of theirs named as a package
    files = sorted(tmp_path.rglob("*.py"))
    assert set(imported_packages(tmp_path, files)) == {"numpy", "optuna"}
    folder = project(tmp_path / "proj")
    (folder / "utils.py").write_text("import yaml\n")
    assert own_code_record(configs(folder), folder)["packages"] == {"PyYAML": version("PyYAML")}


def test_the_files_trials_name_are_their_data_and_a_script_outside_the_folder_their_code(
        tmp_path, monkeypatch):
    """A command's fixed words and each trial's string values that name files: each trial's
    data (its data_fingerprint, so its identity: a trial keeps its own when a file only
    another trial names changes), and a resume after a change of one is refused naming it; a
    file that appears (an output, a new variant's) is no change. A script named outside the
    folder: code, by its path."""
    from ablations.experiment.provenance import own_code_files
    from ablations.experiment.provenance.own_code_files import file_fingerprint, named_data
    from ablations.experiment.provenance.provenance import data_fingerprints, trial_columns

    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "fit.py").write_text("print(1)\n")
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "data.csv").write_text("1,2\n")
    (folder / "a.txt").write_text("a\n")
    (folder / "b.txt").write_text("b\n")
    (folder / "space.yaml").write_text(textwrap.dedent(f"""\
        name: named
        command: "{{python}} {shared / 'fit.py'} --data data.csv --extra={{extra}} --out {{out}}"
        config: {{extra: a.txt, optimizer: adam, out: model.pt}}
        metrics: {{score: lower}}
        reference: baseline
        variants: {{baseline: {{}}, other: {{extra: b.txt}}}}
        """))
    (folder / "results").mkdir()  # a folder named: not read
    planned = configs(folder)
    assert set(named_data(planned, folder)["files"]) == {"data.csv", "a.txt", "b.txt"}
    record = own_code_record(planned, folder)
    assert str(shared / "fit.py") in record["files"]
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        before = {"data": data_fingerprints(planned)}
        (folder / "b.txt").write_text("changed\n")
        middle = {"data": data_fingerprints(planned)}
        (folder / "model.pt").write_bytes(b"weights")  # what a trial wrote
        after = {"data": data_fingerprints(planned)}
    finally:
        os.chdir(cwd)
    baseline, other = (config for config in planned if config.seed == 0)
    assert baseline.ablation == "baseline" and other.ablation == "other"
    assert trial_columns(before, baseline) == trial_columns(middle, baseline)
    assert trial_columns(before, other)["data_fingerprint"] != \
        trial_columns(middle, other)["data_fingerprint"]
    blocking, _ = changes(before, after)
    assert blocking == ["the files your trials name (b.txt changed)"]
    # a file too large to read whole at each start: its start, middle and end
    monkeypatch.setattr(own_code_files, "WHOLE_FILE_BYTES", 2)
    monkeypatch.setattr(own_code_files, "SAMPLE_BYTES", 1)
    large = folder / "data.csv"  # 1,2\n: 4 bytes, read at 0, 2 and 3
    first = file_fingerprint(large)
    large.write_text("1;2\n")  # a byte between the samples
    assert file_fingerprint(large) == first
    large.write_text("1,3\n")
    assert file_fingerprint(large) != first


def test_a_project_under_the_system_pythons_prefix_keeps_its_named_files(tmp_path,
                                                                        monkeypatch):
    """A container's /usr/src/app lies under a system Python's /usr: the files its command
    names are still the researcher's; the interpreter and its libraries are not."""
    import sys
    import types

    from ablations.experiment.provenance import own_code_files

    folder = tmp_path / "src" / "app"
    folder.mkdir(parents=True)
    (folder / "cfg.yaml").write_text("lr: 1\n")
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path))
    monkeypatch.setattr(sys, "base_exec_prefix", str(tmp_path))
    own_code_files.environment_folders.cache_clear()
    try:
        command = command_from(f"{sys.executable} train.py --config cfg.yaml", {},
                               {"acc": "higher"})
        _, named, _ = own_code_files.own_code_sources(
            [types.SimpleNamespace(own_code=command)], folder)
    finally:
        own_code_files.environment_folders.cache_clear()
    assert named == [(folder / "cfg.yaml").resolve()]


def test_a_partial_of_a_training_function_is_fingerprinted_by_the_functions_files(tmp_path):
    import functools
    import types

    from ablations.experiment.provenance.own_code_files import own_code_sources

    from tests import faulty

    wrapped = dataclasses.replace(faulty.FAULTY, fit=functools.partial(faulty.FAULTY.fit))
    config = types.SimpleNamespace(own_code=wrapped)
    root, files, _ = own_code_sources([config], tmp_path)
    assert Path(faulty.__file__).resolve() in files  # the files of its top-level package
    assert not any(path.name == "functools.py" for path in files)


def test_a_model_plugins_module_is_fingerprinted_and_an_edit_blocks_a_resume(tmp_path,
                                                                            monkeypatch):
    """A plugin in the researcher's flat folder: its folder's files, as a training function's;
    an edit of its module is a change a resume refuses. The runner's own packages are the
    runner's code (provenance's ``code``), not the researcher's."""
    import types

    folder = tmp_path / "plugproj"
    folder.mkdir()
    (folder / "myplugin.py").write_text("PLUGIN = None\n")
    (folder / "helpers.py").write_text("H = 1\n")
    monkeypatch.syspath_prepend(str(folder))
    plugin = [types.SimpleNamespace(own_code=None, plugin="myplugin:PLUGIN")]
    record = own_code_record(plugin, folder)
    assert set(record["files"]) == {"myplugin.py", "helpers.py"}
    (folder / "myplugin.py").write_text("PLUGIN = 1\n")
    blocking, _ = changes({"own_code": record}, {"own_code": own_code_record(plugin, folder)})
    assert blocking == ["your code (myplugin.py changed)"]
    runner_own = [types.SimpleNamespace(own_code=None, plugin="ablations.model.x:PLUGIN")]
    assert own_code_record(runner_own, folder) is None
    assert own_code_record([types.SimpleNamespace(own_code=None, plugin="")], folder) is None


def test_a_command_names_scripts_and_configs_not_data_and_storage_is_not_walked(
        tmp_path, monkeypatch):
    import ablations.experiment.provenance.own_code_files as own

    folder = project(tmp_path / "proj")
    (folder / "cfg.yaml").write_text("lr: 0.1\n")
    (folder / "frames.csv").write_text("1,2\n")
    (folder / "big.json").write_bytes(b" " * (own.MAX_NAMED_BYTES + 1))
    storage = folder / "runs" / "tiny-1"  # an experiment's storage under the project
    (storage / "tune").mkdir(parents=True)
    (storage / "experiment.json").write_text("{}")
    (storage / "copy.py").write_text("X = 1\n")
    settings = folder / "settings"  # a project's own experiment.json beside its code
    settings.mkdir()
    (settings / "experiment.json").write_text("{}")
    (settings / "paths.py").write_text("ROOT = '.'\n")
    (folder / "launch").write_text("#!/bin/sh\n")  # a script without a suffix
    (folder / "CFG.YAML").write_text("a: 1\n")
    (folder / "fit.R").write_text("x <- 1\n")  # a script in another language
    space = SPACE.replace("--metrics-file", "--config cfg.yaml --data frames.csv "
                          "--extra big.json --launcher launch --other CFG.YAML --r fit.R "
                          "--metrics-file")
    (folder / "space.yaml").write_text(space)
    record = own_code_record(configs(folder), folder)
    assert set(record["files"]) == {"train.py", "utils.py", "cfg.yaml", "launch", "CFG.YAML",
                                    "fit.R", "settings/paths.py"}
    assert not record["truncated"]
    named = {"cfg.yaml", "launch", "CFG.YAML", "fit.R"}
    # exactly at the limit is complete; one more file is truncated
    monkeypatch.setattr(own, "MAX_FILES", 3)
    assert not own_code_record(configs(folder), folder)["truncated"]
    (folder / "more.py").write_text("Y = 1\n")
    cut = own_code_record(configs(folder), folder)
    assert cut["truncated"] and len(set(cut["files"]) - named) == 3
    # a walk stops after MAX_ENTRIES entries, whatever they hold, and says so only where
    # something was left unread
    monkeypatch.setattr(own, "MAX_FILES", 2000)
    monkeypatch.setattr(own, "MAX_ENTRIES", 3)
    assert own_code_record(configs(folder), folder)["truncated"]
    flat = project(tmp_path / "flat")  # train.py, utils.py, space.yaml, .venv: 4 entries
    monkeypatch.setattr(own, "MAX_ENTRIES", 1)
    (flat / ".venv" / "lib" / "site.py").unlink()
    (flat / ".venv" / "lib").rmdir()
    (flat / ".venv").rmdir()
    assert not own_code_record(configs(flat), flat)["truncated"]  # nothing left to walk


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command line in this process, on the test worker's shared Ray: its trials run the
    project's script in ``cwd`` (tests/conftest.py, ``run_here``)."""
    return run_here(*args, cwd=cwd)


@pytest.mark.slow
def test_an_edited_script_is_named_on_resume_and_allowed_trials_keep_their_code(tmp_path):
    folder = project(tmp_path / "proj")
    run = ["--name", "t", "--storage", "results", "--no-dashboard"]
    first = cli("--space", "space.yaml", "--seeds", "2", *run, cwd=folder)
    trials = pd.read_parquet(folder / "results" / "t" / "trials.parquet").set_index(
        "trial_name")
    assert trials.loc["bigger-seed1", "status"] == "failed", first.stdout[-2000:]
    # the researcher fixes the bug and retries the failed trial
    (folder / "train.py").write_text(SCRIPT.replace("args.seed == 1", "args.seed == 99"))
    refused = cli("--resume", "--retry-failed", *run, cwd=folder)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "your code (train.py changed)" in refused.stderr and "--allow-changed" in \
        refused.stderr
    allowed = cli("--resume", "--retry-failed", "--allow-changed", *run, cwd=folder)
    assert allowed.returncode == 0, allowed.stdout[-2000:] + allowed.stderr[-2000:]
    after = pd.read_parquet(folder / "results" / "t" / "trials.parquet").set_index(
        "trial_name")
    assert (after["status"] == "ok").all(), after[["status", "error"]]
    codes = after["code_fingerprint"]
    assert codes.drop("bigger-seed1").nunique() == 1  # finished before the edit
    assert codes["bigger-seed1"] != codes["baseline-seed0"]  # ran on the edited script
    meta = json.loads((folder / "results" / "t" / "experiment.json").read_text())
    assert meta["resume_history"][-1]["changed"] == ["your code (train.py changed)"]
    assert set(meta["provenance"]["own_code"]["files"]) == {"train.py", "utils.py"}
