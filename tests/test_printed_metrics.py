"""Metrics a program prints (ablations/config/printed.py): each declared metric's pattern read
from its stdout's lines, every match a point of its curve and the last its final value; bad
patterns refused before launch; a pattern that matches nothing fails the trial in one line.
The tests that run a program are marked slow (tests/conftest.py refuses subprocesses
otherwise)."""

from __future__ import annotations

import math

import pytest

from ablations.config import ConfigError
from ablations.config.code import command_from, command_of, command_spec
from ablations.config.printed import PrintedMetrics, PrintedValueError, default_pattern
from ablations.config.values import load_yaml_overrides
from ablations.trial.own_code import OwnCodeError
from tests.test_command import run, script

# the word-level language model script's lines, as it prints them
EPOCH = r"end of epoch +(?P<epoch>\d+) .*valid ppl +(?P<value>\S+)"
TEST = r"End of training .*test ppl +(?P<value>\S+)"
LINES = [
    "-" * 89,
    "| end of epoch   1 | time: 12.10s | valid loss  7.02 | valid ppl  1118.85",
    "| end of epoch   2 | time: 12.30s | valid loss  6.80 | valid ppl   894.16",
    "=" * 89,
    "| End of training | test loss  6.62 | test ppl   753.48",
]


def fed(patterns: dict[str, str], lines: list[str]) -> tuple[list, PrintedMetrics]:
    printed = PrintedMetrics(patterns)
    points = [point for line in lines for point in printed.feed(line)]
    return points + printed.finish(), printed


def test_each_match_is_a_point_of_the_curve_and_the_last_the_final_value():
    points, printed = fed({"valid_ppl": EPOCH, "test_ppl": TEST}, LINES)
    assert points == [(1, {"valid_ppl": 1118.85}), (2, {"valid_ppl": 894.16})]
    assert printed.final == {"valid_ppl": 894.16, "test_ppl": 753.48}
    assert printed.unmatched() == []


def test_without_an_epoch_group_a_points_epoch_is_its_ordinal_and_one_line_feeds_several():
    lines = ["step 100: train_loss=2.83, val_loss=2.81", "noise", "step 200: train loss: 2.41, "
             "val loss: 2.52"]
    points, printed = fed({"train_loss": default_pattern("train_loss"),
                           "val_loss": default_pattern("val_loss")}, lines)
    assert points == [(1, {"train_loss": 2.83, "val_loss": 2.81}),
                      (2, {"train_loss": 2.41, "val_loss": 2.52})]
    assert printed.final == {"train_loss": 2.41, "val_loss": 2.52}


@pytest.mark.parametrize("line, value", [
    ("val_loss=0.31", 0.31), ("val_loss: 0.31", 0.31), ("val loss: 1e-3", 1e-3),
    ("epoch 3 | val_loss = -2.5 |", -2.5), ("val_loss: nan", math.nan),
    ("my_val_loss: 9", None), ("val_loss: 0.31ms", None), ("val_loss 0.31", None),
])
def test_the_default_reads_name_equals_and_name_colon_only(line, value):
    _, printed = fed({"val_loss": default_pattern("val_loss")}, [line])
    got = printed.final.get("val_loss")
    assert (got is None if value is None else
            math.isnan(got) if math.isnan(value) else got == value), (line, got)


def test_a_match_that_is_no_number_or_no_epoch_names_the_metric_and_the_line():
    with pytest.raises(PrintedValueError, match=r"metric loss: its pattern matched 'abc', not "
                                                r"a number, in the line 'loss abc'"):
        fed({"loss": r"loss (?P<value>\w+)"}, ["loss abc"])
    with pytest.raises(PrintedValueError, match="epoch '0' is not a whole number from 1 up"):
        fed({"loss": r"epoch (?P<epoch>\d+) loss (?P<value>\S+)"}, ["epoch 0 loss 1.5"])


