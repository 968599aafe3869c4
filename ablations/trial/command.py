"""A command's side of a trial: run the user's program once with its config filled in, and turn
the JSON lines it writes into the trial's reports (ablations/trial/own_code.py).

The contract (docs/own-code.md):

- The command line (``python train.py --lr {lr} --seed {seed}``) is split like a shell does
  (``shlex``), then every ``{field}`` of each argument is filled: the user's keys (booleans as
  ``true`` / ``false``) and the runner's (:data:`~ablations.config.code.COMMAND_FIELDS`).
  A value with a space stays one argument; no shell runs.
- The environment carries the same: ``ABLATIONS_CONFIG`` (the user's keys as JSON) and
  ``ABLATIONS_<FIELD>`` for each of the runner's fields (``ABLATIONS_SEED``,
  ``ABLATIONS_METRICS_FILE``, ...).
- The program appends one JSON object a line to ``{metrics_file}``: a line with ``"epoch"``
  is that epoch's report; a line without is final metrics. A program that writes no such
  file may print its final metrics as its last JSON line on stdout. ``NaN`` and ``Infinity``
  read as numbers, ``null`` as NaN; values that are not numbers are left out. A metric
  declared with ``printed:`` is read from the lines of its stdout instead, by its pattern
  (ablations/config/printed.py): every match a point of its curve, the last its final value;
  a pattern that matches no line fails the trial with the program's last lines.
- It runs in a working folder of its own laid out as the experiment's folder
  (ablations/trial/work_folder.py: the project's small top-level files copied, the rest
  linked), so that trials at once never share a file a script saves under a fixed name; that
  folder is the experiment's ``outputs/<trial>/`` on local storage, kept after it. Its stdout
  and stderr are in ``stdout.log`` and ``stderr.log`` of the trial's folder; a non-zero exit
  fails the trial with stderr's last lines.
- It runs under a supervisor (ablations/trial/supervise.py) that owns its whole tree, a
  launcher's workers included, and ends it when the trial ends, fails or is stopped, or when
  the worker dies; a restarted trial starts once the previous run of it is gone
  (:func:`~ablations.trial.command_process.end_previous_run`).
- ``{resume_dir}`` is kept across restarts of the trial (a resume, a lost node): a program
  that saves its state there can continue from it. A new trial gets it empty.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Optional

from ablations.config.code import Command
from ablations.config.metric_files import MetricFileError, read_points
from ablations.config.printed import PrintedMetrics
from ablations.trial.command_fields import command_environment, command_line, command_values
from ablations.trial.command_fields import (  # noqa: F401 (re-exported)
    MAX_ARGUMENT_BYTES,
    planned_command_line,
)
from ablations.trial.command_logs import (
    STDERR_LOG,
    STDOUT_LOG,
    exit_message,
    last_json_line,
    last_lines,
    last_output,
)
from ablations.trial.command_output import (
    NewLines,
    NewText,
    epoch_number,
    metric_numbers,
    printed_points,
)
from ablations.trial.command_process import (
    check_runnable,
    end_previous_run,
    start_supervised,
    stop_program,
)
from ablations.trial.own_code import OwnCodeError, Trial
from ablations.trial.supervise import PID_FILE
from ablations.trial.time_limit import TrialTimeout
from ablations.trial.work_folder import prepare_work_folder

POLL_S = 0.05  # how often the metrics file is read while the program runs
FILE_POLL_S = 2.0  # how often the program's own log files are read while it runs


def run_command(command: Command, config: Any, trial: Trial) -> dict[str, Any]:
    """Run ``command`` as the trial: report each epoch line of its metrics file (and save the
    history after it), and return its final metrics.

    Raises:
        Diverged: a declared metric that is not finite in an epoch line (the program is
            stopped first).
        OwnCodeError: the program is not found, exits with a non-zero code (the message holds
            stderr's last lines), writes a metrics line that is not a JSON object, or writes
            no metrics at all.
        TrialTimeout: the program ran past the trial's time limit; its tree is ended first,
            and the message holds its last output.
    """
    folder = Path(trial.folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    values = command_values(config, trial, command.forms)
    declared = set(command.metrics)  # the metrics a line must give as numbers
    metrics_file = _prepare_state(trial, values, declared)
    arguments = command_line(command.run, values)
    environment = command_environment(config, values)
    printed = PrintedMetrics(command.printed) if command.printed else None
    if printed is not None:  # lines reach stdout.log as printed, not at exit in one block
        environment.setdefault("PYTHONUNBUFFERED", "1")
    # a folder of its own, laid out as the project's: trials at once never share an output
    work = prepare_work_folder(trial.outputs or folder / "run", Path(trial.cwd),
                               fresh=trial.restore() is None)
    check_runnable(arguments[0], work, environment.get("PATH"))
    pid_file = folder / PID_FILE
    end_previous_run(pid_file)
    progress = _Progress(command, trial, work, folder, metrics_file, declared, printed)
    with open(folder / STDOUT_LOG, "wb") as stdout, open(folder / STDERR_LOG, "wb") as stderr:
        process = start_supervised(arguments, pid_file, work, environment, stdout, stderr)
        _watch(process, pid_file, trial, progress)
    if process.returncode != 0:
        raise OwnCodeError(exit_message(process.returncode, folder))
    return _final_metrics(progress)


def _prepare_state(trial: Trial, values: Mapping[str, str], declared: Collection[str]) -> Path:
    """The trial's {resume_dir}, emptied for a new trial, and its {metrics_file}, emptied for
    this run's lines once a restarted trial has recorded the epochs an earlier run wrote
    there; returns the metrics file."""
    resume_dir = Path(values["resume_dir"])
    if trial.restore() is None:  # a new trial: no state of an earlier run to continue from
        shutil.rmtree(resume_dir, ignore_errors=True)
    resume_dir.mkdir(parents=True, exist_ok=True)
    metrics_file = Path(values["metrics_file"])
    if trial.restore() is not None and metrics_file.exists():
        recover_epochs(metrics_file, trial, declared)
    metrics_file.write_bytes(b"")  # this run's lines only
    return metrics_file


class _Progress:
    """A running program's metrics as they arrive: each epoch reported to the trial (and its
    history saved after it), the final metrics gathered."""

    def __init__(self, command: Command, trial: Trial, work: Path, folder: Path,
                 metrics_file: Path, declared: Collection[str],
                 printed: Optional[PrintedMetrics]) -> None:
        self.command, self.trial, self.work, self.folder = command, trial, work, folder
        self.metrics_file, self.declared, self.printed = metrics_file, declared, printed
        self.lines = NewLines(metrics_file)
        self.output = NewText(folder / STDOUT_LOG)
        self.final: dict[str, Any] = {}
        self.epochs = 0
        self.files_read_at = 0.0

    def report(self, epoch: int, values: Mapping[str, Any]) -> None:
        """One epoch's values as the trial's report (which may raise Diverged), then its
        history saved."""
        self.trial.report(epoch=epoch, **metric_numbers(values, self.declared))
        self.trial.save({})
        self.epochs += 1

    def read(self, *, exited: bool) -> None:
        """What the program wrote since the last read: its metrics file's lines, its printed
        lines and, while it runs, every FILE_POLL_S, its own files' completed epochs."""
        for record in self.lines.read(complete_only=not exited):
            if "epoch" in record:
                self.report(epoch_number(record.pop("epoch"), self.metrics_file), record)
            else:
                self.final.update(metric_numbers(record, self.declared))
        printed = self.printed
        if printed is not None:
            points = [point for line in self.output.read(complete_only=not exited)
                      for point in printed_points(printed, line)]
            for epoch, values in points + (printed.finish() if exited else []):
                if epoch > self.trial.last_epoch:  # a resumed run prints its epochs again
                    self.report(epoch, values)
        if exited:
            return
        if self.command.files and time.monotonic() > self.files_read_at + FILE_POLL_S:
            for epoch, values in epochs_written(self.command, self.trial, self.work):
                self.report(epoch, values)
            self.files_read_at = time.monotonic()


