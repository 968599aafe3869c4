"""A trial's time limit (ablations/trial/time_limit.py): a program past it is ended with its whole
tree and its last output kept; code that reports epochs ends after the epoch that passes it; a
function that hangs in Python is ended by the watchdog; the run records the trial as
``timeout``, and the limit comes from the flag, the space file or ``Resources``."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch

from ablations.config import TrialConfig
from ablations.config.code import TrainingFunction, command_from, command_spec
from ablations.experiment.api import Resources, time_limit_of
from ablations.experiment.core.request import UsageError
from ablations.experiment.execution.tables import trial_status
from ablations.trial import time_limit
from ablations.trial.run import run_trial
from ablations.trial.time_limit import Deadline, TrialTimeout, parse_duration, spoken_duration
from tests.conftest import run_here

PYTHON = shlex.quote(sys.executable)


@pytest.mark.parametrize("text, seconds", [("90", 90.0), ("90s", 90.0), ("1.5m", 90.0),
                                           ("2h", 7200.0), (" 15m ", 900.0), (3, 3.0),
                                           (".5", 0.5)])
def test_a_duration_is_seconds_or_a_number_with_its_unit(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5", "5 min", "m", "inf", "", "1d", True, float("nan")])
def test_a_duration_that_is_none_or_not_above_zero_is_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_a_limit_reads_as_a_person_writes_it():
    assert [spoken_duration(s) for s in (4, 90, 900, 7200, 5400)] == [
        "4 s", "90 s", "15 min", "2 h", "90 min"]


def test_the_library_names_its_argument_and_the_command_line_its_flag(capsys):
    from ablations.cli.main import main

    with pytest.raises(UsageError, match="time_limit: '0s'"):
        time_limit_of("0s")
    assert time_limit_of("2m") == 120.0 and time_limit_of(None) is None
    with pytest.raises(SystemExit) as exit_code:
        main(["run", "--time-limit", "soon"])
    err = capsys.readouterr().err
    assert exit_code.value.code == 2 and "--time-limit" in err
    assert "'soon' is not a duration" in err and "Traceback" not in err


def test_a_space_files_time_limit_is_read_and_a_bad_one_is_one_line_naming_the_file(tmp_path):
    from ablations.config import ConfigError
    from ablations.search_spaces import get_space

    space = tmp_path / "t.yaml"
    space.write_text("time_limit: 15m\nvariants: {baseline: {}, small: {epochs: 1}}\n")
    assert get_space(str(space)).time_limit_s == 900.0
    space.write_text("time_limit: soon\nvariants: {baseline: {}, small: {epochs: 1}}\n")
    with pytest.raises(ConfigError, match=r"t.yaml: time_limit: 'soon' is not a duration"):
        get_space(str(space))


def test_the_watchdog_raises_in_a_block_that_hangs_in_python(monkeypatch):
    monkeypatch.setattr(time_limit, "WATCHDOG_GRACE_S", 0.2)
    deadline = Deadline(0.3)
    with pytest.raises(TrialTimeout, match="ran past its time limit of 0.3 s; spinning"):
        with deadline.watchdog(lambda: "spinning"):
            while True:
                pass


def test_a_block_that_ends_in_time_is_never_interrupted_after_it(monkeypatch):
    monkeypatch.setattr(time_limit, "WATCHDOG_GRACE_S", 0.0)
    with Deadline(0.2).watchdog(lambda: "x"):
        pass
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:  # past the limit: nothing lands here
        pass


@dataclass(frozen=True)
class SlowConfig:
    epochs: int = 100
    epoch_s: float = 0.2
    hang: bool = False


def slow_fit(config, trial):
    for epoch in range(1, config.epochs + 1):
        if config.hang and epoch == 2:
            while True:  # a hang in Python, between reports
                pass
        time.sleep(config.epoch_s)
        trial.report(epoch=epoch, val_loss=1.0 / epoch)
    return {"test_loss": 0.5}


SLOW = TrainingFunction(name="slow", config=SlowConfig, fit=slow_fit,
                        metrics={"test_loss": "lower"})


def run_slow(tmp_path, limit_s, **keys):
    sent, stored = [], []
    config = TrialConfig.of(model=f"{__name__}:SLOW", **keys)
    with pytest.raises(TrialTimeout) as error:
        run_trial(config, name="baseline-seed0", send=lambda m, final, p: sent.append(m),
                  store=stored.append, saved=None, folder=tmp_path, device=torch.device("cpu"),
                  resources={"CPU": 1}, time_limit_s=limit_s)
    return str(error.value), sent, stored


def test_a_function_ends_after_the_epoch_that_passes_its_limit_and_keeps_its_epochs(tmp_path):
    message, sent, stored = run_slow(tmp_path, 1.0)
    epochs = [m["epoch"] for m in sent]
    assert 4 <= len(epochs) < 100 and epochs == list(range(1, len(epochs) + 1))
    assert message == (f"ran past its time limit of 1 s; it stopped after epoch {epochs[-1]}")
    assert [row["epoch"] for row in stored[-1]["history"]] == epochs  # the curves keep them


def test_code_that_catches_every_exception_is_still_ended(monkeypatch):
    monkeypatch.setattr(time_limit, "WATCHDOG_GRACE_S", 0.2)
    with pytest.raises(TrialTimeout, match="ran past its time limit of 0.3 s; retrying"):
        with Deadline(0.3).watchdog(lambda: "retrying"):
            while True:  # a retry loop that logs and goes on
                try:
                    sum(range(100))
                except Exception:  # noqa: BLE001
                    pass


def test_a_function_that_hangs_between_reports_is_ended_by_the_watchdog(tmp_path, monkeypatch):
    monkeypatch.setattr(time_limit, "WATCHDOG_GRACE_S", 0.5)
    message, sent, _ = run_slow(tmp_path, 1.0, hang=True)
    assert [m["epoch"] for m in sent] == [1]
    assert message == ("ran past its time limit of 1 s; it was in epoch 2 (epoch 1 reported)")


@pytest.mark.slow
def test_a_program_past_its_limit_is_ended_with_its_children_and_its_last_output(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent("""
        import json, os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                 start_new_session=True)  # a launcher's worker in a session
        with open(os.environ["ABLATIONS_TRIAL_DIR"] + "/pids", "w") as handle:
            handle.write(f"{os.getpid()} {child.pid}")
        with open(os.environ["ABLATIONS_METRICS_FILE"], "a") as handle:
            handle.write(json.dumps({"epoch": 1, "score": 0.5}) + "\\n")
        print("waiting on the other rank", file=sys.stderr, flush=True)
        time.sleep(120)
        open(os.environ["ABLATIONS_TRIAL_DIR"] + "/slept", "w").close()  # if waited for
        """))
    command = command_from(f"{PYTHON} {shlex.quote(str(program))}", {}, {"score": "higher"})
    sent = []
    with pytest.raises(TrialTimeout) as error:
        run_trial(TrialConfig.of(model=command_spec(command)), name="baseline-seed0",
                  send=lambda m, final, p: sent.append(m), store=lambda s: None, saved=None,
                  folder=tmp_path / "trial", device=torch.device("cpu"), resources={"CPU": 1},
                  cwd=tmp_path, time_limit_s=3.0)
    assert not (tmp_path / "trial" / "slept").exists()  # stopped, not waited for
    assert str(error.value) == ("ran past its time limit of 3 s; the program was stopped; its "
                                "last output (stderr.log): waiting on the other rank")
    assert [m["epoch"] for m in sent] == [1]
    for pid in map(int, (tmp_path / "trial" / "pids").read_text().split()):
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), pid


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_tunes_error_of_a_timeout_is_the_status_timeout_in_its_own_words():
    error = RuntimeError("Traceback ...\nablations.trial.time_limit.TrialTimeout: ran past its "
                         "time limit of 4 s; it stopped after epoch 3")
    assert trial_status({}, error, None) == ("timeout", "ran past its time limit of 4 s; it "
                                             "stopped after epoch 3", "time-limit")


HANG = """\
import json, os, sys, time
print("loading the data", file=sys.stderr, flush=True)
if {hang}:
    time.sleep(600)
