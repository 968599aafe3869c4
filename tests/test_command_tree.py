"""A command's program and everything it starts end with its trial: a program started through
a launcher leaves no process behind when the driver is killed with SIGKILL or stopped with
SIGTERM (torch's ``torch.distributed.run`` with two workers on the CPU, each in a session of
its own), or when the Ray worker running the trial is killed (a shell wrapper whose trainer
leaves the process group with setsid) (ablations/trial/supervise.py); after SIGTERM the
experiment resumes, and each epoch is in epochs.parquet once.

Every trainer writes its process id to a folder of the test's; the test ends only the
processes it started: the driver's process group (the driver and the Ray it started) and the
trainers it recorded, by id."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

RUN_ABLATIONS = Path(sys.executable).with_name("run-ablations")
EPOCHS = 30
# A first run's epochs after its first take PAUSE_S each (the first is quick: a resume finds its
# state at once): its trainers would run on for over two minutes after the stop, far longer
# than the GONE_WITHIN_S they have to be gone (the supervisor takes a few seconds once the
# trial is stopped; after SIGTERM the driver first gives Tune up to cli/signals.py's
# STOP_GRACE_S to stop it; the rest is room for a slow, loaded machine)
PAUSE_S = 5.0
GONE_WITHIN_S = 75.0
TRAIN = """
    import argparse, json, os, sys, time

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--metrics-file")
    parser.add_argument("--resume-dir")
    parser.add_argument("--detach", action="store_true")
    args = parser.parse_args()
    if args.detach:
        os.setsid()  # leaves the launcher's process group, as some launchers' workers do
    rank = int(os.environ.get("RANK", "0"))
    pids = os.environ["TREE_PIDS"]
    open(os.path.join(pids, f"{os.getpid()}"), "w").close()
    state = os.path.join(args.resume_dir, "epoch")
    start = int(open(state).read()) if os.path.exists(state) else 0
    for epoch in range(start + 1, args.epochs + 1):
        time.sleep(float(os.environ["TREE_PAUSE"]) if epoch > 1 else 0.05)
        if rank == 0:
            with open(args.metrics_file, "a") as handle:
                handle.write(json.dumps({"epoch": epoch, "loss": 1.0 / epoch}) + "\\n")
            with open(state + ".tmp", "w") as handle:
                handle.write(str(epoch))
            os.replace(state + ".tmp", state)
    if rank == 0:
        with open(args.metrics_file, "a") as handle:
            handle.write(json.dumps({"score": float(args.epochs)}) + "\\n")
"""
WRAP = """
    # a launcher: starts the trainer in the background and waits for it
    "$@" &
    wait
