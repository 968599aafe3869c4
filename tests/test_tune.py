"""Real Ray Tune runs on a local Ray (one CPU, tests/conftest.py): Parquet files, failures,
resumes; the parts that need no Ray are in tests/test_tune_parts.py."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import ray

from ablations.config import TrialConfig
from ablations.experiment.core.options import RunOptions
from ablations.experiment.execution.runner import run_experiment
from ablations.results import read_experiment
from ablations.results.io.schema import (
    config_columns,
    EPOCH_COLUMNS,
    PREDICTION_COLUMNS,
    TRIAL_COLUMNS,
    column_names,
)
from ablations.search_spaces import TrialSpec, expand, get_space
from tests.conftest import REPO, tiny_config
from tests.faulty import FAULTY_SPEC, faulty

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def experiment(ray_local, tmp_path_factory):
    """baseline, no_images and point_estimate at two seeds, one trial that raises (the
    built-in model through the tests' training function, failing as epoch 2 starts) and one
    whose loss goes non-finite."""
    base = tiny_config(epochs=2)
    trials = expand(get_space("components"), base, [0, 1],
                    only=["baseline", "no_images", "point_estimate"])
    broken = faulty(base.replace(ablation="broken"), fail_at_epoch=2)
    trials.append(TrialSpec("broken-seed0", "broken", 0, broken))
    exploding = base.replace(ablation="exploding", lr=1e30, grad_clip=0.0)
    trials.append(TrialSpec("exploding-seed0", "exploding", 0, exploding))
    options = RunOptions(storage=tmp_path_factory.mktemp("storage"), name="tiny",
                         space="components", progress=False)
    return run_experiment(trials, options), trials


def test_writes_the_three_parquet_files_with_documented_columns(experiment):
    result, trials = experiment
    tables = read_experiment(result.directory)
    trials_df, epochs_df, predictions_df = tables["trials"], tables["epochs"], tables["predictions"]
    assert set(column_names(TRIAL_COLUMNS)) | set(config_columns()) <= set(trials_df.columns)
    assert set(column_names(EPOCH_COLUMNS)) <= set(epochs_df.columns)
    assert set(column_names(PREDICTION_COLUMNS)) <= set(predictions_df.columns)
    assert len(trials_df) == len(trials) == 8
    assert trials_df["trial_name"].tolist() == [spec.name for spec in trials]
    # one row per test sample per ok trial, with the strata
    assert len(predictions_df) == 6 * 48
    assert {"stratum_regime", "stratum_speed_px_per_frame"} <= set(predictions_df.columns)
    # per-epoch curves, including the epoch the broken trial finished before failing
    assert epochs_df.groupby("trial_name")["epoch"].max().to_dict()["broken-seed0"] == 1
    assert len(epochs_df) == 6 * 2 + 1 + 1  # the exploding trial stops after its first epoch


def test_final_figures_reach_tune_as_one_string_and_the_tables_in_full(experiment):
    """Tune analyses every number of every result in the driver (2 KB a key a trial, the
    driver's growth with the trial count): only the live numbers go to it as numbers."""
    from ray.tune.result import AUTO_RESULT_KEYS

    from ablations.experiment.execution.reported import LIVE, PACKED, unpacked

    result, _ = experiment
    trials_df = result.trials.set_index("trial_name")
    files = sorted((result.directory / "tune").glob("baseline-seed*/result.json"))
    assert len(files) == 2
    for path in files:
        last = json.loads(path.read_text().splitlines()[-1])
        numbers = {k for k, v in last.items() if isinstance(v, (int, float))}
        assert numbers - set(AUTO_RESULT_KEYS) - {"done", "should_checkpoint"} <= LIVE | {
            k for k in numbers if k.startswith("val_")}, numbers
        assert "test_mae" not in last and "peak_mem_mb" not in last and PACKED in last
        full = unpacked(last)
        row = trials_df.loc[path.parent.name]
        assert full["test_mae"] == pytest.approx(row["test_mae"])
        assert full["peak_mem_mb"] == pytest.approx(row["peak_mem_mb"])
        assert full["val_mae"] == last["val_mae"] and full["epoch"] == 2


def test_a_failing_trial_is_recorded_and_the_others_finish(experiment):
    trials_df = experiment[0].trials.set_index("trial_name")
    assert trials_df.loc["broken-seed0", "status"] == "failed"
    assert "InjectedFailure: injected failure at epoch 2" in trials_df.loc["broken-seed0", "error"]
    assert trials_df.loc["broken-seed0", "epochs_run"] == 1
    assert trials_df.loc["exploding-seed0", "status"] == "diverged"
    assert "non-finite loss at epoch 1" in trials_df.loc["exploding-seed0", "error"]
    ok = trials_df.drop(index=["broken-seed0", "exploding-seed0"])
    assert (ok["status"] == "ok").all() and ok["error"].isna().all()
    assert (ok["epochs_run"] == 2).all()
    assert ok["test_mae"].notna().all() and (ok["train_samples_per_s"] > 0).all()
    assert (ok["peak_mem_mb"] > 0).all() and (ok["wall_s"] > 0).all()


def test_config_values_and_metadata_are_columns(experiment):
    trials_df = experiment[0].trials.set_index("trial_name")
    assert not trials_df.loc["no_images-seed1", "use_images"]
    assert trials_df.loc["no_images-seed1", "seed"] == 1
    assert trials_df.loc["point_estimate-seed0", "head"] == "point"
    assert pd.isna(trials_df.loc["point_estimate-seed0", "test_nll"])
    assert trials_df.loc["baseline-seed0", "test_nll"] == trials_df.loc["baseline-seed0",
                                                                         "test_nll"]
    assert trials_df["torch_version"].str.len().gt(0).all()
    assert trials_df["ray_version"].str.match(r"^\d+\.\d+").all()
    assert (trials_df["space"] == "components").all()


def test_paired_seeds_give_identical_data_to_every_variant(experiment):
    predictions = experiment[0].predictions
    per_trial = predictions.groupby("trial_name")["sample_index"].apply(tuple)
    assert per_trial.nunique() == 1  # the same test samples, in the same order
    targets = predictions.groupby(["seed", "trial_name"])["target"].sum()
    assert (targets.groupby(level="seed").nunique() == 1).all()  # one draw per seed...
    assert targets.groupby(level="seed").first().nunique() > 1  # ...each seed its own


def test_a_second_experiment_reuses_ok_and_diverged_trials_and_retrains_a_failed_one(
        experiment):
    """The same trials under another name in the same storage: the ok and diverged trials
    are the first experiment's rows (trial_store.py), the failed one trains again (a failure
    may be the machine's) and fails again."""
    result, trials = experiment
    options = RunOptions(storage=result.directory.parent, name="tiny-again",
                         space="components", progress=False)
    again = run_experiment(trials, options).trials.set_index("trial_name")
    first = result.trials.set_index("trial_name")
    retrained = again.index[again["reused_from"] == ""].tolist()
    assert retrained == ["broken-seed0"] and again.loc["broken-seed0", "status"] == "failed"
    assert again.loc["exploding-seed0", "status"] == "diverged"
    reused = again.drop(index="broken-seed0")
    assert (reused["reused_from"] == "tiny/" + reused.index).all()
    assert (reused["trial_key"] == first.loc[reused.index, "trial_key"]).all()
    assert reused["test_mae"].equals(first.loc[reused.index, "test_mae"])


def test_no_temp_files_left_behind(experiment):
    leftovers = [p.name for p in experiment[0].directory.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_a_retried_trial_resumes_from_its_last_checkpoint(ray_local, tmp_path):
    config = tiny_config(epochs=3, ablation="flaky")
    options = RunOptions(storage=tmp_path, name="retry", space="components", progress=False,
                         max_failures=1)
    result = run_experiment([TrialSpec("flaky-seed0", "flaky", 0,
                                       faulty(config, fail_at_epoch=2))], options)
    row = result.trials.iloc[0]
    assert row["status"] == "ok" and row["epochs_run"] == 3
    # epoch 1 ran once: the retry started from its checkpoint, not from scratch
    assert result.epochs["epoch"].tolist() == [1, 2, 3]
    assert len(result.predictions) == 48
    # and it ended where an uninterrupted run ends
    from ablations.trial.loop import train
    clean = train(config)
    assert row["val_loss"] == pytest.approx(clean.metrics["val_loss"], rel=1e-5)


def test_state_every_k_epochs_repeats_at_most_k_minus_1(ray_local, tmp_path):
    config = tiny_config(epochs=4, checkpoint_every=2, ablation="flaky")
    options = RunOptions(storage=tmp_path, name="every2", space="components", progress=False,
                         max_failures=1)
    result = run_experiment([TrialSpec("flaky-seed0", "flaky", 0,
                                       faulty(config, fail_at_epoch=4))], options)
    row = result.trials.iloc[0]
    # failed at the start of epoch 4; the newest state was epoch 2's, not 3's
    assert row["status"] == "ok" and row["resumed_from_epoch"] == 2
    assert result.epochs["epoch"].tolist() == [1, 2, 3, 4]
    from ablations.trial.loop import train
    clean = train(config)
    assert row["val_loss"] == pytest.approx(clean.metrics["val_loss"], rel=1e-5)


def test_oom_past_the_floor_is_a_failed_row_and_the_rest_go_on(ray_local, tmp_path):
    base = tiny_config(epochs=1, batch_size=16)
    trials = [
        TrialSpec("oom-seed0", "oom", 0, faulty(base.replace(ablation="oom", min_micro_batch=8),
                                                oom_above_batch=3)),
        TrialSpec("recovers-seed0", "recovers", 0,
                  faulty(base.replace(ablation="recovers"), oom_above_batch=5)),
    ]
    result = run_experiment(trials, RunOptions(storage=tmp_path, name="oom",
                                               space="components", progress=False))
    rows = result.trials.set_index("trial_name")
    assert rows.loc["oom-seed0", "status"] == "failed"
    assert rows.loc["oom-seed0", "failure_reason"] == "oom"
    assert rows.loc["recovers-seed0", "status"] == "ok"
    assert rows.loc["recovers-seed0", "oom_retries"] == 2
    assert rows.loc["recovers-seed0", "final_micro_batch"] == 4


@pytest.mark.parametrize(
    ("space", "only", "model"),
    [
        # the compiled cell through the tests' training function, which runs the built-in
        # model compiled by the eager backend (no C++ compiler, a fraction of inductor's time)
        ("systems", ["nockpt-off-fp32", "ckpt-default-bf16"], FAULTY_SPEC),
        # a cell that cannot run here: the built-in model's planning skips it
        ("systems", ["nockpt-off-fp32", "ckpt-reduce-overhead-fp32"], None),
        # --only keeps the space's reference (added when left out): batch32, frames4
        ("batch", ["batch32", "batch8"], None),
        ("frames", ["frames4", "frames1"], None),
    ],
)
def test_tiny_run_of_each_sweep_writes_rows(ray_local, tmp_path, space, only, model):
    """Through the public API (``Experiment``), on the Ray already running (left running)."""
    from ablations.experiment.api import Experiment

    tiny = tiny_config(epochs=1, device="cpu").diff(TrialConfig())
    if model == FAULTY_SPEC:
        tiny["compile_backend"] = "eager"
    result = Experiment(space, seeds=1, only=only, model=model, overrides=tiny,
                        storage=tmp_path, name=space).run()
    assert ray.is_initialized()
    rows = result.trials.set_index("trial_name")
    assert len(rows) == len(only)
    for name in only:
        expected = "skipped" if "reduce-overhead" in name else "ok"
        assert rows.loc[f"{name}-seed0", "status"] == expected
    ran = rows[rows["status"] == "ok"]
    assert (ran["train_samples_per_s"] > 0).all()
    assert (ran["compile_s"] >= 0).all() and (ran["compile_s"] < ran["wall_s"]).all()
    assert ran["peak_mem_mb"].gt(10).all()  # MiB: a worker holds torch at least
    assert (ran["mean_epoch_s"] > 0).all() and (ran["mean_epoch_s"] <= ran["wall_s"]).all()
    assert (ran["peak_mem_mb"] == ran[["peak_mem_train_mb", "peak_mem_eval_mb"]].max(axis=1)).all()
    if "ckpt-default-bf16" in only:
        compiled = rows.loc["ckpt-default-bf16-seed0"]
        assert compiled["compile_used"] == "default" and compiled["compiled_graphs"] >= 1
        assert rows.loc["nockpt-off-fp32-seed0", "compiled_graphs"] == 0
        assert compiled["precision"] == "bf16" and compiled["precision_used"] == "bf16"
    if "ckpt-reduce-overhead-fp32" in only:
        assert "no CUDA graphs" in rows.loc["ckpt-reduce-overhead-fp32-seed0", "error"]


def test_resume_retries_failed_trials_only_when_asked(ray_local, tmp_path):
    base = tiny_config(epochs=3)
    trials = [TrialSpec("fine-seed0", "fine", 0, base.replace(ablation="fine")),
              TrialSpec("flaky-seed0", "flaky", 0,
                        faulty(base.replace(ablation="flaky"), fail_at_epoch=2))]
    options = RunOptions(storage=tmp_path, name="retry", space="components", progress=False)
    first = run_experiment(trials, options).trials.set_index("trial_name")
    assert first.loc["flaky-seed0", "status"] == "failed"
    assert first.loc["flaky-seed0", "epochs_run"] == 1
    # a plain resume keeps the failure (it runs the failed trial no more)
    again = run_experiment(trials, options, resume=True).trials.set_index("trial_name")
    assert again.loc["flaky-seed0", "status"] == "failed"
    # --retry-failed: the failed trial continues from its last epoch; the ok one is kept
    options.retry_failed = True
    retried = run_experiment(trials, options, resume=True).trials.set_index("trial_name")
    assert retried.loc["flaky-seed0", "status"] == "ok"
    assert retried.loc["flaky-seed0", "resumed_from_epoch"] == 1
    assert retried.loc["flaky-seed0", "epochs_run"] == 3
    assert retried.loc["fine-seed0", "resumed_from_epoch"] == 0  # not run again
    assert retried.loc["fine-seed0", "test_mae"] == first.loc["fine-seed0", "test_mae"]
    assert not (tmp_path / "retry" / "trial_state").exists()  # nothing left to resume


def test_a_reused_worker_does_not_grow_from_trial_to_trial(ray_local, tmp_path):
    # One worker runs 6 trials in turn. Without return_memory_after_trial() its peak RSS grows
    # by 47-60 MiB per trial (glibc arenas of the per-trial threads); with it, by 2-18 MiB on
    # the machines measured. The least-squares slope over trials 2-6 (the first warms the
    # worker) is bounded between the two, so one noisy trial does not decide it.
    base = TrialConfig.of(epochs=1, synthetic_train=512, synthetic_val=64, synthetic_test=64)
    trials = expand(get_space("components"), base, list(range(6)), only=["baseline"])
    result = run_experiment(trials, RunOptions(storage=tmp_path, name="memory",
                                               space="components", progress=False,
                                               max_concurrent=1))
    peaks = result.trials["peak_mem_mb"].tolist()
    slope = float(np.polyfit(np.arange(5), peaks[1:], 1)[0])
    assert slope < 32, (slope, peaks)


def test_storage_uri(ray_local, tmp_path):
    """A URI root goes through pyarrow.fs (file:// here; s3:// and gs:// take the same path)."""
    uri = f"file://{tmp_path}/bucket"
    trials = expand(get_space("components"), tiny_config(epochs=2), [0], only=["baseline"])
    result = run_experiment(trials, RunOptions(storage=uri, name="remote", space="components",
                                               progress=False))
    assert result.directory == f"{uri}/remote"
    tables = read_experiment(result.directory)
    assert tables["trials"]["status"].tolist() == ["ok"]
    assert len(tables["epochs"]) == 2 and len(tables["predictions"]) == 48
    on_disk = tmp_path / "bucket" / "remote"
    assert (on_disk / "experiment.json").is_file() and (on_disk / "tune").is_dir()
    assert not (on_disk / "trial_state").exists()  # removed once nothing can be resumed
    # the timings benchmarks/scale.py reads: Tune's fit within the driver's wall, the tables
    # written after it, on the test's one-CPU Ray
    timings = json.loads((on_disk / "experiment.json").read_text())
    assert 0 < timings["fit_s"] <= timings["driver_wall_s"]
    assert 0 < timings["collect_s"] < timings["driver_wall_s"] and timings["cluster_cpus"] == 1


def test_report_and_notebook_on_a_real_experiment(experiment, monkeypatch):
    """The report command and the notebook run on an experiment written by a real Tune run
    (it has a failed and a diverged trial: excluded and counted)."""
    import nbclient
    import nbformat

    from ablations.cli.main import main

    directory = experiment[0].directory
    assert main(["report", str(directory), "--figures", "png"]) == 0
    assert (directory / "report.html").stat().st_size > 10_000
    monkeypatch.setenv("ABLATION_EXPERIMENT", str(directory))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    notebook = nbformat.read(REPO / "notebooks" / "ablation_analysis.ipynb", as_version=4)
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO)}}).execute()
    outputs = "".join(str(cell.get("outputs", "")) for cell in notebook.cells)
    assert "no_images" in outputs and "p_holm" in outputs and "coverage_90" in outputs


