"""What reaches the console while Tune runs (ablations/experiment/execution/tune_console.py
TuneLines): Tune's own start-up lines (its box, its folder, its TensorBoard command) go to the
experiment's tune_console.log; a trial's error and anything else reach the command line's console,
or the log too for the library, which prints nothing."""

from __future__ import annotations

import io

from ablations.experiment.execution.tune_console import TuneLines

TUNE_START = """\
\u256d\u2500\u2500\u2500\u2500\u256e
\u2502 Configuration for experiment     tune                  \u2502
\u251c\u2500\u2500\u2500\u2500\u2524
\u2502 Search algorithm                 BasicVariantGenerator \u2502
\u2570\u2500\u2500\u2500\u2500\u256f

View detailed results here: /tmp/x/tune
To visualize your results with TensorBoard, run: `tensorboard --logdir /tmp/ray/session/x`
"""
ERROR = ("Trial baseline-seed0 errored after 1 iterations at 2026-11-23. Total running time: 3s\n"
         "Error file: /tmp/x/tune/baseline-seed0/error.txt\n")


def test_tunes_own_lines_go_to_the_log_and_a_trials_error_to_the_console():
    console, log = io.StringIO(), io.StringIO()
    stream = TuneLines(console, log)
    for chunk in (TUNE_START[:40], TUNE_START[40:], ERROR[:25], ERROR[25:], "no newline"):
        stream.write(chunk)  # lines arrive in pieces, as print() writes them
    stream.flush()
    assert console.getvalue() == ERROR + "no newline"
    assert "Configuration for experiment" in log.getvalue()
    assert "View detailed results here" in log.getvalue()
    assert "tensorboard --logdir /tmp/ray" in log.getvalue()
    assert "errored" not in log.getvalue()


def test_without_a_console_every_line_goes_to_the_log():
    log = io.StringIO()
    stream = TuneLines(None, log)
    stream.write(TUNE_START + ERROR)
    stream.flush()
    assert log.getvalue() == TUNE_START + ERROR
