"""Tuned ablations (``--tune-each``): every arm searched with the same budget on a tuning seed,
then evaluated at its own best beside the table at the configuration given; resumable.

One real experiment through the CLI, stopped with Ctrl-C in its first arm's search and
finished with ``--resume`` (both in this process), is shared by the end-to-end tests; the
statistics are checked on constructed tables."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablations.cli.main import main
from tests.conftest import run_here
from tests.interrupting import ctrl_c_when

BUDGET = 3
SEEDS = 2
EPOCHS = 12  # long enough that the stop arrives while the first search trial trains
ARGS = ["--space", "components", "--only", "no_scalars", "--seeds", str(SEEDS),
        "--epochs", str(EPOCHS), "--set", "synthetic_train=96", "--set", "synthetic_val=16",
        "--set", "synthetic_test=16", "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16",
        "--set", "num_heads=2", "--set", "batch_size=16", "--no-dashboard",
        "--tune-each", "lr,weight_decay", "--tune-budget", str(BUDGET)]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The experiment, stopped (Ctrl-C: SIGINT to the driver, this process:
    tests/interrupting.py) once the first arm's search has a trial with a saved epoch, then
    resumed to its end; both run here, on the test worker's shared Ray."""
    tmp = tmp_path_factory.mktemp("tuned")
    storage, name = tmp / "results", "tuned"
    root = storage / name

    def searching() -> bool:  # a trial of the first arm's search has saved an epoch
        return any((root / "trial_state").glob("tuning-baseline-*/state.pt"))

    with ctrl_c_when(searching) as stop:
        first = run_here(*ARGS, "--name", name, "--storage", str(storage), cwd=tmp)
    assert stop.sent, first.stdout[-2000:] + first.stderr[-3000:]
    stopped = pd.read_parquet(root / "trials.parquet")
    stopped_meta = json.loads((root / "experiment.json").read_text())
    resumed = run_here("--resume", "--name", name, "--storage", str(storage),
                       "--no-dashboard", "--allow-changed", cwd=tmp)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    return {"root": root, "first_code": first.returncode,
            "first_out": first.stdout + first.stderr,
            "stopped": stopped, "stopped_meta": stopped_meta, "resumed": resumed,
            "trials": pd.read_parquet(root / "trials.parquet"),
            "meta": json.loads((root / "experiment.json").read_text())}


@pytest.mark.slow
def test_a_stop_in_a_search_resumes_into_the_remaining_stages(tuned):
    assert tuned["first_code"] == 130, tuned["first_out"][-3000:]
    assert (f"2 variants x {SEEDS} seeds, each tuned with {BUDGET} trials: {2 * SEEDS} + "
            f"{2 * BUDGET} + {2 * SEEDS} trials") in tuned["first_out"]
    stopped = tuned["stopped"]
    # the stop came in the first arm's search: the table at the given configuration had ended
    assert list(tuned["stopped_meta"]["tuned"]["stages"]) == ["evaluation"]
    assert (stopped.loc[stopped["phase"] == "evaluation", "status"] == "ok").all()
    assert stopped.loc[stopped["phase"] == "tuning", "status"].isin(
        ["interrupted", "ok", "not_started"]).all()
    assert (stopped["phase"] == "tuning").any() and "tuned" not in set(stopped["phase"])
    resumed = tuned["resumed"].stdout
    assert re.search(r"Resuming experiment tuned \(components, tuned ablations\): stage 2 of 4 "
                     r"\(tuning-baseline\): \d+ finished \(kept\)", resumed), resumed[:2000]
    assert "Stage 1 of 4" not in resumed  # not run again
    trials = tuned["trials"]
    assert (trials["status"] == "ok").all(), trials[["trial_name", "status", "error"]]
    assert sorted(tuned["meta"]["tuned"]["stages"]) == [
        "evaluation", "tuned", "tuning-baseline", "tuning-no_scalars"]
    # the stage stopped in: its trials as Tune resumed them, none twice
    assert not trials["trial_name"].duplicated().any()
    kept = stopped[(stopped["phase"] == "evaluation")].set_index("trial_name")
    after = trials.set_index("trial_name")
    for name, row in kept.iterrows():  # the first stage's rows are kept as they were
        assert after.loc[name, "test_mae"] == row["test_mae"]


