"""A command as own code (ablations/trial/command.py): its command line and environment filled
from the trial, its JSON lines turned into reports, its failures into one readable line. The
tests that run a program are marked slow (tests/conftest.py refuses subprocesses otherwise)."""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from ablations.config import ConfigError, TrialConfig
from ablations.config.code import command_from, command_spec
from ablations.trial.command import (
    NewLines,
    command_environment,
    command_line,
    command_values,
    epoch_number,
    exit_message,
    last_json_line,
    recover_epochs,
)
from ablations.trial.run import run_trial
from ablations.trial.own_code import OwnCodeError, Trial

REPO = Path(__file__).resolve().parents[1]
PYTHON = shlex.quote(sys.executable)
TRAIN = shlex.quote(str(REPO / "examples" / "digits" / "train.py"))
DIGITS = command_from(
    f"{PYTHON} {TRAIN} --hidden {{hidden}} --layers {{layers}} --dropout {{dropout}} "
    "--augment {augment} --label-smoothing {label_smoothing} --epochs {epochs} --lr {lr} "
    "--seed {seed} --data-seed {data_seed} --metrics-file {metrics_file} "
    "--resume-dir {resume_dir}",
    {"hidden": 32, "layers": 1, "dropout": 0.0, "augment": False, "label_smoothing": 0.0,
     "epochs": 2, "lr": 0.01},
    {"test_acc": "higher", "test_loss": "lower nats"})


def trial_of(run: str, defaults: dict, tmp_path: Path, metrics=None, **keys) -> Trial:
    command = command_from(run, defaults, metrics or {"score": "higher"})
    config = TrialConfig.of(model=command_spec(command), **keys)
    return Trial(config, name="baseline-seed0", send=lambda *a: None, store=lambda s: None,
                 saved=None, folder=tmp_path / "trial", device=torch.device("cpu"),
                 resources={"CPU": 1}, cwd=tmp_path)


def run(command, tmp_path: Path, saved=None, **keys):
    """Run ``command`` as a trial without Ray: (result, reports sent, states stored)."""
    sent, stored = [], []
    config = TrialConfig.of(model=command_spec(command), **keys)
    result = run_trial(config, name="baseline-seed0",
                       send=lambda metrics, final, predictions: sent.append(metrics),
                       store=stored.append, saved=saved, folder=tmp_path / "trial",
                       device=torch.device("cpu"), resources={"CPU": 1}, cwd=tmp_path)
    return result, sent[:-1], stored


def script(tmp_path: Path, text: str) -> str:
    path = tmp_path / "program.py"
    path.write_text(textwrap.dedent(text))
    return f"{PYTHON} {shlex.quote(str(path))}"


# ----------------------------------------------------------------------- filling, no program
def test_a_value_with_a_space_stays_one_argument():
    assert command_line("run --name {name} --tag=x{name}y", {"name": "a b"}) == \
        ["run", "--name", "a b", "--tag=xa by"]


def test_quotes_are_split_like_a_shell_and_braces_that_are_no_field_stay():
    assert command_line("python -c \"print({'a': 1})\" '{seed}'", {"seed": "7"}) == \
        ["python", "-c", "print({'a': 1})", "7"]
    with pytest.raises(OwnCodeError, match="No closing quotation"):
        command_line("python 'train.py", {})


def test_the_trial_fills_the_users_keys_and_the_runners(tmp_path):
    trial = trial_of("prog --flag {flag} --lr {lr} {seed}", {"flag": True, "lr": 0.1},
                     tmp_path, flag=False, lr=0.003, seed=4)
    values = command_values(trial._config.model, trial)
    folder = (tmp_path / "trial").resolve()
    assert command_line("prog --flag {flag} --lr {lr} --seed {seed}", values) == \
        ["prog", "--flag", "false", "--lr", "0.003", "--seed", "4"]
    assert values["init_seed"] == str(trial.seeds.init) and values["trial"] == "baseline-seed0"
    assert values["metrics_file"] == str(folder / "metrics.jsonl")
    assert values["resume_dir"] == str(folder / "resume") and values["device"] == "cpu"
    # a free port per trial (a launcher's rendezvous: two on one node never share 29500), and
    # the GPUs Ray gave it
    import socket

    port = int(values["port"])
    with socket.socket() as probe:
        probe.bind(("", port))  # free: nothing listens there
    assert values["gpus"] == "0"  # resources={"CPU": 1}
    two = trial_of("prog {gpus}", {}, tmp_path)
    two.resources = {"CPU": 2, "GPU": 2.0}
    assert command_values(two._config.model, two)["gpus"] == "2"


def test_the_environment_carries_the_config_as_json_and_each_runner_field(tmp_path):
    trial = trial_of("prog {lr}", {"lr": 0.1, "name": "x"}, tmp_path, lr=0.5, seed=2)
    values = command_values(trial._config.model, trial)
    environment = command_environment(trial._config.model, values, base={"PATH": "/bin"})
    assert json.loads(environment["ABLATIONS_CONFIG"]) == {"lr": 0.5, "name": "x"}
    assert environment["ABLATIONS_SEED"] == "2" and environment["PATH"] == "/bin"
    assert environment["ABLATIONS_METRICS_FILE"] == values["metrics_file"]
    assert environment["ABLATIONS_DATA_SEED"] == values["data_seed"]


