"""The command line: bad input gives one line and exit code 2; list, --dry-run, a real run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from ablations.cli.main import main
from ablations.config.safety import installed_torch
from tests.conftest import REPO, run_here, write_data_dir


# run_ablations.py as itself (its path in sys.argv[0]), saying on stderr at exit whether its
# process loaded torch
SCRIPT = str(REPO / "run_ablations.py")
TORCH_PROBE = ("import atexit, runpy, sys\n"
               "atexit.register(lambda: print('torch in the driver:', 'torch' in sys.modules,"
               " file=sys.stderr))\n"
               f"sys.argv = [{SCRIPT!r}, *sys.argv[1:]]\n"
               f"runpy.run_path({SCRIPT!r}, run_name='__main__')")


def run_cli(*args, cwd=None, timeout=240, torch_probe=False, path=()):
    """``run_ablations.py ARGS`` in a fresh process, with ``path`` (folders) on its sys.path
    after the checkout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *map(str, path)]),
           "RAY_USAGE_STATS_ENABLED": "0"}
    program = ["-c", TORCH_PROBE] if torch_probe else [SCRIPT]
    return subprocess.run([sys.executable, *program, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


def in_process(capsys, *args) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_suggested_command_starts_as_the_user_started_the_tool():
    from ablations.cli.flags import invoked_as

    assert invoked_as("/venv/bin/run-ablations") == ("run-ablations", "run-ablations")
    assert invoked_as("/work/x/run_ablations.py") == ("run_ablations.py",
                                                      "python /work/x/run_ablations.py")
    assert invoked_as("run_ablations.py") == ("run_ablations.py", "python run_ablations.py")
    assert invoked_as("/venv/lib/ablations/cli/__main__.py") == (
        "python -m ablations.cli", "python -m ablations.cli")
    assert invoked_as("-c") == ("run_ablations.py", "python run_ablations.py")  # main() called


def assert_one_line_error(code, err, pattern):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert pattern in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--seeds", "0"], "number of seeds must be >= 1"),
        (["--seeds", "a,b"], "not a count"),
        (["--seeds", "1,1"], "distinct"),
        (["--epochs", "-1"], "must be >= 1"),
        (["--space", "nope"], "unknown space 'nope'; choose one of: batch, components, features, "
                              "frames, hpo, systems"),
        (["--only", "no_brains"], "unknown variant(s) ['no_brains']"),
        (["--config", "/nonexistent.yaml"], "config file not found"),
        (["--cpus-per-trial", "-1"], "must be a finite number >= 0"),
        (["--gpus-per-trial", "x"], "not a number"),
        (["--dashboard", "maybe"], "not a boolean"),
        (["--set", "temporal_frames=9"], "temporal_frames=9 but the synthetic data has 8 frames"),
        (["--set", "use_scalars=False", "--set", "use_images=0"], "no input"),
        (["--set", "nonsense"], "not KEY=VALUE"),
        (["--set", "gradient_checkpointing=on"], "not a boolean"),
        (["--data", "/nonexistent/dir"], "data directory not found"),
        (["--name", "bad name!"], "--name 'bad name!'"),
        (["--address", "not an address"], "--address 'not an address'"),
        (["--storage", "nosuchscheme://bucket/x"], "--storage nosuchscheme://bucket/x"),
        (["--storage", "s3://"], "--storage s3:// names no bucket: give one, e.g. "
                                 "s3://my-bucket/ablations"),
        (["--storage", "file:///"], "--storage file:/// names no folder: give one, e.g. "
                                    "file:///data/ablations"),
        (["--storage", "~nouser/x"], "--storage ~nouser/x: ~nouser names no user's home"),
        (["--data", "~nouser/x"], "--data ~nouser/x: ~nouser names no user's home"),
        (["--space", "~nouser/x.yaml"], "--space ~nouser/x.yaml: ~nouser names no user's home"),
        (["--cpus-per-trial", "0"], "a trial needs a CPU or a GPU"),
        (["--set", "seed=5"], "each trial's seed comes from --seeds"),
        (["--set", "ablation=x"], "each trial's variant name comes from the space's variants"),
        (["--name", "a" * 101], "--name is 101 characters long: 100 at most"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, pattern):
    storage = [] if "--storage" in args else ["--storage", str(tmp_path / "results")]
    code, _, err = in_process(capsys, *args, *storage)
    assert_one_line_error(code, err, pattern)
    assert not (tmp_path / "results").exists()  # nothing started, nothing written


def test_a_storage_under_a_file_and_a_home_that_is_no_ones_are_one_line(capsys, tmp_path):
    (tmp_path / "afile").write_text("")
    code, _, err = in_process(capsys, "--storage", str(tmp_path / "afile" / "sub"))
    assert_one_line_error(code, err, f"{tmp_path / 'afile'} is a file, not a directory")
    experiment = tmp_path / "results" / "p"  # an experiment's folder given as the storage
    experiment.mkdir(parents=True)
    (experiment / "experiment.json").write_text("{}")
    (experiment / "trials.parquet").write_text("")
    for given in (["--storage", str(experiment), "--name", "inner"],
                  ["--resume", "--storage", str(experiment)]):
        code, _, err = in_process(capsys, *given, "--dry-run")
        assert_one_line_error(code, err, f"--storage {experiment} is an experiment's folder, "
                                         f"not a storage of experiments: pass --storage "
                                         f"{experiment.parent} (with --name p to resume")
    from ablations.config.values import ConfigError, flag_of
    from ablations.search_spaces.files import load_space_file

    with pytest.raises(ConfigError) as missing:  # the command named as the user runs the tool
        load_space_file(tmp_path / "missing.yaml")
    assert "; run-ablations list shows the built-in spaces)" in missing.value.render(
        flag_of, "run-ablations")
    for command in (["report", "~nouser/x"], ["compare", "~nouser/x", "~nouser/y"]):
        code, _, err = in_process(capsys, *command)
        assert_one_line_error(code, err, f"{command[0]}: error: {command[0]} ~nouser/x: "
                                         "~nouser names no user's home folder")


def test_a_resume_refuses_flags_that_would_plan_other_trials(capsys, tmp_path):
    """A resume continues the recorded plan: --epochs, --set, other seeds, variants or
    resources given beside it are refused in one line, not dropped unseen; the same values
    as the record (the starting command given again with --resume) pass."""
    import json

    from ablations.experiment.api import Experiment
    from ablations.experiment.core.plans import trial_plan
    from ablations.experiment.core.request import Request
    from ablations.experiment.resuming import refuse_plan_changes

    planned = Experiment("components", seeds=2, only=["no_images"], overrides={"epochs": 4}
                         ).plan()
    folder = tmp_path / "results" / "p"
    folder.mkdir(parents=True)
    record = {"schema_version": 1, "space": "components", "seeds": [0, 1], "reference":
              "baseline", "cpus_per_trial": 1.0, "gpus_per_trial": 0.0,
              "trials": trial_plan(planned)}
    (folder / "experiment.json").write_text(json.dumps(record))
    where = ["--resume", "--name", "p", "--storage", str(tmp_path / "results"), "--dry-run"]
    for given, named in ((["--epochs", "3"], "--epochs"), (["--set", "lr=0.1"], "--set"),
                         (["--seeds", "5"], "--seeds"), (["--cpus-per-trial", "2"],
                                                         "--cpus-per-trial"),
                         (["--only", "no_scalars", "--epochs", "3"], "--only, --epochs"),
                         (["--set", "no_such_key=1"], "--set")):
        code, _, err = in_process(capsys, *where, *given)
        assert_one_line_error(code, err, f"--resume continues p as it was planned (space "
                                         f"components, seeds [0, 1]); {named} would plan other")
    configs = [spec.config for spec in planned]
    same = Request(seeds=[1, 0], epochs=4, overrides=[("epochs", "4")], only=["no_images"],
                   cpus_per_trial=1, given=frozenset({"seeds", "epochs", "overrides", "only",
                                                      "cpus_per_trial"}))
    refuse_plan_changes(same, "p", record, configs)  # the record's own values: no refusal
    assert json.loads((folder / "experiment.json").read_text()) == record


def test_bad_yaml_key_and_value(capsys, tmp_path):
    (tmp_path / "a.yaml").write_text("memory_optimised: true\n")
    code, _, err = in_process(capsys, "--config", str(tmp_path / "a.yaml"), "--dry-run")
    assert_one_line_error(code, err, "unknown key 'memory_optimised'; did you mean "
                                     "'memory_optimized'?")
    (tmp_path / "b.yaml").write_text("gradient_checkpointing: Flase\n")
    code, _, err = in_process(capsys, "--config", str(tmp_path / "b.yaml"), "--dry-run")
    assert_one_line_error(code, err, "gradient_checkpointing: 'Flase' is not a boolean")


def test_bad_data_directory_is_refused_before_any_trial(capsys, tmp_path):
    root = write_data_dir(tmp_path / "d")
    table = pd.read_parquet(root / "table.parquet")
    table.loc[2, "scalar_a"] = float("nan")
    table.to_parquet(root / "table.parquet")
    code, _, err = in_process(capsys, "--data", str(root), "--storage", str(tmp_path / "r"))
    assert_one_line_error(code, err, "column 'scalar_a' has 1 NaN/inf values")
    assert str(root / "table.parquet") in err
    assert not (tmp_path / "r").exists()


def test_existing_experiment_is_never_overwritten(capsys, tmp_path):
    existing = tmp_path / "r" / "mine"
    existing.mkdir(parents=True)
    (existing / "trials.parquet").write_bytes(b"precious")
    code, _, err = in_process(capsys, "--storage", str(tmp_path / "r"), "--name", "mine")
    assert_one_line_error(code, err, "already exists and is not an experiment of this tool")
    assert (existing / "trials.parquet").read_bytes() == b"precious"


def test_list(capsys):
    code, out, _ = in_process(capsys, "list")
    assert code == 0
    for name in ("components:", "no_temporal_attention", "single_frame", "point_estimate"):
        assert name in out


def test_dry_run_lists_27_resolved_trials(capsys):
    code, out, _ = in_process(capsys, "--space", "components", "--dry-run")
    assert code == 0
    assert "27 trials" in out
    assert "single_frame-seed2" in out and "temporal_frames=1" in out
    assert "reduced_width-seed0" in out and "cnn_widths=32,64,128" in out


def test_dry_run_applies_yaml_then_flags(capsys, tmp_path):
    (tmp_path / "c.yaml").write_text("epochs: 9\nbatch_size: 20\nmemory_optimized: yes\n")
    code, out, _ = in_process(capsys, "--config", str(tmp_path / "c.yaml"), "--epochs", "2",
                              "--dry-run", "--seeds", "0,5")
    assert code == 0
    assert "  epochs: 2" in out and "  batch_size: 20" in out and "cnn_widths: 32,64,128" in out
    assert "baseline-seed5" in out and "18 trials" in out


@pytest.mark.slow
def test_a_subprocess_error_has_no_traceback(tmp_path):
    proc = run_cli("--epochs", "zero", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not installed_torch().endswith("+cpu"), reason="needs a CPU-only torch build")
def test_a_dry_run_plans_every_trial_without_importing_torch(tmp_path):
    """Planning the main job (its configurations, the safety rules, the device, the data's
    provenance) needs no torch on a CPU-only build: a dry run answers in the time of its own
    work, not torch's import (benchmarks/cli_start.py)."""
    probe = ("import runpy, sys; sys.argv = ['run_ablations.py', *sys.argv[1:]]\n"
             f"runpy.run_path({str(REPO / 'run_ablations.py')!r}, run_name='__main__')")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONVERBOSE": "1"}
    proc = subprocess.run([sys.executable, "-c", probe, "--space", "components", "--dry-run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "27 trials" in proc.stdout, proc.stderr[-2000:]
    imported = re.findall(r"^import '([\w.]+)'", proc.stderr, flags=re.MULTILINE)
    assert "ablations.experiment.prepare" in imported and "pandas" in imported
    assert "torch" not in imported


@pytest.mark.slow
def test_end_to_end_cli_run(tmp_path):
    """The CLI starts its own local Ray, runs, prints where results are, writes Parquet; here
    the `features` space, whose table comes from the data's scalar columns (one run serves
    both: each CLI run starts a Ray of its own)."""
    from ablations.experiment.api import Experiment
    from ablations.trial.cost import estimated_cost

    # the trials' cost estimates counted here first (their FLOPs, kept in the cache folder,
    # which counting imports torch for): the run reads them
    for trial in Experiment("features", seeds=2, only=["baseline", "no_images", "no_scalar_2"],
                            overrides={"synthetic_train": 64, "synthetic_val": 16,
                                       "synthetic_test": 16, "cnn_widths": "8,16,16",
                                       "embed_dim": 16, "batch_size": 16}).plan():
        estimated_cost(trial.config)
    proc = run_cli(
        "--space", "features", "--seeds", "2", "--only", "baseline,no_images,no_scalar_2",
        "--epochs", "1", "--set", "synthetic_train=64", "--set", "synthetic_val=16",
        "--set", "synthetic_test=16", "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16",
        "--set", "batch_size=16", "--name", "e2e", "--no-dashboard", "--margin", "0.5",
        "--progress", "epochs", cwd=tmp_path, torch_probe=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the driver trains nothing: with the estimates kept, Tune's TensorBoard logger writes
    # without torch (below)
    if installed_torch().endswith("+cpu"):
        assert "torch in the driver: False" in proc.stderr, proc.stderr[-2000:]
    out_dir = tmp_path / "ablation_results" / "e2e"  # default storage: under the working folder
    assert f"Results in {out_dir}" in proc.stdout
    # spelled as the test started it: python with the script's path
    assert f"Report: python {REPO / 'run_ablations.py'} report {out_dir}\n" in proc.stdout
    assert "[6/6]" in proc.stdout  # progress lines
    assert "  no_scalar_2-seed1 epoch 1/1 val_mae=" in proc.stdout  # --progress epochs
    # what the trials print is in their folders, not on the console
    assert "pid=" not in proc.stdout + proc.stderr
    assert (out_dir / "tune" / "baseline-seed0" / "stderr").is_file()
    # TensorBoard's files hold each epoch's metrics (tensorboard --logdir, as the run prints)
    events = next((out_dir / "tune" / "baseline-seed0").glob("events.out.tfevents.*"))
    assert b"ray/tune/val_mae" in events.read_bytes()
    # the summary gives each variant a verdict against the baseline, at the margin asked for
    assert "Verdicts on test_mae (lower is better) against baseline: " in proc.stdout
    assert "; margin ±0.5, alpha" in proc.stdout
    dropped = next(line for line in proc.stdout.splitlines() if line.strip().startswith(
        "no_scalar_2 "))  # the summary's row (the epoch lines name trials: no_scalar_2-seed0)
    assert dropped.split()[-4] in ("worse", "better", "equivalent", "negligible", "inconclusive")
    trials = pd.read_parquet(out_dir / "trials.parquet")
    assert sorted(trials["trial_name"]) == [f"{variant}-seed{seed}" for variant in (
        "baseline", "no_images", "no_scalar_2") for seed in (0, 1)]
    assert (trials["status"] == "ok").all()
    assert (out_dir / "epochs.parquet").is_file() and (out_dir / "predictions.parquet").is_file()
    by_variant = trials.drop_duplicates("ablation").set_index("ablation")
    assert by_variant.loc["no_scalar_2", "drop_scalars"] == "scalar_2"
    assert by_variant.loc["baseline", "drop_scalars"] == ""
    # the baseline check: one line above the verdicts, recorded in the experiment folder
    check = next(line for line in proc.stdout.splitlines() if line.startswith("Baseline check"))
    assert proc.stdout.index(check) < proc.stdout.index("Verdicts on test_mae")
    assert json.loads((out_dir / "baseline_check.json").read_text())["line"] == check
    assert (trials["test_mae_mean_predictor"] > 0).all()


def test_systems_dry_run_lists_the_matrix_with_conflicts_marked(capsys):
    code, out, _ = in_process(capsys, "--space", "systems", "--seeds", "1", "--dry-run")
    assert code == 0
    skipped = [line for line in out.splitlines() if line.strip().startswith("SKIP")]
    runnable = [line for line in out.splitlines() if "-seed0 " in line and "SKIP" not in line]
    assert len(skipped) + len(runnable) == 40
    # every CUDA-graph cell and every tf32 cell is skipped on CPU, with its reason
    assert sum("reduce-overhead" in line for line in skipped) == 8
    assert sum("-max-autotune-fp32" in line or "-max-autotune-bf16" in line
               for line in skipped) == 4
    assert all("no CUDA graphs" in line for line in skipped if "reduce-overhead" in line)
    assert sum("tf32 is a CUDA" in line for line in skipped) >= 6
    assert any("nockpt-default-bf16-seed0" in line for line in runnable)


def test_resolve_conflicts_maps_with_a_warning(capsys):
    code, out, err = in_process(capsys, "--set", "compile=reduce-overhead", "--only", "baseline",
                                "--dry-run")
    assert_one_line_error(code, err, "compile=reduce-overhead uses CUDA graphs")
    code, out, err = in_process(capsys, "--set", "compile=reduce-overhead", "--only", "baseline",
                                "--dry-run", "--resolve-conflicts")
    assert code == 0
    assert "warning: baseline-seed0: compile=reduce-overhead" in err and "using compile=default" \
        in err
    assert "compile_requested=reduce-overhead" in out


def test_preset_by_name(capsys):
    code, out, _ = in_process(capsys, "--config", "full_optimized", "--dry-run", "--seeds", "1")
    assert code == 0
    assert "  compile: default" in out and "  batch_size: 20" in out
    assert "  gradient_checkpointing: True" in out


def test_frames_sweep_skips_frames_beyond_the_data(capsys, tmp_path):
    root = write_data_dir(tmp_path / "d", frames=3)
    code, out, _ = in_process(capsys, "--space", "frames", "--data", str(root), "--seeds", "1",
                              "--set", "batch_size=8", "--dry-run")
    assert code == 0
    assert "3 trials (5 more skipped)" in out
    assert "SKIP frames4-seed0" in out and "has 3 frames" in out


def test_auto_batch_refused_for_the_batch_space(capsys):
    code, _, err = in_process(capsys, "--space", "batch", "--auto-batch")
    assert_one_line_error(code, err, "--auto-batch picks one batch size")


@pytest.mark.slow
def test_diagnose(tmp_path):
    proc = run_cli("diagnose", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CPU:" in proc.stdout and "Ray resources: CPU" in proc.stdout
    assert f"Suggested: python {REPO / 'run_ablations.py'} --space components" in proc.stdout


def test_a_scheduler_is_refused_for_ablation_spaces(capsys):
    code, _, err = in_process(capsys, "--space", "components", "--scheduler", "asha")
    assert_one_line_error(code, err, "every trial runs to the same budget")


def test_hpo_dry_run_lists_the_search(capsys):
    code, out, _ = in_process(capsys, "--space", "hpo", "--num-samples", "8", "--dry-run")
    assert code == 0
    assert "8 sampled trials (asha scheduler)" in out and "lr: loguniform" in out


def test_resume_errors(capsys, tmp_path):
    code, _, err = in_process(capsys, "--resume", "--storage", str(tmp_path))
    assert_one_line_error(code, err, "--resume: no experiment in")
    (tmp_path / "x").mkdir()
    code, _, err = in_process(capsys, "--resume", "--name", "x", "--storage", str(tmp_path))
    assert_one_line_error(code, err, "is not an experiment folder")
    code, _, err = in_process(capsys, "--retry-failed")
    assert_one_line_error(code, err, "--retry-failed only applies with --resume")


@pytest.fixture(scope="module")
def file_run(tmp_path_factory):
    """A run on a file dataset, with --verbose (Ray Tune's own tables on the console), in this
    process (run_here), on the module's Ray."""
    tmp_path = tmp_path_factory.mktemp("files")
    root = write_data_dir(tmp_path / "data", n=60, frames=3, size=8)
    proc = run_here(
        "--space", "frames", "--only", "frames1,frames3,frames4", "--seeds", "1",
        "--epochs", "1", "--data", str(root), "--max-train-examples", "32",
        "--set", "cnn_widths=8,16,16", "--set", "embed_dim=16", "--set", "batch_size=8",
        "--name", "files", "--no-dashboard", "--verbose", cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"proc": proc, "root": root, "out_dir": tmp_path / "ablation_results" / "files"}


@pytest.mark.slow
def test_end_to_end_cli_run_on_a_file_dataset(file_run):
    """--data DIR through the whole path: validation, Tune trials, strata in the predictions."""
    root, out_dir = file_run["root"], file_run["out_dir"]
    trials = pd.read_parquet(out_dir / "trials.parquet").set_index("trial_name")
    assert trials.loc["frames4-seed0", "status"] == "skipped"  # the data has 3 frames
    assert (trials.loc[["frames1-seed0", "frames3-seed0"], "status"] == "ok").all()
    assert trials.loc["frames1-seed0", "data_dir"] == str(root)
    predictions = pd.read_parquet(out_dir / "predictions.parquet")
    assert {"stratum_site", "stratum_season"} <= set(predictions.columns)
    assert len(predictions) == 2 * 8  # the 8 test rows of the table, per ok trial


@pytest.mark.slow
def test_verbose_shows_every_final_figure_in_tunes_result_table(file_run):
    """With --verbose the trials report their final figures to Tune as numbers, so Tune's
    result table of a finished trial shows the test metrics, not a packed JSON string."""
    out = file_run["proc"].stdout
    trials = pd.read_parquet(file_run["out_dir"] / "trials.parquet").set_index("trial_name")
    assert "Trial frames1-seed0 result" in out, out[-3000:]
    box = out.split("Trial frames1-seed0 result", 1)[1].split("\n\n", 1)[0]
    assert "packed_json" not in box, box
    shown = re.search(r"[│|] test_mae\s+([0-9.]+) [│|]", box)  # Tune's UTF-8 or ASCII box
    assert shown, box
    assert float(shown.group(1)) == pytest.approx(trials.loc["frames1-seed0", "test_mae"],
                                                  rel=1e-4)


@pytest.mark.slow
def test_more_gpus_than_the_cluster_has_is_refused_before_any_trial(tmp_path):
    proc = run_here("--gpus-per-trial", "1", "--only", "baseline", "--seeds", "1",
                    "--no-dashboard", "--name", "gpu", cwd=tmp_path)
    assert proc.returncode == 2
    assert "a trial asks for 1 CPU / 1 GPU but the cluster has" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "ablation_results" / "gpu" / "trials.parquet").exists()
