"""Trials failing alike stop the run (ablations/experiment/execution/fail_fast.py), whichever end
first: the rules on stand-in trials, then a program that always fails, stopped after its first
failures with one message, and resumed with --retry-failed once it is fixed."""

from __future__ import annotations

import re
import signal
import textwrap

import pandas as pd
import pytest

from ablations.experiment.execution.fail_fast import MIN_VARIANTS, FailAlike
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


def test_trials_of_two_variants_failing_alike_stop_the_run_once(tmp_path, tune_stop_handler):
    callback = FailAlike(total=8)
    end(callback, [Trial(f"v{i}-seed0", f"command exited with code 2: bad --lr 0.{i}", tmp_path)
                   for i in range(3)])
    assert tune_stop_handler == [signal.SIGUSR1]  # once, at the second variant
    assert callback.reason.startswith("stopped launching trials: trials of 2 variants (v0, v1) "
                                      "failed alike: command exited with code 2: bad --lr 0.0; "
                                      "fix the cause")


@pytest.mark.parametrize("order", [
    ["baseline-seed0", "baseline-seed1", "high-seed0"],  # the reference's seeds end first
    ["high-seed0", "baseline-seed0"],
    ["high-seed1", "higher-seed0"],
])
def test_failures_alike_stop_whichever_trials_end_first(tmp_path, tune_stop_handler, order):
    callback = FailAlike(total=9, reference="baseline", reference_trials=3)
    end(callback, [Trial(name, "usage: error: unrecognized arguments", tmp_path)
                   for name in order])
    assert tune_stop_handler == [signal.SIGUSR1], order
    assert "trials of 2 variants" in callback.reason


def test_the_reference_failing_on_every_seed_stops_the_run_though_others_ended_ok(
        tmp_path, tune_stop_handler):
    callback = FailAlike(total=9, reference="baseline", reference_trials=3)
    end(callback, [Trial("high-seed0", None, tmp_path)]  # ok
        + [Trial(f"baseline-seed{i}", "CUDA error: no kernel image", tmp_path) for i in range(3)])
    assert tune_stop_handler == [signal.SIGUSR1]
    assert callback.reason.startswith("stopped launching trials: every seed of the reference "
                                      "baseline failed alike, so no verdict can follow: CUDA")
    # where the reference has rows from before (reference_trials 0) it does not stop so
    again = FailAlike(total=9, reference="baseline", reference_trials=0)
    end(again, [Trial("high-seed0", None, tmp_path)]
        + [Trial(f"baseline-seed{i}", "CUDA error", tmp_path) for i in range(3)])
    assert tune_stop_handler == [signal.SIGUSR1] and again.reason is None


@pytest.mark.parametrize("ended", [
    [None, "a", "a"],  # a trial ended ok before them
    ["a", "b"],  # two errors
    ["ran past its time limit of 5 s"] * 4,  # timeouts: the trials' time, not failures
])
def test_failures_that_differ_or_an_ok_trial_let_the_run_go_on(tmp_path, tune_stop_handler,
                                                               ended):
    callback = FailAlike(total=8)
    end(callback, [Trial(f"t{i}-seed0", error, tmp_path) for i, error in enumerate(ended)])
    assert tune_stop_handler == [] and callback.reason is None


def test_one_broken_variant_failing_on_its_seeds_lets_the_others_run(tmp_path,
                                                                    tune_stop_handler):
    callback = FailAlike(total=12, reference="baseline", reference_trials=3)
    end(callback, [Trial(f"bad-seed{i}", "num_heads 7 does not divide 64", tmp_path)
                   for i in range(3)])
    assert tune_stop_handler == [] and callback.reason is None


def test_a_run_of_few_trials_and_a_resumed_run_never_stop(tmp_path, tune_stop_handler):
    import pickle

    for callback in (FailAlike(total=MIN_VARIANTS),
                     pickle.loads(pickle.dumps(FailAlike(8, "baseline", 2)))):
        end(callback, [Trial(f"t{i}-seed0", "same", tmp_path) for i in range(3)])
    assert tune_stop_handler == []