@pytest.mark.slow
def test_every_arm_gets_the_same_search_on_a_seed_no_evaluation_uses(tuned):
    trials, record = tuned["trials"], tuned["meta"]["tuned"]
    tuning = trials[trials["phase"] == "tuning"]
    assert tuning.groupby("ablation").size().to_dict() == {"baseline": BUDGET,
                                                           "no_scalars": BUDGET}
    evaluation_seeds = set(trials.loc[trials["phase"] != "tuning", "seed"])
    assert evaluation_seeds == set(range(SEEDS))
    assert set(tuning["seed"]) == {record["seed"]} and record["seed"] not in evaluation_seeds
    assert (tuning["epochs_run"] == EPOCHS).all()  # FIFO: every sample trained to the end
    # the same search space for every arm, in one Optuna study per arm
    assert record["keys"] == ["lr", "weight_decay"] and record["budget"] == BUDGET
    with sqlite3.connect(tuned["root"] / "optuna.db") as db:
        studies = dict(db.execute("SELECT study_id, study_name FROM studies"))
        counts = dict(db.execute("SELECT study_id, COUNT(*) FROM trials WHERE state = "
                                 "'COMPLETE' GROUP BY study_id"))
        spaces = {}
        for study_id, param, distribution in db.execute(
                "SELECT t.study_id, p.param_name, p.distribution_json FROM trial_params p "
                "JOIN trials t ON p.trial_id = t.trial_id"):
            spaces.setdefault(study_id, set()).add((param, distribution))
    assert sorted(studies.values()) == ["tuned-baseline", "tuned-no_scalars"]
    assert all(counts[study] == BUDGET for study in studies), counts
    assert spaces[min(studies)] == spaces[max(studies)]
    assert {param for param, _ in spaces[min(studies)]} == {"params/lr", "params/weight_decay"}
    # the other arms' configuration is untouched by the search
    for arm, rows in tuning.groupby("ablation"):
        assert (rows["use_scalars"] == (arm != "no_scalars")).all()


@pytest.mark.slow
def test_each_arm_is_evaluated_at_its_own_best_by_validation(tuned):
    trials, record = tuned["trials"], tuned["meta"]["tuned"]
    tuning = trials[trials["phase"] == "tuning"]
    given = trials[trials["phase"] == "evaluation"]
    own = trials[trials["phase"] == "tuned"]
    assert len(given) == len(own) == 2 * SEEDS
    for arm in ("baseline", "no_scalars"):
        best = tuning[tuning["ablation"] == arm].sort_values("val_mae").iloc[0]
        assert record["best_trials"][arm] == best["trial_name"]
        rows = own[own["ablation"] == arm]
        assert sorted(rows["seed"]) == list(range(SEEDS))
        assert np.allclose(rows["lr"], best["lr"]) and np.allclose(
            rows["weight_decay"], best["weight_decay"])
        assert (given.loc[given["ablation"] == arm, "lr"] == 0.002).all()  # the given config
    assert set(own["trial_name"]) == {f"{arm}-tuned-seed{s}" for arm in ("baseline", "no_scalars")
                                      for s in range(SEEDS)}


@pytest.mark.slow
def test_console_and_report_put_the_two_verdict_tables_side_by_side(tuned):
    from ablations.results.stats.tuned import side_by_side
    from ablations.results.report.build import write_report

    out = tuned["resumed"].stdout
    trials = tuned["trials"]
    table = side_by_side(trials, keys=["lr", "weight_decay"])
    assert "Tuned ablations (test_mae" in out
    row = table.set_index("ablation").loc["no_scalars"]
    assert re.search(rf"no_scalars\s+{row['mean_given']:.3f} {row['verdict_given']} .*"
                     rf"{row['mean_tuned']:.3f} {row['verdict_tuned']}", out), out[-3000:]
    assert "Verdicts that change when every arm is tuned: " in out
    # the summary table above it reads the evaluation at the given configuration only, while
    # the compute line counts every trial, the search's too
    assert re.search(r"no_scalars\s+2/2 ", out)
    assert f"of {len(trials)} trials" in out and len(trials) == 4 * SEEDS + 2 * BUDGET
    report = write_report(tuned["root"], figures="png")
    text = Path(report.markdown).read_text()
    assert "## Tuned ablations" in text and f"{BUDGET} search trials per arm" in text
    assert "At its own best" in text


def test_the_best_configuration_is_chosen_on_validation_not_test():
    from ablations.config import TrialConfig
    from ablations.experiment.designs.tuned import TunedRun
    from ablations.search_spaces import TrialSpec

    config = TrialConfig()
    run = TunedRun(["lr"], 3, 1000, "baseline", {"baseline-seed0": TrialSpec(
        "baseline-seed0", "baseline", 0, config)})
    rows = pd.DataFrame({"trial_name": ["a", "b", "c"], "status": ["ok", "ok", "failed"],
                         "lr": [0.001, 0.004, 0.009], "val_mae": [0.50, 0.40, 0.10],
                         "test_mae": [0.30, 0.60, 0.05]})
    run.pick_best("baseline", rows)
    assert run.best == {"baseline": {"lr": 0.004}} and run.best_trials["baseline"] == "b"
    run.pick_best("baseline", rows.assign(status="failed"))
    assert run.best["baseline"] is None and run.tuned_trials() == []


def _phase_rows(phase: str, arm: str, means: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"trial_name": [f"{arm}-{phase}-{s}" for s in range(len(means))],
                         "ablation": arm, "seed": range(len(means)), "status": "ok",
                         "phase": phase, "test_mae": means, "lr": 0.002 if phase ==
                         "evaluation" else 0.0005})


