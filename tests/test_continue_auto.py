"""A fixed-seed run continued into `--seeds auto`: the fixed run's summary names its
inconclusive variants and prints the one command that decides them, with an upper bound on
what it adds; that command keeps the fixed trials as round 1 (not run again), gives later
rounds' seeds only to the variants the design has not decided and the reference, and says
that every verdict is the sequential design's and what compute it added. Bad uses are one
line, exit 2, before anything is written (ablations/experiment/continuing.py)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from ablations.config.comparison import Decision
from ablations.experiment.continuing import (
    estimate_continuation,
    first_look,
    sequential_seeds,
    trial_slots,
)
from ablations.experiment.designs.rounds import RoundsRun, next_arms
from ablations.results.stats.analysis import verdict_table
from ablations.results.stats.sequential import SeedDesign
from ablations.results.io.files import SCHEMA_VERSION
from tests.conftest import run_here, tiny_config
from tests.test_cli import assert_one_line_error, in_process

# Tiny trials (under a second each). At a 1% margin neither variant can be shown equivalent
# with 3 seeds, so the fixed table (the pilot look of the design planned before the run) has
# inconclusive variants and the continuation a round 2; --max-seeds 5 keeps it to two looks
# (3, 5).
ARGS = ["--space", "components", "--only", "baseline,no_images", "--null-control",
        "--seeds", "3", "--max-seeds", "5", "--margin", "1%", "--epochs", "2",
        "--set", "synthetic_train=96",
        "--set", "synthetic_val=16", "--set", "synthetic_test=32", "--set", "cnn_widths=8,16,16",
        "--set", "embed_dim=16", "--set", "num_heads=2", "--set", "batch_size=16",
        "--no-dashboard"]
MAX_SEEDS = 5


@pytest.fixture(scope="module")
def continued(tmp_path_factory):
    """A fixed 3-seed run planned with --max-seeds 5, then the command its summary
    printed."""
    storage = tmp_path_factory.mktemp("continue") / "results"
    fixed = run_here(*ARGS, "--name", "fixed", "--storage", str(storage))
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-3000:]
    root = storage / "fixed"
    before = {"stdout": fixed.stdout, "trials": pd.read_parquet(root / "trials.parquet"),
              "epochs": pd.read_parquet(root / "epochs.parquet"),
              "meta": json.loads((root / "experiment.json").read_text())}
    printed = re.search(r"python \S*run_ablations\.py --resume [^\n]*", fixed.stdout)
    assert printed, fixed.stdout[-3000:]
    command = shlex.split(printed.group(0))[2:]  # after "python run_ablations.py"
    # --allow-changed: other tests may edit the checkout meanwhile (provenance is not tested
    # here); --no-dashboard as in the first run.
    done = run_here(*command, "--no-dashboard", "--allow-changed")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"root": root, "storage": storage, "before": before, "command": printed.group(0),
            "stdout": done.stdout, "trials": pd.read_parquet(root / "trials.parquet"),
            "epochs": pd.read_parquet(root / "epochs.parquet"),
            "meta": json.loads((root / "experiment.json").read_text())}


# ------------------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_a_fixed_run_names_its_inconclusive_variants_and_the_command_that_decides_them(
        continued):
    before, storage = continued["before"], continued["storage"]
    # the verdicts printed are the pilot look's of the design recorded before the run
    planned = before["meta"]["planned"]
    assert SeedDesign.from_dict(planned["design"]) == SeedDesign.plan(3, MAX_SEEDS)
    assert (planned["margin"], planned["seeds"]) == ("1%", [0, 1, 2, 3, 4])
    look = first_look(before["trials"], [0, 1, 2], MAX_SEEDS, reference="baseline",
                      metric="test_mae", margin="1%", alpha=0.05)
    undecided = look.loc[look["verdict"] == "inconclusive", "ablation"].tolist()
    assert undecided, look[["ablation", "verdict"]]
    assert f"Inconclusive after 3 seeds: {', '.join(undecided)}." in before["stdout"]
    assert "These 3 seeds are the pilot look of a sequential design planned before the run" \
        in before["stdout"]
    # one command, the same folder, the recorded design's flags (it continues that design)
    # (main() called in this process: the checkout's script, as typed; test_cli.py has the
    # other spellings)
    assert continued["command"] == (f"python run_ablations.py --resume --name fixed "
                                    f"--storage {storage} --seeds auto --max-seeds 5 "
                                    "--margin 1%")
    # the bound: the variants the pilot look leaves, and the reference, to --max-seeds
    arms = [a for a in next_arms(look, set(look["ablation"])) if a != "baseline"]
    assert set(undecided) <= set(arms) | set(look.loc[look["n_ok"] < 2, "ablation"])
    assert f"At most {(len(arms) + 1) * 2} more trials ({len(arms)} variant(s) + the " \
           "reference x 2 seeds)" in before["stdout"]
    assert "the worst case, every undecided variant running to --max-seeds; at this run's " \
           "median trial times about" in before["stdout"]


@pytest.mark.slow
def test_the_fixed_trials_are_round_1_as_they_were_not_run_again(continued):
    old = continued["before"]["trials"].set_index("trial_name")
    new = continued["trials"].set_index("trial_name")
    assert (new.loc[old.index, "round"] == 1).all()
    kept = ["trial_id", "started_at", "wall_s", "test_mae"]
    assert new.loc[old.index, kept].equals(old[kept])  # the same rows: not trained again
    assert (new.drop(index=old.index)["round"] > 1).all()
    assert "Round 1 of at most 2 (the fixed run's trials, kept, not run again)" \
        in continued["stdout"]
    epochs = continued["epochs"]
    assert epochs[epochs["trial_name"].isin(old.index)].reset_index(drop=True).equals(
        continued["before"]["epochs"].reset_index(drop=True))
    assert not epochs.duplicated(["trial_name", "epoch"]).any()


@pytest.mark.slow
def test_later_rounds_run_only_the_undecided_variants_and_the_reference(continued):
    trials, meta = continued["trials"], continued["meta"]
    run = RoundsRun.from_record(meta["rounds"])
    assert run.design == SeedDesign.plan(3, MAX_SEEDS)
    assert run.seeds[:3] == [0, 1, 2] and len(run.seeds) == MAX_SEEDS
    assert run.continued["seeds"] == [0, 1, 2] and run.continued["trials"] == 9
    assert run.continued["command"] == continued["before"]["meta"]["command"]
    assert (trials["status"] == "ok").all(), trials[["trial_name", "status", "error"]]
    rounds = sorted(trials["round"].unique())
    assert rounds == [1, 2], rounds
    before = trials[trials["round"] == 1]
    expected = set(next_arms(run.verdicts(before), set(before["ablation"]))) | {"baseline"}
    assert set(trials.loc[trials["round"] == 2, "ablation"]) == expected
    assert set(trials.loc[trials["round"] == 2, "seed"]) == {3, 4}
    # the end: every variant decided, or it ran the last look's seeds
    final = run.verdicts(trials).set_index("ablation")
    seeds = trials.groupby("ablation")["seed"].nunique()
    for arm, row in final.drop(index="baseline").iterrows():
        assert row["verdict"] != "inconclusive" or seeds[arm] == MAX_SEEDS, (arm, row)
    # experiment.json: what plain --resume continues from now on, the fixed run's start kept
    assert {r["round"]: set(r["trials"]) for r in meta["rounds"]["rounds"]} == \
        {n: set(trials.loc[trials["round"] == n, "trial_name"]) for n in rounds}
    assert meta["started_at"] == continued["before"]["meta"]["started_at"]
    assert set(meta["trials"]) == set(trials["trial_name"])


@pytest.mark.slow
def test_the_summary_says_the_verdicts_are_the_sequential_designs_and_the_compute_added(
        continued):
    out, trials = continued["stdout"], continued["trials"]
    assert "every verdict above comes from the sequential design; the fixed run's table was " \
        "its pilot look, planned before the first trial, and every verdict it gave stands" in out
    # nothing the fixed run decided changed
    first = first_look(continued["before"]["trials"], [0, 1, 2], MAX_SEEDS,
                       reference="baseline", metric="test_mae", margin="1%", alpha=0.05)
    decided = first[~first["verdict"].isin(["inconclusive", "reference"])]
    final = RoundsRun.from_record(continued["meta"]["rounds"]).verdicts(trials)
    assert final.set_index("ablation").loc[decided["ablation"], "verdict"].tolist() == \
        decided["verdict"].tolist()
    added = trials[trials["round"] > 1]
    assert f"The continuation added {len(added)} trials, {added['cpu_hours'].sum():.3g} " \
           f"CPU-hours; total {len(trials)} trials, {trials['cpu_hours'].sum():.3g} " \
           "CPU-hours." in out
    # the rounds' own verdicts are final: no command to continue them again
    assert "--seeds auto" in continued["command"]
    assert not re.search(r"--resume [^\n]*--seeds auto", out), out[-2000:]
    run = RoundsRun.from_record(continued["meta"]["rounds"])
    table = out[out.index("ablation"):]
    for arm, verdict in run.verdicts(trials).set_index("ablation")["verdict"].items():
        assert re.search(rf"\b{arm}\s+\d+/\d+ .*\b{verdict}\b", table), (arm, verdict, table)


@pytest.mark.slow
def test_continuing_it_again_says_plain_resume_and_writes_nothing(continued, capsys):
    files = {p: p.read_bytes() for p in continued["root"].glob("*.*")}
    code, _, err = in_process(capsys, "--resume", "--name", "fixed", "--storage",
                              str(continued["storage"]), "--seeds", "auto")
    assert_one_line_error(code, err, "fixed already runs with --seeds auto; continue it with "
                                     "plain --resume")
    assert {p: p.read_bytes() for p in continued["root"].glob("*.*")} == files


# ------------------------------------------------------------------------------ bad uses


PLANNED = {"reference": "baseline", "metric": "test_mae", "margin": "5%", "alpha": 0.05,
           "design": SeedDesign.plan(3, 10).to_dict(), "seeds": list(range(10))}


def _experiment(root: Path, *, seeds=(0, 1, 2), status="ok", **meta) -> Path:
    """A finished fixed-seed experiment folder as the runner writes one (no Ray)."""
    root.mkdir(parents=True)
    names = {}
    for variant in ("baseline", "no_images"):
        for seed in seeds:
            names[f"{variant}-seed{seed}"] = tiny_config().replace(ablation=variant,
                                                                   seed=seed).to_dict()
    record = {"schema_version": SCHEMA_VERSION, "experiment": root.name, "space": "components",
              "reference": "baseline",
              "seeds": list(seeds), "trials": names, "skipped": {}, "search": None,
              "command": ["run_ablations.py"], **meta}
    (root / "experiment.json").write_text(json.dumps(record))
    pd.DataFrame([{"trial_name": name, "ablation": config["ablation"],
                   "seed": config["seed"], "status": status, "round": 1, "wall_s": 1.0,
                   "cpu_hours": 0.001, "gpu_hours": 0.0, "test_mae": 1.0}
                  for name, config in names.items()]).to_parquet(root / "trials.parquet")
    for table in ("epochs", "predictions"):
        pd.DataFrame({"trial_name": list(names)}).to_parquet(root / f"{table}.parquet")
    return root


@pytest.mark.parametrize(
    ("extra", "experiment", "pattern"),
    [
        ([], {"search": {"num_samples": 4}}, "--seeds auto: exp is a search (space components)"),
        ([], {"rounds": {"rounds": []}},
         "exp already runs with --seeds auto; continue it with plain --resume"),
        (["--only", "no_images"], {}, "--only would change them"),
        (["--space", "hpo"], {}, "--space would change them"),
        (["--set", "epochs=3", "--pilot", "2"], {}, "--set, --pilot would change them"),
        (["--retry-failed"], {}, "--retry-failed: retry exp's failed trials first"),
        ([], {"status": "interrupted"}, "exp has 6 unfinished trial(s); finish them first"),
        ([], {"seeds": (0,)}, "exp ran 1 seed(s); a pilot needs at least 2"),
        (["--max-seeds", "3"], {}, "--max-seeds 3: exp already ran 3 seeds"),
        # a design recorded before the first trial: continued as recorded, or final
        (["--max-seeds", "6"], {"planned": PLANNED},
         "--max-seeds 6: exp planned its rounds before its first trial with --max-seeds 10; "
         "drop --max-seeds"),
        (["--margin", "10%"], {"planned": PLANNED},
         "--margin 10%: exp planned its rounds before its first trial with --margin 5%"),
        (["--alpha", "0.1"], {"planned": PLANNED},
         "--alpha 0.1: exp planned its rounds before its first trial with --alpha 0.05"),
        ([], {"planned": {**PLANNED, "design": SeedDesign.fixed(3).to_dict(),
                          "seeds": [0, 1, 2]}},
         "exp's verdicts are final: its 3 seeds were planned as the fixed design at full "
         "alpha"),
    ],
)
def test_bad_continuations_are_one_line_before_anything_is_written(capsys, tmp_path, extra,
                                                                    experiment, pattern):
    status, seeds = experiment.pop("status", "ok"), experiment.pop("seeds", (0, 1, 2))
    root = _experiment(tmp_path / "results" / "exp", seeds=seeds, status=status, **experiment)
    files = {p: p.read_bytes() for p in root.iterdir()}
    code, _, err = in_process(capsys, "--resume", "--name", "exp", "--storage",
                              str(tmp_path / "results"), "--seeds", "auto", *extra)
    assert_one_line_error(code, err, pattern)
    assert {p: p.read_bytes() for p in root.iterdir()} == files


def test_a_table_on_several_datasets_is_not_continued(capsys, tmp_path):
    root = _experiment(tmp_path / "results" / "exp")
    record = json.loads((root / "experiment.json").read_text())
    for i, config in enumerate(record["trials"].values()):
        config["dataset"] = "site_a" if i % 2 else "site_b"
    (root / "experiment.json").write_text(json.dumps(record))
    files = {p: p.read_bytes() for p in root.iterdir()}
    code, _, err = in_process(capsys, "--resume", "--name", "exp", "--storage",
                              str(tmp_path / "results"), "--seeds", "auto")
    assert_one_line_error(code, err, "exp ran on several datasets; --seeds auto continues an "
                          "experiment on one: start one per dataset")
    assert {p: p.read_bytes() for p in root.iterdir()} == files


def test_a_fixed_run_without_results_is_finished_first(capsys, tmp_path):
    root = _experiment(tmp_path / "results" / "exp")
    (root / "trials.parquet").unlink()
    code, _, err = in_process(capsys, "--resume", "--name", "exp", "--storage",
                              str(tmp_path / "results"), "--seeds", "auto")
    assert_one_line_error(code, err, "exp has no results yet (trials.parquet); finish it first:")


def test_the_continuation_runs_the_design_recorded_before_the_first_trial(tmp_path):
    """Not one planned at the continuation: the recorded looks, seed order, margin and alpha,
    whatever the defaults would plan now."""
    from ablations.experiment.continuing import continue_plan
    from ablations.experiment.core.request import Request

    planned = {**PLANNED, "margin": "1%", "alpha": 0.1,
               "design": SeedDesign.plan(3, 6).to_dict(), "seeds": [0, 1, 2, 7, 8, 9]}
    root = _experiment(tmp_path / "results" / "exp", planned=planned)
    meta = json.loads((root / "experiment.json").read_text())
    run = continue_plan(Request(seeds="auto"), str(tmp_path / "results"), "exp", meta)
    assert run.design == SeedDesign.plan(3, 6) and run.seeds == [0, 1, 2, 7, 8, 9]
    assert (run.margin, run.alpha) == ("1%", 0.1)
    assert run.continued["planned"] is True


def test_plain_resume_refuses_a_new_design(capsys, tmp_path):
    _experiment(tmp_path / "results" / "exp")
    code, _, err = in_process(capsys, "--resume", "--name", "exp", "--storage",
                              str(tmp_path / "results"), "--max-seeds", "6")
    assert_one_line_error(code, err, "--pilot and --max-seeds apply only when continuing")


# ------------------------------------------------------------------------------ the estimate


def test_the_seed_order_starts_with_the_fixed_runs_seeds():
    assert sequential_seeds([0, 1, 2], 6) == [0, 1, 2, 3, 4, 5]
    assert sequential_seeds([5, 2], 5) == [5, 2, 0, 1, 3]


def test_the_estimate_is_every_undecided_variant_and_the_reference_at_max_seeds():
    rows = [{"ablation": arm, "seed": seed, "status": "ok", "wall_s": wall * (1 + seed),
             "cpu_hours": wall * (1 + seed) / 3600, "gpu_hours": 0.0}
            for arm, wall in (("baseline", 10.0), ("a", 20.0), ("b", 30.0))
            for seed in range(3)]
    rows.append({"ablation": "a", "seed": 9, "status": "failed", "wall_s": 1000.0,
                 "cpu_hours": 1.0, "gpu_hours": 0.0})  # not an ok trial: not in the median
    estimate = estimate_continuation(pd.DataFrame(rows), ["a"], reference="baseline",
                                     fixed_seeds=3, max_seeds=10, slots=4)
    # medians 20 (baseline) and 40 (a) s, 7 seeds each
    assert (estimate.trials, estimate.added_seeds) == (14, 7)
    assert estimate.trial_s == pytest.approx(60 * 7)
    assert estimate.cpu_hours == pytest.approx(60 * 7 / 3600)
    # looks 3, 6, 10: rounds of 2 x 3 and 2 x 4 trials on 4 slots, each at a's 40 s
    assert estimate.wall_s == pytest.approx((2 + 2) * 40)
    # with the fixed run's time in Tune (10 trials on 4 slots: 3 waves of 30 s): 4 waves
    timed = estimate_continuation(pd.DataFrame(rows), ["a"], reference="baseline",
                                  fixed_seeds=3, max_seeds=10, slots=4, fixed_wall_s=90.0)
    assert timed.wall_s == pytest.approx(4 * 30)
    nothing = estimate_continuation(pd.DataFrame(rows), [], reference="baseline",
                                    fixed_seeds=3, max_seeds=10, slots=4)
    assert (nothing.trials, nothing.trial_s) == (0, 0.0)


def test_the_hint_leaves_out_variants_whose_trials_failed():
    """A variant with fewer than 2 ok or diverged trials gets no more seeds (next_arms): the
    hint says so, and prints no command when no variant would get seeds."""
    import numpy as np

    from ablations.experiment.continuing import continuation_hint

    rng = np.random.default_rng(0)
    rows = pd.DataFrame([{"experiment": "e", "trial_name": f"{arm}-seed{seed}", "ablation": arm,
                          "seed": seed, "round": 1, "test_mae": 1 + rng.normal(0, 0.1),
                          "status": "failed" if arm == "b" and seed else "ok",
                          "wall_s": 5.0, "cpu_hours": 5 / 3600, "gpu_hours": 0.0}
                         for arm in ("baseline", "a", "b") for seed in range(3)])

    def hint(trials):
        return continuation_hint(trials, verdict_table(trials), storage="/s", name="n",
                                 decision=Decision(reference="baseline", metric="test_mae",
                                                   alpha=0.05), slots=2)

    text = hint(rows)
    assert text.startswith("Inconclusive after 3 seeds: a, b. To decide them")
    assert "b: no more seeds: fewer than 2 ok or diverged trials" in text
    assert "At most 14 more trials (1 variant(s) + the reference x 7 seeds)" in text
    assert "about 70 s of trial time, 0.0194 CPU-hours, ~35 s wall at 2 trial(s) at a time" \
        in text
    alone = hint(rows[rows["ablation"] != "a"])
    assert "--seeds auto" not in alone and "would not decide it here" in alone


def test_trials_at_a_time_are_bounded_by_cpus_gpus_and_max_concurrent():
    assert trial_slots({"CPU": 16.0, "GPU": 2.0}, 2, 0) == 8
    assert trial_slots({"CPU": 16.0, "GPU": 2.0}, 2, 0.5) == 4
    assert trial_slots({"CPU": 16.0}, 1, 0, max_concurrent=3) == 3
    assert trial_slots({"CPU": 16.0}, 0, 0) is None
