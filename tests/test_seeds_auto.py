"""`--seeds auto` end to end on a real local Ray: rounds are trials of one experiment folder,
each round's variants are exactly those the earlier rounds left without a verdict (plus the
reference), `trials.parquet` says which round each trial ran in, the summary and the report
give the verdicts and the compute spent, and a run stopped by Ctrl-C in round 2 is continued by
--resume without losing or re-running anything. Bad flags are refused before anything runs.

The statistical behaviour (error rates with the stopping included) is simulated in
tests/test_sequential.py; a run at the default settings is in tests/test_tune.py."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from ablations.experiment.designs.rounds import RoundsRun, next_arms
from ablations.results.report.build import write_report
from ablations.results.io.files import SCHEMA_VERSION
from tests.conftest import run_here
from tests.interrupting import ctrl_c_when
from tests.test_cli import assert_one_line_error, in_process

# Tiny trials (about a second each), 8 epochs so a round-2 trial is still running when the
# stop arrives. baseline_repeat (--null-control) is a true null: inconclusive after a 3-seed
# pilot at a 5% margin, so there is always a round 2.
ARGS = ["--space", "components", "--only", "no_images", "--null-control", "--seeds", "auto",
        "--max-seeds", "5", "--epochs", "8", "--set", "synthetic_train=96",
        "--set", "synthetic_val=16", "--set", "synthetic_test=32", "--set", "cnn_widths=8,16,16",
        "--set", "embed_dim=16", "--set", "num_heads=2", "--set", "batch_size=16",
        "--no-dashboard"]
VARIANTS = {"baseline", "no_images", "baseline_repeat"}


@pytest.fixture(scope="module")
def stopped_and_resumed(tmp_path_factory):
    """Ctrl-C (SIGINT to the driver, this process: tests/interrupting.py) once a round-2 trial
    has saved an epoch, then the printed --resume command; both run here, on the test worker's
    shared Ray."""
    storage = tmp_path_factory.mktemp("auto") / "results"
    root = storage / "stopped"
    # a round-2 trial (seeds 3-4) has saved an epoch
    with ctrl_c_when(lambda: any((root / "trial_state").glob("*-seed[34]/state.pt"))) as stop:
        first = run_here(*ARGS, "--name", "stopped", "--storage", str(storage))
    assert stop.sent, first.stdout[-2000:] + first.stderr[-3000:]
    stopped = {"returncode": first.returncode, "text": first.stdout + first.stderr,
               "trials": pd.read_parquet(root / "trials.parquet"),
               "meta": json.loads((root / "experiment.json").read_text())}
    printed = re.search(r"python \S*run_ablations\.py --resume [^\n]*", stopped["text"])
    assert printed, stopped["text"][-3000:]
    resume = shlex.split(printed.group(0))[2:]  # after "python .../run_ablations.py"
    # --allow-changed: other tests may edit the checkout meanwhile (provenance is not tested
    # here); --no-dashboard as in the first run.
    done = run_here(*resume, "--no-dashboard", "--allow-changed")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"root": root, "stopped": stopped, "stdout": done.stdout,
            "trials": pd.read_parquet(root / "trials.parquet"),
            "meta": json.loads((root / "experiment.json").read_text())}


# ------------------------------------------------------------------------------ bad flags


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["--seeds", "auto", "--space", "hpo"], "--seeds auto: space hpo is a search"),
        (["--seeds", "auto", "--pilot", "4", "--max-seeds", "3"],
         "--max-seeds 3 is below the pilot's 4 seeds"),
        (["--seeds", "3", "--pilot", "2"], "--pilot applies with --seeds auto only"),
        (["--pilot", "1", "--seeds", "auto"], "--pilot: '1' must be >= 2"),
        (["--seeds", "auto", "--auto-batch"], "--auto-batch with --seeds auto is not supported"),
        (["--seeds", "sometimes"], "is not a count (3), a list of seeds (0,1,2) or auto"),
        (["--metric", "test_accuracy"], "'test_accuracy' is not a metric column"),
    ],
)
def test_bad_auto_flags_are_one_line_before_any_trial(capsys, args, pattern):
    code, _, err = in_process(capsys, *args, "--dry-run")
    assert_one_line_error(code, err, pattern)


def test_dry_run_shows_the_design_and_the_pilot(capsys):
    code, out, _ = in_process(capsys, "--seeds", "auto", "--only", "no_images", "--dry-run")
    assert code == 0, out
    assert "looks at 3, 5, 7, 10 seeds per variant" in out
    # --only gains the reference; the pilot's trials are listed, not the later rounds'
    assert "baseline-seed2" in out and "no_images-seed2" in out
    assert "seed3" not in out


# ------------------------------------------------------------------------------ rounds


@pytest.mark.slow
def test_each_round_runs_exactly_the_variants_left_without_a_verdict(stopped_and_resumed):
    trials, meta = stopped_and_resumed["trials"], stopped_and_resumed["meta"]
    run = RoundsRun.from_record(meta["rounds"])
    assert run.design.looks == (3, 5)
    assert set(trials["ablation"]) == VARIANTS
    assert (trials["status"] == "ok").all(), trials[["trial_name", "status", "error"]]
    pilot = trials[trials["round"] == 1]
    assert set(pilot["ablation"]) == VARIANTS and set(pilot["seed"]) == {0, 1, 2}
    rounds = sorted(trials["round"].unique())
    assert rounds[0] == 1 and len(rounds) >= 2, rounds  # the null control needs more seeds
    # the null control (the baseline under other training seeds: not a copy of it) is never
    # called worse/better, and it gets the next look's seeds while it has no verdict
    verdicts = run.verdicts(trials).set_index("ablation")["verdict"]
    assert verdicts["baseline_repeat"] in ("equivalent", "inconclusive"), verdicts.to_dict()
    assert set(trials.loc[trials["ablation"] == "baseline_repeat", "round"]) == {1, 2}
    by_seed = trials.pivot_table(index="seed", columns="ablation", values="test_mae")
    assert (by_seed["baseline_repeat"] != by_seed["baseline"]).all()
    for number in rounds[1:]:
        before = trials[trials["round"] < number]
        last = before.loc[before["round"] == number - 1, "ablation"]
        expected = set(next_arms(run.verdicts(before), set(last))) | {"baseline"}
        ran = trials[trials["round"] == number]
        assert set(ran["ablation"]) == expected, number
        assert set(ran["seed"]) == set(run.look_seeds(number)) == {3, 4}
    # experiment.json records the same rounds, each in its own Tune folder
    recorded = {r["round"]: set(r["trials"]) for r in meta["rounds"]["rounds"]}
    assert recorded == {n: set(trials.loc[trials["round"] == n, "trial_name"]) for n in rounds}
    for record in meta["rounds"]["rounds"]:
        assert (stopped_and_resumed["root"] / record["tune"]).is_dir()
    assert set(meta["trials"]) == set(trials["trial_name"])
    # the pilot's start, kept by round 2 and by the resume
    assert meta["started_at"] == stopped_and_resumed["stopped"]["meta"]["started_at"]
    assert meta["rounds"]["rounds"][0]["trials"] == \
        stopped_and_resumed["stopped"]["meta"]["rounds"]["rounds"][0]["trials"]
    # the epochs and predictions of every round are kept, not only the last round's
    epochs = pd.read_parquet(stopped_and_resumed["root"] / "epochs.parquet")
    assert set(epochs["trial_name"]) == set(trials["trial_name"])
    assert (epochs.groupby("trial_name")["epoch"].nunique() == 8).all()
    predictions = pd.read_parquet(stopped_and_resumed["root"] / "predictions.parquet")
    assert set(predictions["trial_name"]) == set(trials["trial_name"])


@pytest.mark.slow
def test_the_summary_gives_verdicts_seeds_and_compute_against_a_fixed_design(stopped_and_resumed):
    out, trials = stopped_and_resumed["stdout"], stopped_and_resumed["trials"]
    assert "Round 2 of at most 2:" in out  # the resumed run's own output
    assert "looks at 3, 5 seeds per variant" in out
    spent = len(trials)
    assert f"Compute spent: {spent} trials" in out
    assert "a fixed design at 5 seeds for every variant: 15 trials" in out
    table = out[out.index("ablation"):]
    for variant in VARIANTS:
        ok = (trials[trials["ablation"] == variant]["status"] == "ok").sum()
        assert re.search(rf"\b{variant}\s+{ok}/{ok}\b", table), (variant, table[:2000])


@pytest.mark.slow
def test_the_report_reads_the_rounds(stopped_and_resumed):
    report = write_report(stopped_and_resumed["root"], figures="png")
    text = Path(report.markdown).read_text()
    assert "## Compute spent" in text and "looks at 3, 5 seeds" in text
    run = RoundsRun.from_record(stopped_and_resumed["meta"]["rounds"])
    expected = run.verdicts(stopped_and_resumed["trials"]).set_index("ablation")["verdict"]
    got = report.ablation.set_index("ablation")["verdict"]
    assert got.to_dict() == expected.to_dict()
    assert "looks" in report.ablation and "decided_at" in report.ablation
    # one story: each verdict the rounds printed (before the stop and after the resume) is the
    # report's, and an arm the rounds decided has its deciding look's seeds
    printed = {}
    for text in (stopped_and_resumed["stopped"]["text"], stopped_and_resumed["stdout"]):
        for line in re.findall(r"^Round \d+: (.+)$", text, flags=re.M):
            if line != "no verdict yet":
                printed.update(item.rsplit(" ", 1) for item in line.split(", "))
    for arm in VARIANTS - {"baseline"}:  # printed when decided, else undecided to the end
        assert got[arm] == printed.get(arm, "inconclusive"), (arm, printed, got.to_dict())
        decided = report.ablation.set_index("ablation").loc[arm, "decided_at"]
        assert (decided > 0) if arm in printed else pd.isna(decided), (arm, decided)


@pytest.mark.slow
def test_a_record_of_schema_version_1_reports_and_plans_its_rounds_alike(stopped_and_resumed,
                                                                        tmp_path):
    """experiment.json written before the rounds' record had the design's name (schema_version
    1: under "sequential") reports the same verdicts and rebuilds the same design."""
    import shutil

    from ablations.experiment.designs.records import design_from_record
    from ablations.experiment.designs.rounds import Rounds
    from ablations.results.io.files import read_metadata

    older = tmp_path / "older"
    shutil.copytree(stopped_and_resumed["root"], older)
    meta = json.loads((older / "experiment.json").read_text())
    assert meta["schema_version"] == SCHEMA_VERSION and "rounds" in meta
    renamed = {"rounds": "sequential", "search": "hpo"}
    (older / "experiment.json").write_text(json.dumps(
        {**{renamed.get(key, key): value for key, value in meta.items()}, "schema_version": 1}))
    report = write_report(older, figures="png")
    got = report.ablation.set_index("ablation")["verdict"].to_dict()
    run = RoundsRun.from_record(stopped_and_resumed["meta"]["rounds"])
    assert got == run.verdicts(stopped_and_resumed["trials"]).set_index("ablation")[
        "verdict"].to_dict()
    assert "looks at 3, 5 seeds" in Path(report.markdown).read_text()
    design = design_from_record(read_metadata(older), str(older))
    assert isinstance(design, Rounds) and design.run.record() == run.record()


@pytest.mark.slow
def test_a_run_stopped_in_round_2_resumes_it_and_loses_nothing(stopped_and_resumed):
    """Ctrl-C while round 2 runs: exit 130, round 1 kept whole, round 2's unfinished trials
    `interrupted`/`not_started`; the printed --resume continues round 2 in the same folder
    (its Tune folder, its saved epochs) and finishes the experiment."""
    stopped = stopped_and_resumed["stopped"]
    assert stopped["returncode"] == 130, stopped["text"][-3000:]
    before = stopped["trials"].set_index("trial_name")
    assert (before.loc[before["round"] == 1, "status"] == "ok").all()
    second = before[before["round"] == 2]
    assert len(second) and set(second["status"]) & {"interrupted", "not_started"}
    assert "Resuming experiment stopped (components):" in stopped_and_resumed["stdout"]
    assert "Round 2 of at most 2" in stopped_and_resumed["stdout"]
    assert "Round 1 of" not in stopped_and_resumed["stdout"]  # round 1 is not run again

    after = stopped_and_resumed["trials"].set_index("trial_name")
    assert (after["status"] == "ok").all(), after[["status", "error"]]
    for name, row in before.iterrows():  # round 1's trials are the ones kept, not re-run
        if row["round"] == 1:
            assert after.loc[name, ["trial_id", "started_at", "test_mae"]].tolist() == \
                row[["trial_id", "started_at", "test_mae"]].tolist(), name
        elif row["status"] == "interrupted":  # continued after its last saved epoch
            assert after.loc[name, "resumed_from_epoch"] >= 1, name
    epochs = pd.read_parquet(stopped_and_resumed["root"] / "epochs.parquet")
    assert not epochs.duplicated(["trial_name", "epoch"]).any()
    assert not (stopped_and_resumed["root"] / "trial_state").exists()  # nothing left to resume


@pytest.mark.slow
def test_the_same_name_with_fixed_seeds_or_other_decision_flags_is_refused(
        stopped_and_resumed, capsys):
    """An auto experiment's folder is not continued as fixed seeds (that would drop its
    design), nor with another margin than the one its rounds decided on."""
    storage = str(stopped_and_resumed["root"].parent)
    fixed = [{"auto": "3", "no_images": "baseline,no_images"}.get(a, a) for a in ARGS
             if a not in ("--max-seeds", "5")]
    code, _, err = in_process(capsys, *fixed, "--name", "stopped", "--storage", storage)
    assert_one_line_error(code, err, "holds an experiment run with --seeds auto")
    code, _, err = in_process(capsys, *ARGS, "--margin", "0.05", "--name", "stopped",
                              "--storage", storage)
    assert_one_line_error(code, err, "decides its rounds on metric test_mae, margin 5%")


def test_only_variants_of_the_last_round_with_two_ok_trials_get_more_seeds():
    """next_arms: no verdict yet, ran in the round just run, and at least two ok trials."""
    table = pd.DataFrame({"ablation": ["baseline", "a", "b", "c", "d"],
                          "verdict": ["reference", "inconclusive", "inconclusive",
                                      "inconclusive", "worse"],
                          "n_ok": [3, 3, 1, 3, 3]})
    assert next_arms(table, {"baseline", "a", "b", "d"}) == ["a"]  # b: 1 ok; c: stopped


def test_the_report_and_the_notebook_function_use_what_the_run_decided_on(tmp_path):
    """experiment_verdicts (the notebook's) and write_report default to the metric, margin
    and alpha experiment.json records for the rounds, not 5% / 0.05."""
    import numpy as np

    from ablations.results.stats.sequential import SeedDesign

    from ablations.results.stats.decisions import experiment_verdicts

    rng = np.random.default_rng(3)
    rows = [{"experiment": "e", "trial_name": f"{a}-seed{s}", "ablation": a, "seed": s,
             "status": "ok", "round": 1, "test_mae": 0.55 + d + rng.normal(0, 0.01),
             "test_rmse": 0.7 + d + rng.normal(0, 0.01)}
            for a, d in (("baseline", 0), ("x", 0.0)) for s in range(3)]
    trials = pd.DataFrame(rows)
    record = {"design": SeedDesign.plan(3, 6).to_dict(), "seeds": list(range(6)),
              "reference": "baseline", "metric": "test_rmse", "margin": "0.5", "alpha": 0.1,
              "plan": {}, "rounds": []}
    (tmp_path / "experiment.json").write_text(json.dumps({
        "schema_version": SCHEMA_VERSION, "rounds": record, "reference": "baseline"}))
    table = experiment_verdicts(str(tmp_path), trials)
    assert table.attrs["metric"] == "test_rmse" and table.attrs["margin"] == 0.5
    assert table.attrs["alpha"] == 0.1 and "looks" in table
    other = experiment_verdicts(str(tmp_path), trials, margin="0.01")
    assert other.attrs["margin"] == 0.01
    assert other.attrs["exploratory"] == ["margin 0.01 (planned 0.5)"]  # not its verdicts
