"""The first trials failing alike stop the run (ablations/experiment/fail_fast.py): the rule on
stand-in trials, then a program that always fails, stopped after its first failures with one
message, and resumed with --retry-failed once it is fixed."""

from __future__ import annotations

import signal
import textwrap

import pandas as pd
import pytest

from ablations.experiment.fail_fast import FIRST_FAILURES, FailAlike
from tests.conftest import run_here


class Trial:
    def __init__(self, name: str, error: str | None, folder) -> None:
        self.name = name
        self.error_file = None
        if error is not None:
            self.error_file = str(folder / f"{name}.txt")
            with open(self.error_file, "w") as handle:
                kind = "TrialTimeout" if "time limit" in error else "OwnCodeError"
                handle.write(f"Failure # 1\nTraceback ...\nmodule.{kind}: {error}\n")

    def __str__(self) -> str:
        return self.name


@pytest.fixture
def tune_stop_handler():
    """Tune's stop handler on SIGUSR1, as ``Tuner.fit`` installs it; the signals it got."""
    got = []

    def signal_interrupt_tune_run(sig, frame):
        got.append(sig)

    before = signal.signal(signal.SIGUSR1, signal_interrupt_tune_run)
    yield got
    signal.signal(signal.SIGUSR1, before)


def end(callback, trials):
    for trial in trials:
        if trial.error_file is None:
            callback.on_trial_complete(0, [], trial)
        else:
            callback.on_trial_error(0, [], trial)


def test_the_first_trials_failing_alike_stop_the_run_once(tmp_path, tune_stop_handler):
    callback = FailAlike(total=8)
    end(callback, [Trial(f"v{i}-seed0", f"command exited with code 2: bad --lr 0.{i}", tmp_path)
                   for i in range(FIRST_FAILURES + 1)])
    assert tune_stop_handler == [signal.SIGUSR1]  # once, at the third
    assert callback.reason.startswith(f"stopped launching trials: the first {FIRST_FAILURES} "
                                      "trials failed alike, none ended otherwise: command "
                                      "exited with code 2: bad --lr 0.0; fix the cause")


@pytest.mark.parametrize("ended", [
    ["a", None, "a", "a"],  # one trial ended ok among them
    ["a", "b", "a", "a"],  # two errors
    ["ran past its time limit of 5 s"] * 4,  # timeouts: the trials' time, not failures
])
def test_failures_that_differ_or_an_ok_trial_let_the_run_go_on(tmp_path, tune_stop_handler,
                                                               ended):
    callback = FailAlike(total=8)
    end(callback, [Trial(f"t{i}-seed0", error, tmp_path) for i, error in enumerate(ended)])
    assert tune_stop_handler == [] and callback.reason is None


def test_one_broken_variant_failing_on_its_seeds_lets_the_others_run(tmp_path,
                                                                    tune_stop_handler):
    callback = FailAlike(total=12)
    end(callback, [Trial(f"bad-seed{i}", "num_heads 7 does not divide 64", tmp_path)
                   for i in range(FIRST_FAILURES)])
    assert tune_stop_handler == [] and callback.reason is None


def test_a_run_of_few_trials_and_a_resumed_run_never_stop(tmp_path, tune_stop_handler):
    import pickle

    for callback in (FailAlike(total=FIRST_FAILURES), pickle.loads(pickle.dumps(FailAlike(8)))):
        end(callback, [Trial(f"t{i}", "same", tmp_path) for i in range(FIRST_FAILURES)])
    assert tune_stop_handler == []


PROGRAM = """\
import json, os, sys
if not os.path.exists("fixed"):
    sys.exit("usage: train.py: error: unrecognized arguments: --lr " + sys.argv[2])
with open(os.environ["ABLATIONS_METRICS_FILE"], "a") as handle:
    handle.write(json.dumps({"loss": float(sys.argv[2])}) + "\\n")
"""


@pytest.mark.slow
def test_a_program_that_always_fails_stops_after_its_first_trials_and_resumes(tmp_path):
    """Both runs in this process (``run_here``) on the test worker's shared Ray, their trials
    in the project's folder; the stop is Tune's own handler, which ``Tuner.fit`` installs in
    this process's main thread."""
    from ablations.cli.flags import PROGRAM as INVOKED

    (tmp_path / "train.py").write_text(PROGRAM)
    (tmp_path / "space.yaml").write_text(textwrap.dedent("""
        command: "{python} train.py --lr {lr}"
        config: {lr: 0.1}
        metrics: {loss: lower}
        variants: {baseline: {}, high: {lr: 0.5}, higher: {lr: 0.9}}
        """))
    base = ["run", "--no-dashboard", "--storage", "res", "--name", "ff"]
    first = run_here(*base, "--space", "space.yaml", "--seeds", "2", cwd=tmp_path)
    assert first.returncode == 1, first.stderr[-2000:]  # a failed run, not a Ctrl-C (130)
    assert "Stopped early: 3 trials not run; once the cause is fixed, continue with: " \
           f"{INVOKED} --resume --name ff --storage " in first.stdout
    said = [line for line in (first.stdout + first.stderr).splitlines()
            if "stopped launching trials" in line]
    assert said == ["warning: stopped launching trials: the first 3 trials failed alike, none "
                    "ended otherwise: command exited with code 1: usage: train.py: error: "
                    "unrecognized arguments: --lr 0.1; fix the cause, then resume the experiment "
                    "with --retry-failed, which runs the failed trials again and the others"]
    statuses = pd.read_parquet(tmp_path / "res" / "ff" / "trials.parquet")["status"]
    assert (statuses == "failed").sum() == FIRST_FAILURES
    assert statuses.isin(["interrupted", "not_started"]).sum() == 6 - FIRST_FAILURES
    (tmp_path / "fixed").write_text("")
    again = run_here(*base, "--resume", "--retry-failed", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    trials = pd.read_parquet(tmp_path / "res" / "ff" / "trials.parquet")
    assert list(trials["status"]) == ["ok"] * 6 and trials["trial_name"].is_unique
