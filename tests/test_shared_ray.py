"""Trials of a researcher's flat project (tests/flat_project.py: its own ``model.py`` and
``results.py``, names the checkout's packages also have) run through the command line in this
process (``run_here``) on the test worker's shared Ray, which started from the checkout: the trials
run in the driver's folder and import the project's modules first on their path
(ablations/experiment/execution/trainable.py, ``trial_cwd``), whatever folder and path the Ray's
workers started with; a second project with modules of the same names gets its own, not the
first's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO, run_here, shared_ray
from tests.flat_project import write_flat_project

pytestmark = pytest.mark.slow

# Each script and training function checks that the model it imported is the one beside it.
SAME_FOLDER = ("import os as _os\n"
               "assert _os.path.dirname(_os.path.abspath(model.__file__)) == "
               "_os.path.dirname(_os.path.abspath(__file__)), model.__file__\n")


def project(folder: Path, l2: str) -> Path:
    write_flat_project(folder)
    for name in ("train.py", "fn.py"):
        path = folder / name
        text = path.read_text()
        head, _, rest = text.partition("\nassert model.OWNER")
        path.write_text(head + "\n" + SAME_FOLDER + "assert model.OWNER" + rest)
    # the second project's arm differs, so that its table cannot be the first's
    (folder / "fit.yaml").write_text(f"name: flat-fit\nvariants:\n  baseline: {{}}\n"
                                     f"  strong_l2: {{l2: {l2}}}\n")
    return folder


def ok(folder: Path) -> pd.DataFrame:
    trials = pd.read_parquet(folder / "trials.parquet")
    assert (trials["status"] == "ok").all(), trials[["trial_name", "status", "error"]]
    return trials


def test_own_code_from_folders_of_their_own_runs_on_the_shared_ray(tmp_path):
    ray = shared_ray()
    address = ray.get_runtime_context().gcs_address
    first = project(tmp_path / "first", "1.0")
    second = project(tmp_path / "second", "0.5")
    assert Path.cwd() == REPO  # where the shared Ray's workers started

    script = run_here("--space", "command.yaml", "--seeds", "1", "--storage",
                      str(tmp_path / "r"), "--name", "script", "--no-dashboard", cwd=first)
    assert script.returncode == 0, script.stdout[-3000:] + script.stderr[-3000:]
    assert len(ok(tmp_path / "r" / "script")) == 2

    tables = {}
    for folder in (first, second):
        done = run_here("--model", "fn:FLAT", "--space", "fit.yaml", "--seeds", "1",
                        "--storage", str(tmp_path / "r"), "--name", f"fit-{folder.name}",
                        "--no-dashboard", cwd=folder)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        tables[folder.name] = ok(tmp_path / "r" / f"fit-{folder.name}").set_index("ablation")
    assert tables["first"].loc["strong_l2", "l2"] == 1.0
    assert tables["second"].loc["strong_l2", "l2"] == 0.5
    assert tables["first"].loc["strong_l2", "test_loss"] \
        != tables["second"].loc["strong_l2", "test_loss"]
    assert ray.is_initialized() and ray.get_runtime_context().gcs_address == address
