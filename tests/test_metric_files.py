"""Metrics a program writes to log files of its own (ablations/config/metric_files.py): a CSV log
(Lightning's CSVLogger), JSON (the Hugging Face Trainer's all_results.json and
trainer_state.json), TensorBoard events (SummaryWriter), read while the program runs and once it
has ended; each value a point of the curve, the last the final value. The runs are marked
slow."""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import pandas as pd
import pytest

from ablations.config import ConfigError
from ablations.config.code import command_from, command_of, command_spec
from ablations.config.metric_files import MetricFileError, read_points
from ablations.trial.command import epochs_written

# Lightning's CSVLogger: a row per log call, each with the columns it logged; epoch from 0
LIGHTNING_CSV = """epoch,step,train_loss,val_loss,val_acc
0,49,1.20,,
0,49,,0.95,0.61
1,99,0.80,,
1,99,,0.72,0.70
2,149,0.61,,
2,149,,0.66,0.74
"""


def test_a_csv_log_gives_each_columns_values_at_the_epochs_counted_from_1(tmp_path):
    (tmp_path / "lightning_logs" / "version_0").mkdir(parents=True)
    (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").write_text("epoch\nstale\n")
    newest = tmp_path / "lightning_logs" / "version_1" / "metrics.csv"
    newest.parent.mkdir()
    newest.write_text(LIGHTNING_CSV)  # written last: the glob's newest match
    spec = {"kind": "csv", "path": "lightning_logs/version_*/metrics.csv", "key": "val_loss"}
    assert read_points(spec, str(tmp_path)) == [(1, 0.95), (2, 0.72), (3, 0.66)]
    without = tmp_path / "plain.csv"
    without.write_text("loss\n3.0\n2.5\n")
    assert read_points({"kind": "csv", "path": "plain.csv", "key": "loss"}, str(tmp_path)) == \
        [(1, 3.0), (2, 2.5)]  # no epoch column: the ordinal
    with pytest.raises(MetricFileError, match=r"metrics.csv has no column val_mae \(its "
                                              r"columns: epoch, step, train_loss"):
        read_points({**spec, "key": "val_mae"}, str(tmp_path))
    with pytest.raises(MetricFileError, match="no csv file out/log.csv where the program ran"):
        read_points({**spec, "path": "out/log.csv"}, str(tmp_path))


def test_while_it_runs_an_epoch_is_read_once_every_file_has_a_point_past_it(tmp_path):
    command = command_from("{python} t.py", {}, {
        "val_loss": {"direction": "lower", "csv": "log.csv"},
        "val_acc": {"direction": "higher", "json": "state.json"}})
    trial = SimpleNamespace(last_epoch=0)
    assert epochs_written(command, trial, tmp_path) == []  # no file yet
    (tmp_path / "log.csv").write_text("epoch,val_loss\n0,0.9\n1,0.8\n2,0.7\n")
    assert epochs_written(command, trial, tmp_path) == []  # the other file not yet
    history = [{"epoch": 1.0, "val_acc": 0.5}, {"epoch": 2.0, "val_acc": 0.6}]
    (tmp_path / "state.json").write_text(json.dumps({"log_history": history}))
    # epoch 2 of the JSON file may still grow a key: epoch 1 alone is complete in both
    assert epochs_written(command, trial, tmp_path) == [(1, {"val_loss": 0.9, "val_acc": 0.5})]
    trial.last_epoch = 1  # reported
    assert epochs_written(command, trial, tmp_path) == []
    (tmp_path / "state.json").write_text('{"log_history": [{"epo')  # being rewritten
    assert epochs_written(command, trial, tmp_path) == []
    history += [{"epoch": 3.0, "val_acc": 0.7}, {"epoch": 4.0, "val_acc": 0.7}]
    (tmp_path / "state.json").write_text(json.dumps({"log_history": history}))
    (tmp_path / "log.csv").write_text("epoch,val_loss\n0,0.9\n1,0.8\n3,0.6\n")
    # the CSV has no epoch 3 (its 2): the epochs read stop before it
    assert epochs_written(command, trial, tmp_path) == [(2, {"val_loss": 0.8, "val_acc": 0.6})]


def test_json_files_give_a_final_value_or_the_trainers_log_history(tmp_path):
    (tmp_path / "all_results.json").write_text(json.dumps({"eval_accuracy": 0.81,
                                                           "epoch": 3.0}))
    assert read_points({"kind": "json", "path": "all_results.json", "key": "eval_accuracy"},
                       str(tmp_path)) == [(1, 0.81)]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": [
        {"epoch": 1.0, "eval_loss": 0.9}, {"epoch": 1.0, "loss": 1.1, "step": 10},
        {"epoch": 2.0, "eval_loss": 0.7}, {"epoch": 2.0, "eval_loss": 0.69}]}))
    # the script's own evaluate() after training logs epoch 2 again: its value is the last
    assert read_points({"kind": "json", "path": "trainer_state.json", "key": "eval_loss"},
                       str(tmp_path)) == [(1, 0.9), (2, 0.69)]
    (tmp_path / "restarted.json").write_text(json.dumps({"log_history": [
        {"epoch": 1.0, "loss": 0.9}, {"epoch": 2.0, "loss": 0.8}, {"epoch": 1.0, "loss": 0.7}]}))
    assert read_points({"kind": "json", "path": "restarted.json", "key": "loss"},
                       str(tmp_path)) == [(1, 0.9), (2, 0.8), (3, 0.7)]  # back: the ordinal


