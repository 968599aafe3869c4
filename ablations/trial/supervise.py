"""The supervisor of a command's program: one small process per trial that owns the program's
whole tree and ends it with the trial.

    python -I supervise.py PID_FILE -- PROGRAM ARGS...

Two processes. The waiter is the runner's child: Ray ends a worker's direct children with
SIGKILL when the worker exits (``RAY_kill_child_processes_on_worker_exit``), so nothing that
must clean up can be one. The waiter forks the supervisor into a session of its own, forwards
a stop to it, and exits with the program's code; the kernel kills the waiter with its worker
(``PR_SET_PDEATHSIG``), and the supervisor sees the pipe from it close. The supervisor starts
the program in a session of its own (its process group), writes ``SUPERVISOR_PID
PROGRAM_PID`` to ``PID_FILE``, and waits. It becomes the "child subreaper" of what the
program starts (Linux ``PR_SET_CHILD_SUBREAPER``): a launcher's workers (``torchrun``,
``accelerate launch``, ``srun``, a shell wrapper) that outlive their parent, or that call
``setsid`` and leave the group, are re-parented to it, not to init, so it can find them. It
ends the whole tree (SIGTERM, then SIGKILL after the grace) when

- the program exits (what it left running is ended, and the supervisor exits with the
  program's code, or dies of the program's signal);
- it is told to stop (SIGTERM, SIGINT or SIGHUP: the trial is stopped, fails or times out);
- the Ray worker running the trial dies, even of SIGKILL (the waiter dies with it).

It imports nothing of the runner and only the standard library (``-I``: the trial's working
folder is not on its path), so that it starts in a few tens of milliseconds and a researcher's
own modules cannot shadow anything it needs. Linux only: elsewhere it still owns the
program's process group, and a launcher's workers that leave the group are not found.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, Optional

PID_FILE = "program.pid"  # the supervisor's and the program's ids, in the trial's folder
GRACE_S = 2.0  # the tree's time to exit on SIGTERM before SIGKILL
POLL_S = 0.2  # how often the parent and the program are checked
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def descendants(*roots: int) -> list[int]:
    """Every live process below any of ``roots`` (children, theirs, ...), from /proc; []
    without it."""
    if not roots:
        return []
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, stack = [], list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _signal(pids: list[int], group: Optional[int], number: int) -> None:
    if group is not None:
        try:
            os.killpg(group, number)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, number)
        except (ProcessLookupError, PermissionError):
            pass


def end_tree(group: Optional[int]) -> None:
    """End the program's group and every process below this one: SIGTERM, then SIGKILL for
    what is left after :data:`GRACE_S`; reap them."""
    me = os.getpid()
    _signal(descendants(me), group, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and descendants(me):
        _reap()
        time.sleep(0.05)
    _signal(descendants(me), group, signal.SIGKILL)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and descendants(me):
        _reap()
        time.sleep(0.02)
    _reap()


def _reap() -> None:
    """Collect the exit status of every ended child (re-parented ones included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def is_supervisor(pid: int, pid_file: Path) -> bool:
    """Whether ``pid`` is alive and is the supervisor of ``pid_file`` (not a process that
    took the number since, nor a zombie)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().split(b"\0")
    except OSError:
        return False
    return str(pid_file).encode() in words and any(w.endswith(b"supervise.py") for w in words)


def end_supervised(pid_files: Iterable[Path], timeout_s: float = 10.0) -> int:
    """Stop the supervisor named in each of ``pid_files`` that still runs (SIGTERM: it ends
    its program's tree), wait up to ``timeout_s`` for them all, and SIGKILL what is left;
    returns how many were running."""
    running = []
    for pid_file in pid_files:
        try:
            supervisor, program = (int(part) for part in Path(pid_file).read_text().split())
        except (OSError, ValueError):
            continue
        if is_supervisor(supervisor, pid_file):
            _signal([supervisor], None, signal.SIGTERM)
            running.append((supervisor, pid_file, program))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(is_supervisor(pid, path)
                                              for pid, path, _ in running):
        time.sleep(0.05)
    for supervisor, pid_file, program in running:
        if is_supervisor(supervisor, pid_file):  # it did not end in time: it and its tree
            kill_tree(supervisor, program)
    return len(running)


def kill_tree(supervisor: Optional[int], group: Optional[int]) -> None:
    """SIGKILL every process below ``supervisor`` and below the program (``group``, the
    program's id, while it still leads its session), the program's group, then the
    supervisor: what is left of a supervisor that did not end its tree in time, or of one that
    is gone (None, or killed from outside). A Ray worker runs at nice 15, and so does the
    supervisor it starts: on a busy machine it can wait many seconds for the CPU. Its
    descendants go first, while it lives as their subreaper, so that a launcher's worker that
    left the group (``torchrun``'s run in sessions of their own) is not re-parented to init
    unseen; without the supervisor they are still the program's children, and are found
    below it. A few passes catch what a dying launcher started meanwhile."""
    for _ in range(5):
        roots = [supervisor] if supervisor is not None else []
        if group is not None and leads_session(group):
            roots.append(group)
        below = descendants(*roots)
        _signal(below, group, signal.SIGKILL)
        if not below:
            break
        time.sleep(0.05)
    if supervisor is not None:
        _signal([supervisor], None, signal.SIGKILL)


def leads_session(pid: int) -> bool:
    """Whether ``pid`` runs and leads a session of its own, as the supervisor starts the
    program (``start_new_session``); a process that took a freed id rarely does."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2:].split()  # state, ppid, group, session, ...
    return len(fields) > 3 and fields[0] != "Z" and fields[3] == str(pid)


def end_programs_under(root: str | Path, timeout_s: float = 10.0) -> int:
    """End every program still running on this machine for the trials of the experiment
    folder ``root`` (each trial's pid file below it): what a driver does before it exits
    on a stop, whatever the Ray it leaves does with the trials' workers."""
    return end_supervised(pid_files_under(Path(root)), timeout_s)


def pid_files_under(root: Path) -> list[Path]:
    """The trials' pid files of the experiment folder ``root``: ``<root>/<state
    folder>/<trial>/work/program.pid``, two levels of folders read (not the whole tree, whose
    folders a stopping program may be deleting); a folder that vanishes is skipped."""
    found = []
    for level in _folders(root):
        for trial in _folders(level):
            path = trial / "work" / PID_FILE
            if path.is_file():
                found.append(path)
    return found


def _folders(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as entries:
            return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _ignore_stops() -> None:
    """From here on SIGTERM, SIGINT and SIGHUP are ignored: the clean-up runs to its end."""
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)


class _Stop(Exception):
    """A signal told the supervisor to end the tree."""


def main(argv: list[str]) -> int:
    """The waiter: the runner's child, which Ray SIGKILLs with its worker (Ray ends a worker's
    direct children, not theirs). It forks the supervisor, forwards a stop to it, and exits
    with the program's code; its death closes the pipe the supervisor watches."""
    if len(argv) < 4 or argv[2] != "--":
        print("usage: supervise.py PID_FILE -- PROGRAM ARGS...", file=sys.stderr)
        return 2
    parent = os.getppid()
    alive_read, alive_write = os.pipe()  # held by the waiter: EOF when it is gone
    code_read, code_write = os.pipe()  # the program's exit code, supervisor -> waiter
    supervisor = os.fork()
    if supervisor == 0:
        os.close(alive_write)
        os.close(code_read)
        os.setsid()  # out of the waiter's session and group, which Ray may end as a whole
        os._exit(supervise(argv[1], argv[3:], alive_read, code_write))
    os.close(alive_read)
    os.close(code_write)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the waiter dies with the worker

    def forward(number: int, frame: object) -> None:
        try:
            os.kill(supervisor, signal.SIGTERM)
        except ProcessLookupError:
            pass

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, forward)
    if os.getppid() != parent:  # the worker died before the prctl
        forward(signal.SIGTERM, None)
    said = b""
    while True:
        try:
            chunk = os.read(code_read, 64)
        except InterruptedError:
            continue
        if not chunk:
            break
        said += chunk
    while True:
        try:
            os.waitpid(supervisor, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            break
    try:
        code = int(said.decode().strip())
    except ValueError:
        code = 143  # stopped before the program's end
    if code < 0:  # die of the program's signal, so that the runner reads it as the program's
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def supervise(pid_file: str, arguments: list[str], alive: int, report: int) -> int:
    """The supervisor proper: start the program, end its tree when it exits, when told to
    stop, or when the waiter (so the worker) is gone; report the program's exit code."""
    import select

    _prctl(_PR_SET_CHILD_SUBREAPER, 1)

    def stop(number: int, frame: object) -> None:
        _ignore_stops()  # one stop: a second signal must not cut the clean-up short
        raise _Stop(number)

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, stop)
    program: Optional[subprocess.Popen] = None
    code = 143
    try:
        try:
            program = subprocess.Popen(arguments, start_new_session=True)
        except OSError as exc:
            print(f"{arguments[0]}: {exc.strerror or exc}", file=sys.stderr)
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            _ignore_stops()
            raise _Stop(0) from None
        with open(pid_file + ".tmp", "w") as handle:
            handle.write(f"{os.getpid()} {program.pid}\n")
        os.replace(pid_file + ".tmp", pid_file)
        while True:
            try:
                code = program.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                ready, _, _ = select.select([alive], [], [], 0)
                if ready:  # EOF: the waiter is gone, and with it the worker
                    _ignore_stops()
                    raise _Stop(signal.SIGTERM) from None
        _ignore_stops()  # the clean-up below runs to its end
        end_tree(program.pid)
    except _Stop:
        _ignore_stops()  # whichever way the stop came (and a signal's handler did already)
        end_tree(program.pid if program is not None else None)
    try:
        os.write(report, f"{code}\n".encode())
    except OSError:  # the waiter is gone: nobody to tell
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
