"""A kind of own code added in one file (tests/contract_epochs.py: a generator of each epoch's
metrics and its contract): its trial runs through run_trial like a training function's, its
keys plan a table, its module is its sources, and through the installed ``run-ablations`` from
a researcher's folder every trial trains on a local Ray and gets its verdict."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from ablations.config import ConfigError, TrialConfig
from ablations.contract import Contract, OwnCode, register_contract
from ablations.experiment.provenance.own_code_files import own_code_sources
from ablations.experiment.prepare import prepare
from ablations.experiment.core.request import Request
from ablations.trial.contracts import contract_of
from ablations.trial.run import run_trial
from tests import contract_epochs
from tests.test_flat_project import ok_trials, run_from

SPEC = "tests.contract_epochs:TOY"


@dataclasses.dataclass(frozen=True)
class Unregistered(OwnCode):
    """A kind of own code whose module registers no contract."""

    name: str = "orphan"
    config: type = contract_epochs.Toy
    metrics: object = dataclasses.field(default_factory=lambda: {"val_loss": "lower"})

    def __post_init__(self) -> None:
        self.check()


ORPHAN = Unregistered()


def run(config: TrialConfig, folder: Path):
    sent = []
    result = run_trial(config, name="baseline-seed0",
                       send=lambda metrics, final, path: sent.append((metrics, final)),
                       store=lambda state: None, saved=None, folder=folder,
                       device=torch.device("cpu"), resources={"CPU": 1})
    return result, sent


def test_a_trial_of_the_new_kind_reports_each_epoch_and_ends_with_the_last(tmp_path):
    config = TrialConfig.of(model=SPEC, steps=4, width=8)
    assert isinstance(config.own_code, contract_epochs.EpochGenerator)
    expected = list(contract_epochs.toy_epochs(config.model, config.seeds.init))
    result, sent = run(config, tmp_path)
    epochs = [metrics for metrics, final in sent if not final]
    assert [row["epoch"] for row in epochs] == [1, 2, 3, 4]
    assert [row["val_loss"] for row in epochs] == [row["val_loss"] for row in expected]
    assert result["status"] == "ok" and result["val_loss"] == expected[-1]["val_loss"]
    assert result["epochs_run"] == 4
    other, _ = run(TrialConfig.of(model=SPEC, steps=4, width=8, seed=1), tmp_path / "b")
    assert other["val_loss"] != result["val_loss"]  # the trial's seed reaches the code


def test_its_keys_and_metrics_are_checked_and_plan_a_table(tmp_path, capsys):
    from tests.test_cli import in_process

    with pytest.raises(ConfigError, match="widht"):
        TrialConfig.of(model=SPEC, widht=3)
    with pytest.raises(ConfigError, match="'up'"):
        contract_epochs.EpochGenerator("bad", contract_epochs.Toy, contract_epochs.toy_epochs,
                                       {"val_loss": "up"})
    space = tmp_path / "table.yaml"
    space.write_text(f"model: {SPEC}\nvariants:\n  baseline: {{}}\n  narrow: {{width: 2}}\n")
    prepared = prepare(Request(space=str(space), seeds=[0, 1]))
    assert [spec.config.model.width for spec in prepared.trials] == [4, 4, 2, 2]
    assert prepared.design.plan_spec["decision"].metric == "val_loss"
    code, out, err = in_process(capsys, "--space", str(space), "--seeds", "2", "--dry-run")
    assert code == 0, err
    assert re.search(r"narrow-seed1\s+width=2\n", out), out


def test_its_sources_are_its_modules_package(tmp_path):
    """Started from another folder: the files of the package its module is in (tests/)."""
    folder, files, _ = own_code_sources([TrialConfig.of(model=SPEC)], folder=tmp_path)
    module = Path(contract_epochs.__file__).resolve()
    assert module in files and folder == module.parent.parent  # paths relative to its root
    assert all(path.is_relative_to(module.parent) for path in files)


def test_a_kind_without_a_contract_is_refused_in_one_line_before_any_trial(tmp_path, capsys):
    from tests.test_cli import assert_one_line_error, in_process

    with pytest.raises(ConfigError, match="no contract is registered for Unregistered"):
        contract_of(ORPHAN)
    space = tmp_path / "table.yaml"
    space.write_text(f"model: {__name__}:ORPHAN\nvariants:\n  baseline: {{}}\n"
                     "  narrow: {width: 2}\n")
    code, _, err = in_process(capsys, "--space", str(space), "--storage", str(tmp_path / "r"))
    assert_one_line_error(code, err, "model orphan: no contract is registered for Unregistered")
    assert not (tmp_path / "r").exists()  # refused before anything was written
    with pytest.raises(TypeError, match="subclass of ablations.contract.OwnCode"):
        register_contract(dict, Contract(fit=contract_epochs.fit_epochs))


def test_docs_worked_example_is_this_contract():
    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    section = text.split("## Adding a contract", 1)[1].split("\n## ", 1)[0]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "class EpochGenerator(OwnCode)" in block and "register_contract(" in block
    assert block in Path(contract_epochs.__file__).read_text()


@pytest.mark.slow
def test_the_new_kind_runs_from_a_researchers_folder_through_the_command_line(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(contract_epochs.__file__, project / "epochs_contract.py")
    (project / "table.yaml").write_text(
        "model: epochs_contract:TOY\nvariants:\n  baseline: {}\n  narrow: {width: 2}\n")
    proc = run_from(project, "--space", "table.yaml", "--seeds", "2", "--quiet",
                    "--storage", str(tmp_path / "results"), "--name", "epochs")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    root = tmp_path / "results" / "epochs"
    trials = ok_trials(root, 4)
    epochs = pd.read_parquet(root / "epochs.parquet")
    assert epochs.groupby("trial_name")["epoch"].max().tolist() == [3, 3, 3, 3]
    last = epochs.sort_values("epoch").groupby("trial_name")["val_loss"].last()
    assert trials.set_index("trial_name")["val_loss"].to_dict() == last.to_dict()
    assert set(trials["model"]) == {"epochs_contract:TOY"}
    # narrow's loss is higher at every seed (1/width): the console and the record agree on it
    assert "narrow" in proc.stdout and "worse" in proc.stdout, proc.stdout
    record = json.loads((root / "experiment.json").read_text())
    assert any(path.endswith("epochs_contract.py")
               for path in record["provenance"]["own_code"]["files"]), record["provenance"]