def test_tensorboard_events_give_a_tags_values_at_their_steps(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "runs"))
    for step, value in enumerate([0.9, 0.7, 0.6]):
        writer.add_scalar("val/loss", value, step)
    writer.close()
    points = read_points({"kind": "tensorboard", "path": "runs", "key": "val/loss"},
                         str(tmp_path))
    assert [epoch for epoch, _ in points] == [1, 2, 3]  # steps from 0, counted from 1
    assert [round(value, 6) for _, value in points] == [0.9, 0.7, 0.6]
    with pytest.raises(MetricFileError, match=r"have no scalar val/acc \(its scalars: val/loss"):
        read_points({"kind": "tensorboard", "path": "runs", "key": "val/acc"}, str(tmp_path))


@pytest.mark.parametrize("declared, problem", [
    ({"csv": "a.csv", "json": "b.json"}, "one source per metric, not csv and json"),
    ({"csv": "a.csv", "printed": True}, "one source per metric, not csv and printed"),
    ({"key": "val/loss"}, "key: names a column, key or tag of a file; give the file too"),
    ({"tensorboard": ""}, "tensorboard: '' is not a file's path"),
])
def test_a_bad_file_source_is_refused_in_one_line(declared, problem):
    with pytest.raises(ConfigError) as error:
        command_from("python t.py", {}, {"loss": {"direction": "lower", **declared}})
    assert problem in str(error.value) and "\n" not in str(error.value)


def test_the_spec_carries_each_metrics_file():
    command = command_from("python t.py", {}, {
        "val_loss": {"direction": "lower", "tensorboard": "runs", "key": "val/loss"},
        "val_acc": {"direction": "higher", "csv": "logs/*/metrics.csv"}})
    assert command_of(command_spec(command)).files == {
        "val_loss": {"kind": "tensorboard", "path": "runs", "key": "val/loss"},
        "val_acc": {"kind": "csv", "path": "logs/*/metrics.csv", "key": "val_acc"}}


# Scripts that write only their own logs, as published ones do: argparse, --seed, no JSON.
CSV_SCRIPT = '''
import argparse, csv, os
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
os.makedirs("lightning_logs/version_0", exist_ok=True)
with open("lightning_logs/version_0/metrics.csv", "w", newline="") as handle:
    log = csv.writer(handle)
    log.writerow(["epoch", "step", "train_loss", "val_loss"])
    for epoch in range(3):
        log.writerow([epoch, 10 * epoch + 9, 1.0 - epoch * args.lr, ""])
        log.writerow([epoch, 10 * epoch + 9, "", 1.1 - epoch * args.lr + args.seed / 1000])
'''
TENSORBOARD_SCRIPT = '''
import argparse
from tensorboardX import SummaryWriter
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
writer = SummaryWriter("runs/exp")
for epoch in range(3):
    writer.add_scalar("val/loss", 1.1 - epoch * args.lr + args.seed / 1000, epoch)
writer.close()
'''


