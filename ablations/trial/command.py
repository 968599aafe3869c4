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
  (:func:`end_previous_run`).
- ``{resume_dir}`` is kept across restarts of the trial (a resume, a lost node): a program
  that saves its state there can continue from it. A new trial gets it empty.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Optional

from ablations.config.code import COMMAND_FIELDS, FIELD, FLAG, Command, field_default
from ablations.config.metric_files import MetricFileError, read_points
from ablations.config.printed import PrintedMetrics, PrintedValueError
from ablations.config.value_forms import DEFAULT_FORM, written
from ablations.trial.own_code import OwnCodeError, Trial
from ablations.trial.supervise import PID_FILE, end_supervised, is_supervisor, kill_tree
from ablations.trial.time_limit import TrialTimeout
from ablations.trial.work_folder import prepare_work_folder

METRICS_FILE = "metrics.jsonl"
RESUME_DIR = "resume"
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"
POLL_S = 0.05  # how often the metrics file is read while the program runs
FILE_POLL_S = 2.0  # how often the program's own log files are read while it runs
SUPERVISOR = str(Path(__file__).with_name("supervise.py"))
STOP_GRACE_S = 2.0  # a stopped program's time to exit on SIGTERM before SIGKILL
TAIL_BYTES = 65536  # how much of the end of a log is read for stderr's last lines
ERROR_LINES = 5  # stderr's last non-empty lines in a failed trial's error
ERROR_CHARS = 400


# Linux's MAX_ARG_STRLEN (32 pages): one argument or environment string a program receives
# holds fewer bytes than this, its terminating NUL included
MAX_ARGUMENT_BYTES = 32 * 4096


def value_problem(config: Any) -> Optional[str]:
    """Why the values of a command's keys (``config``: its dataclass) cannot reach its
    program, in words for a one-line error; None when they can. A value may not hold a NUL
    byte (arguments and environment strings end at one) nor be as long as
    :data:`MAX_ARGUMENT_BYTES`; nor may ``ABLATIONS_CONFIG``, every key as JSON."""
    values = dataclasses.asdict(config)
    for key, value in values.items():
        text = _text(value)
        if "\0" in text:
            return (f"{key}: the value holds a NUL byte, which no program receives in its "
                    "arguments or environment; remove it")
        size = len(text.encode())
        if size >= MAX_ARGUMENT_BYTES:
            return (f"{key}: the value is {size:,} bytes; a program's argument holds at most "
                    f"{MAX_ARGUMENT_BYTES - 1:,} (Linux's MAX_ARG_STRLEN): pass the path of a "
                    "file that holds it instead")
    size = len(f"ABLATIONS_CONFIG={json.dumps(values, sort_keys=True)}".encode())
    if size >= MAX_ARGUMENT_BYTES:
        return (f"the keys' values are {size:,} bytes as JSON (the program's ABLATIONS_CONFIG); "
                f"an environment string holds at most {MAX_ARGUMENT_BYTES - 1:,}: pass large "
                "values as paths of files")
    return None


def unused_key_problem(command: Command, config: Any) -> Optional[str]:
    """Why a trial of ``command`` would run as if a key it changes were not changed, in words
    for a one-line error; None when it would not. A program that takes its keys on its command
    line (the line has a ``{key}`` of the user's) gets a key only there: a key a trial sets
    away from its default that the line never names would reach the program in
    ``ABLATIONS_CONFIG`` alone, and the trial would repeat another. A line that names no key
    of the user's is a program that reads ``ABLATIONS_CONFIG``: nothing to check."""
    values = dataclasses.asdict(config)
    on_line = set(FIELD.findall(command.run)) | {key for key, _ in FLAG.findall(command.run)}
    if not on_line & set(values):
        return None
    defaults = {f.name: field_default(f) for f in dataclasses.fields(config)}
    changed = [key for key, value in values.items()
               if key not in on_line and value != defaults.get(key)]
    if not changed:
        return None
    key = changed[0]
    return (f"{key}={values[key]!r} changes a key the command line never names, so the program "
            f"would run as with {key}={defaults.get(key)!r}; put {{{key}}} on the line (e.g. "
            f"--{key.replace('_', '-')} {{{key}}}) or drop it from the variant")