def test_a_line_being_written_waits_for_its_newline_and_nan_reads_as_a_number(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"epoch": 1, "loss": NaN}\n{"epoch": 2, "lo')
    lines = NewLines(path)
    first = lines.read(complete_only=True)
    assert len(first) == 1 and math.isnan(first[0]["loss"])
    with open(path, "a") as handle:
        handle.write('ss": 0.5}\n')
    assert lines.read(complete_only=True) == [{"epoch": 2, "loss": 0.5}]
    assert lines.read(complete_only=False) == []


def test_a_metrics_line_that_is_not_json_names_its_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"epoch": 1}\n{\'epoch\': 2}\n')
    with pytest.raises(OwnCodeError, match="metrics.jsonl line 2 is not a JSON object"):
        NewLines(path).read(complete_only=True)


@pytest.mark.parametrize("epoch", ["1", None, 1.5, True, float("inf"), 0, -3, -3.0])
def test_an_epoch_that_is_not_a_whole_number_is_refused(epoch):
    with pytest.raises(OwnCodeError, match="metrics.jsonl: epoch .* is not a whole number"):
        epoch_number(epoch, Path("metrics.jsonl"))
    assert epoch_number(2.0, Path("metrics.jsonl")) == 2


def test_a_failure_says_the_exit_code_and_stderrs_last_lines(tmp_path):
    (tmp_path / "stderr.log").write_text("\n".join(f"line {i}" for i in range(9)) + "\n\n")
    assert exit_message(3, tmp_path) == \
        "command exited with code 3: line 4 | line 5 | line 6 | line 7 | line 8"
    (tmp_path / "stderr.log").write_text("x" * 2000)
    assert len(exit_message(1, tmp_path)) < 500
    assert "killed by SIGKILL" in exit_message(-9, tmp_path)


def test_stdouts_last_json_object_line_holds_the_final_metrics(tmp_path):
    (tmp_path / "out.log").write_text('{"a": 1}\nnoise\n{"a": 2, "b": 3}\n[1]\ndone\n')
    assert last_json_line(tmp_path / "out.log") == {"a": 2, "b": 3}
    assert last_json_line(tmp_path / "missing.log") is None


# --------------------------------------------------------------------------- real programs
@pytest.fixture(scope="module")
def digits_unbroken(tmp_path_factory):
    """The digits script as a trial of 4 epochs: (result, reports, states stored, folder)."""
    folder = tmp_path_factory.mktemp("digits")
    return (*run(DIGITS, folder, epochs=4), folder)


@pytest.mark.slow
def test_the_digits_script_reports_each_epoch_and_returns_its_test_metrics(digits_unbroken):
    result, reports, stored, folder = digits_unbroken
    assert [report["epoch"] for report in reports] == [1, 2, 3, 4]
    assert {"train_loss", "val_acc", "val_loss"} <= set(reports[0])
    assert result["status"] == "ok" and 0.5 < result["test_acc"] <= 1
    assert result["test_loss"] > 0 and result["epochs_run"] == 4
    assert [row["epoch"] for row in stored[-1]["history"]] == [1, 2, 3, 4]
    assert (folder / "trial" / "resume" / "checkpoint.pt").exists()


@pytest.mark.slow
def test_a_restarted_trial_continues_from_the_programs_checkpoint_to_the_same_end(
        tmp_path, digits_unbroken):
    _, _, stored = run(DIGITS, tmp_path, epochs=2)
    result, reports, stored = run(DIGITS, tmp_path, saved=stored[-1], epochs=4)
    assert [report["epoch"] for report in reports] == [3, 4]  # epochs 1, 2 not trained again
    assert result["resumed_from_epoch"] == 2 and result["status"] == "ok"
    assert [row["epoch"] for row in stored[-1]["history"]] == [1, 2, 3, 4]
    unbroken = digits_unbroken[0]  # the checkpoint holds the generator: the same shuffles
    assert (result["test_acc"], result["test_loss"]) == \
        (unbroken["test_acc"], unbroken["test_loss"])


@pytest.mark.slow
def test_a_failing_command_fails_the_trial_with_its_code_and_stderr(tmp_path):
    failing = command_from(
        f"{PYTHON} -c \"import sys; sys.stderr.write('boom\\n'); sys.exit(3)\"", {},
        {"score": "higher"})
    with pytest.raises(OwnCodeError, match=r"^command exited with code 3: boom$"):
        run(failing, tmp_path)
    missing = command_from("no-such-program-4d2 --lr 1", {}, {"score": "higher"})
    with pytest.raises(OwnCodeError, match="'no-such-program-4d2'"):
        run(missing, tmp_path)
    silent = command_from(f"{PYTHON} -c pass", {}, {"score": "higher"})
    with pytest.raises(OwnCodeError, match="command wrote no metrics"):
        run(silent, tmp_path)