@pytest.mark.slow  # trains through the command line, on the test worker's shared Ray
@pytest.mark.parametrize("script, metric", [
    (CSV_SCRIPT, "val_loss: {direction: lower, csv: lightning_logs/version_*/metrics.csv}"),
    (TENSORBOARD_SCRIPT, "val_loss: {direction: lower, tensorboard: runs/exp, key: val/loss}"),
], ids=["csv", "tensorboard"])
def test_a_script_that_writes_only_its_own_log_runs_unedited(tmp_path, script, metric):
    from tests.conftest import run_here

    if "tensorboard:" in metric:
        pytest.importorskip("tensorboard")
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(script.lstrip())
    (project / "space.yaml").write_text(textwrap.dedent(f"""
        command: "{{python}} train.py --lr {{lr}} --seed {{seed}}"
        config: {{lr: 0.1}}
        metrics: {{{metric}}}
        variants: {{baseline: {{}}, slower: {{lr: 0.05}}}}
        """).lstrip())
    run = run_here("--space", "space.yaml", "--seeds", "2", "--no-dashboard", "--storage",
                   str(tmp_path), "--name", "logs", cwd=project)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    trials = pd.read_parquet(tmp_path / "logs" / "trials.parquet").set_index("trial_name")
    assert (trials["status"] == "ok").all(), trials["error"].tolist()
    for name, row in trials.iterrows():
        lr = 0.1 if row["ablation"] == "baseline" else 0.05
        assert row["val_loss"] == pytest.approx(1.1 - 2 * lr + row["seed"] / 1000, abs=1e-6)
    epochs = pd.read_parquet(tmp_path / "logs" / "epochs.parquet")
    assert epochs.groupby("trial_name")["epoch"].apply(list).to_dict() == {
        name: [1, 2, 3] for name in trials.index}
    assert "Verdicts on val_loss (lower is better) against baseline" in run.stdout


# A CSVLogger-like script that, after writing its second epoch's row, waits until the runner
# has saved its first epoch (the trial's history.json, which a resume continues from): that
# happens while it runs only if the log is read while it runs.
LIVE_SCRIPT = """
import argparse, json, os, time

parser = argparse.ArgumentParser()
parser.add_argument("--trial-dir")
args = parser.parse_args()
# the trial's state folder, which holds its folder: its history.json
history = os.path.join(os.path.dirname(os.path.abspath(args.trial_dir)), "history.json")


def saved(epoch):
    try:
        return any(entry.get("epoch") == epoch for entry in json.load(open(history)))
    except (OSError, ValueError):
        return False


with open("metrics.csv", "w") as log:
    log.write("epoch,val_loss\\n")
    for epoch in range(3):
        log.write(f"{epoch},{1 - epoch / 10}\\n")
        log.flush()
        if epoch == 1:
            deadline = time.time() + 60  # a deadlock guard: 'late' fails the test
            while not saved(1) and time.time() < deadline:
                time.sleep(0.1)
            open("seen.txt", "w").write("live" if saved(1) else "late")
"""


@pytest.mark.slow  # trains through the command line, on the test worker's shared Ray
def test_a_log_file_reaches_the_trials_saved_state_while_the_program_runs(tmp_path):
    from tests.conftest import run_here

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(LIVE_SCRIPT.lstrip())
    (project / "space.yaml").write_text(textwrap.dedent("""
        command: "{python} train.py --trial-dir {trial_dir}"
        metrics: {val_loss: {direction: lower, csv: metrics.csv}}
        variants: {baseline: {}}
        """).lstrip())
    run = run_here("--space", "space.yaml", "--seeds", "1", "--no-dashboard", "--storage",
                   str(tmp_path), "--name", "live", cwd=project)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    trials = pd.read_parquet(tmp_path / "live" / "trials.parquet")
    outputs = trials["outputs_dir"].iloc[0]
    assert (tmp_path / "live" / "outputs").is_dir() and outputs
    assert open(f"{outputs}/seen.txt").read() == "live"
    epochs = pd.read_parquet(tmp_path / "live" / "epochs.parquet")
    assert epochs["epoch"].tolist() == [1, 2, 3]  # each once: read live and at the end