def _watch(process: subprocess.Popen, pid_file: Path, trial: Trial,
           progress: _Progress) -> None:
    """Read the program's output every POLL_S until it exits; stop it when the trial's time
    limit passes or a report raises, and in any case once the wait ends."""
    try:
        while True:
            if trial.deadline.passed():
                raise trial.deadline.error("")
            try:
                process.wait(timeout=POLL_S)
                exited = True
            except subprocess.TimeoutExpired:
                exited = False
            progress.read(exited=exited)
            if exited:
                break
    except TrialTimeout:  # the limit passed in the loop or in an epoch's report
        stop_program(process, pid_file)
        raise trial.deadline.error(last_output(progress.folder)) from None
    finally:
        stop_program(process, pid_file)


def _final_metrics(progress: _Progress) -> dict[str, Any]:
    """The final metrics of a program that exited with code 0: its metrics file's final
    lines, its printed metrics' last values and its own files' last values; without any of
    these, the last JSON line it printed."""
    command, folder, declared = progress.command, progress.folder, progress.declared
    final, printed, metrics_file = progress.final, progress.printed, progress.metrics_file
    if printed is not None:
        missing = printed.unmatched()
        if missing:
            said = last_lines(folder / STDOUT_LOG) or "nothing"
            raise OwnCodeError(
                f"metric {missing[0]}: no line the program printed matched its pattern "
                f"{command.printed[missing[0]]!r}; its last lines: {said}")
        final.update(metric_numbers(printed.final, declared))
    if command.files:
        final.update(_from_files(command, progress.trial, progress.work, folder, declared,
                                 progress.report))
    if printed is not None or command.files:
        return final
    if not final and not progress.epochs:
        line = last_json_line(folder / STDOUT_LOG)
        if line is None:
            raise OwnCodeError(
                f"command wrote no metrics: no line in {{metrics_file}} ({metrics_file}) and "
                "no JSON object on stdout; append json.dumps({\"epoch\": 1, ...}) lines to "
                "the file it names, or print the final metrics as one JSON line")
        final = metric_numbers(line, declared)
    return final


