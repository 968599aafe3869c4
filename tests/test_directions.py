"""A metric's direction and unit are given, never ambient: own code's declared metric reaches
every verdict as an explicit :class:`~ablations.config.metrics.Metric` (or through the
experiment.json the caller reads), so the analysis called directly, the report, the summary
and the rounds of ``--seeds auto`` agree on which way is better (results/io/directions.py)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ablations.config.comparison import Decision
from ablations.config.metrics import Metric
from ablations.results.io.directions import metric_of
from ablations.results.io.files import SCHEMA_VERSION, write_parquet_atomic
from ablations.results.stats.compare import compare_experiments
from ablations.results.stats.decisions import experiment_verdicts
from ablations.results.stats.sequential import SeedDesign
from ablations.results.stats.sequential_table import sequential_verdict_table
from ablations.results.stats.verdicts import verdict_table

# what a classifier's own code declares (examples/digits/fit.py), as experiment.json keeps it
DECLARED = {"test_acc": {"direction": "higher", "unit": ""},
            "test_loss": {"direction": "lower", "unit": "nats"}}
ACC = Metric("test_acc", "higher", "")
# accuracy 0.90 at the reference; one arm clearly higher, one clearly lower, one the same
SHIFTS = {"baseline": 0.0, "no_dropout": 0.05, "no_augment": -0.10, "no_smoothing": 0.0}


def own_code_trials(seeds: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    seed_effect = 0.005 * rng.standard_normal(seeds)
    rows = []
    for arm, shift in SHIFTS.items():
        for seed in range(seeds):
            acc = 0.90 + shift + seed_effect[seed] + 0.002 * rng.standard_normal()
            rows.append({"experiment": "digits", "ablation": arm, "seed": seed,
                         "trial_name": f"{arm}-seed{seed}", "status": "ok",
                         "test_acc": acc, "test_loss": 1.0 - acc, "wall_s": 1.0,
                         "cpu_hours": 0.001, "gpu_hours": 0.0, "data_seed": 0})
    return pd.DataFrame(rows)


def own_code_experiment(root, trials: pd.DataFrame):
    """An experiment folder of own code: its tables and the experiment.json with its
    declared metrics (a classifier: no regression target in its predictions)."""
    root.mkdir(parents=True)
    epochs = trials[["experiment", "ablation", "seed", "trial_name"]].assign(
        epoch=1, val_acc=trials["test_acc"], val_loss=trials["test_loss"])
    predictions = trials[["experiment", "trial_name", "ablation", "seed"]].assign(
        sample_index=0)
    for name, frame in (("trials", trials), ("epochs", epochs), ("predictions", predictions)):
        write_parquet_atomic(frame, root / f"{name}.parquet")
    (root / "experiment.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION, "reference": "baseline", "metrics": DECLARED}))
    return root


def verdicts(table: pd.DataFrame) -> dict[str, str]:
    return dict(zip(table["ablation"], table["verdict"]))


def test_verdict_table_called_directly_takes_the_declared_direction():
    trials = own_code_trials()
    table = verdict_table(trials, metric=ACC)
    assert verdicts(table)["no_dropout"] == "better"  # higher accuracy, higher is better
    assert verdicts(table)["no_augment"] == "worse"
    assert (table.attrs["metric"], table.attrs["direction"], table.attrs["unit"]) == \
        ("test_acc", 1, "")
    # the declaration as experiment.json keeps it gives the same Metric
    assert metric_of("test_acc", DECLARED) == ACC
    assert verdicts(verdict_table(trials, metric=metric_of("test_acc", DECLARED))) == \
        verdicts(table)
    # a plain name is read as a built-in column: test_acc is none of the built-in model's,
    # so it has no direction, and the same tests only say which way the arm moved
    plain = verdict_table(trials, metric="test_acc")
    assert verdicts(plain)["no_dropout"] == "higher" and verdicts(plain)["no_augment"] == "lower"
    pd.testing.assert_series_equal(plain["p_holm"], table["p_holm"])
    # a lower-is-better declaration turns the same arm around
    lower = verdict_table(trials, metric=Metric("test_acc", "lower"))
    assert verdicts(lower)["no_dropout"] == "worse"


def test_a_built_in_column_needs_no_metric_and_reads_as_before():
    trials = own_code_trials().assign(test_mae=lambda f: 1.0 - f["test_acc"])
    by_name = verdict_table(trials, metric="test_mae")
    assert verdicts(by_name)["no_dropout"] == "better"  # a lower error
    assert (by_name.attrs["direction"], by_name.attrs["unit"]) == (-1, "km")
    given = verdict_table(trials, metric=metric_of("test_mae"))
    pd.testing.assert_frame_equal(by_name, given)


def test_the_sequential_design_takes_the_declared_direction():
    trials = own_code_trials()
    table = sequential_verdict_table(trials, SeedDesign.plan(3, 5), list(range(5)), metric=ACC)
    assert verdicts(table)["no_dropout"] == "better" and verdicts(table)["no_augment"] == "worse"


def test_report_summary_and_verdicts_of_an_own_code_experiment_agree(tmp_path):
    from ablations.results.report.summary import summary_table
    from ablations.results.report.build import write_report

    trials = own_code_trials()
    root = own_code_experiment(tmp_path / "digits", trials)
    direct = verdicts(verdict_table(trials, metric=ACC))
    assert direct["no_dropout"] == "better"
    # the experiment's verdicts read its experiment.json: the declared direction
    assert verdicts(experiment_verdicts(str(root), metric="test_acc")) == direct
    report = write_report(root, metric="test_acc", formats=("markdown",), figures="png")
    assert verdicts(report.ablation) == direct
    markdown = report.markdown.read_text()
    section = markdown[markdown.index("## Verdicts"):]
    section = section[:section.index("\n## ", 1)]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines()
            if line.startswith("| no_")}
    assert "| better |" in rows["no_dropout"] and "| worse |" in rows["no_augment"]
    methods = (root / "methods.md").read_text()
    assert "on test_acc (higher is better)" in methods
    meta = json.loads((root / "experiment.json").read_text())
    summary = summary_table(trials, meta, metric="test_acc")
    lines = {line.split()[0]: line.split() for line in summary.splitlines()
             if line.strip().startswith(tuple(SHIFTS))}
    assert "better" in lines["no_dropout"] and "worse" in lines["no_augment"]
    assert "test_acc (higher is better)" in summary
    # the declared unit, and no other: test_loss in nats in the report's table of metrics
    report = write_report(root, metric="test_loss", figures="png")
    assert "Mean test_loss (nats)" in report.markdown.read_text()
    assert verdicts(report.ablation)["no_dropout"] == "better"  # a lower loss


def test_across_datasets_and_their_ranks_take_the_declared_direction():
    from ablations.results.stats.datasets import rank_comparison
    from ablations.results.stats.decisions import across_datasets_of

    trials = pd.concat([own_code_trials(3).assign(dataset=f"dataset_{d}") for d in range(5)],
                       ignore_index=True)
    across = across_datasets_of(trials, {"metrics": DECLARED}, reference="baseline",
                                metric="test_acc", margin="5%", alpha=0.05)
    assert verdicts(across)["no_dropout"] == "better"
    assert verdicts(across)["no_augment"] == "worse"
    ranks = rank_comparison(trials, metric=ACC, alpha=0.05)
    assert list(ranks.average.index)[0] == "no_dropout"  # the highest accuracy ranks first
    assert list(ranks.average.index)[-1] == "no_augment"


def test_compare_reads_the_declared_direction_from_the_folders(tmp_path):
    trials = own_code_trials()
    a = own_code_experiment(tmp_path / "a", trials)
    rerun = 0.002 * np.random.default_rng(1).standard_normal(len(trials))
    b = own_code_experiment(tmp_path / "b", trials.assign(test_acc=trials["test_acc"] + rerun
                            + np.where(trials["ablation"] == "no_dropout", 0.05, 0.0)))
    rows = compare_experiments(a, b, metric="test_acc").set_index("ablation")
    assert rows.loc["no_dropout", "verdict"] == "better"  # higher in B: better
    assert rows.attrs["direction"] == 1
    # tables carry no declaration: the metric is given
    given = compare_experiments(trials, pd.read_parquet(b / "trials.parquet"), metric=ACC)
    assert given.set_index("ablation").loc["no_dropout", "verdict"] == "better"


def test_the_rounds_of_seeds_auto_decide_on_the_plans_declared_direction():
    from ablations import Rounds
    from ablations.experiment.prepare import prepare
    from ablations.experiment.core.request import Request

    run = prepare(Request(space="examples/digits/ablations.yaml", seeds="auto",
                          design=Rounds(max_seeds=5))).design.run
    assert run.metric == "test_acc"  # the code's first declared metric
    trials = own_code_trials().replace({"ablation": {"no_smoothing": "no_label_smoothing"}})
    table = run.verdicts(trials)
    assert verdicts(table)["no_dropout"] == "better" and verdicts(table)["no_augment"] == "worse"


def test_the_continuation_hint_takes_a_metric_and_names_it_in_its_command():
    from ablations.experiment.continuing import continuation_hint

    rng = np.random.default_rng(0)
    trials = pd.DataFrame([{"experiment": "e", "trial_name": f"{arm}-seed{seed}",
                            "ablation": arm, "seed": seed, "status": "ok",
                            "test_acc": 0.9 + rng.normal(0, 0.1), "wall_s": 5.0,
                            "cpu_hours": 5 / 3600, "gpu_hours": 0.0}
                           for arm in ("baseline", "a") for seed in range(3)])
    text = continuation_hint(trials, verdict_table(trials, metric=ACC), storage="/s",
                             name="n", decision=Decision(reference="baseline", metric=ACC,
                                                       alpha=0.05))
    assert text.startswith("Inconclusive after 3 seeds: a.")
    assert "--metric test_acc" in text


@pytest.mark.parametrize("direction,sign", [("higher", 1), ("lower", -1), (None, 0)])
def test_a_metric_says_its_sign(direction, sign):
    assert Metric("m", direction).sign == sign