@pytest.mark.parametrize("printed, problem", [
    ("loss (?P<value>[", "is not a regular expression"),
    ("loss ([0-9.]+)", "has no group for the number; name it (?P<value>...) or (?P<loss>...)"),
    ("", "is not a pattern"),
    (3, "is not a pattern"),
])
def test_a_bad_pattern_is_refused_before_launch_naming_the_fix(printed, problem):
    with pytest.raises(ConfigError) as error:
        command_from("python train.py", {}, {"loss": {"direction": "lower", "printed": printed}})
    message = str(error.value)
    assert message.startswith("command: metrics: loss: printed: ") and problem in message
    assert "\n" not in message and "e.g. loss: {direction: lower, printed: " in message


def test_the_spec_carries_the_patterns_and_leaves_a_command_without_them_as_it_was():
    command = command_from("python t.py", {}, {"loss": {"direction": "lower", "unit": "nats",
                                                        "printed": r"loss (?P<loss>\S+)"},
                                               "acc": {"direction": "higher", "printed": True}})
    again = command_of(command_spec(command))
    assert again.printed == {"loss": r"loss (?P<loss>\S+)", "acc": default_pattern("acc")}
    assert again.metrics["loss"].unit == "nats" and again.printed == command.printed
    plain = command_from("python t.py", {}, {"loss": "lower nats"})
    assert command_spec(plain) == ('command:{"config":{},"metrics":{"loss":{"direction":'
                                   '"lower","unit":"nats"}},"run":"python t.py"}')


def test_printed_true_in_a_space_file_is_the_default_pattern(tmp_path):
    """A space file's YAML reaches the command as text (every scalar a string): its
    ``printed: true`` is the default pattern, not the regular expression ``true``."""
    space = tmp_path / "space.yaml"
    space.write_text("metrics:\n  val_loss: {direction: lower, printed: true}\n")
    metrics = load_yaml_overrides(space)["metrics"]
    assert metrics["val_loss"]["printed"] == "true"
    command = command_from("python t.py", {}, metrics)
    assert command.printed == {"val_loss": default_pattern("val_loss")}


WORD_LM = """
    import math, sys
    for epoch in (1, 2, 3):
        # no flush: the runner reads the lines as printed (PYTHONUNBUFFERED)
        print("| end of epoch {:3d} | time: 1.00s | valid loss {:5.2f} | valid ppl {:8.2f}"
              .format(epoch, 7 - epoch / 10, math.exp(7 - epoch / 10)))
    print("| End of training | test loss {:5.2f} | test ppl {:8.2f}".format(6.6, math.exp(6.6)))
"""


@pytest.mark.slow
def test_a_program_that_prints_text_reports_each_epoch_and_its_final_values(tmp_path):
    command = command_from(script(tmp_path, WORD_LM), {}, {
        "test_ppl": {"direction": "lower", "printed": TEST},
        "valid_ppl": {"direction": "lower", "printed": EPOCH}})
    result, sent, _ = run(command, tmp_path)
    assert [report["epoch"] for report in sent] == [1, 2, 3]
    assert [report["valid_ppl"] for report in sent] == [
        round(math.exp(7 - epoch / 10), 2) for epoch in (1, 2, 3)]
    assert result["test_ppl"] == round(math.exp(6.6), 2)
    assert result["valid_ppl"] == sent[-1]["valid_ppl"]


@pytest.mark.slow
def test_a_pattern_that_matches_nothing_fails_the_trial_with_the_programs_last_lines(tmp_path):
    command = command_from(script(tmp_path, WORD_LM), {}, {
        "test_ppl": {"direction": "lower", "printed": r"Test perplexity (?P<value>\S+)"}})
    with pytest.raises(OwnCodeError) as error:
        run(command, tmp_path)
    message = str(error.value)
    assert message.startswith("metric test_ppl: no line the program printed matched its "
                              "pattern 'Test perplexity (?P<value>\\\\S+)'; its last lines: ")
    assert "| End of training | test loss  6.60 | test ppl   735.10" in message


@pytest.mark.slow
def test_a_printed_nan_ends_the_trial_as_diverged(tmp_path):
    command = command_from(script(tmp_path, """
        print("step 1: loss 2.5")
        print("step 2: loss nan")
    """), {}, {"loss": {"direction": "lower", "printed": r"step \d+: loss (?P<value>\S+)"}})
    result, reports, _ = run(command, tmp_path)
    assert result["status"] == "diverged" and "loss=nan at epoch 2" in result["error"]
    assert [report["status"] for report in reports] == ["ok", "diverged"]
