"""A command's program as a process (ablations/trial/command.py runs it): refused before it
starts when it is not runnable, started under its supervisor (ablations/trial/supervise.py),
stopped with its whole tree, and a previous run of the same trial ended before it starts
again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Mapping, Optional, Sequence

from ablations.trial.own_code import OwnCodeError
from ablations.trial.supervise import end_supervised, is_supervisor, kill_tree

SUPERVISOR = str(Path(__file__).with_name("supervise.py"))
STOP_GRACE_S = 2.0  # a stopped program's time to exit on SIGTERM before SIGKILL


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


def start_supervised(arguments: Sequence[str], pid_file: Path, work: Path,
                     environment: Mapping[str, str], stdout: IO[bytes],
                     stderr: IO[bytes]) -> subprocess.Popen:
    """The supervisor started on ``arguments`` in the folder ``work``, its output to
    ``stdout`` and ``stderr``; it writes its own and the program's ids to ``pid_file``."""
    try:
        return subprocess.Popen(
            [sys.executable, "-I", SUPERVISOR, str(pid_file), "--", *arguments],
            cwd=work, env=environment, stdin=subprocess.DEVNULL, stdout=stdout,
            stderr=stderr,
            # a session of its own: Ray may end a worker by its process group, and the
            # supervisor must outlive the worker long enough to end the program's tree
            start_new_session=True)
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise OwnCodeError(f"cannot start the program's supervisor ({exc.strerror}) in "
                           f"the folder it runs in: {work}") from None


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


__all__ = ["STOP_GRACE_S", "SUPERVISOR", "check_runnable", "end_previous_run",
           "start_supervised", "stop_program"]