def test_side_by_side_names_an_arm_that_is_worse_only_at_the_baseline_configuration():
    """A constructed experiment: the arm is 30% worse at the given configuration and within
    1% of the reference at its own best; verdict tables see one phase each."""
    from ablations.results.stats.phases import evaluation_rows
    from ablations.results.stats.tuned import side_by_side, side_by_side_text
    from ablations.results.stats.verdicts import verdict_table

    rng = np.random.default_rng(0)
    base = 1.0 + rng.normal(0, 0.01, 8)
    noise = rng.normal(0, 0.002, 8)
    trials = pd.concat([
        _phase_rows("evaluation", "baseline", list(base)),
        _phase_rows("evaluation", "slow", list(base * 1.3 + noise)),
        _phase_rows("tuning", "slow", [9.0, 9.0]),  # never read by a verdict
        _phase_rows("tuned", "baseline", list(base)),
        _phase_rows("tuned", "slow", list(base * 1.002 + noise)),
    ], ignore_index=True)
    table = side_by_side(trials, keys=["lr"], margin="5%").set_index("ablation")
    assert table.loc["slow", "verdict_given"] == "worse"
    assert table.loc["slow", "verdict_tuned"] == "equivalent"
    assert bool(table.loc["slow", "changed"]) and not bool(table.loc["baseline", "changed"])
    assert table.loc["slow", "best_lr"] == 0.0005
    text = side_by_side_text(side_by_side(trials, keys=["lr"], margin="5%"))
    assert "Verdicts that change when every arm is tuned: slow" in text
    assert re.search(r"slow\s+1\.3\d\d worse .* 1\.00\d equivalent .* 0\.0005 .*<- changed",
                     text), text
    # every other table reads the evaluation at the given configuration
    plain = verdict_table(trials, margin="5%").set_index("ablation")
    assert plain.loc["slow", "verdict"] == "worse" and plain.loc["slow", "n_ok"] == 8
    assert set(evaluation_rows(trials)["phase"]) == {"evaluation"}
    plain_run = trials[trials["phase"] == "evaluation"].drop(columns="phase")
    assert evaluation_rows(plain_run) is plain_run
    # the experiment's one decision function: at the settings recorded before the data
    from ablations.results.stats.decisions import tuned_comparison_of

    assert tuned_comparison_of(trials, {}) is None  # no tune_each recorded
    recorded = {"tuned": {"keys": ["lr"]}, "planned": {
        "reference": "baseline", "metric": "test_mae", "margin": "50%", "alpha": 0.05}}
    wide = tuned_comparison_of(trials, recorded).set_index("ablation")
    assert wide.loc["slow", "verdict_given"] == "negligible"  # 30% worse, inside 50%
    assert tuned_comparison_of(trials, recorded, margin="5%").equals(table.reset_index())


@pytest.mark.parametrize(("extra", "error"), [
    (["--tune-each", "lr,momentum"], r"--tune-each: momentum: give keys that have a "
                                     r"search range .*: lr, weight_decay"),
    (["--tune-each", "lr", "--tune-budget", "1"], r"--tune-budget: 1 must be an integer >= 2"),
    (["--tune-each", "lr", "--seeds", "auto"], r"does not combine with --seeds auto"),
    (["--tune-each", "lr", "--space", "hpo"], r"does not combine with a search space"),
    (["--tune-each", "lr", "--auto-batch"], r"does not combine with --auto-batch"),
    (["--tune-each", "lr", "--design", "factorial", "--factors",
      "temporal_attention,spatial_attention"],
     r"--design factorial and --tune-each each ask for another design; give one"),
])
def test_bad_tuning_flags_are_one_line_exit_2(tmp_path, capsys, extra, error):
    code = main(["--space", "components", "--dry-run", "--storage", str(tmp_path / "r"),
                 *extra])
    captured = capsys.readouterr()
    assert code == 2, captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run_ablations.py: error: "), lines
    assert re.search(error, lines[0]), lines[0]
    assert not (tmp_path / "r").exists()


def test_the_dry_run_describes_the_search_and_the_tuning_seed(tmp_path, capsys):
    code = main(["--space", "components", "--only", "no_scalars", "--seeds", "3", "--dry-run",
                 "--storage", str(tmp_path / "r"), "--tune-each", "lr", "--tune-budget", "6"])
    out = capsys.readouterr().out
    assert code == 0
    assert "6 trials. Base configuration:" in out  # the table at the given configuration
    assert re.search(r"Optuna TPE, 6 trials each \(3 random first\), FIFO, on val_mae, at "
                     r"seed 1000 \(no evaluation seed\); over lr loguniform", out), out


@pytest.mark.slow
def test_the_same_name_with_another_search_is_refused_and_changes_nothing(tuned, capsys):
    root = tuned["root"]
    before = {path: path.stat().st_mtime_ns for path in root.iterdir()}
    args = [a if a != "lr,weight_decay" else "lr" for a in ARGS]
    code = main([*args, "--name", "tuned", "--storage", str(root.parent)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "tunes lr,weight_decay with --tune-budget 3; give those (or --resume" in err
    plain = ARGS[:ARGS.index("--tune-each")]
    assert main([*plain, "--name", "tuned", "--storage", str(root.parent)]) == 2
    assert "holds an experiment run with --tune-each" in capsys.readouterr().err
    assert {path: path.stat().st_mtime_ns for path in root.iterdir()} == before
