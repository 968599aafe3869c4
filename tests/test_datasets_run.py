"""An experiment over several datasets end to end (docs/datasets.md): the command line runs one
table on the synthetic data and a file dataset, prints each dataset's verdicts and the verdicts
across them, writes a ``dataset`` column in every table and across_datasets.parquet, and
``report`` draws the across-dataset report with each dataset's own; over five datasets the
library's run adds the ranks and the critical-difference diagram."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from ablations.results.io.files import read_metadata
from ablations.results.stats.decisions import across_datasets_of
from ablations.results.stats.datasets import FULL_ALPHA_NOTE
from tests.conftest import run_here, write_data_dir
from tests.interrupting import ctrl_c_when
from tools.browser_check import find_chromium

pytestmark = pytest.mark.slow

SPACE = """\
variants:
  baseline: {}
  no_images: {use_images: false}
  no_scalars: {use_scalars: false}
"""
SMALL = ["--epochs", "1", "--set", "max_train_examples=64", "--set", "max_eval_examples=32",
         "--set", "batch_size=8"]


@pytest.fixture(scope="module")
def two_datasets(tmp_path_factory):
    """The run, stopped with Ctrl-C (SIGINT to the driver, this process: tests/interrupting.py)
    once a trial has finished (its final checkpoint is in the experiment's tune/ folder), then
    resumed to the end; both run here, on the test worker's shared Ray. The tests read the
    resumed run's output and files (the first run's under "first")."""
    root = tmp_path_factory.mktemp("datasets")
    write_data_dir(root / "site_a", n=96, frames=4)
    space = root / "space.yaml"
    space.write_text(SPACE)
    experiment = root / "results" / "two"
    with ctrl_c_when(lambda: any(experiment.glob("tune/*/checkpoint_*"))) as stop:
        first = run_here("--space", str(space), "--data", "synthetic", "--data",
                         str(root / "site_a"), "--seeds", "2", *SMALL, "--storage",
                         str(root / "results"), "--name", "two", "--no-dashboard", cwd=root)
    assert stop.sent, first.stdout[-2000:] + first.stderr[-3000:]
    result = run_here("--resume", "--name", "two", "--storage", str(root / "results"),
                      "--no-dashboard", "--allow-changed", cwd=root)
    result.first = first
    return experiment, result


def test_the_run_ends_with_each_datasets_verdicts_and_those_across(two_datasets):
    folder, result = two_datasets
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    first = result.first
    assert first.returncode == 130, first.stdout[-3000:] + first.stderr[-3000:]  # Ctrl-C
    assert "12 trials (3 variants x 2 seeds x 2 datasets)" in first.stdout + first.stderr
    assert "Resuming experiment two" in out  # stopped by Ctrl-C, resumed to the end
    assert "Dataset synthetic (6 trials):" in out and "Dataset site_a (6 trials):" in out
    assert "Across 2 datasets (synthetic, site_a):" in out
    assert FULL_ALPHA_NOTE in out  # why the same trials alone may read otherwise
    across = pd.read_parquet(folder / "across_datasets.parquet")
    assert list(across["ablation"]) == ["no_images", "no_scalars"]
    assert (across["n_datasets"] == 2).all()
    block = out[out.index("Across 2 datasets"):]
    for _, row in across.iterrows():  # the console's row says the Parquet's verdict
        line = next(line for line in block.splitlines() if line.strip().startswith(
            row["ablation"]))
        assert row["verdict"] in line
        assert abs(float(line.split()[2]) - 100 * row["ratio"]) < 0.01  # the pooled ratio, %


def test_every_table_has_the_dataset_column(two_datasets):
    folder, _ = two_datasets
    trials = pd.read_parquet(folder / "trials.parquet")
    assert list(trials["dataset"].unique()) == ["synthetic", "site_a"]
    assert trials["trial_name"].str.startswith(("synthetic.", "site_a.")).all()
    assert (trials["status"] == "ok").all() and len(trials) == 12  # each trial once
    assert not trials["trial_name"].duplicated().any()
    for name in ("epochs", "predictions"):
        table = pd.read_parquet(folder / f"{name}.parquet")
        assert set(table["dataset"]) == {"synthetic", "site_a"}, name
        if name == "epochs":  # after the resume, every epoch once
            assert not table.duplicated(["trial_name", "epoch"]).any()
        named = table.drop_duplicates("trial_name").set_index("trial_name")["dataset"]
        assert (named == trials.set_index("trial_name").loc[named.index, "dataset"]).all()
    check = json.loads((folder / "baseline_check.json").read_text())
    assert set(check["datasets"]) == {"synthetic", "site_a"}


def test_the_across_table_is_what_the_trials_give(two_datasets):
    folder, _ = two_datasets
    trials = pd.read_parquet(folder / "trials.parquet")
    again = across_datasets_of(trials, read_metadata(str(folder)))
    written = pd.read_parquet(folder / "across_datasets.parquet")
    pd.testing.assert_series_equal(again["verdict"], written["verdict"], check_dtype=False)
    pd.testing.assert_series_equal(again["ratio"], written["ratio"], check_dtype=False)


def test_the_report_leads_with_the_verdicts_across_and_keeps_each_datasets(two_datasets):
    folder, _ = two_datasets
    result = run_here("report", str(folder), "--format", "latex")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Across the datasets:" in result.stdout
    assert f"Table (across latex): {folder / 'across_table.tex'}" in result.stdout
    table = (folder / "across_table.tex").read_text()
    assert r"\caption{Ablations across 2 datasets (synthetic, site\_a)" in table
    methods = (folder / "methods.md").read_text()
    assert "made on each of the 2 datasets (synthetic, site_a) separately" in methods
    page = (folder / "report.md").read_text()
    assert page.index("## Verdicts across the datasets") < page.index("## Differences per")
    across = pd.read_parquet(folder / "across_datasets.parquet")
    for ablation in across["ablation"]:
        assert (folder / "report_files" / f"forest-{ablation}.png").is_file()
        assert (folder / "report_files" / f"forest-{ablation}.pdf").is_file()
    for name in ("synthetic", "site_a"):
        own = (folder / "datasets" / name / "report.md").read_text()
        assert f"dataset {name}" in own.splitlines()[0]
        assert f"### Dataset {name}" in page
    assert page.count(FULL_ALPHA_NOTE) == 2  # under each dataset's verdicts
    assert "Ranks across the datasets" not in page  # two datasets: no ranks


def test_five_datasets_add_the_ranks_and_the_critical_difference_diagram(tmp_path, ray_local):
    from ablations.experiment.api import Experiment

    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    datasets = {f"draw{k}": {"data_seed": k} for k in range(5)}
    results = Experiment(str(space), seeds=2, data=datasets, epochs=1,
                         overrides={"max_train_examples": 64, "max_eval_examples": 32,
                                    "batch_size": 8},
                         storage=tmp_path / "results", name="five").run()
    assert set(results.verdicts["dataset"]) == set(datasets)
    assert list(results.across["ablation"]) == ["no_images", "no_scalars"]
    assert (results.across["n_datasets"] == 5).all()
    assert results.across["pi_low"].notna().all()  # k >= 3: a prediction interval
    from ablations.results.report.build import write_report

    report = write_report(results.directory, figures="png")
    page = report.markdown.read_text()
    assert "## Ranks across the datasets" in page
    assert (tmp_path / "results" / "five" / "report_files" / "critical_difference.png").is_file()


@pytest.mark.skipif(find_chromium() is None, reason="needs Chromium (apt-get install chromium)")
def test_in_a_browser_the_report_across_datasets_fits_1366_px(two_datasets):
    from tools.browser_check import checks, measure

    folder, _ = two_datasets
    if not (folder / "report.html").exists():
        assert run_here("report", str(folder), "--figures", "png").returncode == 0
    measured = measure(folder / "report.html", find_chromium(), width=1366)
    results = {check.name: check for check in checks(measured, 1366)}
    assert all(check.ok for check in results.values()), results
    assert len(measured["images"]) == 2  # a forest plot per ablation
