"""Shared fixtures: a tiny trial config, tiny data directories, one local Ray per test worker;
and the guard that keeps the unit loop (``pytest -m "not slow"``) free of Ray, subprocesses
and servers.

One Ray per test worker: a test that trains in this process (``ray_local``, ``run_here``)
gets the worker's shared local Ray, started by the first such test and kept across modules
until the session ends, as Ray's own tests share ``ray_start_regular_shared``. Its workers keep
the environment, working folder and module path this process had when it started, so a test
that needs a Ray of its own says so with ``@pytest.mark.own_ray`` (or the module's
``pytestmark``) and the reason in its docstring: one that tests Ray's own start or stop, one
whose trials must see an environment it sets (a bucket's credentials), one that connects to a
cluster started with ``ray start``. Before such a test the shared Ray stops; the Ray it starts
stops after its module, and the next test that needs the shared one starts it again. New
end-to-end tests use the shared Ray unless they test a property of a process."""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import pytest

from ablations.config import TrialConfig
from tests.shared_ray import STATE, running_ray, shared_ray, stop_shared_ray

# Tune must not try to reach the network or pop up anything.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
# One core per test worker: the suite runs on two xdist workers (pyproject.toml), so a local
# Ray a test starts (in its process or in a command it runs) gets one CPU, through Ray's own
# override of a node's resources; Tune then runs one trial at a time and starts one trial actor
# (its imports, ~7 CPU-s, are most of a tiny run's cost), not two that share the core with the
# other worker's. Nor does Ray start a worker ahead for the first driver (an idle one the trial
# actor does not use). Clusters started with `ray start` (tests/ray_cluster.py) keep the CPUs
# they are given. benchmarks/run_cpu.py measures both ways.
os.environ.setdefault("RAY_OVERRIDE_RESOURCES", '{"CPU": 1}')
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")

REPO = Path(__file__).resolve().parents[1]
# Seconds each work unit took at the last `pytest --store-durations` (the workers take the
# longest first: pytest_collection_modifyitems).
DURATIONS = REPO / "tests" / "durations.json"


# ------------------------------------------------------------------ scheduling the workers
# The suite runs on xdist's workers (pyproject.toml: `-n 2 --dist loadfile
# --no-loadscope-reorder`) in work units: a test file is one unit, so that its module-scoped
# experiments train once, on one worker; each test of a file in SPLIT_FILES (files of
# independent end-to-end tests: no module- or class-scoped fixture, which collection checks) is
# a unit of its own, so that such a file spreads over the workers. Units go out longest first,
# by the seconds a `--store-durations` run recorded (a unit it did not see counts by its
# marks), so that no long unit starts last and holds the run's end: the suite is CPU-bound
# (2 cores 95-97% busy over its run), and its end is where a worker idles.
SPLIT_FILES = frozenset({
    "tests/test_reproduce_commands.py", "tests/test_time_limit.py", "tests/test_failures.py",
    "tests/test_gpu_paths.py", "tests/test_fail_fast.py",
    "tests/test_own_code_fingerprint.py", "tests/test_api.py", "tests/test_factorial.py",
})


def work_unit(nodeid: str) -> str:
    """The unit a test runs in: its own id in a SPLIT_FILES file, else its file."""
    path = nodeid.split("::", 1)[0]
    return nodeid if path in SPLIT_FILES else path


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnits(config, log)


def pytest_addoption(parser):
    parser.addoption("--store-durations", action="store_true",
                     help=f"record each work unit's seconds in {DURATIONS.relative_to(REPO)} "
                          "(the workers take the longest first)")


def _shared_fixture(item: pytest.Item) -> str | None:
    """A module-, class- or package-scoped fixture the test uses, if any."""
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        if defs and defs[-1].scope in ("module", "class", "package"):
            return name
    return None


def _recorded() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


def _unit_guess(items: list[pytest.Item]) -> float:
    """Seconds for a unit no recorded run saw: an end-to-end test's typical cost, or a unit
    test's."""
    return sum(20.0 if item.get_closest_marker("slow") else 0.2 for item in items)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Order the work units longest first; refuse a SPLIT_FILES test that shares a fixture."""
    recorded = _recorded()
    units: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        unit = work_unit(item.nodeid)
        if unit == item.nodeid and (shared := _shared_fixture(item)):
            raise pytest.UsageError(
                f"{item.nodeid} uses the module-scoped fixture {shared}: take its file out of "
                "SPLIT_FILES in tests/conftest.py (its tests must run on one worker)")
        units[unit].append(item)
    cost = {unit: recorded.get(unit, _unit_guess(members)) for unit, members in units.items()}
    # Stable: within a unit, and among units of equal cost, the collection's order holds.
    items[:] = [item for unit in sorted(units, key=lambda unit: -cost[unit])
                for item in units[unit]]


class UnitSeconds:
    """With --store-durations, in the controlling process: each phase's seconds added to its
    unit, merged into the durations file at the session's end."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report):
        self.seconds[work_unit(report.nodeid)] += report.duration

    def pytest_sessionfinish(self):
        recorded = _recorded()
        recorded.update({unit: round(s, 1) for unit, s in self.seconds.items()})
        DURATIONS.write_text(json.dumps(dict(sorted(recorded.items())), indent=0) + "\n")


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """Collect with bytecode writing on: pytest keeps a test module's assertion-rewritten code
    (tests/__pycache__/*-pytest-*.pyc) only where bytecode may be written, so that where
    PYTHONDONTWRITEBYTECODE is set each collecting process of every later run would rewrite
    every test module again (about 8 CPU-s a process, the unit loop's included). Python's own
    setting is restored for the tests, and their subprocesses keep the environment's."""
    previous = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = previous