def command_values(config: Any, trial: Trial,
                   forms: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """What fills the command line's fields: the user's keys, each in its form (``forms``: key
    -> form, ablations/config/value_forms.py), then the runner's."""
    folder = Path(trial.folder).resolve()
    values = {key: written(value, (forms or {}).get(key, DEFAULT_FORM))
              for key, value in dataclasses.asdict(config).items()}
    values.update(seed=str(trial.seed), init_seed=str(trial.seeds.init),
                  order_seed=str(trial.seeds.order), data_seed=str(trial.seeds.data),
                  trial=trial.name, ablation=trial.ablation, dataset=trial.dataset,
                  trial_dir=str(folder),
                  metrics_file=str(folder / METRICS_FILE), resume_dir=str(folder / RESUME_DIR),
                  device=trial.device.type, python=sys.executable, port=str(free_port()),
                  gpus=str(int(trial.resources.get("GPU", 0))))
    return values


def free_port() -> int:
    """A TCP port no process listens on now, on this node: two launcher-started trials on one
    node (torchrun's default 29500) each get their own."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def planned_command_line(command: Command, trial: Any, name: str) -> str:
    """The command line the trial ``name`` (its TrialConfig: ``trial``) will run, as a dry
    run shows it: the user's keys and the runner's fields filled as :func:`command_values`
    fills them, the paths made at launch shown as ``<trial_dir>``, ``<metrics_file>`` and
    ``<resume_dir>``, the port and GPUs given at launch as ``<port>`` and ``<gpus>``, the
    worker's Python as ``{python}``; quoted as a shell would need it."""
    values = {key: written(value, command.forms.get(key, DEFAULT_FORM))
              for key, value in dataclasses.asdict(trial.model).items()}
    seeds = trial.seeds
    values.update(seed=str(trial.seed), init_seed=str(seeds.init), order_seed=str(seeds.order),
                  data_seed=str(seeds.data), trial=name, ablation=trial.ablation,
                  dataset=trial.dataset, trial_dir="<trial_dir>",
                  metrics_file="<metrics_file>", resume_dir="<resume_dir>",
                  device=trial.systems.device, python="{python}", port="<port>",
                  gpus="<gpus>")
    return shlex.join(command_line(command.run, values)).replace("'{python}'", "{python}")


def command_line(run: str, values: Mapping[str, str]) -> list[str]:
    """The program's arguments: ``run`` split like a shell does, then each argument's
    ``{field}``s filled from ``values`` (so a value with a space stays one argument)."""
    try:
        arguments = shlex.split(run)
    except ValueError as exc:  # an unclosed quote
        raise OwnCodeError(f"command {run!r}: {exc}") from None

    def fill(match: Any) -> str:
        if match.group(1) not in values:
            raise OwnCodeError(f"command {run!r}: no value for {{{match.group(1)}}}")
        return values[match.group(1)]

    def flag(match: Any) -> str:  # {key:--flag}: the flag where the boolean key is true
        return match.group(2) if fill(match) == "true" else ""

    filled = []
    for argument in arguments:
        with_flags = FLAG.sub(flag, argument)
        if with_flags or not FLAG.search(argument):  # an argument that was only flags, all off
            filled.append(FIELD.sub(fill, with_flags))
    return filled


def command_environment(config: Any, values: Mapping[str, str],
                        base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """``base`` (the worker's environment) with ``ABLATIONS_CONFIG`` (the user's keys as
    JSON) and ``ABLATIONS_<FIELD>`` for each of the runner's fields."""
    environment = dict(os.environ if base is None else base)
    environment["ABLATIONS_CONFIG"] = json.dumps(dataclasses.asdict(config), sort_keys=True)
    environment.update({f"ABLATIONS_{field.upper()}": values[field] for field in COMMAND_FIELDS})
    return environment


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
    resume_dir = Path(values["resume_dir"])
    if trial.restore() is None:  # a new trial: no state of an earlier run to continue from
        shutil.rmtree(resume_dir, ignore_errors=True)
    resume_dir.mkdir(parents=True, exist_ok=True)
    metrics_file = Path(values["metrics_file"])
    declared = set(command.metrics)  # the metrics a line must give as numbers
    if trial.restore() is not None and metrics_file.exists():
        recover_epochs(metrics_file, trial, declared)
    metrics_file.write_bytes(b"")  # this run's lines only
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
    lines = NewLines(metrics_file)
    output = NewText(folder / STDOUT_LOG)
    final: dict[str, Any] = {}
    epochs = 0
    files_read_at = 0.0

    def report(epoch: int, values: Mapping[str, Any]) -> None:
        nonlocal epochs
        trial.report(epoch=epoch, **_numbers(values, declared))  # may raise Diverged
        trial.save({})
        epochs += 1

    with open(folder / STDOUT_LOG, "wb") as stdout, open(folder / STDERR_LOG, "wb") as stderr:
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", SUPERVISOR, str(pid_file), "--", *arguments],
                cwd=work, env=environment, stdin=subprocess.DEVNULL, stdout=stdout,
                stderr=stderr,
                # a session of its own: Ray may end a worker by its process group, and the
                # supervisor must outlive the worker long enough to end the program's tree
                start_new_session=True)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise OwnCodeError(f"cannot start the program's supervisor ({exc.strerror}) in "
                               f"the folder it runs in: {work}") from None
        try:
            while True:
                if trial.deadline.passed():
                    raise trial.deadline.error("")
                try:
                    process.wait(timeout=POLL_S)
                    exited = True
                except subprocess.TimeoutExpired:
                    exited = False
                for record in lines.read(complete_only=not exited):
                    if "epoch" in record:
                        report(epoch_number(record.pop("epoch"), metrics_file), record)
                    else:
                        final.update(_numbers(record, declared))
                if printed is not None:
                    points = [point for line in output.read(complete_only=not exited)
                              for point in _fed(printed, line)]
                    for epoch, values in points + (printed.finish() if exited else []):
                        if epoch > trial.last_epoch:  # a resumed run prints its epochs again
                            report(epoch, values)
                if exited:
                    break
                if command.files and time.monotonic() > files_read_at + FILE_POLL_S:
                    for epoch, values in epochs_written(command, trial, work):
                        report(epoch, values)
                    files_read_at = time.monotonic()
        except TrialTimeout:  # the limit passed in the loop or in an epoch's report
            stop_program(process, pid_file)
            raise trial.deadline.error(last_output(folder)) from None
        finally:
            stop_program(process, pid_file)
    if process.returncode != 0:
        raise OwnCodeError(exit_message(process.returncode, folder))
    if printed is not None:
        missing = printed.unmatched()
        if missing:
            said = _last_lines(folder / STDOUT_LOG) or "nothing"
            raise OwnCodeError(
                f"metric {missing[0]}: no line the program printed matched its pattern "
                f"{command.printed[missing[0]]!r}; its last lines: {said}")
        final.update(_numbers(printed.final, declared))
    if command.files:
        final.update(_from_files(command, trial, work, folder, declared, report))
    if printed is not None or command.files:
        return final
    if not final and not epochs:
        printed = last_json_line(folder / STDOUT_LOG)
        if printed is None:
            raise OwnCodeError(
                f"command wrote no metrics: no line in {{metrics_file}} ({metrics_file}) and "
                "no JSON object on stdout; append json.dumps({\"epoch\": 1, ...}) lines to "
                "the file it names, or print the final metrics as one JSON line")
        final = _numbers(printed, declared)
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
            said = _last_lines(folder / STDERR_LOG) or _last_lines(folder / STDOUT_LOG)
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
    return _numbers(final, declared)


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
                trial.report(epoch=epoch, **_numbers(record, declared))
                trial.save({})


class NewBytes:
    """What was appended to a file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read_bytes(self, *, complete_only: bool) -> bytes:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return b""
        if complete_only:  # a line still being written waits for its newline
            data = data[:data.rfind(b"\n") + 1]
        self.offset += len(data)
        return data


class NewLines(NewBytes):
    """The JSON objects of the lines appended to a file since the last read."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.line_number = 0

    def read(self, *, complete_only: bool) -> list[dict[str, Any]]:
        pieces = self.read_bytes(complete_only=complete_only).split(b"\n")
        if pieces[-1] == b"":  # what follows the last newline
            pieces.pop()
        records = []
        for raw in pieces:
            self.line_number += 1
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                record = json.loads(text)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                raise OwnCodeError(
                    f"{self.path.name} line {self.line_number} is not a JSON object: "
                    f"{text[:80]!r}; write one json.dumps({{...}}) a line")
            records.append(record)
        return records


class NewText(NewBytes):
    """The text lines appended to a file since the last read."""

    def read(self, *, complete_only: bool) -> list[str]:
        data = self.read_bytes(complete_only=complete_only)
        # a progress bar's carriage returns end its updates as lines do
        text = data.decode("utf-8", errors="replace").replace("\r", "\n")
        return [line for line in text.split("\n") if line.strip()]


def _fed(printed: PrintedMetrics, line: str) -> list[tuple[int, dict[str, float]]]:
    try:
        return printed.feed(line)
    except PrintedValueError as exc:
        raise OwnCodeError(f"{exc}; make the pattern's group match the number alone") from None


def epoch_number(value: Any, path: Path) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and float(value).is_integer() and value >= 1:
        return int(value)
    raise OwnCodeError(f"{path.name}: epoch {value!r} is not a whole number from 1 up; write "
                       '{"epoch": 1, ...} with epochs counted from 1')


def _numbers(record: Mapping[str, Any], declared: Collection[str]) -> dict[str, float]:
    """The numbers of a JSON line (``null`` as NaN: what e.g. JavaScript writes for NaN).
    A declared metric that is no number (``true``, text, a list) or an integer too large
    for a 64-bit float fails the trial naming it; other keys that are no number are left
    out."""
    out = {}
    for key, value in record.items():
        if value is None:
            out[key] = math.nan
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                out[key] = float(value)
                continue
            except OverflowError:
                problem = f"{value} is too large for a 64-bit float"
        else:
            problem = f"{json.dumps(value)[:80]} is not a number"
        if key in declared:
            raise OwnCodeError(f"metric {key}: {problem}; write numbers (e.g. loss.item())")
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_runnable(program: str, cwd: Path, path: Optional[str]) -> None:
    """Refuse (one line) a program that is not there or not runnable: a path from the folder
    it runs in, or a name on ``path`` (the trial's PATH)."""
    if os.sep in program:
        target = Path(program) if Path(program).is_absolute() else cwd / program
        runnable = target.is_file() and os.access(target, os.X_OK)
    else:
        runnable = shutil.which(program, path=path) is not None
    if not runnable:
        raise OwnCodeError(f"command not found or not runnable: {program!r}; check the "
                           f"program's name and PATH, and the folder it runs in: {cwd}")


def end_previous_run(pid_file: Path, timeout_s: float = 30.0) -> None:
    """Before a trial's program starts again (a resume, a retry, a replaced worker on this
    node): end the previous run's supervisor and program if they are still alive, and wait
    until they are gone, so that two runs never write one {resume_dir}."""
    try:
        _, program = (int(part) for part in pid_file.read_text().split())
    except (OSError, ValueError):
        return
    end_supervised([pid_file], timeout_s)
    # What is left of the group, if anything; not what is below the program's id, which an
    # earlier run's program may have freed for another process since.
    _signal_group(program, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)


def stop_program(process: subprocess.Popen, pid_file: Path) -> None:
    """Stop the supervisor, which ends the program's tree (SIGTERM, then SIGKILL after its
    grace); if it does not exit in time, kill it and its whole tree."""
    ended = True
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_S * 2 + 5)
        except subprocess.TimeoutExpired:
            ended = False
    try:
        supervisor, program = (int(part) for part in pid_file.read_text().split())
    except (OSError, ValueError):
        supervisor = program = None
    if not ended:
        kill_tree(supervisor if supervisor is not None and is_supervisor(supervisor, pid_file)
                  else None, program)
        process.kill()  # the waiter
        process.wait()
    if program is not None:
        # What is left: nothing after a supervisor that ended the tree; after one killed from
        # outside (its waiter then exits too), the program and what it started. The group's
        # id stays taken while a member lives, so the group is the program's own.
        kill_tree(None, program)


