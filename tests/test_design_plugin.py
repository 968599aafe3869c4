"""A design of one's own (tests/design_long.py, one file) with an option of its own
(``--long-factor``, ``LongOptions(factor=...)``), from a project folder: it plans (the dry run
and the run's first line say so) and runs (every trial at three times the epochs asked: a
trial set to fail at epoch 2 fails), both through the command line in this process
(run_here); then the installed command line, in processes of their own, imports it again from
what the run recorded: it resumes (the failed trials continue from their saved epoch to 3, not
to 9: the recorded plan is not multiplied again), and `report` writes its sentence under the
verdicts and in the methods paragraph. Its flag is in ``run --help`` once ``--design`` names
it; the library takes its options as an object. The refusals are one line each, before
anything is planned."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from ablations import DesignOptions, Flag, Table, register_design
from tests.conftest import REPO, run_here
from tests.test_cli import assert_one_line_error, in_process

SPEC = "tests.design_long:Long"
TINY = ["batch_size=16", "synthetic_train=96", "synthetic_val=32", "synthetic_test=48",
        "cnn_widths=8,16,16", "embed_dim=16", "num_heads=2", "eval_batch_size=64", "epochs=1"]
SPACE = """
    name: long-check
    variants:
      baseline: {}
      flaky: {fail_at_epoch: 2}
    """


def run_cli(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed `run-ablations` in ``folder``; tests.* import through PYTHONPATH (the
    driver's and the local Ray's workers')."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run([str(Path(sys.executable).with_name("run-ablations")), *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=400)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("long-project")
    (folder / "long.yaml").write_text(textwrap.dedent(SPACE))
    return folder


def plan_args(name: str) -> list[str]:
    sets = [part for key in TINY for part in ("--set", key)]
    return ["--space", "long.yaml", "--model", "tests.faulty:FAULTY", "--design", SPEC,
            "--long-factor", "3", "--seeds", "2", *sets, "--name", name, "--no-dashboard"]


@pytest.mark.slow
def test_a_design_of_ones_own_plans_runs_resumes_and_reports(project):
    dry = run_here(*plan_args("long"), "--dry-run", cwd=project)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    listed = [line for line in dry.stdout.splitlines() if "-seed" in line]
    assert len(listed) == 4 and all(re.search(r"\bepochs=3\b", line) for line in listed), \
        dry.stdout
    assert not (project / "ablation_results" / "long").exists()

    first = run_here(*plan_args("long"), cwd=project)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "each trained for 3x the epochs asked" in first.stdout
    assert "Long design: every trial trained for 3x the epochs asked." in first.stdout
    root = project / "ablation_results" / "long"
    meta = json.loads((root / "experiment.json").read_text())
    assert meta["design_plugin"] == SPEC and meta["long"] == {"factor": 3}
    trials = pd.read_parquet(root / "trials.parquet").set_index("trial_name")
    assert (trials["epochs"] == 3).all()
    ran = trials.loc[["baseline-seed0", "baseline-seed1"]]
    assert (ran["status"] == "ok").all() and (ran["epochs_run"] == 3).all()
    flaky = trials.loc[["flaky-seed0", "flaky-seed1"]]
    assert (flaky["status"] == "failed").all() and (flaky["epochs_run"] == 1).all()

    resumed = run_cli(project, "--resume", "--name", "long", "--retry-failed",
                      "--no-dashboard")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    trials = pd.read_parquet(root / "trials.parquet").set_index("trial_name")
    assert (trials["status"] == "ok").all(), trials["status"]
    assert (trials["epochs"] == 3).all() and (trials["epochs_run"] == 3).all()
    assert trials.loc["flaky-seed0", "resumed_from_epoch"] == 1
    assert "Long design: every trial trained for 3x the epochs asked." in resumed.stdout

    report = run_cli(project, "report", str(root), "--figures", "png")
    assert report.returncode == 0, report.stdout + report.stderr
    page = (root / "report.md").read_text()
    assert "Every trial trained for 3x the epochs asked (a long design)." in page
    methods = (root / "methods.md").read_text()
    assert "Every trial trained for 3 times the configured number of epochs" in methods


def test_its_flag_is_in_run_help_once_design_names_it(capsys):
    code, out, _ = in_process(capsys, "run", "--design", SPEC, "--help")
    assert code == 0
    assert re.search(r"design long:\n\s+--long-factor N\s+with --design "
                     r"tests.design_long:Long: train every\s+trial for N", out), out
    code, out, _ = in_process(capsys, "run", "--help")
    assert code == 0 and "--long-factor" not in out


@pytest.mark.parametrize("design, epochs", [(SPEC, 8), ("LongOptions(factor=5)", 20)])
def test_the_library_asks_for_it_by_name_or_with_its_options(design, epochs):
    from ablations import Experiment
    from tests.design_long import LongOptions

    asked = LongOptions(factor=5) if design.startswith("LongOptions") else design
    trials = Experiment("components", design=asked, only=["no_temporal_attention"],
                        overrides={"epochs": 4}).plan()
    assert {spec.config.flat()["epochs"] for spec in trials} == {epochs}


class ClashingOptions(DesignOptions):
    kind = "clashing"
    flags = (Flag("epochs", help="a flag that takes run's own --epochs"),)


@register_design
class Clashing(Table):
    name = record_key = "clashing"
    options = ClashingOptions


def test_its_options_are_refused_in_one_line(capsys, monkeypatch, tmp_path):
    from ablations import Experiment, UsageError
    from tests.design_long import LongOptions

    with pytest.raises(UsageError, match=r"^long_factor: 0 must be an integer >= 1$"):
        Experiment("components", design=LongOptions(factor=0)).plan()
    monkeypatch.chdir(tmp_path)
    for args, expected in (
            (["--design", SPEC, "--long-factor", "0"], "argument --long-factor: '0' must be >= 1"),
            (["--long-factor", "3"], "unrecognized arguments: --long-factor 3"),
            (["--design", "clashing"], "--design clashing: argument --epochs: conflicting "
             "option string: --epochs; give the design's flags names of their own")):
        code, _, err = in_process(capsys, *args, "--dry-run")
        assert_one_line_error(code, err, expected)


def test_a_design_that_does_not_import_or_refuses_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for design, expected in (
            ("no_such_module:Design", "cannot import no_such_module"),
            ("tests.design_long:Nope", "tests.design_long.Nope is not a subclass of"),
            ("tests.faulty:FAULTY", "tests.faulty.FAULTY is not a subclass of"),
            ("long design", "name a design of your own as package.module:Class")):
        code, _, err = in_process(capsys, "--design", design, "--dry-run")
        assert_one_line_error(code, err, expected)
    code, _, err = in_process(capsys, "--design", SPEC, "--seeds", "auto", "--dry-run")
    assert_one_line_error(code, err, f"--design {SPEC}: --seeds auto runs rounds")


def test_a_design_cannot_take_a_built_in_designs_name_or_record_key():
    from ablations import Table
    from ablations.experiment.designs.registry import REGISTERED, register_design

    for name, key in (("search", "mine"), ("mine", "rounds"), ("mine", "search")):
        kind = type("Mine", (Table,), {"name": name, "record_key": key})
        with pytest.raises(ValueError, match="is a built-in design's"):
            register_design(kind)
        assert REGISTERED.get(name) is not kind


def test_the_table_designs_earlier_name_still_imports_with_a_warning():
    import ablations
    from ablations import Table

    with pytest.warns(DeprecationWarning, match="ablations.Grid is ablations.Table"):
        assert ablations.Grid is Table


def test_one_registration_takes_the_designs_analysis_and_report_under_its_name():
    from ablations import Analysis, DesignReport, Table
    from ablations.experiment.designs.registry import REGISTERED, register_design
    from ablations.results.report.designs import REPORTS
    from ablations.results.stats.analyses import ANALYSES

    from tests.design_long import Long, LongAnalysis, LongReport

    assert REGISTERED["long"] is Long and ANALYSES["long"] is LongAnalysis
    assert REPORTS[LongAnalysis] is LongReport
    short = type("Short", (Table,), {"name": "short", "record_key": "short"})
    other = type("OtherAnalysis", (Analysis,), {"name": "other", "record_key": "short"})
    with pytest.raises(ValueError, match=r"its name and record key \('short', 'short'\)"):
        register_design(short, analysis=other)
    with pytest.raises(ValueError, match="registered with its analysis"):
        register_design(short, report=type("ShortReport", (DesignReport,), {}))
    assert "short" not in REGISTERED and "other" not in ANALYSES