def pytest_collection_finish(session):
    """The modules the collection imported (torch, Ray, pandas, the tests) live to the end:
    frozen, no later garbage collection walks them again, neither Python's own nor the
    ``gc.collect()`` of a trial's OOM recovery (a quarter of a second each over that heap).
    Collected once first, so that no garbage of the collection is kept."""
    gc.collect()
    gc.freeze()


# The folders whose modules the suite's processes import: the runner's packages, and the
# tests, benchmarks and examples that its subprocesses and Ray workers import.
SOURCE_FOLDERS = ("ablations", "model", "results", "search_spaces", "tools", "tests",
                  "benchmarks", "examples")


def compile_sources() -> None:
    """Write the checkout's bytecode once, before the workers start. Where bytecode writing is
    off (PYTHONDONTWRITEBYTECODE), every driver, Ray worker and benchmark
    the suite starts would otherwise compile each module it imports from source again (the
    runner's packages: about half a CPU-second a driver); Python reads bytecode written here
    whether or not it may write its own."""
    import compileall

    for folder in SOURCE_FOLDERS:
        compileall.compile_dir(REPO / folder, quiet=2, workers=1)


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return
    compile_sources()
    if config.getoption("store_durations"):
        config.pluginmanager.register(UnitSeconds(), "unit-seconds")


class EndToEndInUnitTest(RuntimeError):
    """A test not marked ``slow`` started Ray, a subprocess or a server."""


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise EndToEndInUnitTest(
            f"{what} in a test not marked slow: mark it `@pytest.mark.slow` (or its module "
            "`pytestmark = pytest.mark.slow`); the unit loop, `pytest -m 'not slow'`, starts no "
            "Ray, no subprocess and no server")
    return refuse


_GUARD = pytest.StashKey[pytest.MonkeyPatch]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """For a test not marked slow, refuse ``ray.init``, every subprocess (``Popen``, and so
    ``subprocess.run``, ``check_output`` and Ray's own processes) and every listening socket
    (moto's, MLflow's or any other server) from its setup to the end of its call. Installed
    here, before the test's fixtures, so that a module- or session-scoped fixture it is the
    first to request is refused too; undone before teardown. Importing Ray stays allowed.

    Before an ``own_ray`` test, the test worker's shared Ray stops (module docstring)."""
    STATE["own_ray"] = item.get_closest_marker("own_ray") is not None
    if STATE["own_ray"]:
        stop_shared_ray()
    if item.get_closest_marker("slow") is None:
        guard = pytest.MonkeyPatch()
        item.stash[_GUARD] = guard
        # _execute_child: the one place every Popen starts its child, even a Popen a module
        # imported by name before the guard.
        guard.setattr(subprocess.Popen, "_execute_child", _refuse("A subprocess"))
        guard.setattr(socket.socket, "listen", _refuse("A server (a listening socket)"))
        if "ray" in sys.modules:  # otherwise ray.init fails on its first subprocess
            guard.setattr(sys.modules["ray"], "init", _refuse("ray.init"))
            # nor a Ray an earlier test of the module left running (run_here, ray_local)
            guard.setattr(sys.modules["ray"], "is_initialized", lambda: False)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    guard = item.stash.get(_GUARD, None)
    if guard is not None:
        guard.undo()
    outcome = yield
    # after a module's last test, a Ray its tests left running other than the test worker's
    # shared one stops (an own_ray module's), so that no other module finds a Ray it did not
    # start; the shared one stops after the session's last test
    if nextitem is None or nextitem.module is not item.module:
        running = running_ray()
        if running is not None and (nextitem is None or running != STATE["address"]):
            sys.modules["ray"].shutdown()
            if running == STATE["address"]:
                STATE["address"] = None
    return outcome


OFFLINE = ("report", "compare", "list")  # the subcommands that start no Ray