def _signal_group(group: int, signal_number: int) -> None:
    try:
        os.killpg(group, signal_number)
    except (ProcessLookupError, PermissionError):
        pass


def exit_message(code: int, folder: Path) -> str:
    """One line: the exit code (or the signal) and stderr's last non-empty lines."""
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    said = _last_lines(folder / STDERR_LOG)
    return (f"command {how}: {said}" if said else
            f"command {how} and wrote nothing on stderr (its output: {folder / STDOUT_LOG})")


def last_output(folder: Path) -> str:
    """A stopped program's last lines, stderr's else stdout's, for its trial's error."""
    for log in (STDERR_LOG, STDOUT_LOG):
        said = _last_lines(folder / log)
        if said:
            return f"the program was stopped; its last output ({log}): {said}"
    return "the program was stopped; it wrote nothing on stderr or stdout"


def _last_lines(path: Path) -> str:
    """The last non-empty lines of a log, joined by ' | ', at most ERROR_CHARS long."""
    tail = [line.strip() for line in _tail(path).splitlines() if line.strip()]
    said = " | ".join(tail[-ERROR_LINES:])
    return "..." + said[-ERROR_CHARS:] if len(said) > ERROR_CHARS else said


def last_json_line(path: Path) -> Optional[dict[str, Any]]:
    """The last line of ``path`` that is a JSON object, else None."""
    for line in reversed(_tail(path).splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                return record
    return None


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - TAIL_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


__all__ = ["command_environment", "command_line", "command_values", "run_command"]