"""
LAUNCHERS = {
    "shell": "/bin/sh wrap.sh {python} train.py --detach",
    "torchrun": "{python} -m torch.distributed.run --nproc-per-node 2 --standalone train.py",
}


def space(launcher: str) -> str:
    return textwrap.dedent(f"""
        name: tree-{launcher}
        command: >-
          {LAUNCHERS[launcher]} --epochs {{epochs}} --metrics-file {{metrics_file}}
          --resume-dir {{resume_dir}}
        config: {{epochs: {EPOCHS}}}
        metrics: {{score: higher}}
        variants:
          baseline: {{}}
        """)


def ancestry(pids: list[int]) -> str:
    """Each of ``pids`` and the processes above it (pid, parent, group, session, state, age,
    command), from ps: what a failure reports about the processes left running."""
    table = subprocess.run(["ps", "-eo", "pid=,ppid=,pgid=,sid=,stat=,etimes=,args="],
                           capture_output=True, text=True).stdout.splitlines()
    rows = {int(line.split()[0]): line for line in table if line.split()}
    shown: list[str] = []
    for pid in pids:
        while pid in rows and rows[pid] not in shown:
            shown.append(rows[pid][:200])
            pid = int(rows[pid].split()[1])
    return "\n".join(shown)


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().split(")")[-1].split()[1])


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Run:
    """A driver started from a project folder, its trainers' ids, and the clean-up of both."""

    def __init__(self, folder: Path, launcher: str, storage: Path) -> None:
        self.folder, self.storage = folder, storage
        self.pids = folder / f"pids-{launcher}"
        self.pids.mkdir()
        (folder / f"{launcher}.yaml").write_text(space(launcher))
        self.where = ["--storage", str(storage), "--name", launcher, "--no-dashboard"]
        self.args = ["--space", f"{launcher}.yaml", "--seeds", "1", "--quiet", *self.where]
        self.env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                    "RAY_USAGE_STATS_ENABLED": "0", "TREE_PIDS": str(self.pids)}
        self.started: list[subprocess.Popen] = []

    def start(self, resume: bool = False) -> subprocess.Popen:
        # its own process group: the driver and the Ray it starts, ended by the clean-up
        args = ["--resume", *self.where] if resume else self.args
        # the first run's epochs outlast the time its trainers have to be gone
        pause = {"TREE_PAUSE": str(0.05 if resume else PAUSE_S)}
        process = subprocess.Popen([str(RUN_ABLATIONS), *args], cwd=self.folder,
                                   env={**self.env, **pause}, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
        self.started.append(process)
        return process

    def trainers(self) -> list[int]:
        return [int(path.name) for path in self.pids.iterdir()]

    def wait_for_trainers(self, count: int, process: subprocess.Popen, *,
                          epoch_written: bool = True) -> list[int]:
        """The ids of the ``count`` trainers once they run; with ``epoch_written``, once their
        first epoch is written and checkpointed too (what a resume continues from)."""
        deadline = time.monotonic() + 240  # a deadlock guard, not a speed limit
        while len(self.trainers()) < count:
            assert process.poll() is None, process.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the trainers never started"
            time.sleep(0.1)
        if epoch_written:  # the program's state of epoch 1, then a second for the runner
            while next(self.storage.rglob("epoch"), None) is None:
                assert process.poll() is None, process.stdout.read()[-3000:]
                assert time.monotonic() < deadline, "no epoch was written"
                time.sleep(0.1)
            time.sleep(1.0)
        return self.trainers()

    def pid_file(self) -> Path:
        """The trial's pid file (the supervisor's and the program's ids), once written."""
        from ablations.trial.supervise import PID_FILE

        deadline = time.monotonic() + 60  # a deadlock guard, not a speed limit
        while (found := next(self.storage.rglob(PID_FILE), None)) is None:
            assert time.monotonic() < deadline, "no pid file"
            time.sleep(0.05)
        return found

    def gone_within(self, pids: list[int], seconds: float = GONE_WITHIN_S) -> list[int]:
        """The ``pids`` still running after ``seconds``."""
        deadline = time.monotonic() + seconds
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        return [pid for pid in pids if alive(pid)]

    def end_drivers(self) -> None:
        """The drivers' process groups: each driver and what it left of its Ray."""
        for process in self.started:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            process.wait(timeout=60)

    def clean_up(self) -> None:
        self.end_drivers()
        for pid in self.trainers():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def folder(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(textwrap.dedent(TRAIN))
    (project / "wrap.sh").write_text(textwrap.dedent(WRAP))
    return project


def each_epoch_once(root: Path) -> None:
    trials = pd.read_parquet(root / "trials.parquet")
    assert (trials["status"] == "ok").all(), trials[["trial_name", "status", "error"]]
    epochs = pd.read_parquet(root / "epochs.parquet")
    assert sorted(epochs["epoch"]) == list(range(1, EPOCHS + 1)), epochs["epoch"].tolist()


def stop_driver(run: Run, how: signal.Signals, *, resumes: bool) -> subprocess.Popen:
    """Start the torchrun experiment, send ``how`` to the driver alone (not its group) once
    both trainers run, and check that they are gone within GONE_WITHIN_S; the stopped driver
    has exited."""
    driver = run.start()
    trainers = run.wait_for_trainers(2, driver, epoch_written=resumes)
    os.kill(driver.pid, how)
    left = run.gone_within(trainers)
    assert left == [], (f"left running after {how.name} (driver "
                        f"{'running' if driver.poll() is None else driver.returncode}):\n"
                        + ancestry(left))
    driver.wait(timeout=120)
    return driver


def test_a_driver_stopped_with_sigterm_leaves_no_trainer_and_the_resume_writes_each_epoch_once(
        folder, tmp_path):
    """SIGTERM: the driver hands Tune the stop (cli/signals.py), Tune stops the trial and saves
    its state, and the runner ends what the trial's program still runs; the resume continues
    from that state and the program's {resume_dir}."""
    run = Run(folder, "torchrun", tmp_path / "results")
    try:
        stop_driver(run, signal.SIGTERM, resumes=True)
        run.end_drivers()  # what the stopped driver left of its Ray
        resumed = run.start(resume=True)
        output, _ = resumed.communicate(timeout=600)
        assert resumed.returncode == 0, output[-3000:]
        each_epoch_once(tmp_path / "results" / "torchrun")
        assert [pid for pid in run.trainers() if alive(pid)] == []
    finally:
        run.clean_up()


def test_a_driver_killed_with_sigkill_leaves_no_trainer(folder, tmp_path):
    """SIGKILL: nothing of the driver runs; its local Ray goes with it, and so do the trial's
    worker and the supervisor's waiter, whose end the supervisor sees: it ends the tree, the
    launcher's workers included, each in a session of its own as a trainer that calls setsid
    is (the shell wrapper's, ended by the supervisor: the tests below). A resume after a driver
    killed with SIGKILL, each epoch once, is tests/test_own_code_runs.py's (the command
    example)."""
    run = Run(folder, "torchrun", tmp_path / "results")
    try:
        stop_driver(run, signal.SIGKILL, resumes=False)
    finally:
        run.clean_up()


def test_a_killed_worker_takes_its_programs_tree_with_it(folder, tmp_path):
    """The Ray worker running the trial is killed while the driver runs on: its waiter dies
    with it, and the program's tree (a shell wrapper whose trainer left the group) ends, by
    the supervisor, which sees the waiter gone, or by the driver, which ends what its trials'
    programs still run when Tune's run returns; the trial's end is reported."""
    run = Run(folder, "shell", tmp_path / "results")
    try:
        driver = run.start()
        trainers = run.wait_for_trainers(1, driver, epoch_written=False)
        supervisor = int(run.pid_file().read_text().split()[0])
        waiter = parent(supervisor)  # supervise.py's waiter forked the supervisor
        worker = parent(waiter)  # the Ray worker of the driver's local Ray running the trial
        os.kill(worker, signal.SIGKILL)
        assert run.gone_within([supervisor, *trainers]) == []
        output, _ = driver.communicate(timeout=300)
        assert "baseline-seed0" in output, output[-3000:]  # the trial's end is reported
    finally:
        run.clean_up()


def test_a_driver_ends_the_programs_its_trials_still_run(folder, tmp_path):
    """What a stopped driver does before it exits on a local Ray (cli/signals.py): every
    supervisor named by a pid file under the experiment's folder is stopped and takes its
    program's tree with it; a pid file naming a process that is not its supervisor ends
    nothing."""
    from ablations.trial.supervise import PID_FILE, end_programs_under

    root = tmp_path / "results" / "exp"
    work = root / "trial_state" / "baseline-seed0" / "work"
    work.mkdir(parents=True)
    pids = folder / "pids"
    started = start_supervised(folder, work, pids)
    other = subprocess.Popen(["sleep", "300"])  # a process a stale pid file names
    stale = root / "trial_state" / "no_x-seed0" / "work"
    stale.mkdir(parents=True)
    (stale / PID_FILE).write_text(f"{other.pid} {other.pid}\n")
    try:
        trainers = wait_for_supervised(started, work, pids)
        assert end_programs_under(root) == 1
        assert [pid for pid in trainers if alive(pid)] == []
        assert started.wait(timeout=30) is not None
        assert other.poll() is None  # not a supervisor: left alone
    finally:
        end_started([started, other], pids)


def end_started(processes: list[subprocess.Popen], pids: Path) -> None:
    """What a test left running of what it started: ``processes``, and the trainers whose ids
    are in ``pids``."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
    for path in pids.iterdir():
        if alive(int(path.name)):
            os.kill(int(path.name), signal.SIGKILL)


def start_supervised(folder: Path, work: Path, pids: Path) -> subprocess.Popen:
    """A trial's supervisor as the runner starts it (its waiter, in a session of its own),
    running the shell launcher whose trainer leaves the group; the trainers' ids go to
    ``pids``."""
    from ablations.trial.supervise import PID_FILE

    pids.mkdir()
    supervise = Path(__file__).resolve().parents[1] / "ablations" / "trial" / "supervise.py"
    return subprocess.Popen(
        [sys.executable, "-I", str(supervise), str(work / PID_FILE), "--", "/bin/sh",
         "wrap.sh", sys.executable, "train.py", "--detach", "--epochs", "100",
         "--metrics-file", str(work / "m.jsonl"), "--resume-dir", str(work)],
        cwd=folder, env={**os.environ, "TREE_PIDS": str(pids), "TREE_PAUSE": "5"},
        start_new_session=True)


def wait_for_supervised(started: subprocess.Popen, work: Path, pids: Path) -> list[int]:
    """The trainers' ids, once the trainer and the pid file are there."""
    from ablations.trial.supervise import PID_FILE

    deadline = time.monotonic() + 120  # a deadlock guard, not a speed limit
    while not list(pids.iterdir()) or not (work / PID_FILE).exists():
        assert started.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return [int(path.name) for path in pids.iterdir()]


@contextlib.contextmanager
def stopped_supervisor(folder: Path, work: Path):
    """A supervised shell launcher whose trainer left its group, with the supervisor stopped
    (SIGSTOP: a supervisor that cannot get the CPU): (waiter, trainers, supervisor); what is
    left of them is killed on exit."""
    from ablations.trial.supervise import PID_FILE

    pids = folder / "pids"
    started = start_supervised(folder, work, pids)
    supervisor = None
    try:
        trainers = wait_for_supervised(started, work, pids)
        supervisor = int((work / PID_FILE).read_text().split()[0])
        os.kill(supervisor, signal.SIGSTOP)
        yield started, trainers, supervisor
    finally:
        if started.poll() is None:
            started.kill()
            started.wait()
        for pid in [int(path.name) for path in pids.iterdir()] + [supervisor or 0]:
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_supervisor_that_cannot_end_its_tree_in_time_is_killed_with_all_of_it(folder,
                                                                               tmp_path):
    """A Ray worker runs at nice 15, and so does its trial's supervisor: on a busy machine it
    may not get the CPU to end its tree within the clean-up's time (SIGSTOP stands for that
    here). The clean-up then kills the supervisor's whole tree, the trainer that left the
    launcher's group included, not the supervisor and the program's group alone (which would
    leave that trainer to init, running)."""
    from ablations.trial.supervise import end_programs_under

    root = tmp_path / "results" / "exp"
    work = root / "trial_state" / "baseline-seed0" / "work"
    work.mkdir(parents=True)
    with stopped_supervisor(folder, work) as (_, trainers, supervisor):
        assert end_programs_under(root, timeout_s=0.5) == 1
        assert Run.gone_within(None, trainers, seconds=30) == [], ancestry(trainers)
        assert Run.gone_within(None, [supervisor], seconds=30) == []


def test_a_trials_stop_kills_the_tree_of_a_supervisor_that_does_not_end_in_time(folder,
                                                                                tmp_path):
    """The trial's own stop (ablations/trial/command.py ``stop_program``): the waiter does not exit
    in time because its supervisor cannot run; the supervisor's whole tree, the detached
    trainer included, is killed, then the waiter."""
    from ablations.trial.command import stop_program
    from ablations.trial.supervise import PID_FILE

    work = tmp_path / "work"
    work.mkdir()
    with stopped_supervisor(folder, work) as (waiter, trainers, supervisor):
        stop_program(waiter, work / PID_FILE)
        assert waiter.poll() is not None
        assert Run.gone_within(None, [*trainers, supervisor], seconds=30) == [], \
            ancestry(trainers)


def test_a_trials_stop_ends_the_tree_of_a_supervisor_killed_from_outside(folder, tmp_path):
    """The supervisor is SIGKILLed (by whatever kills a process on a busy node), so nothing
    ends the program's tree from within and the waiter exits; the trial's stop then ends the
    launcher and the trainer that left its group, found below the launcher, not the
    launcher's group alone (which would leave that trainer to init, running)."""
    from ablations.trial.command import stop_program
    from ablations.trial.supervise import PID_FILE

    work = tmp_path / "work"
    work.mkdir()
    pids = folder / "pids"
    waiter = start_supervised(folder, work, pids)
    try:
        trainers = wait_for_supervised(waiter, work, pids)
        supervisor, launcher = (int(part) for part in (work / PID_FILE).read_text().split())
        os.kill(supervisor, signal.SIGKILL)
        waiter.wait(timeout=60)  # the supervisor's pipe closed: the waiter is done
        assert [pid for pid in trainers if alive(pid)] == trainers  # left running, so far
        stop_program(waiter, work / PID_FILE)
        assert Run.gone_within(None, [*trainers, launcher], seconds=30) == [], \
            ancestry(trainers)
    finally:
        end_started([waiter], pids)


def test_a_supervisor_ending_its_tree_takes_no_second_stop(tmp_path):
    """The Ray worker is gone (its waiter killed), so the supervisor is ending a program that
    ignores SIGTERM; a SIGTERM that arrives meanwhile (a driver's clean-up) does not cut its
    clean-up short: the program is killed after the grace, and nothing is left."""
    from ablations.trial.supervise import PID_FILE

    pid_file = tmp_path / PID_FILE
    supervise = Path(__file__).resolve().parents[1] / "ablations" / "trial" / "supervise.py"
    waiter = subprocess.Popen(
        [sys.executable, "-I", str(supervise), str(pid_file), "--", "/bin/sh", "-c",
         "trap '' TERM; sleep 300 & wait; sleep 300"], start_new_session=True)
    supervisor = program = None
    try:
        deadline = time.monotonic() + 60  # a deadlock guard, not a speed limit
        while not pid_file.exists():
            assert waiter.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        supervisor, program = (int(part) for part in pid_file.read_text().split())
        waiter.kill()  # as Ray kills a worker's children
        waiter.wait(timeout=30)
        time.sleep(0.5)  # the supervisor has seen the waiter go and is ending the tree
        os.kill(supervisor, signal.SIGTERM)
        assert Run.gone_within(None, [program, supervisor], seconds=60) == []
    finally:
        for pid in (supervisor, program):
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)