def forget_own_modules(cwd: Optional[Path], imported: set[str]) -> None:
    """Of the modules a run in ``cwd`` imported, forget those of the folder's own (a
    ``model.py``, which another test's folder has too); not the checkout's (``cwd`` in it: its
    packages and examples stay the same) nor an environment's libraries."""
    if cwd is None or Path(cwd).resolve().is_relative_to(REPO):
        return
    folder, libraries = Path(cwd).resolve(), Path(sys.prefix).resolve()
    for name in imported:
        where = Path(getattr(sys.modules[name], "__file__", None) or "/").resolve()
        if where.is_relative_to(folder) and not where.is_relative_to(libraries):
            del sys.modules[name]


def run_here(*args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """``run_ablations.py ARGS`` run in this process (``ablations.cli.main``), in ``cwd``, as a
    CompletedProcess: its exit code, stdout and stderr. Its runs use the test worker's shared Ray
    (``shared_ray``; in an ``own_ray`` test, one of the module's own, the machine's CPUs and no
    dashboard, as the command line starts one): a run saves Ray's start and the driver's imports,
    about 17 of a tiny run's 31 CPU-s. For runs that are not about the process (a signal, the
    process's own Ray or dashboard): the trials run in ``cwd`` and import their own code from it
    first (ablations/experiment/execution/trainable.py, ``trial_cwd``), and the modules the run
    imported from ``cwd`` are forgotten afterwards, so that another folder's ``model.py`` is its
    own; but the shared Ray's workers keep the environment they started with, so a run whose trials
    must see a variable the test sets is an ``own_ray`` test's."""
    import contextlib
    import io

    import ray

    from ablations.cli.main import main

    if not args or args[0] not in OFFLINE:
        if STATE["own_ray"]:
            if not ray.is_initialized():
                ray.init(address="local", include_dashboard=False, log_to_driver=False)
        else:
            shared_ray()
    out, err = io.StringIO(), io.StringIO()
    folder, path, environ = os.getcwd(), list(sys.path), dict(os.environ)
    modules = set(sys.modules)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's refusals
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(folder)
        sys.path[:] = path
        os.environ.clear()
        os.environ.update(environ)
        forget_own_modules(cwd, set(sys.modules) - modules)
    return subprocess.CompletedProcess(["run_ablations.py", *args], code, out.getvalue(),
                                       err.getvalue())


@pytest.fixture(scope="session", autouse=True)
def synthetic_cache(tmp_path_factory):
    """Synthetic sets cached in a folder of this test session, not in the user's cache (set
    before any local Ray starts, so its workers inherit it)."""
    from ablations.model.data import CACHE_DIR_ENV

    folder = tmp_path_factory.mktemp("synthetic-cache")
    previous = os.environ.get(CACHE_DIR_ENV)
    os.environ[CACHE_DIR_ENV] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop(CACHE_DIR_ENV, None)
    else:
        os.environ[CACHE_DIR_ENV] = previous


def tiny_config(**changes) -> TrialConfig:
    """A trial that trains in well under a second: small data, small widths."""
    base = TrialConfig.of(
        epochs=2, batch_size=16, synthetic_train=96, synthetic_val=32, synthetic_test=48,
        cnn_widths="8,16,16", embed_dim=16, num_heads=2, eval_batch_size=64,
    )
    return base.replace(**changes) if changes else base


def write_data_dir(root: Path, *, n: int = 40, frames: int = 3, channels: int = 2, size: int = 8,
                   split: bool = True, seed: int = 0) -> Path:
    """A valid file dataset: images.npy (N, T, C, H, W) and table.parquet."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    images = rng.standard_normal((n, frames, channels, size, size)).astype(np.float32)
    np.save(root / "images.npy", images)
    table = pd.DataFrame({
        "target": rng.uniform(0, 10, n),
        "scalar_a": rng.standard_normal(n),
        "scalar_b": rng.standard_normal(n),
        "site": rng.choice(["north", "south"], n),
        "season": rng.integers(1, 5, n),
    })
    if split:
        table["split"] = (["train"] * (n - 16)) + (["val"] * 8) + (["test"] * 8)
    table.to_parquet(root / "table.parquet", index=False)
    return root


@pytest.fixture(scope="module")
def ray_local():
    """A real local Ray for the module's tests: the test worker's shared one, or in an
    ``own_ray`` module one of its own (1 CPU), stopped after the module."""
    import ray

    if not STATE["own_ray"]:
        yield shared_ray()
        return
    if not ray.is_initialized():  # else the one the module's in-process runs started
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def start_until(command: list[str], kw: dict, prefix: str, timeout: float):
    """Start the CLI in a session of its own (so a test can kill it and the Ray it starts) and
    read its output until a line starts with ``prefix``: (process, lines so far, deadline)."""
    import subprocess
    import time

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kw)
    seen, deadline = [], time.monotonic() + timeout
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(prefix) or time.monotonic() > deadline:
            break
    return proc, seen, deadline