@pytest.mark.slow
def test_a_nan_metric_ends_the_trial_as_diverged_and_stops_the_program_and_its_children(
        tmp_path):
    run_line = script(tmp_path, """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(os.environ["ABLATIONS_TRIAL_DIR"] + "/pids", "w") as handle:
            handle.write(f"{os.getpid()} {child.pid}")
        with open(os.environ["ABLATIONS_METRICS_FILE"], "a") as handle:
            handle.write('{"epoch": 1, "score": 0.5}\\n{"epoch": 2, "score": NaN}\\n')
        time.sleep(60)
        open(os.environ["ABLATIONS_TRIAL_DIR"] + "/slept", "w").close()  # if waited for
        """)
    result, reports, stored = run(command_from(run_line, {}, {"score": "higher"}), tmp_path)
    assert not (tmp_path / "trial" / "slept").exists()  # stopped, not waited for
    assert result["status"] == "diverged" and "score=nan at epoch 2" in result["error"]
    assert [report["status"] for report in reports] == ["ok", "diverged"]
    for pid in map(int, (tmp_path / "trial" / "pids").read_text().split()):
        assert _gone_soon(pid)


@pytest.mark.slow
def test_values_stay_one_argument_and_the_program_runs_in_the_experiments_folder(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import json, os, sys
        config = json.loads(os.environ["ABLATIONS_CONFIG"])
        ok = sys.argv[1:] == ["a b", "--flag=true"] and config == {"flag": True, "name": "a b"}
        print("noise")
        print(json.dumps({"score": float(ok), "note": "strings are left out"}))
        print("done")
        """))
    command = command_from(f"{PYTHON} train.py {{name}} --flag={{flag}}",
                           {"name": "x", "flag": False}, {"score": "higher"})
    result, reports, _ = run(command, tmp_path, name="a b", flag=True)
    assert result["score"] == 1.0 and "note" not in result and reports == []


@pytest.mark.slow
def test_a_new_trial_gets_an_empty_resume_folder_and_a_restarted_one_keeps_it(tmp_path):
    run_line = script(tmp_path, """
        import json, os
        print(json.dumps({"score": len(os.listdir(os.environ["ABLATIONS_RESUME_DIR"]))}))
        """)
    command = command_from(run_line, {}, {"score": "higher"})
    (tmp_path / "trial" / "resume").mkdir(parents=True)
    (tmp_path / "trial" / "resume" / "stale.pt").write_text("")
    saved = {"epoch": 1, "user": {}, "history": [{"epoch": 1, "score": 0.0}], "wall_s": 1.0}
    assert run(command, tmp_path, saved=saved)[0]["score"] == 1
    assert run(command, tmp_path)[0]["score"] == 0


def _gone_soon(pid: int, within_s: float = 10.0) -> bool:
    """True once ``pid`` is gone: a SIGKILL is delivered, and the process torn down, a moment
    after ``killpg`` returns (longer on a busy machine)."""
    deadline = time.monotonic() + within_s
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _running(pid: int) -> bool:
    """True while ``pid`` lives (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_restart_keeps_the_epochs_the_program_wrote_after_the_last_save(tmp_path):
    """A worker that died while its program went on: the program's epoch lines after the
    runner's last save (which its own checkpoint may hold) become the trial's history."""
    command = command_from("prog {metrics_file}", {}, {"score": "higher"})
    config = TrialConfig.of(model=command_spec(command))
    saved = {"epoch": 2, "user": {}, "wall_s": 1.0,
             "history": [{"epoch": e, "score": float(e), "status": "ok"} for e in (1, 2)]}
    sent = []
    trial = Trial(config, name="baseline-seed0", send=lambda m, final, p: sent.append(m),
                  store=lambda s: None, saved=saved, folder=tmp_path, device=torch.device("cpu"),
                  resources={})
    lines = [{"epoch": e, "score": float(e)} for e in (1, 2, 3, 4)] + [{"score": 9.0}]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"epoch": 5')
    recover_epochs(metrics, trial, set(command.metrics))
    assert [row["epoch"] for row in trial.history] == [1, 2, 3, 4]
    assert [m["epoch"] for m in sent] == [3, 4]  # the half-written line waits


def test_a_flag_field_is_the_flag_where_its_key_is_true_and_no_argument_where_false():
    run = "python train.py {standardize:--standardize} --x{verbose:-v} --lr {lr}"
    on = command_line(run, {"standardize": "true", "verbose": "true", "lr": "0.1"})
    off = command_line(run, {"standardize": "false", "verbose": "false", "lr": "0.1"})
    assert on == ["python", "train.py", "--standardize", "--x-v", "--lr", "0.1"]
    assert off == ["python", "train.py", "--x", "--lr", "0.1"]


@pytest.mark.parametrize("run, words", [
    ("p {lr:.3f}", "lr is a float"), ("p {lr:--lr}", "lr is a float"),
    ("p {nope:--nope}", "nope has no default"), ("p { lr }", "a field is {key} alone"),
    ("p {0}", "a field is {key} alone"), ("p {lr!r}", "a field is {key} alone")])
def test_a_placeholder_in_another_form_is_refused_naming_it(run, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        command_from(run, {"lr": 0.1, "standardize": True}, {"score": "higher"})