def test_a_failed_trial_is_one_line_on_the_console_its_traceback_left_to_its_file(
        tmp_path, capsys, caplog):
    """The progress line carries the error's last line; Tune's traceback of the failure (its
    tune_controller's record, some 30 lines) and the stop's lists are dropped from the log."""
    import logging

    from ablations.cli.progress import ConsoleView
    from ablations.experiment.core.events import listening
    from ablations.experiment.execution.interrupt import quiet_tune_logs
    from ablations.experiment.execution.progress import TrialProgress

    progress = TrialProgress(2, clock=lambda: 0.0)
    trial = Trial("high-seed0", "command exited with code 2: --bias: invalid choice", tmp_path)
    trial.last_result = {}
    with listening(ConsoleView(live=False)):  # the command line's view of the events
        progress.on_trial_error(0, [], trial)
    assert capsys.readouterr().out.splitlines() == [
        "[1/2] high-seed0 FAILED (0s elapsed): command exited with code 2: --bias: invalid "
        "choice"]
    with quiet_tune_logs(), caplog.at_level(logging.ERROR):
        logging.getLogger("ray.tune.execution.tune_controller").error(
            "Trial task failed for trial high-seed0", exc_info=RuntimeError("boom"))
        logging.getLogger("ray.tune.tune").error("Trials did not complete: [high-seed0]")
        logging.getLogger("ray.tune.execution.tune_controller").error("another error")
    assert [record.getMessage() for record in caplog.records] == ["another error"]
    with quiet_tune_logs():  # Tune's reporter prints its own block for the trial
        print("Trial high-seed0 errored after 0 iterations at 2026-12-02 14:25:07. Total "
              "running time: 6s\nError file: /tmp/ray/session/high-seed0/error.txt")
        print("[2/2] next")
    assert capsys.readouterr().out == "[2/2] next\n"


PROGRAM = """\
import json, os, sys
broken = open("broken").read() if os.path.exists("broken") else None  # a variant's --lr
if not os.path.exists("fixed") or sys.argv[2] == broken:
    sys.exit("usage: train.py: error: unrecognized arguments: --lr " + sys.argv[2])
with open(os.environ["ABLATIONS_METRICS_FILE"], "a") as handle:
    handle.write(json.dumps({"loss": float(sys.argv[2])}) + "\\n")
"""
STOPPED = re.compile(r"^warning: stopped launching trials: (trials of 2 variants \(\w+, \w+\) "
                     r"failed alike|every seed of the reference baseline failed alike, so no "
                     r"verdict can follow): command exited with code 1: usage: train\.py: error: "
                     r"unrecognized arguments: --lr 0\.\d; fix the cause, then resume the "
                     r"experiment with --retry-failed, which runs the failed trials again and the "
                     r"others$")


@pytest.mark.slow
def test_a_program_that_always_fails_stops_after_its_first_trials_and_resumes(tmp_path):
    """Two trials at a time, the reference's seeds first (the plan's order): after the
    failures of two variants, or of every seed of the reference, no trial starts; fixed, the
    experiment resumes with --retry-failed; a variant broken alone lets the others finish. The
    runs in this process (``run_here``) on the test worker's shared Ray (half a CPU a trial),
    their trials in the project's folder; the stop is Tune's own handler, which ``Tuner.fit``
    installs in this process's main thread."""
    from ablations.cli.flags import PROGRAM as INVOKED

    (tmp_path / "train.py").write_text(PROGRAM)
    (tmp_path / "space.yaml").write_text(textwrap.dedent("""
        command: "{python} train.py --lr {lr}"
        config: {lr: 0.1}
        metrics: {loss: lower}
        variants: {baseline: {}, high: {lr: 0.5}, higher: {lr: 0.9}}
        """))
    base = ["run", "--no-dashboard", "--storage", "res", "--cpus-per-trial", "0.5",
            "--max-concurrent", "2"]
    first = run_here(*base, "--name", "ff", "--space", "space.yaml", "--seeds", "2",
                     cwd=tmp_path)
    assert first.returncode == 1, first.stderr[-2000:]  # a failed run, not a Ctrl-C (130)
    assert re.search(r"Stopped early: \d trials not run; once the cause is fixed, continue "
                     rf"with: {re.escape(INVOKED)} --resume --name ff --storage ", first.stdout)
    said = [line for line in (first.stdout + first.stderr).splitlines()
            if "stopped launching trials" in line]
    assert len(said) == 1 and STOPPED.match(said[0]), said
    statuses = pd.read_parquet(tmp_path / "res" / "ff" / "trials.parquet")["status"]
    # the two failures that stopped it, and at most the one trial running beside them
    assert (statuses == "failed").sum() >= 2 and statuses.isin(["failed", "interrupted"]).sum() \
        <= 3, statuses.tolist()
    assert statuses.isin(["interrupted", "not_started"]).sum() >= 3, statuses.tolist()
    (tmp_path / "fixed").write_text("")
    again = run_here(*base, "--name", "ff", "--resume", "--retry-failed", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    trials = pd.read_parquet(tmp_path / "res" / "ff" / "trials.parquet")
    assert list(trials["status"]) == ["ok"] * 6 and trials["trial_name"].is_unique
    # one broken variant (its seeds end first among the failures): the others finish
    (tmp_path / "broken").write_text("0.5")
    broken = run_here(*base, "--name", "broken", "--space", "space.yaml", "--seeds", "2",
                      "--no-reuse", cwd=tmp_path)
    assert broken.returncode == 0, broken.stderr[-2000:]
    assert "stopped launching trials" not in broken.stdout + broken.stderr
    rows = pd.read_parquet(tmp_path / "res" / "broken" / "trials.parquet")
    assert rows.groupby("ablation")["status"].agg(set).to_dict() == {
        "baseline": {"ok"}, "high": {"failed"}, "higher": {"ok"}}
