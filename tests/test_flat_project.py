"""The runner as a guest in a researcher's flat project folder (tests/flat_project.py: their
own ``model.py``, ``results.py``, ``search_spaces.py``, ``data.py``, ``utils.py``,
``config.py``, ``train.py`` and ``fn.py``), through the installed ``run-ablations``, on a
local Ray: the runner imports under ``ablations`` only, so both contracts find the
researcher's modules, on the driver and on Ray's workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_here
from tests.flat_project import write_flat_project

pytestmark = pytest.mark.slow

RUN_ABLATIONS = Path(sys.executable).with_name("run-ablations")


def clean_env() -> dict[str, str]:
    """The environment of a researcher's shell: no PYTHONPATH pointing at the checkout."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


def run_from(folder: Path, *args: str) -> subprocess.CompletedProcess:
    # timeout: a deadlock guard, not a speed limit
    return subprocess.run([str(RUN_ABLATIONS), *args], cwd=folder, env=clean_env(),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return write_flat_project(tmp_path_factory.mktemp("flat") / "project")


def ok_trials(folder: Path, count: int) -> pd.DataFrame:
    trials = pd.read_parquet(folder / "trials.parquet")
    assert len(trials) == count, trials
    assert (trials["status"] == "ok").all(), trials[["trial_name", "status", "error"]]
    return trials


def test_no_module_of_the_runner_takes_a_common_name(tmp_path):
    code = ("import importlib.util as u\n"
            "print([n for n in ('model', 'results', 'search_spaces', 'run_ablations') "
            "if u.find_spec(n) is not None])\n"
            "import ablations.model.synthetic, ablations.results.io.files, "
            "ablations.search_spaces\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=clean_env(),
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    imports_model = subprocess.run([sys.executable, "-c", "import model"], cwd=tmp_path,
                                   env=clean_env(), capture_output=True, text=True)
    assert imports_model.returncode == 1
    assert "No module named 'model'" in imports_model.stderr


def test_a_script_importing_its_own_model_and_results_runs_every_trial(project, tmp_path):
    proc = run_from(project, "--space", "command.yaml", "--seeds", "2", "--quiet",
                    "--storage", str(tmp_path), "--name", "script")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    trials = ok_trials(tmp_path / "script", 4)
    assert trials["test_loss"].between(0, 1).all()
    # {standardize:--standardize}: a store_true flag there for the baseline, not for the arm
    loss = trials.groupby("ablation")["test_loss"].mean()
    assert loss["baseline"] != loss["raw_features"]
    assert sorted(trials["standardize"].tolist()) == [False, False, True, True]
    # the command it suggests is spelled as the researcher started it: no run_ablations.py here
    assert f"Report: run-ablations report {tmp_path / 'script'}\n" in proc.stdout, proc.stdout
    # what the identity takes beyond the runner's packages: what the researcher's files import
    record = json.loads((tmp_path / "script" / "experiment.json").read_text())
    assert set(record["provenance"]["own_code"]["packages"]) == {"numpy", "PyYAML"}
    # the same command under another name: every trial is the first run's (trial_store.py),
    # Tune runs nothing (the command line in this process: what is reused is not about the
    # entry point)
    again = run_here("--space", "command.yaml", "--seeds", "2", "--quiet",
                     "--storage", str(tmp_path), "--name", "script-again", cwd=project)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    reused = ok_trials(tmp_path / "script-again", 4)
    assert (reused["reused_from"] == "script/" + reused["trial_name"]).all()
    assert reused["test_loss"].tolist() == trials["test_loss"].tolist()
    assert "4 of 4 trials reused from script; 0 to train" in again.stdout + again.stderr
    assert "(4 reused)" in again.stdout
    assert not (tmp_path / "script-again" / "tune").exists()


def test_a_function_named_module_colon_name_is_found_in_the_folder_it_starts_from(
        project, tmp_path):
    proc = run_from(project, "--model", "fn:FLAT", "--space", "fit.yaml", "--seeds", "2",
                    "--quiet", "--storage", str(tmp_path), "--name", "function")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    trials = ok_trials(tmp_path / "function", 4)
    assert trials["test_loss"].between(0, 1).all()
    strong = trials[trials["ablation"] == "strong_l2"]["test_loss"]
    assert (strong > trials[trials["ablation"] == "baseline"]["test_loss"].max()).all()


def test_a_folder_whose_own_ablations_module_would_shadow_the_runner_is_refused(tmp_path):
    folder = write_flat_project(tmp_path / "shadow")
    (folder / "ablations.py").write_text("x = 1\n")
    proc = run_from(folder, "--space", "command.yaml", "--seeds", "1",
                    "--storage", str(tmp_path / "results"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "ablations.py" in lines[0] and "rename" in lines[0], lines
    assert not (tmp_path / "results").exists()