def test_compare_on_real_experiment_folders(experiment, tmp_path, capsys):
    """`run_ablations.py compare A B` reads two experiment folders: the same run twice is
    equivalent everywhere (deterministic training: Δ = 0); a copy whose no_images trials are
    0.5 km worse is called worse for no_images only; a wrong folder is one line, exit 2."""
    import shutil

    from ablations.cli.main import main

    directory = experiment[0].directory
    assert main(["compare", str(directory), str(directory), "--margin", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "No variant changed by more than the margin" in out and "| baseline " in out
    assert "Without an ok trial in both (not compared): broken, exploding." in out
    changed = tmp_path / "changed"
    shutil.copytree(directory, changed)
    trials = pd.read_parquet(changed / "trials.parquet")
    trials.loc[trials["ablation"] == "no_images", "test_mae"] += 0.5
    trials.to_parquet(changed / "trials.parquet")
    assert main(["compare", str(directory), str(changed), "--margin", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "Changed: no_images." in out
    # the report's optional section: this experiment against the changed copy
    assert main(["report", str(directory), "--compare-with", str(changed), "--figures", "png"]) == 0
    report = (directory / "report.md").read_text()
    assert "## Compared with changed" in report and "Changed: no_images." in report
    assert "| Variant | Seeds A | Seeds B | Pairs (Δ's seeds) |" in report  # each side's seeds
    assert main(["compare", str(directory), str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run_ablations.py compare: error:" in err


def test_trials_record_their_threads_and_times(experiment):
    result, _ = experiment
    ok = result.trials[result.trials["status"] == "ok"]
    assert (ok["torch_threads"] == 1).all()  # = --cpus-per-trial (default 1)
    epochs = result.epochs.merge(ok[["trial_name", "started_at"]], on="trial_name")
    assert (epochs["reported_at"] > epochs["started_at"]).all()
    first = epochs.sort_values("epoch").groupby("trial_name").first()
    later = epochs.sort_values("epoch").groupby("trial_name").last()
    assert (later["reported_at"] > first["reported_at"]).all()


def test_tables_follow_the_plan_order_whatever_order_trials_ran_in(experiment):
    result, trials = experiment
    plan = [spec.name for spec in trials]  # baseline, no_images, point_estimate x 2 seeds, ...
    assert result.trials["trial_name"].tolist() == plan
    ran = result.predictions.drop_duplicates("trial_name")["trial_name"].tolist()
    assert ran == [name for name in plan if name in ran]
    started = result.trials.dropna(subset=["started_at"]).sort_values("started_at")
    assert started["trial_name"].iloc[-1].startswith("no_images")  # longest first: ran last