with open(os.environ["ABLATIONS_METRICS_FILE"], "a") as handle:
    handle.write(json.dumps({{"epoch": 1, "loss": 0.5}}) + "\\n")
print(json.dumps({{"loss": 0.5}}))
"""


@pytest.mark.slow
def test_a_run_records_timeouts_from_the_space_file_and_the_flag_overrides_it(tmp_path):
    (tmp_path / "hang.py").write_text(HANG.format(hang="sys.argv[1] == 'true'"))
    (tmp_path / "hang.yaml").write_text(textwrap.dedent("""
        command: "{python} hang.py {hang}"
        config: {hang: false}
        metrics: {loss: lower}
        time_limit: 5s
        variants:
          baseline: {}
          hangs: {hang: true}
        """))
    # the command line in this process, on the shared Ray: its trials run in tmp_path
    run = run_here("run", "--space", "hang.yaml", "--seeds", "1", "--no-dashboard",
                   "--storage", "res", "--name", "h", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    trials = pd.read_parquet(tmp_path / "res" / "h" / "trials.parquet").set_index("ablation")
    assert trials.loc["baseline", "status"] == "ok"
    assert trials.loc["hangs", "status"] == "timeout"
    assert trials.loc["hangs", "failure_reason"] == "time-limit"
    assert trials.loc["hangs", "error"] == ("ran past its time limit of 5 s; the program was "
                                           "stopped; its last output (stderr.log): loading "
                                           "the data")
    assert "1 ok, 0 failed, 0 diverged, 1 timed out" in run.stdout
    assert "hangs-seed0: timeout: ran past its time limit of 5 s" in run.stdout
    assert json.loads((tmp_path / "res" / "h" / "experiment.json").read_text()
                      )["time_limit_s"] == 5.0
    # --time-limit over the file's: the hang.py of the reference would pass 5 s, not 1 s
    (tmp_path / "hang.py").write_text(HANG.format(hang="True"))
    flagged = run_here("run", "--space", "hang.yaml", "--seeds", "1", "--no-dashboard",
                       "--storage", "res", "--name", "f", "--only", "baseline",
                       "--time-limit", "2", cwd=tmp_path)
    trials = pd.read_parquet(tmp_path / "res" / "f" / "trials.parquet")
    assert list(trials["status"]) == ["timeout"], flagged.stdout[-2000:]
    assert trials["error"].iloc[0].startswith("ran past its time limit of 2 s")


def test_resources_carry_the_time_limit_into_the_request():
    from ablations.experiment.api import Decision, Seeds, request_of

    request = request_of(None, Seeds(), Decision(), Resources(time_limit="15m"))
    assert request.time_limit == 900.0 and "time_limit" in request.given
