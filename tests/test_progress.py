"""The live progress (ablations/experiment/execution/progress.py) driven through Tune's callback
hooks with stand-in trials and a fake clock: the events it emits, and the command line's view of
them (ablations/cli/progress.py: lines, a status line every 30 s, a bar on a terminal); a real run's
lines are checked in tests/test_cli.py."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from ablations.cli.progress import ConsoleView
from ablations.experiment.core.events import (
    EpochEnded,
    FitEnded,
    Status,
    TrialEnded,
    emit,
    listening,
)
from ablations.experiment.execution.progress import Planned, TrialProgress, format_duration


@pytest.fixture
def heard():
    """The events emitted within the test."""
    events: list = []
    with listening(events.append):
        yield events


class Trial:
    def __init__(self, name: str, status: str = "PENDING"):
        self.name, self.status, self.last_result = name, status, {}

    def __str__(self) -> str:
        return self.name


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(**kwargs):
    clock = Clock()
    plan = {"a": Planned(epochs=4, cost=100.0), "b": Planned(epochs=4, cost=200.0)}
    progress = TrialProgress(2, plan=plan, clock=clock, **kwargs)
    return progress, clock, [Trial("a", "RUNNING"), Trial("b", "RUNNING")]


def test_eta_from_measured_epochs_carried_over_by_cost():
    progress, clock, trials = make()
    progress.on_step_begin(0, trials)
    assert progress.eta_s() is None
    assert "ETA after the first epoch" in progress.status_line()
    progress.on_trial_result(0, trials, trials[0], {"epoch": 1, "epoch_s": 10.0,
                                                     "val_mae": 0.9})
    # a: 3 epochs x 10 s; b (not measured): 4 epochs x (10 s / 25 FLOP) x 50 FLOP per epoch
    assert progress.eta_s() == pytest.approx(max((30 + 80) / 2, 80))
    progress.on_trial_result(0, trials, trials[1], {"epoch": 1, "epoch_s": 30.0,
                                                     "val_mae": 0.7})
    assert progress.eta_s() == pytest.approx(max((30 + 90) / 2, 90))  # b at its own pace
    line = progress.status_line()
    assert line.startswith("[status] 0/2 done, 2 running, 0 pending; epochs 2/8")
    assert "best 0.700 km (b), worst 0.900 km (a)" in line and "ETA 1m30s" in line


def test_a_status_each_second_epochs_on_request_and_a_line_per_trial(heard):
    progress, clock, trials = make(epochs=True)
    progress.on_step_begin(0, trials)  # the first step's status at once
    clock.now = 0.5
    progress.on_step_begin(1, trials)
    assert [type(event) for event in heard] == [Status]
    clock.now = 1.5
    progress.on_step_begin(2, trials)
    status = heard[-1]
    assert isinstance(status, Status) and len(heard) == 2 and status.level == "status"
    assert (status.done, status.total, status.running, status.pending) == (0, 2, 2, 0)
    assert status.epochs_total == 8 and status.eta_s is None and status.elapsed_s == 1.5
    assert status.message.startswith("[status] 0/2 done, 2 running, 0 pending; epochs 0/8")
    assert status.short.startswith("0/2 done, 2 running, 0 pending; ETA after")
    progress.on_trial_result(2, trials, trials[0], {"epoch": 1, "epoch_s": 10.0,
                                                     "val_mae": 0.9})
    epoch = heard[-1]
    assert isinstance(epoch, EpochEnded) and epoch.level == "info"
    assert epoch.message == "  a epoch 1/4 val_mae=0.900 km 10.0 s/epoch"
    assert (epoch.trial, epoch.epoch, epoch.epochs, epoch.val_mae, epoch.epoch_s) == (
        "a", 1, 4, 0.9, 10.0)
    trials[0].status, trials[0].last_result = "TERMINATED", {"test_mae": 0.8}
    progress.on_trial_complete(3, trials, trials[0])
    ended = heard[-1]
    assert isinstance(ended, TrialEnded)
    assert ended.message.startswith("[1/2] a ok test_mae=0.800 km")
    assert (ended.trial, ended.status, ended.done, ended.metrics) == ("a", "ok", 1,
                                                                     {"test_mae": 0.8})
    progress.on_step_begin(4, trials)
    assert progress.running == ["b"]
    assert progress.eta_s() == pytest.approx(4 * 10 / 25 * 50)  # a is done: b alone
    progress.on_experiment_end(trials)
    assert type(heard[-1]) is Status  # the last; FitEnded is the runner's, once fit returns


def test_a_callback_pickled_by_an_earlier_version_takes_this_ones_pace_at_setup(heard):
    """Tune restores the callback of tuner.pkl on --resume: one that printed to a stream every
    30 s drops its stream and bar and emits a status a second."""
    progress, clock, trials = make()
    progress.__dict__.update(stream=io.StringIO(), bar=None, live=False, live_given=None,
                             every_s=30.0)
    progress.setup()
    assert not {"stream", "bar", "live", "live_given"} & set(vars(progress))
    for second in range(3):
        clock.now = float(second)
        progress.on_step_begin(second, trials)
    assert [type(event) for event in heard] == [Status] * 3


def test_in_a_log_the_view_prints_a_status_line_every_30_seconds_and_the_lines(capsys):
    view = ConsoleView(live=False)
    progress, clock, trials = make()
    with listening(view):
        for second in range(0, 62):
            clock.now = float(second)
            progress.on_step_begin(second, trials)
        trials[0].status, trials[0].last_result = "TERMINATED", {"test_mae": 0.8}
        progress.on_trial_complete(99, trials, trials[0])
        progress.on_experiment_end(trials)
        emit(FitEnded("status", "fit ended"))  # as the runner does after the fit
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(";")[0] for line in lines] == [
        "[status] 0/2 done, 2 running, 0 pending", "[status] 0/2 done, 2 running, 0 pending",
        "[1/2] a ok test_mae=0.800 km (61s elapsed)"], lines  # at 30 s and 60 s
    assert view.last_line_s == 0.0  # the next fit's status lines count from its start


def test_without_epoch_lines_an_epoch_emits_nothing(heard):
    progress, clock, trials = make()
    progress.on_step_begin(0, trials)
    progress.on_trial_result(0, trials, trials[0], {"epoch": 1, "epoch_s": 10.0})
    assert [type(event) for event in heard] == [Status]


@pytest.mark.parametrize(("seconds", "text"), [(42.4, "42s"), (250, "4m10s"),
                                                (3900, "1h05m")])
def test_durations_read_as_people_write_them(seconds, text):
    assert format_duration(seconds) == text


def test_the_eta_counts_each_trials_time_outside_its_epochs():
    """A trial that has ended teaches the time a trial spends outside its epochs (start, data,
    test): the trials not yet started get it on top of their epochs."""
    clock = Clock()
    plan = {name: Planned(epochs=2, cost=100.0) for name in ("a", "b", "c")}
    progress = TrialProgress(3, plan=plan, clock=clock)
    trials = [Trial("a", "RUNNING"), Trial("b", "PENDING"), Trial("c", "PENDING")]
    progress.on_step_begin(0, trials)
    progress.on_trial_result(0, trials, trials[0], {"epoch": 1, "epoch_s": 10.0})
    progress.on_trial_result(0, trials, trials[0], {"epoch": 2, "epoch_s": 10.0})
    clock.now = 26.0  # 2 epochs of 10 s and 6 s outside them
    trials[0].status = "TERMINATED"
    progress.on_trial_complete(1, trials, trials[0])
    trials[1].status = "RUNNING"
    progress.on_step_begin(2, trials)
    # b: running, 2 epochs left x 10 s; c: not started, 2 x 10 s + 6 s; one slot running
    assert progress.eta_s() == pytest.approx(20 + 26)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_bar_redrawn_in_place_with_the_lines_above_it():
    import pickle

    clock, out = Clock(), Terminal()
    plan = {"a": Planned(epochs=4, cost=100.0), "b": Planned(epochs=4, cost=200.0)}
    progress = TrialProgress(2, plan=plan, clock=clock)
    view = ConsoleView(out)
    trials = [Trial("a", "RUNNING"), Trial("b", "RUNNING")]
    assert view.live
    with listening(view):
        progress.on_step_begin(0, trials)
        progress.on_trial_result(0, trials, trials[0], {"epoch": 1, "epoch_s": 10.0,
                                                         "val_mae": 0.9})
        clock.now = 0.5
        progress.on_step_begin(1, trials)  # within a second: not redrawn
        drawn = out.getvalue()
        assert "0/8 epochs" in drawn and "1/8 epochs" not in drawn
        clock.now = 1.5
        progress.on_step_begin(2, trials)
        drawn = out.getvalue()
        assert "\r" in drawn and "1/8 epochs |" in drawn.split("\r")[-1]
        assert "0/2 done, 2 running" in drawn.split("\r")[-1] and "ETA" in drawn
        assert "[status]" not in drawn  # no 30-second lines on a terminal
        pickle.loads(pickle.dumps(progress))  # Tune pickles its callbacks
        trials[0].status, trials[0].last_result = "TERMINATED", {"test_mae": 0.5}
        progress.on_trial_complete(3, trials, trials[0])
        clock.now = 2.5
        progress.on_step_begin(4, trials)
        text = out.getvalue()
        assert "[1/2] a ok test_mae=0.500 km" in text  # the line, above the redrawn bar
        assert re.search(r"\r +\r\[1/2\] a ok", text), text  # the bar cleared before it
        assert text.rindex("[1/2] a ok") < text.rindex("1/2 done")
        assert "1/2 done, 1 running, 0 pending" in text  # a is no longer counted as running
        progress.on_experiment_end(trials)
        emit(FitEnded("status", "fit ended"))
    assert view.bar is None and out.getvalue().endswith("\n")
    assert not ConsoleView(io.StringIO()).live  # a file or a pipe: plain lines
    assert ConsoleView(io.StringIO(), live=True).live  # asked for: kept


def test_the_views_lines_reach_the_console_it_started_on_while_tune_holds_stdout():
    """While Tune runs, sys.stdout is the filter that keeps Tune's own lines in a log
    (ablations/experiment/execution/tune_console.py): the view writes to the stdout it was made
    on."""
    console, elsewhere = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(console):
        view = ConsoleView(live=False)
    progress = TrialProgress(1, clock=Clock())
    trial = Trial("a", "TERMINATED")
    trial.last_result = {"test_mae": 0.5}
    with contextlib.redirect_stdout(elsewhere), listening(view):
        progress.on_trial_complete(0, [trial], trial)
    assert console.getvalue().startswith("[1/1] a ok") and elsewhere.getvalue() == ""


def test_a_search_bar_counts_its_samples_epochs():
    clock, out = Clock(), Terminal()
    progress = TrialProgress(3, default=Planned(epochs=4, cost=float("nan")),
                             clock=clock)  # a search: no plan, each sample 4 epochs
    with listening(ConsoleView(out)):
        progress.on_step_begin(0, [Trial("hpo-1", "RUNNING")])
        assert "0/12 epochs |" in out.getvalue()
        progress.on_experiment_end([])
        emit(FitEnded("status", "fit ended"))


def test_own_code_without_planned_epochs_shows_the_epoch_alone(heard):
    progress = TrialProgress(1, plan={"a": Planned(epochs=0, cost=float("nan"))},
                             clock=Clock(), epochs=True)
    progress.on_step_begin(0, [Trial("a", "RUNNING")])
    progress.on_trial_result(0, [], Trial("a", "RUNNING"), {"epoch": 1, "epoch_s": 2.0})
    assert heard[-1].message == "  a epoch 1 2.0 s/epoch" and heard[-1].epochs == 0


def test_trials_without_epochs_get_an_eta_from_the_ended_trials():
    clock = Clock()
    plan = {name: Planned(epochs=0, cost=float("nan")) for name in "abcd"}
    progress = TrialProgress(4, plan=plan, clock=clock)
    trials = [Trial(name, "RUNNING") for name in "ab"]
    progress.on_step_begin(0, trials)
    assert "ETA after the first epoch or trial" in progress.status_line()
    clock.now = 10.0
    trials[0].status, trials[0].last_result = "TERMINATED", {"final": True}
    progress.on_trial_complete(1, trials, trials[0])
    trials[1].status = "RUNNING"
    progress.on_step_begin(2, [trials[1], Trial("c", "RUNNING")])
    clock.now = 14.0
    # a took 10 s; b has 0 s left of its 10, c 6 s, d 10 s: 16 s over two slots
    assert progress.eta_s() == pytest.approx(10.0)
    assert "ETA 10s" in progress.status_line()


def test_own_codes_metrics_end_a_trials_line_in_their_declared_units(heard):
    progress = TrialProgress(1, plan={"a": Planned(epochs=0, cost=float("nan"))},
                             clock=Clock(), units={"test_mae": "km"})
    trial = Trial("a", "TERMINATED")
    trial.last_result = {"own_metrics": "test_acc,test_mae", "test_acc": 0.5,
                         "test_mae": 5.0321, "epoch": 3}
    progress.on_trial_complete(0, [trial], trial)
    # the declared unit after its metric; a metric declared without one stays bare
    assert heard[-1].message == "[1/1] a ok test_acc=0.5 test_mae=5.032 km (0s elapsed)"
    assert heard[-1].metrics == {"test_acc": 0.5, "test_mae": 5.0321}