def _from_files(command: Command, trial: Trial, work: Path, folder: Path,
                declared: Collection[str],
                report: Callable[[int, Mapping[str, Any]], None]) -> dict[str, float]:
    """The metrics a program wrote to its own log files (ablations/config/metric_files.py),
    read once it has ended: each epoch's values given to ``report`` (those a resumed run has
    not), the last value of each its final one."""
    by_epoch: dict[int, dict[str, float]] = {}
    final = {}
    for name, spec in command.files.items():
        try:
            points = read_points(spec, str(work))
        except MetricFileError as exc:
            said = last_lines(folder / STDERR_LOG) or last_lines(folder / STDOUT_LOG)
            raise OwnCodeError(f"metric {name}: {exc}"
                               + (f"; the program's last lines: {said}" if said else "")) \
                from None
        if not points:
            raise OwnCodeError(f"metric {name}: its {spec['kind']} file {spec['path']} holds "
                               "no value of it")
        for epoch, value in points:
            by_epoch.setdefault(epoch, {})[name] = value
        final[name] = points[-1][1]
    if len(by_epoch) > 1:  # a curve (one point alone: a final value, e.g. all_results.json)
        for epoch in sorted(by_epoch):
            if epoch > trial.last_epoch:
                report(epoch, by_epoch[epoch])
    return metric_numbers(final, declared)


def epochs_written(command: Command, trial: Trial, work: Path) -> list[tuple[int, dict]]:
    """While the program runs: the epochs after the trial's last whose values every file
    metric holds and which a later point of each follows (so no row or record of them is still
    being written), in order, up to the first that is not so. A file not there yet, or one
    that does not read (a JSON file being rewritten), gives none this time."""
    curves = []
    for spec in command.files.values():
        try:
            curves.append(dict(read_points(spec, str(work))))
        except (OSError, ValueError):  # MetricFileError, a file half written or replaced
            return []
    if not curves or not all(curves):
        return []
    complete = min(max(curve) for curve in curves)  # each metric has a point past these
    written = []
    for epoch in sorted(e for e in curves[0] if trial.last_epoch < e < complete):
        if not all(epoch in curve for curve in curves[1:]):
            break
        written.append((epoch, {name: curve[epoch]
                                for name, curve in zip(command.files, curves)}))
    return written


def recover_epochs(metrics_file: Path, trial: Trial, declared: Collection[str]) -> None:
    """The epochs an earlier run of a restarted trial wrote after the runner last saved its
    state (its worker died while the program went on, and may have checkpointed them in
    {resume_dir}): recorded as the trial's, so that the curves keep them."""
    for record in NewLines(metrics_file).read(complete_only=True):
        if "epoch" in record:
            epoch = epoch_number(record.pop("epoch"), metrics_file)
            if epoch > trial.last_epoch:
                trial.report(epoch=epoch, **metric_numbers(record, declared))
                trial.save({})


__all__ = ["command_environment", "command_line", "command_values", "run_command"]
